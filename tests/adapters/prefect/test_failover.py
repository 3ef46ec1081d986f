"""A Prefect component task with an ordered list of schedulers (the real test server, real
local_cwd jobs). The failover on a real capacity refusal (a kube namespace's ResourceQuota)
is ``tests/adapters/prefect/test_failover_kube.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.adapters.common import JobResult, SchedulerListError
from tether.runner import get_runner

pytestmark = pytest.mark.usefixtures("prefect_test")


def test_a_list_runs_one_logical_job_on_the_first_candidate_with_room() -> None:
    """``namespace`` is kubernetes's only: local_cwd takes the job without it."""
    from prefect import flow

    from tether.adapters.prefect import component_task

    placed = component_task("tests.adapters.recovering_app:placed",
                            scheduler=["local_cwd", "kubernetes"], cfg={"namespace": "ml"})

    @flow
    def runs() -> JobResult:
        return placed()

    state = runs(return_state=True)
    assert state.is_completed(), state.message
    result = state.result()
    assert result.app_handle.startswith("chain://")
    with get_runner() as runner:
        [attempt] = runner.attempts(result.app_handle)
    assert attempt["scheduler"] == "local_cwd" and attempt["refused"] == []


def test_an_unknown_candidate_fails_the_task_run_before_submitting() -> None:
    from prefect import flow

    from tether.adapters.prefect import component_task

    placed = component_task("tests.adapters.recovering_app:placed",
                            scheduler="kubernets,local_cwd", retries=1)

    @flow
    def runs() -> JobResult:
        return placed()

    state = runs(return_state=True)
    assert state.is_failed()
    with pytest.raises(SchedulerListError, match=r"task '[^']+': scheduler: unknown scheduler "
                       r"'kubernets'; did you mean kubernetes\?"):  # fmt: skip
        state.result()
    with get_runner() as runner:
        assert [a for a in runner.list("local_cwd") if a.app_id.startswith("placed")] == []


def test_an_option_no_candidate_declares_is_refused() -> None:
    from prefect import flow

    from tether.adapters.prefect import component_task

    placed = component_task("tests.adapters.recovering_app:placed",
                            scheduler=["local_cwd", "kubernetes"], cfg={"namespce": "ml"})

    @flow
    def runs() -> JobResult:
        return placed()

    state = runs(return_state=True)
    assert state.is_failed()
    with pytest.raises(SchedulerListError, match=r"cfg: run option 'namespce' is not an "
                       r"option of any of the schedulers local_cwd, kubernetes"):  # fmt: skip
        state.result()


def test_a_candidate_without_a_capability_the_app_needs_is_refused(tmp_path: Path) -> None:
    """``flaky``'s role has no image: kubernetes, which runs images, could not run it, so the
    task run fails before anything is submitted, naming the task, the field, the scheduler
    and the capability."""
    from prefect import flow

    from tether.adapters.prefect import component_task

    flaky = component_task("tests.adapters.recovering_app:flaky",
                           scheduler=["local_cwd", "kubernetes"], cfg={"namespace": "ml"})

    @flow
    def runs() -> JobResult:
        return flaky(ckpt=str(tmp_path / "ckpt"))

    state = runs(return_state=True)
    assert state.is_failed()
    with pytest.raises(SchedulerListError, match=r"task '[^']+': scheduler: the failover list "
                       r"local_cwd, kubernetes names schedulers that cannot run app 'flaky'"
                       r"(.|\n)*kubernetes lacks the capability `needs_image`: role 'train': "
                       r"image is empty"):  # fmt: skip
        state.result()
    assert not (tmp_path / "ckpt").exists()  # no attempt ran


def test_a_list_naming_no_scheduler_fails_when_the_task_is_made() -> None:
    from tether.adapters.prefect import component_task

    with pytest.raises(SchedulerListError, match=r"component_task: scheduler: .* names no "
                       "scheduler"):  # fmt: skip
        component_task("tests.adapters.recovering_app:placed", scheduler=[" "])
