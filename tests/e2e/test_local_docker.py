"""``local_docker`` for real: containers on a private podman serving the Docker API.

The image is a busybox rootfs imported into that podman (nothing is pulled here); see
:mod:`tests.e2e.infra.podman`. Where podman cannot run, the tests skip with the reason,
except in CI (``CI`` set), where that is a failure.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

pytest.importorskip("docker")

from tests.e2e.infra.podman import (
    BUSYBOX_IMAGE,
    PodmanService,
    PodmanUnavailable,
    tether_apps_here,
)
from tether.schedulers.api import JOB_KEY
from tether.schedulers.local_docker.scheduler import LocalDockerScheduler
from tether.schedulers.local_docker.watch import DockerReader
from tether.schedulers.watch import JobEvent, Subscription, WatchHub, resolve_target
from tether.specs import (
    AppDef,
    AppState,
    BindMount,
    Resource,
    RetryPolicy,
    Role,
    is_terminal,
    parse_app_handle,
)

pytestmark = pytest.mark.e2e

DEADLINE_S = 120.0


@pytest.fixture(scope="module")
def podman() -> Iterator[PodmanService]:
    """A private podman serving the Docker API, with the busybox image imported."""
    service = PodmanService()
    try:
        service.start()
    except PodmanUnavailable as e:
        reason = f"podman cannot run containers here: {e}"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture
def sched(podman: PodmanService) -> Iterator[LocalDockerScheduler]:
    s = LocalDockerScheduler("test", docker_host=podman.docker_host)
    # podman instances on one host share the CNI network configuration, so the listing shows
    # the apps of other sessions' podmans too (another group's, running now): delete only
    # what this test made on this engine
    before = tether_apps_here(s.api)
    try:
        yield s
    finally:
        for app_id in sorted(tether_apps_here(s.api) - before):
            s.delete(app_id)
        s.close()


def sh(name: str, script: str, **kw: Any) -> Role:
    return Role(name=name, image=BUSYBOX_IMAGE, entrypoint="sh", args=["-c", script], **kw)


def wait_state(s: LocalDockerScheduler, app_id: str, done: Any = is_terminal) -> Any:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        desc = s.describe(app_id)
        assert desc is not None
        if done(desc.state):
            return desc
        assert time.monotonic() < deadline, f"{app_id} still {desc.state}: {desc.msg}"
        time.sleep(0.2)


def logs(s: LocalDockerScheduler, app_id: str, role: str, k: int = 0, **kw: Any) -> str:
    return "".join(s.log_iter(app_id, role, k, **kw))


def test_success_logs_and_streams(sched: LocalDockerScheduler) -> None:
    app = AppDef("hello", roles=[sh("main", "echo out-$TETHER_REPLICA_ID; echo err >&2",
                                    resource=Resource(cpu=0.5, gpu=0, memMB=64))])
    app_id = sched.submit(app, {})
    desc = wait_state(sched, app_id)
    assert desc.state == AppState.SUCCEEDED, desc.msg
    assert desc.roles_statuses[0].replicas[0].exit_code == 0
    # two pipes: the engine keeps each stream's order, not the order across them
    assert sorted(logs(sched, app_id, "main").splitlines()) == ["err", "out-0"]
    assert logs(sched, app_id, "main", streams="stdout") == "out-0\n"
    assert logs(sched, app_id, "main", streams="stderr") == "err\n"
    future = datetime.now(timezone.utc) + timedelta(hours=1)
    assert logs(sched, app_id, "main", since=future) == ""
    assert logs(sched, app_id, "main", until=datetime(2000, 1, 1, tzinfo=timezone.utc)) == ""
    assert app_id in [a.app_id for a in sched.list()]
    sched.cancel(app_id)  # finished: a no-op
    assert sched.describe(app_id).state == AppState.SUCCEEDED  # type: ignore[union-attr]


def test_failure_exit_code(sched: LocalDockerScheduler) -> None:
    app_id = sched.submit(AppDef("fail", roles=[sh("main", "exit 3")]), {})
    desc = wait_state(sched, app_id)
    assert desc.state == AppState.FAILED
    assert desc.roles_statuses[0].replicas[0].exit_code == 3
    assert "exit code 3" in desc.msg


def test_replicas_reach_rank0_by_hostname(sched: LocalDockerScheduler, tmp_path: Any) -> None:
    # replica 0 listens, replica 1 connects to $TETHER_RANK0_HOST: a real rendezvous. Replica
    # 0 answers only once it has read the request: busybox nc exits at the peer's EOF without
    # waiting for its own stdin, so a listener that sent `pong` at once could end the exchange
    # before the client's `echo ping` had written anything (seen under load)
    script = (
        'if [ "$TETHER_REPLICA_ID" = 0 ]; then nc -l -p 2999 -e sh -c '
        '\'read x; echo "$x" > /out/got0; echo pong\'; '
        'else i=0; until echo ping | nc "$TETHER_RANK0_HOST" 2999 > /out/got1; '
        'do i=$((i+1)); [ $i -gt 900 ] && exit 7; sleep 0.1; done; fi; '
        'echo "$TETHER_REPLICA_ID/$TETHER_NUM_REPLICAS rank0=$TETHER_RANK0_HOST host=$(hostname)"'
    )
    tmp_path.chmod(0o777)
    role = sh("trainer", script, num_replicas=2,
              mounts=[BindMount(src_path=str(tmp_path), dst_path="/out")])
    app_id = sched.submit(AppDef("dist", roles=[role]), {})
    desc = wait_state(sched, app_id)
    assert desc.state == AppState.SUCCEEDED, (
        desc.msg, logs(sched, app_id, "trainer", 0), logs(sched, app_id, "trainer", 1))
    rank0 = f"{app_id}-trainer-0"
    assert logs(sched, app_id, "trainer", 0) == f"0/2 rank0={rank0} host={rank0}\n"
    assert logs(sched, app_id, "trainer", 1) == f"1/2 rank0={rank0} host={app_id}-trainer-1\n"
    assert (tmp_path / "got0").read_text() == "ping\n"
    assert (tmp_path / "got1").read_text() == "pong\n"


def test_cancel_stops_every_container(sched: LocalDockerScheduler, podman: PodmanService
                                      ) -> None:
    app_id = sched.submit(AppDef("long", roles=[sh("a", "sleep 600", num_replicas=2),
                                                 sh("b", "sleep 600")]), {"stop_timeout": 1})
    wait_state(sched, app_id, lambda s: s == AppState.RUNNING)
    sched.cancel(app_id)
    desc = wait_state(sched, app_id)
    assert desc.state == AppState.CANCELLED
    api = sched.api
    running = api.containers(filters={"label": [f"tether.dev/app-id={app_id}"]})
    assert running == []
    assert len(api.containers(all=True, filters={"label": [f"tether.dev/app-id={app_id}"]})) == 3
    sched.cancel(app_id)  # idempotent
    sched.delete(app_id)
    sched.delete(app_id)
    assert sched.describe(app_id) is None
    assert api.containers(all=True, filters={"label": [f"tether.dev/app-id={app_id}"]}) == []


def test_reattach_by_job_key(sched: LocalDockerScheduler, podman: PodmanService) -> None:
    app = AppDef("keyed", roles=[sh("main", "echo hi", resource=Resource(cpu=1, gpu=0, memMB=128))],
                 metadata={JOB_KEY: "dag/run 1/task"})
    app_id = sched.submit(app, {})
    other = sched.submit(AppDef("other", roles=[sh("main", "true")]), {})
    wait_state(sched, app_id)
    # another process, another client: the engine's labels are the record
    fresh = LocalDockerScheduler("elsewhere", docker_host=podman.docker_host)
    try:
        found = fresh.find_jobs("dag/run 1/task")
        assert [a.app_id for a in found] == [app_id]
        desc = fresh.describe(app_id)
        assert desc is not None and desc.job_key == "dag/run 1/task"
        assert desc.state == AppState.SUCCEEDED
        assert desc.roles[0].entrypoint == "sh" and desc.roles[0].resource.memMB == 128
        assert {app_id, other} <= {a.app_id for a in fresh.list()}
    finally:
        fresh.close()


def test_app_without_its_network_is_described_from_its_containers(
        sched: LocalDockerScheduler) -> None:
    """While any container of an app exists, the app exists: podman's API can miss an
    existing network for a moment, and a network removed outside tether leaves only the
    containers. Neither may turn a running job into "no such app", nor drop it from a
    listing."""
    app = AppDef("nonet", roles=[sh("main", "sleep 600")], metadata={JOB_KEY: "dag/run/nonet"})
    req = sched.submit_dryrun(app, {"stop_timeout": 1}).request
    api = sched.api
    for c in req.containers:  # the app's own containers, but on no network of the engine
        body = {**c.body, "HostConfig": {**c.body["HostConfig"], "NetworkMode": "none"}}
        body.pop("NetworkingConfig", None)
        api.start(api.create_container_from_config(body, c.name)["Id"])
    try:
        desc = wait_state(sched, req.app_id, lambda s: s == AppState.RUNNING)
        assert desc.job_key == "dag/run/nonet"
        assert [r.state for r in desc.roles_statuses[0].replicas] == [AppState.RUNNING]
        # listed too (a job key's re-attach lookup is a listing)
        assert req.app_id in {a.app_id for a in sched.list()}
        assert [a.app_id for a in sched.find_jobs("dag/run/nonet")] == [req.app_id]
        sched.cancel(req.app_id)
        assert wait_state(sched, req.app_id).state == AppState.CANCELLED
    finally:
        sched.delete(req.app_id)
    assert sched.describe(req.app_id) is None


def test_a_network_the_engine_does_not_find_fails_the_start_naming_it(
        sched: LocalDockerScheduler) -> None:
    """The containers of an app join its network: when the engine does not find it (it
    answered 404 after several lookups), no container is made and the reason names it."""
    req = sched.submit_dryrun(AppDef("nonet", roles=[sh("main", "true")]), {}).request
    why = sched._start_containers(req)  # the step after the network's creation
    assert why == f"network {req.app_id} was created but the engine does not find it"
    assert sched.api.containers(all=True, filters={"label": [f"tether.dev/app-id={req.app_id}"]}
                                ) == []


def test_missing_image_fails_without_containers(sched: LocalDockerScheduler) -> None:
    role = Role(name="main", image="localhost/not-there:1", entrypoint="true")
    app_id = sched.submit(AppDef("noimg", roles=[role]), {"pull": False})
    desc = sched.describe(app_id)
    assert desc is not None and desc.state == AppState.FAILED
    assert "localhost/not-there:1" in desc.msg and "not found" in desc.msg.lower()
    assert sched.api.containers(all=True, filters={"label": [f"tether.dev/app-id={app_id}"]}) == []


def test_replica_retries_by_restart_policy(sched: LocalDockerScheduler, tmp_path: Any) -> None:
    tmp_path.chmod(0o777)
    role = sh("main", "echo x >> /out/tries; [ $(wc -l < /out/tries) -ge 3 ]",
              max_retries=2, retry_policy=RetryPolicy.REPLICA,
              mounts=[BindMount(src_path=str(tmp_path), dst_path="/out")])
    app_id = sched.submit(AppDef("retry", roles=[role]), {})
    desc = wait_state(sched, app_id)
    assert desc.state == AppState.SUCCEEDED, desc.msg
    assert desc.num_restarts == 2


def test_no_engine_names_docker_host(tmp_path: Any) -> None:
    from tether.schedulers.docker_engine import DockerUnavailableError

    s = LocalDockerScheduler("test", docker_host=f"unix://{tmp_path}/none.sock")
    with pytest.raises(DockerUnavailableError, match="DOCKER_HOST") as e:
        s.list()
    assert "podman system service" in str(e.value)


def test_cli_run_echo(podman: PodmanService, tmp_path: Any) -> None:
    """`tether run -s local_docker utils.echo --msg hi` waits and prints the container's output."""
    import subprocess
    import sys

    env = {**os.environ, "DOCKER_HOST": podman.docker_host, "HOME": str(tmp_path),
           "TETHER_STATE_DIR": str(tmp_path / "state")}
    with contextlib.closing(LocalDockerScheduler("cli", docker_host=podman.docker_host)
                            ) as sched:
        before = tether_apps_here(sched.api)
        res = subprocess.run(
            [sys.executable, "-m", "tether.cli.main", "run", "-s", "local_docker",
             "utils.echo", "--msg", "hi", "--image", BUSYBOX_IMAGE],
            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=DEADLINE_S)
        assert res.returncode == 0, res.stderr
        assert "hi" in res.stdout.splitlines() or "hi" in res.stderr, (res.stdout, res.stderr)
        handle = res.stdout.splitlines()[0]  # printed first
        assert handle.startswith("local_docker://"), handle
        app_id = parse_app_handle(handle).app_id
        # one app, the CLI's, made on this engine; listed as it ended (the listing also
        # shows other podmans' apps, another test group's echo too: their networks are in
        # the host's shared CNI directory)
        assert tether_apps_here(sched.api) - before == {app_id}
        assert [(a.name, a.state) for a in sched.list() if a.app_id == app_id] == [
            ("echo", AppState.SUCCEEDED)]
        sched.delete(app_id)


def test_unpullable_image_fails_with_engine_reason(sched: LocalDockerScheduler) -> None:
    role = Role(name="main", image="registry.invalid/tether/none:1", entrypoint="true")
    app_id = sched.submit(AppDef("nopull", roles=[role]), {})
    desc = sched.describe(app_id)
    assert desc is not None and desc.state == AppState.FAILED
    assert "cannot be pulled" in desc.msg and "registry.invalid" in desc.msg
    assert sched.api.containers(all=True, filters={"label": [f"tether.dev/app-id={app_id}"]}) == []


def test_the_watch_hub_lists_the_engine_and_describes_only_what_changed(
    sched: LocalDockerScheduler,
) -> None:
    long_a = sched.submit(AppDef("wa", [sh("r", "sleep 600")]), {})
    long_b = sched.submit(AppDef("wb", [sh("r", "sleep 600")]), {})
    fails = sched.submit(AppDef("wf", [sh("r", "sleep 3; exit 4")]), {})
    fast = lambda s, a: dataclasses.replace(resolve_target(s, a), interval=0.2)  # noqa: E731
    hub = WatchHub(resolve=fast)
    with Subscription(hub) as sub:
        for app_id in (long_a, long_b, fails):
            sub.follow(sched, app_id)
        events: list[JobEvent] = []
        while not any(e.final for e in events):
            ev = sub.get(timeout=DEADLINE_S)
            assert ev is not None, events
            events.append(ev)
        reader = next(iter(hub._views.values())).driver._reader
        assert isinstance(reader, DockerReader)
        rounds = next(iter(hub._views.values())).driver.rounds
        sched.cancel(long_a)
        while not any(e.final and e.app_id == long_a for e in events):
            ev = sub.get(timeout=DEADLINE_S)
            assert ev is not None, events
            events.append(ev)
        assert sub.get(timeout=1.0) is None  # nothing else changed
    hub.close()
    finals = {e.app_id: e for e in events if e.final}
    assert len([e for e in events if e.final]) == 2  # each end heard once
    assert finals[fails].state == AppState.FAILED and "4" in finals[fails].msg
    assert finals[long_a].state == AppState.CANCELLED
    assert long_b not in finals
    # many reads of three apps, but a describe only when an app's listing changed
    assert rounds >= 5, rounds
    assert reader.describes <= 12 < 3 * rounds, (reader.describes, rounds)
