"""An Airflow task with an ordered list of schedulers (``dag.test()``, real local_cwd jobs).

The failover itself, a real capacity refusal (a namespace's ResourceQuota on the e2e
kube-apiserver) moving the task's job to ``local_cwd``, is
``tests/adapters/airflow/test_airflow_failover_kube.py``; here: the list as a DAG param, the
options each candidate gets, and bad input refused before anything is submitted.
"""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from airflow_testlib import run_dag, task_states, try_numbers, xcoms

from tether.runner import get_runner

pytestmark = pytest.mark.usefixtures("airflow_db")


def _when() -> dt.datetime:
    return dt.datetime(2024, 6, 1, tzinfo=dt.timezone.utc) + dt.timedelta(
        microseconds=uuid.uuid4().int % 10**9)


@pytest.mark.parametrize("dag_id", ["tether_t_failover", "tether_t_failover_defer"])
def test_the_first_candidate_with_room_runs_the_job(
    capfd: pytest.CaptureFixture[str], dag_id: str
) -> None:
    """``local_cwd,kubernetes`` with ``namespace`` (kubernetes's only): local_cwd takes the
    job without the option, as one logical job; a deferrable task defers on it."""
    conf = {"schedulers": "local_cwd,kubernetes", "namespace": "ml"}
    dr = run_dag(dag_id, conf=conf, when=_when())
    text = "".join(capfd.readouterr())
    assert task_states(dr) == {"placed": "success"}, text[-3000:]
    handle = xcoms(dag_id, dr.run_id, "placed")["app_handle"]
    assert handle.startswith("chain://")
    assert "placed attempt 0" in text
    with get_runner() as runner:
        [attempt] = runner.attempts(handle)
    assert attempt["scheduler"] == "local_cwd" and attempt["refused"] == []


@pytest.mark.parametrize(
    ("conf", "error"),
    [
        ({"schedulers": "kubernets,local_cwd"},
         "task 'placed': scheduler: unknown scheduler 'kubernets'; did you mean kubernetes?"),
        ({"schedulers": "local_cwd,kubernetes", "option": "namespce"},
         "task 'placed': cfg: run option 'namespce' is not an option of any of the schedulers "
         "local_cwd, kubernetes"),
        ({"schedulers": "local_cwd,kubernetes", "option": "image_pull_timeout",
          "namespace": "soon"},
         "task 'placed': run option 'image_pull_timeout'"),
    ],
)
def test_bad_lists_fail_the_task_before_anything_is_submitted(
    capfd: pytest.CaptureFixture[str], conf: dict[str, str], error: str
) -> None:
    """An unknown candidate (with its close match), an option no candidate declares, a value
    a candidate would not take: the task fails on its first try (no retry can help) and
    nothing was submitted."""
    dr = run_dag("tether_t_failover", conf=conf, when=_when())
    text = "".join(capfd.readouterr())
    assert task_states(dr) == {"placed": "failed"}
    assert try_numbers(dr) == {"placed": 1}
    assert error in text, text[-3000:]
    assert "app_handle" not in xcoms("tether_t_failover", dr.run_id, "placed")
