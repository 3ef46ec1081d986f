"""DAG files written as a newcomer writes them: found by the dry-run, checked when parsed."""

from __future__ import annotations

import datetime as dt
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tether.adapters.airflow import ComponentOperator

REPO = Path(__file__).resolve().parents[3]

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


def _dryrun(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether.adapters.airflow.dryrun", *argv],
        capture_output=True, text=True, timeout=180, check=False, cwd=cwd,
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


def _docs_example() -> str:
    """The first Python example of docs/airflow.md, as a user copies it."""
    text = (REPO / "docs" / "airflow.md").read_text()
    match = re.search(r"```python\n(.*?)```", text, re.S)
    assert match, "docs/airflow.md has no Python example"
    return match.group(1)


def test_the_docs_example_dry_runs_on_the_default_and_on_kubernetes(tmp_path: Path) -> None:
    dag_file = tmp_path / "train_dag.py"
    dag_file.write_text(_docs_example())
    (tmp_path / "train.py").write_text("print('hi')\n")  # local_cwd checks the script exists
    proc = _dryrun(str(dag_file), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "## DAG train" in proc.stdout and "local_cwd" in proc.stdout
    assert "cannot render" not in proc.stdout.lower(), proc.stdout
    proc = _dryrun(str(dag_file), "-p", "scheduler=kubernetes")
    assert proc.returncode == 0, proc.stderr
    assert "kind: Job" in proc.stdout or '"kind": "Job"' in proc.stdout, proc.stdout[-2000:]


@pytest.mark.usefixtures("airflow_db")
def test_the_docs_example_runs_as_copied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    from tests.adapters.airflow.airflow_testlib import task_states
    from tether.adapters.airflow.dryrun import load_dags

    # the worker's directory holds the script the example names
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(
        "import os\nprint('docs example rank', os.environ['RANK'], flush=True)\n")
    # dag.test() runs the DAGs of the DAGs folder (set by this directory's conftest)
    dag_file = Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"]) / "docs_airflow_example.py"
    dag_file.write_text(_docs_example())
    try:
        dag = load_dags(str(dag_file))["train"]
        when = dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc)
        dag_run = dag.test(logical_date=when, run_after=when)
    finally:
        dag_file.unlink()
    out = "".join(capfd.readouterr())
    assert task_states(dag_run) == {"train": "success"}, out[-4000:]
    assert "docs example rank 0" in out and "docs example rank 1" in out
