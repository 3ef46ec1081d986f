"""Recovery from a real Slurm node failure over the ``ssh`` and ``rest`` transports, through
``Runner.run`` and ``Runner.wait`` under one logical handle.

The cluster is the module's own (``tests/e2e/slurm_recovery.py``), with a private sshd and a
slurmrestd (JWTs) in front of it (``tests/e2e/infra/slurm_remote.py``); the jobs run as the
dedicated login user, in its home directory. The tests run with no Slurm client on their
PATH (over ``ssh`` only ``ssh`` and the tools it needs; over ``rest`` nothing at all), so
every read of the job's state, the cause of its end and the next attempt's submission go
through the transport. The failure is Slurm's own: ``scontrol update state=DOWN`` on the
node that runs attempt 0; Slurm ends it ``NODE_FAIL``, tether records ``node_lost`` and
submits attempt 1, which resumes from attempt 0's checkpoint. Over ``rest`` the logs are
read through the ``mount`` setting (slurmrestd serves no files); the cluster has no
accounting, so slurmrestd 22.05's ``slurmdb`` quirks (``docs/slurm.md``) do not come in:
every state is read from the queue. The module fills the ``slurm_ssh`` and ``slurm_rest``
cells of the portability matrix's recovery row (``tests/e2e/matrix/table.py``).
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import slurm_recovery as rec
from tests.e2e.infra.slurm import SlurmCluster
from tests.e2e.infra.slurm_remote import (
    SSH_USER,
    SlurmRestd,
    SshServer,
    ensure_user,
    missing_remote_tools,
)
from tests.e2e.matrix.table import RECOVERY, recovery_cell, write_doc
from tether.runner import Runner
from tether.specs import AppDef, AppState, RecoveryPolicy, Role, parse_app_handle

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(400)]

SCRIPT = """\
set -eu
echo "attempt $TETHER_ATTEMPT on $SLURMD_NODENAME"
if [ "$TETHER_ATTEMPT" = 0 ]; then
  mkdir -p "$TETHER_CHECKPOINT"
  echo 5 > "$TETHER_CHECKPOINT/step.tmp"
  mv "$TETHER_CHECKPOINT/step.tmp" "$TETHER_CHECKPOINT/step"
  exec sleep 600
fi
echo "resumed at step $(cat "$TETHER_CHECKPOINT/step")"
"""

OUTCOMES: dict[str, dict[str, bool]] = {"ssh": {}, "rest": {}}
"""Transport -> test name -> whether it passed (for the matrix cells)."""


@pytest.fixture(scope="module", autouse=True)
def _matrix_cells() -> Iterator[None]:
    yield
    how = "a node set DOWN (`NODE_FAIL`), through the Runner over the {} transport"
    write_doc({
        (RECOVERY, f"slurm_{t}"): recovery_cell(f"slurm_{t}", outcomes, how.format(t))
        for t, outcomes in OUTCOMES.items() if outcomes
    })  # fmt: skip


@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmCluster]:
    missing = missing_remote_tools()
    if missing:
        pytest.skip(f"missing {', '.join(missing)}; run tests/e2e/infra/setup.d/32-slurm-remote.sh")
    yield from rec.own_cluster(jwt=True)


@pytest.fixture(scope="module")
def sshd(cluster: SlurmCluster) -> Iterator[SshServer]:
    assert cluster.dir is not None
    cluster.dir.chmod(0o711)  # the login user's Slurm commands read slurm.conf
    with SshServer() as server:
        yield server


@pytest.fixture(scope="module")
def restd(cluster: SlurmCluster) -> Iterator[SlurmRestd]:
    with SlurmRestd(cluster) as server:
        yield server


@pytest.fixture
def home() -> Iterator[Path]:
    """A directory of the login user's home for the test's jobs (``jobs``, made beforehand:
    slurmrestd makes no directory) and checkpoint."""
    user = ensure_user(SSH_USER)
    d = Path(user.pw_dir) / "tether-recovery-e2e" / uuid.uuid4().hex[:12]
    (d / "jobs").mkdir(parents=True)
    for p in (d / "jobs", d, d.parent):
        os.chown(p, user.pw_uid, user.pw_gid)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _path_with(tmp_path: Path, tools: tuple[str, ...]) -> str:
    """A PATH holding only ``tools`` (no Slurm client)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in tools:
        found = shutil.which(tool)
        assert found is not None, tool
        (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


def _params(transport: str, request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    cluster: SlurmCluster = request.getfixturevalue("cluster")
    if transport == "ssh":
        sshd: SshServer = request.getfixturevalue("sshd")
        return {**sshd.settings(), "slurm_conf": str(cluster.conf)}
    restd: SlurmRestd = request.getfixturevalue("restd")
    user_home = ensure_user(SSH_USER).pw_dir
    mounted = tmp_path / "hpc-home"  # the cluster's home directories, "mounted" here
    mounted.symlink_to(user_home)
    return {"transport": "rest", "rest_url": restd.url, "jwt": cluster.token(SSH_USER),
            "mount": f"{user_home}={mounted}"}  # fmt: skip


@pytest.mark.parametrize("transport", ["ssh", "rest"])
def test_node_set_down_is_recovered_over_the_transport(
    transport: str, cluster: SlurmCluster, home: Path, tmp_path: Path,
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    OUTCOMES[transport][request.node.name] = False
    params = _params(transport, request, tmp_path)
    tools = ("ssh", "ssh-keygen", "sh", "rsync") if transport == "ssh" else ()
    monkeypatch.setenv("PATH", _path_with(tmp_path, tools))
    assert shutil.which("squeue") is None and shutil.which("sbatch") is None
    monkeypatch.setenv("TETHER_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "tetherconfig.ini").write_text("")
    monkeypatch.setenv("TETHERCONFIG", str(tmp_path / "tetherconfig.ini"))

    name = f"rec-{transport}"
    ckpt = home / "ckpt"
    app = AppDef(name, roles=[Role("w", entrypoint="bash", args=["-c", SCRIPT])],
                 recovery=RecoveryPolicy(max_recoveries=2, backoff_s=0),
                 checkpoint=str(ckpt))  # fmt: skip
    undo: Callable[[], None] | None = None
    with Runner("e2e", scheduler_params={"slurm": params}) as runner:
        handle = runner.run(app, "slurm", {"job_dir": str(home / "jobs")})
        assert handle.startswith("chain://")
        try:
            first, node = rec.wait_running(cluster, name, (ckpt / "step").exists)
            undo = rec.set_down(cluster, node)
            final = runner.wait(handle, wait_interval=0.5, timeout=rec.WAIT_S)
        finally:
            if undo is not None:
                undo()
        assert final is not None and final.state == AppState.SUCCEEDED, final
        assert final.num_restarts == 1 and final.msg.startswith("attempt 1 on slurm"), final
        attempts = runner.attempts(handle)
        assert [(a["attempt"], a["state"], a["cause"]) for a in attempts] == [
            (0, "FAILED", "node_lost"), (1, "SUCCEEDED", None),
        ]  # fmt: skip
        ids = [parse_app_handle(a["handle"]).app_id for a in attempts]
        assert ids[0] == first
        lines = [
            line for line in runner.log_lines(handle, "w") if not line.startswith("slurmstepd-")
        ]  # Slurm's own NODE FAILURE line
    rec.one_job_per_attempt(cluster, name, ids, ["NODE_FAIL", "COMPLETED"])
    assert lines[:3] == [
        "[tether] attempt 0 on slurm\n", f"attempt 0 on {node}\n", "[tether] attempt 1 on slurm\n",
    ], lines  # fmt: skip
    assert lines[3].startswith("attempt 1 on ") and lines[4:] == ["resumed at step 5\n"], lines
    OUTCOMES[transport][request.node.name] = True
