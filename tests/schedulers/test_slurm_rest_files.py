"""The remote transports' reach beyond Slurm's API: the mounted job directory (``mount``),
accounting records from slurmrestd's ``slurmdb`` API (record shapes as slurmrestd 22.05 sends
them) and the outputs URL as the cluster sees it; the e2e tests run each against the real
daemons."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.schedulers.slurm.files import MountedFiles, NoFiles
from tether.schedulers.slurm.outputs import cluster_url
from tether.schedulers.slurm.render import Marker, make_comment
from tether.schedulers.slurm.rest import RestClient
from tether.schedulers.slurm.rest_acct import from_slurmdb
from tether.schedulers.slurm.transport import (
    SlurmTransportConfigError,
    SlurmTransportError,
    TransportSettings,
)
from tether.specs import AppState


def mount(tmp_path: Path) -> MountedFiles:
    here = tmp_path / "mnt"
    here.mkdir()
    return MountedFiles("/cluster/home", str(here), NoFiles("rest", "http://x"))


def test_paths_under_the_cluster_dir_are_read_and_written_at_the_mount(tmp_path: Path) -> None:
    files = mount(tmp_path)
    script = files.write_new("/cluster/home/alice/jobs", ".job-", "#!/bin/bash\n")
    assert script.startswith("/cluster/home/alice/jobs/.job-")  # the cluster's path
    local = tmp_path / "mnt" / "alice" / "jobs" / Path(script).name
    assert local.read_text() == "#!/bin/bash\n"
    files.rename(script, "/cluster/home/alice/jobs/job-1.sbatch")
    assert files.read("/cluster/home/alice/jobs/job-1.sbatch", 2) == b"/bin/bash\n"
    assert files.sizes("/cluster/home/alice/jobs") == {"job-1.sbatch": 12}
    files.touch("/cluster/home/alice/jobs/.job-1.deleted")
    assert files.exists("/cluster/home/alice/jobs/.job-1.deleted")
    files.remove("/cluster/home/alice/jobs")
    assert not (tmp_path / "mnt" / "alice" / "jobs").exists()


def test_paths_outside_the_mount_are_out_of_reach(tmp_path: Path) -> None:
    files = mount(tmp_path)
    outside = tmp_path / "elsewhere.txt"
    outside.write_text("x")
    assert files.local("/cluster/homework/a") is None  # a prefix of a name is not a parent
    assert files.local("/cluster/home/../etc/passwd") is None
    assert files.read(str(outside)) is None and not files.exists(str(outside))
    with pytest.raises(SlurmTransportError, match="mount=CLUSTER_DIR=LOCAL_DIR"):
        files.touch(str(outside))


def test_job_dir_is_made_through_the_mount_private_and_only_there(tmp_path: Path) -> None:
    files = mount(tmp_path)
    assert files.make_dir("/cluster/home/alice/jobs/run-1")
    made = tmp_path / "mnt" / "alice" / "jobs" / "run-1"
    assert made.is_dir() and made.stat().st_mode & 0o777 == 0o700
    assert files.make_dir("/cluster/home/alice/jobs/run-1")  # already there: fine
    assert files.reaches("/cluster/home/alice/jobs/run-1")
    assert not files.make_dir("/scratch/alice/jobs") and not files.reaches("/scratch/alice")
    assert not NoFiles("rest", "http://x").make_dir("/cluster/home/alice/jobs")
    (tmp_path / "mnt" / "afile").write_text("")  # fails for root too
    with pytest.raises(SlurmTransportError, match=r"rest to http://x: cannot create "
                       r"/cluster/home/afile/x through the mount.*writable"):  # fmt: skip
        files.make_dir("/cluster/home/afile/x")


@pytest.mark.parametrize("value", ["/home", "home=/mnt", "/home=mnt", "=/mnt"])
def test_a_malformed_mount_names_the_field_and_the_form(value: str) -> None:
    with pytest.raises(SlurmTransportConfigError, match=r"mount=.* must be CLUSTER_DIR=LOCAL_DIR"):
        TransportSettings(transport="rest", rest_url="http://x", mount=value).check()


def test_capabilities_follow_the_mount() -> None:
    bare = RestClient(TransportSettings(transport="rest", rest_url="http://x"))
    assert not bare.capabilities.reads_files and not bare.capabilities.copies_workspaces
    mounted = RestClient(TransportSettings(transport="rest", rest_url="http://x",
                                           mount="/home=/mnt/hpc"))  # fmt: skip
    assert mounted.capabilities.reads_files and mounted.capabilities.copies_workspaces


def record(job_id: int, state: str, rc: int, het: tuple[int, int | None] = (0, None),
           comment: str | None = None) -> dict[str, object]:  # fmt: skip
    return {
        "job_id": job_id, "name": "train", "state": {"current": state, "reason": "None"},
        "exit_code": {"status": "SUCCESS", "return_code": rc},
        "het": {"job_id": het[0], "job_offset": het[1]}, "nodes": "n1",
        "comment": {"administrator": None, "job": comment, "system": None},
        "working_directory": "/home/alice/jobs", "time": {"submission": 1795851893},
        "user": "alice", "kill_request_user": None,
    }  # fmt: skip


def test_slurmdb_records_become_apps() -> None:
    two = make_comment(Marker([("a", 1), ("b", 1)], job_key="k1"))
    one = make_comment(Marker([("w", 2)]))
    apps = from_slurmdb([
        record(8, "COMPLETED", 0, het=(7, 1)),
        record(7, "COMPLETED", 0, het=(7, 0), comment=two),
        record(9, "FAILED", 0, comment=one),  # slurmrestd 22.05's exit code: always 0
        record(10, "COMPLETED", 0),  # not tether's
    ])  # fmt: skip
    assert [a.app_id for a in apps] == ["7", "9"]
    het, failed = apps
    assert het.state == AppState.SUCCEEDED and het.marker.job_key == "k1"
    assert [c.offset for c in het.components] == [0, 1] and het.job_dir == "/home/alice/jobs"
    assert failed.state == AppState.FAILED and "exit code" not in failed.msg
    assert failed.created == 1795851893.0


@pytest.mark.parametrize(
    ("transport", "url", "mount", "want"),
    [
        ("ssh", "/mnt/hpc/alice/out/slurm/${app_id}", "/home=/mnt/hpc",
         "/home/alice/out/slurm/${app_id}"),
        ("rest", "file:///mnt/hpc/out", "/home=/mnt/hpc", "/home/out"),
        ("rest", "s3://bucket/out/slurm/${app_id}", None, "s3://bucket/out/slurm/${app_id}"),
        ("local", "/var/tether/out", None, "/var/tether/out"),
        ("ssh", "/mnt/hpcx/out", "/home=/mnt/hpc", None),  # a sibling, not under the mount
        ("ssh", "/root/.local/state/tether/outputs/slurm/1", None, None),
    ],
)  # fmt: skip
def test_the_outputs_url_as_the_cluster_sees_it(
    transport: str, url: str, mount: str | None, want: str | None
) -> None:
    settings = TransportSettings(transport=transport, host="h", rest_url="http://x", mount=mount)
    assert cluster_url(url, settings) == want


def test_an_outputs_root_the_cluster_cannot_see_is_named_at_dryrun(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from tether.schedulers.slurm import create_scheduler
    from tether.specs import AppDef, Role

    sched = create_scheduler("t", transport="ssh", host="login.example")
    app = AppDef("a", [Role("w", entrypoint="true",
                            env={"TETHER_OUTPUTS_URL": "/root/state/outputs/slurm/${app_id}"})])
    with caplog.at_level("WARNING"):
        info = sched.submit_dryrun(app, {"job_dir": "/home/alice/jobs"})
    assert "TETHER_OUTPUTS_URL=/root/state/outputs/slurm/${app_id} is a path of this machine" in (
        caplog.text)
    assert "does not see" in caplog.text
    mounted = create_scheduler("t", transport="ssh", host="login.example", mount="/root=/root")
    caplog.clear()
    info = mounted.submit_dryrun(app, {"job_dir": "/home/alice/jobs"})
    assert "TETHER_OUTPUTS_URL=/root/state/outputs/slurm/" in info.request.script
    assert not caplog.text and app.roles[0].env["TETHER_OUTPUTS_URL"].startswith("/root/")


def test_the_watch_hub_keys_a_rest_view_by_user_and_token() -> None:
    """A hub view reads with the client that opened it: followers with another token (a
    renewed one, another connection's) must not share it, or they read with a token that
    may have expired; the same credentials share one view."""
    def client(jwt: str, user: str = "alice") -> RestClient:
        return RestClient(TransportSettings(transport="rest", rest_url="http://x", user=user),
                          jwt=jwt)  # fmt: skip

    assert client("t1").cluster_key == client("t1").cluster_key
    assert client("t1").cluster_key != client("t2").cluster_key
    assert client("t1").cluster_key != client("t1", user="bob").cluster_key
    assert "t1" not in client("t1").cluster_key  # a checksum, not the token
