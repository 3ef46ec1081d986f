"""``local_docker`` requests: golden files, limits, mounts, addresses and dryrun checks.

Regenerate the golden files with ``TETHER_REGEN_GOLDEN=1 pytest tests/schedulers``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.golden import GoldenDir
from tether.schedulers.api import JOB_KEY
from tether.schedulers.capabilities import Stream, UnsupportedFeatureError
from tether.schedulers.ids import make_app_id
from tether.schedulers.local_docker.options import LocalDockerOpts
from tether.schedulers.local_docker.render import (
    APP_ID_RULE,
    render,
    replica_hostname,
)
from tether.schedulers.local_docker.scheduler import create_scheduler, parse_log_line
from tether.schedulers.local_docker.status import app_state, replica_state
from tether.specs import (
    AppDef,
    AppState,
    BindMount,
    DeviceMount,
    Resource,
    RetryPolicy,
    Role,
    VolumeMount,
)

GOLDEN = GoldenDir(Path(__file__).parent / "golden" / "local_docker", suffix=".json")


def ddp_app() -> AppDef:
    trainer = Role(
        name="trainer", image="trainer:1", entrypoint="python",
        args=["-m", "train", "--rank0", "${rank0_env}", "--id", "${replica_id}"],
        env={"LR": "0.1", "API_TOKEN": "s3cret"}, num_replicas=2,
        max_retries=2, retry_policy=RetryPolicy.REPLICA,
        resource=Resource(cpu=2, gpu=1, memMB=1024), port_map={"tb": 6006},
        mounts=[BindMount("/data", "/data", read_only=True), VolumeMount("ckpt", "/ckpt"),
                DeviceMount("/dev/fuse", "/dev/fuse")],
    )
    return AppDef("DDP Train!", roles=[trainer, Role("ps", image="ps:1", entrypoint="serve")],
                  metadata={JOB_KEY: "dag/run/task"})


def test_golden_ddp() -> None:
    from tether.schedulers.local_docker.render import format_request

    req = render(ddp_app(), LocalDockerOpts(labels={"team": "ml"}),
                 make_app_id("DDP Train!", APP_ID_RULE, "x1y2z3"), created=1700000000.0)
    text = format_request(req)
    assert "s3cret" not in text
    GOLDEN.check("ddp", text)
    body = req.containers[1].body
    assert body["Hostname"] == "ddp-train-x1y2z3-trainer-1"
    env = dict(e.split("=", 1) for e in body["Env"])
    assert env["TETHER_RANK0_HOST"] == "ddp-train-x1y2z3-trainer-0"
    assert body["Cmd"][-1] == "1"  # ${replica_id}
    hc = body["HostConfig"]
    assert hc["NanoCpus"] == 2_000_000_000 and hc["Memory"] == 1024 * 1024 * 1024
    assert hc["DeviceRequests"][0]["Count"] == 1
    assert hc["RestartPolicy"] == {"Name": "on-failure", "MaximumRetryCount": 2}


def test_addresses_fill_hosts_of_every_replica() -> None:
    req = render(ddp_app(), LocalDockerOpts(), "app-x", created=0.0)
    hosts = [f"10.0.0.{i}" for i in range(1, 40)]
    out = req.with_addresses(hosts)
    names = [c.name for c in out.containers]
    for i, c in enumerate(out.containers):
        assert c.body["NetworkingConfig"]["EndpointsConfig"]["app-x"]["IPAMConfig"] == {
            "IPv4Address": hosts[10 + i]}
        assert c.body["HostConfig"]["ExtraHosts"] == [
            f"{n}:{hosts[10 + j]}" for j, n in enumerate(names)]
    assert "ExtraHosts" not in req.containers[0].body["HostConfig"]  # the input is unchanged
    with pytest.raises(ValueError, match="addresses"):
        req.with_addresses(hosts[:5])


def test_names_are_hostnames() -> None:
    app_id = make_app_id("9 Very long name with spaces and CAPS " * 3, APP_ID_RULE, "abcdef")
    assert app_id[0].isalpha() and app_id.endswith("-abcdef") and len(app_id) <= 37
    assert len(replica_hostname(app_id, "r" * 80, 123)) <= 63


def test_dryrun_offline_and_capability_checks() -> None:
    s = create_scheduler("t", docker_host="unix:///nonexistent.sock")
    info = s.submit_dryrun(ddp_app(), {})
    assert json.loads(str(info))["images"] == ["ps:1", "trainer:1"]
    bad = AppDef("x", roles=[Role("r", image="i", entrypoint="e", max_retries=1,
                                  retry_policy=RetryPolicy.APPLICATION)])
    with pytest.raises(UnsupportedFeatureError, match="retry_policy=APPLICATION"):
        s.submit_dryrun(bad, {})
    with pytest.raises(UnsupportedFeatureError, match="image is empty"):
        s.submit_dryrun(AppDef("x", roles=[Role("r", entrypoint="e")]), {})


def test_state_table() -> None:
    assert replica_state({"Status": "running"}, 0)[0] == AppState.RUNNING
    assert replica_state({"Status": "exited", "ExitCode": 0}, 0)[0] == AppState.SUCCEEDED
    # podman: "stopped" (exit code known) between the exit and the cleanup, never UNKNOWN
    assert replica_state({"Status": "stopped", "ExitCode": 0}, 0)[0] == AppState.SUCCEEDED
    assert replica_state({"Status": "stopped", "ExitCode": 3}, 0)[0] == AppState.FAILED
    st, msg = replica_state({"Status": "exited", "ExitCode": 137, "OOMKilled": True}, 0)
    assert st == AppState.FAILED and "137" in msg and "out of memory" in msg
    assert replica_state({"Status": "exited", "ExitCode": 1}, 2, 1)[0] == AppState.PENDING
    assert replica_state({"Status": "what"}, 0)[0] == AppState.UNKNOWN
    assert app_state([], False, "no image") == AppState.FAILED
    from tether.schedulers.local_docker.status import ReplicaView

    done = ReplicaView("r", 0, "h", AppState.SUCCEEDED, 0, 0, "")
    assert app_state([done], False, None) == AppState.SUCCEEDED
    assert app_state([done], True, None) == AppState.CANCELLED  # exited 0 on SIGTERM


def test_log_timestamps() -> None:
    ts, prec, text = parse_log_line("2024-01-02T03:04:05.123456789Z hello world")
    assert text == "hello world" and ts is not None and ts.microsecond == 123456
    assert prec.total_seconds() < 1
    ts, prec, text = parse_log_line("2024-01-02T03:04:05Z x")
    assert text == "x" and prec.total_seconds() == 1
    assert parse_log_line("no stamp")[2] == "no stamp"


def test_dryrun_shows_workspace_build_without_engine(tmp_path: Path) -> None:
    from tether.workspace import Workspace

    (tmp_path / "train.py").write_text("print(1)\n")
    s = create_scheduler("t", docker_host="unix:///nonexistent.sock")
    role = Role("main", image="base:1", entrypoint="python", args=["train.py"],
                workspace=Workspace({str(tmp_path): ""}))
    cfg = s.run_opts().resolve({"image_repo": "reg:5000/team"}, "local_docker")
    s.build_workspaces([role], cfg)
    info = s.submit_dryrun(AppDef("ws", roles=[role]), cfg)
    doc = json.loads(str(info))
    (build,) = doc["build"]
    assert build["base_image"] == "base:1" and build["push"] is True and build["files"] == 1
    assert doc["containers"][0]["Image"] == build["image"]
    assert build["image"].startswith("reg:5000/team/tether-workspace-")


def test_kubernetes_workspace_image_needs_and_uses_image_repo(tmp_path: Path) -> None:
    from tether.runner import get_runner

    (tmp_path / "train.py").write_text("print(1)\n")
    app = AppDef("ws", roles=[Role("main", image="base:1", entrypoint="python",
                                   args=["train.py"])])
    with get_runner("t") as runner:
        with pytest.raises(ValueError, match="image_repo"):
            runner.dryrun(app, "kubernetes", {}, workspace=str(tmp_path))
        info = runner.dryrun(app, "kubernetes", {"image_repo": "reg.example.com:5000/team"},
                             workspace=str(tmp_path))
    assert info.app is not None
    image = info.app.roles[0].image
    assert image.startswith("reg.example.com:5000/team/tether-workspace-")
    assert f"image: {image}" in str(info)


def test_log_frames_join_partial_lines() -> None:
    """Engines stamp every frame, also the rest of a line written in pieces (podman)."""

    class Frames:  # stands in for the engine's framed log stream (the e2e tests use podman)
        def logs(self, cid: str, **kw: object) -> list[bytes]:
            return [b"2024-01-02T03:04:05Z part-one", b"2024-01-02T03:04:05Z  part-two\n",
                    b"2024-01-02T03:04:06.5Z a\n2024-01-02T03:04:06.6Z b\n",
                    b"2024-01-02T03:04:07Z 2020-01-01T00:00:00Z kept as written\n"]

    s = create_scheduler("t", api=Frames())
    assert list(s._lines("c", None, None, False, Stream.COMBINED)) == [
        "part-one part-two\n", "a\n", "b\n", "2020-01-01T00:00:00Z kept as written\n"]


def test_overlay_merges_into_the_create_body_last() -> None:
    """An overlay wins over what tether rendered, survives the addresses, and dryrun shows it."""
    from tether.schedulers.local_docker.render import OVERLAY_KIND, OVERLAY_NAMESPACE
    from tether.specs.overlays import DEL, PUT, set_overlay

    role = Role("main", image="img:1", entrypoint="python", args=["-m", "x"],
                resource=Resource(cpu=1, gpu=0, memMB=512), env={"A": "1"})
    set_overlay(role, OVERLAY_NAMESPACE, OVERLAY_KIND, {
        "HostConfig": {"ShmSize": 2 ** 30, "CapAdd": ["SYS_PTRACE"], PUT("Memory"): 2 ** 31,
                       "ExtraHosts": ["db:10.1.2.3"]},
        "Env": ["B=2"], "User": "1000:1000", DEL("Entrypoint"): None,
    })
    app = AppDef("over", roles=[role])
    req = render(app, LocalDockerOpts(), make_app_id("over", APP_ID_RULE, "abc123"),
                 created=1700000000.0)
    from tether.schedulers.local_docker.render import format_request

    GOLDEN.check("overlay", format_request(req))
    body = req.containers[0].body
    assert body["HostConfig"]["ShmSize"] == 2 ** 30 and body["HostConfig"]["Memory"] == 2 ** 31
    assert body["HostConfig"]["NanoCpus"] == 1_000_000_000  # kept
    assert "A=1" in body["Env"] and body["Env"][-1] == "B=2"  # lists append
    assert "Entrypoint" not in body and body["User"] == "1000:1000"
    placed = req.with_addresses([f"10.0.0.{i}" for i in range(1, 20)]).containers[0].body
    assert placed["HostConfig"]["ExtraHosts"] == ["db:10.1.2.3", "over-abc123-main-0:10.0.0.11"]
    s = create_scheduler("t", docker_host="unix:///nonexistent.sock")
    shown = json.loads(str(s.submit_dryrun(app, {})))["containers"][0]
    assert shown["HostConfig"]["CapAdd"] == ["SYS_PTRACE"] and shown["User"] == "1000:1000"


def test_overlay_type_mismatch_names_the_key() -> None:
    from tether.specs.overlays import OverlayError, set_overlay

    role = Role("main", image="img:1", entrypoint="python")
    set_overlay(role, "local_docker", "ContainerCreate", {"Cmd": "not a list"})
    with pytest.raises(OverlayError, match="Cmd"):
        render(AppDef("x", roles=[role]), LocalDockerOpts(), "x-abc", created=0.0)
