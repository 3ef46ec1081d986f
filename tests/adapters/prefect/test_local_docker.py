"""Real Prefect 3 flows running tether components on ``local_docker`` (a private podman).

The image is the busybox rootfs of :mod:`tests.e2e.infra.podman` (nothing is pulled); where
podman cannot run, the tests skip with the reason, except in CI (``CI`` set).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

pytest.importorskip("docker")

from tests.adapters.prefect.conftest import wait_for_logs
from tests.e2e.infra.podman import (
    BUSYBOX_IMAGE,
    PodmanService,
    PodmanUnavailable,
    tether_apps_here,
)
from tether.adapters.common import JobFailedError, JobResult
from tether.specs import AppState

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("prefect_test")]


@pytest.fixture(scope="module")
def podman() -> Iterator[PodmanService]:
    service = PodmanService()
    try:
        service.start()
    except PodmanUnavailable as e:
        if os.environ.get("CI"):
            pytest.fail(str(e))
        pytest.skip(f"podman cannot run containers here: {e}")
    from tether.schedulers.local_docker.scheduler import LocalDockerScheduler

    sched = LocalDockerScheduler("cleanup", docker_host=service.docker_host)
    # the CNI network config is host-wide: the listing shows other podmans' apps too
    before = tether_apps_here(sched.api)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DOCKER_HOST", service.docker_host)
        try:
            yield service
        finally:
            for app_id in sorted(tether_apps_here(sched.api) - before):
                sched.delete(app_id)
            sched.close()
            service.stop()


def test_containers_succeed_and_stream_into_the_run_logs(podman: PodmanService) -> None:
    from prefect import flow

    from tether.adapters.prefect import component_task

    sh = component_task("utils.sh", scheduler="local_docker", image=BUSYBOX_IMAGE)

    @flow
    def two_containers() -> JobResult:
        return sh("echo hello from $TETHER_REPLICA_ID of $(hostname)", num_replicas=2,
                  memMB=64)

    state = two_containers(return_state=True)
    assert state.is_completed(), state.message
    result = state.result()
    assert result.state == AppState.SUCCEEDED
    assert result.app_handle.startswith("local_docker://")
    app_id = result.app_handle.rsplit("/", 1)[-1]
    wait_for_logs(state.state_details.flow_run_id,
                  f"sh/0 hello from 0 of {app_id}-sh-0", f"sh/1 hello from 1 of {app_id}-sh-1")


def test_failed_container_fails_the_task_with_its_message(podman: PodmanService) -> None:
    from prefect import flow

    from tether.adapters.prefect import component_task

    sh = component_task("utils.sh", scheduler="local_docker", image=BUSYBOX_IMAGE)

    @flow
    def failing() -> JobResult:
        return sh("echo 'disk full' >&2; exit 3", memMB=64)

    state = failing(return_state=True)
    assert state.is_failed()
    with pytest.raises(JobFailedError) as info:
        state.result()
    assert "FAILED" in str(info.value) and "exit code 3" in str(info.value)


def test_job_inputs_cache_runs_a_new_job_when_the_scheduler_changes(
    podman: PodmanService,
) -> None:
    """The scheduler is part of the cache key: the same call on ``local_docker`` after a
    cached ``local_cwd`` result runs a new job (the other inputs: ``test_options.py``)."""
    import uuid

    from prefect import flow

    from tether.adapters.prefect import component_task
    from tether.adapters.prefect.cache import JOB_INPUTS

    sh = component_task("utils.sh", scheduler="local_cwd", image=BUSYBOX_IMAGE,
                        cache_policy=JOB_INPUTS, env={"SALT": uuid.uuid4().hex})

    @flow
    def cached() -> list[JobResult]:
        base = sh("echo cached", memMB=64)
        again = sh("echo cached", memMB=64)
        other = sh.with_options(scheduler="local_docker")("echo cached", memMB=64)
        return [base, again, other]

    state = cached(return_state=True)
    assert state.is_completed(), state.message
    base, again, other = state.result()
    assert base.app_handle.startswith("local_cwd://")
    assert again.app_handle == base.app_handle
    assert other.app_handle.startswith("local_docker://"), other
    assert other.state == AppState.SUCCEEDED
