"""ComponentOperator under real Airflow 3 (``dag.test()``) with jobs on ``local_docker``.

Containers run on a private podman (:mod:`tests.e2e.infra.podman`, nothing pulled); where
podman cannot run, the tests skip with the reason, except in CI (``CI`` set).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("docker")

from airflow_testlib import run_dag, task_states, xcoms

from tests.e2e.infra.podman import (
    BUSYBOX_IMAGE,
    PodmanService,
    PodmanUnavailable,
    tether_apps_here,
)

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("airflow_db")]

DAGS = Path(__file__).parent / "docker_dags" / "tether_docker_dags.py"


@pytest.fixture(scope="module")
def podman() -> Iterator[PodmanService]:
    service = PodmanService(image=BUSYBOX_IMAGE)
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


def test_containers_succeed_and_stream_into_the_task_log(
    podman: PodmanService, capfd: pytest.CaptureFixture[str]
) -> None:
    dr = run_dag("tether_docker_ok", path=DAGS)
    out = capfd.readouterr()
    text = out.out + out.err
    assert str(dr.state) == "success", task_states(dr)
    x = xcoms("tether_docker_ok", dr.run_id, "two_containers")
    assert x["state"] == "SUCCEEDED" and x["app_handle"].startswith("local_docker://")
    app_id = x["app_handle"].rsplit("/", 1)[-1]
    assert f"sh/0 hello from 0 on {app_id}-sh-0" in text
    assert f"sh/1 hello from 1 on {app_id}-sh-1" in text


def test_failed_container_fails_the_task(podman: PodmanService,
                                         capfd: pytest.CaptureFixture[str]) -> None:
    dr = run_dag("tether_docker_fail", path=DAGS)
    text = "".join(capfd.readouterr())
    assert str(dr.state) == "failed", task_states(dr)
    assert "exit code 3" in text and "disk full" in text
