"""DAG files written as a newcomer writes them: found by the dry-run, checked when parsed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tether.adapters.airflow import ComponentOperator

DAGS = textwrap.dedent('''\
    import datetime as dt

    from airflow.sdk import DAG, dag

    from tether.adapters.airflow import ComponentOperator

    with DAG("no_as_dag", schedule=None, start_date=dt.datetime(2024, 1, 1)):
        ComponentOperator(task_id="hello", component="utils.echo",
                          component_args={"msg": "from a with-block"})


    @dag(schedule=None, start_date=dt.datetime(2024, 1, 1))
    def decorated():
        ComponentOperator(task_id="hi", component="utils.echo",
                          component_args={"msg": "from a decorated dag"})


    decorated()
    ''')


def _dryrun(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether.adapters.airflow.dryrun", *argv],
        capture_output=True, text=True, timeout=180, check=False,
    )


def test_dryrun_finds_dags_that_no_name_holds(tmp_path: Path) -> None:
    dag_file = tmp_path / "pipeline.py"
    dag_file.write_text(DAGS)
    proc = _dryrun(str(dag_file))
    assert proc.returncode == 0, proc.stderr
    assert "## DAG no_as_dag" in proc.stdout and "from a with-block" in proc.stdout
    assert "## DAG decorated" in proc.stdout and "from a decorated dag" in proc.stdout

    proc = _dryrun(str(dag_file), "--dag-id", "no_as_dag")
    assert proc.returncode == 0, proc.stderr
    assert "## DAG no_as_dag" in proc.stdout and "## DAG decorated" not in proc.stdout


def test_a_component_typo_fails_when_the_dag_file_is_parsed(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"task 'say': unknown component 'utils.ehco'\. "
                                         r"Did you mean utils\.echo"):
        ComponentOperator(task_id="say", component="utils.ehco")
    # names found where the task runs (files, modules) and templates are left to run time
    ComponentOperator(task_id="file", component="comps/train.py:main")
    ComponentOperator(task_id="module", component="my_pkg.comps:train")
    ComponentOperator(task_id="templated", component="{{ params.component }}")

    dag_file = tmp_path / "typo.py"
    dag_file.write_text(DAGS.replace('"utils.echo"', '"utils.ehco"', 1))
    proc = _dryrun(str(dag_file))
    assert proc.returncode == 1
    assert "Did you mean utils.echo" in proc.stderr and "Traceback" not in proc.stderr
