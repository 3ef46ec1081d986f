"""The Prefect ``SlurmConnection`` block against the real cluster's sshd and slurmrestd.

The block is saved to the session's real Prefect API and loaded back by name (secrets and
all), then its parameters configure the Runner that submits with no Slurm client on PATH
(``tests/e2e/infra/slurm_remote.py``). ``from_env`` reads the same from ``TETHER_SLURM_*``.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tether.specs import AppDef, Role

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


@pytest.fixture
def job_dir() -> Iterator[str]:
    from tests.e2e.infra.slurm_remote import ensure_user

    user = ensure_user()
    path = Path(user.pw_dir) / "tether-prefect-e2e" / uuid.uuid4().hex[:12]
    path.mkdir(parents=True)
    for p in (path, path.parent):
        os.chown(p, user.pw_uid, user.pw_gid)
    yield str(path)
    shutil.rmtree(path, ignore_errors=True)


def test_saved_block_and_env_settings_run_jobs_over_ssh_and_rest(
    prefect_api: str, slurm_cluster: Any, slurm_sshd: Any, slurm_restd: Any, job_dir: str,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    from pydantic import SecretStr

    from tether.adapters.prefect.slurm import SlurmConnection
    from tether.runner import get_runner
    from tether.specs import AppDef, AppState, Role

    token = slurm_cluster.token(slurm_sshd.user)
    key = Path(slurm_sshd.identity_file).read_text()
    host_key = " ".join(Path(slurm_sshd.known_hosts).read_text().split()[1:3])
    name = f"hpc-{uuid.uuid4().hex[:8]}"
    SlurmConnection(
        transport="ssh", host="127.0.0.1", port=slurm_sshd.port, user=slurm_sshd.user,
        private_key=SecretStr(key), host_key=host_key, slurm_conf=str(slurm_cluster.conf),
        job_dir=job_dir,
    ).save(name)  # fmt: skip
    ssh = SlurmConnection.load(name, _sync=True)  # type: ignore[call-arg]
    assert isinstance(ssh, SlurmConnection)
    assert "PRIVATE KEY" not in repr(ssh)
    for var, value in {"TRANSPORT": "rest", "REST_URL": slurm_restd.url,
                       "USER": slurm_sshd.user, "JWT": token, "JOB_DIR": job_dir}.items():
        monkeypatch.setenv(f"TETHER_SLURM_{var}", value)  # fmt: skip
    rest = SlurmConnection.from_env()
    assert token not in repr(rest)

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("ssh", "sh"):
        (bin_dir / tool).symlink_to(shutil.which(tool) or tool)
    monkeypatch.setenv("PATH", str(bin_dir))
    for conn in (ssh, rest):
        app = AppDef(f"pf-{conn.transport}", roles=[Role("w", entrypoint="echo",
                                                         args=[conn.transport])])  # fmt: skip
        with get_runner(**conn.scheduler_params()) as runner:
            handle = runner.run(app, "slurm", conn.run_defaults())
            status = runner.wait(handle, wait_interval=0.5, timeout=120)
        assert status is not None and status.state == AppState.SUCCEEDED, status
        app_id = handle.rsplit("/", 1)[-1]
        out = Path(job_dir) / f"pf-{conn.transport}-{app_id}" / "w-0.out"
        assert out.read_text() == f"{conn.transport}\n"
    printed = "".join(capfd.readouterr())
    assert token not in printed and "PRIVATE KEY" not in printed


def slurm_echo(message: str = "hi") -> AppDef:
    """A one-replica echo (no image: Slurm runs it as is).

    Args:
        message: What the job prints.
    """
    return AppDef("pfslurm", [Role("main", entrypoint="echo", args=[message])])


def run_flow(task: Any, message: str) -> Any:
    """Runs a flow calling ``task(message=...)`` once; returns its final state."""
    from prefect import flow

    @flow(name="slurm-remote")
    def one_job(message: str) -> Any:
        return task(message=message)

    return one_job(message, return_state=True)


def test_a_flow_runs_tether_jobs_over_ssh_and_rest_without_a_slurm_client(
    prefect_api: str, slurm_cluster: Any, slurm_sshd: Any, slurm_restd: Any, job_dir: str,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """A Prefect flow on the session's server runs a component task on the cluster, on a
    worker with no Slurm client on PATH, configured by its environment
    (``SlurmConnection.environment()``), once per remote transport; the job's output comes
    back into the flow run's logs (over rest through ``mount``)."""
    from pydantic import SecretStr

    from tests.adapters.prefect.conftest import wait_for_logs
    from tests.e2e.infra.slurm_remote import ensure_user
    from tether.adapters.prefect import component_task
    from tether.adapters.prefect.slurm import SlurmConnection
    from tether.specs import AppState

    token = slurm_cluster.token(slurm_sshd.user)
    key = Path(slurm_sshd.identity_file).read_text()
    host_key = " ".join(Path(slurm_sshd.known_hosts).read_text().split()[1:3])
    home = ensure_user(slurm_sshd.user).pw_dir
    mounted = tmp_path / "hpc-home"
    mounted.symlink_to(home)
    conns = {
        "ssh": SlurmConnection(
            transport="ssh", host="127.0.0.1", port=slurm_sshd.port, user=slurm_sshd.user,
            private_key=SecretStr(key), host_key=host_key, slurm_conf=str(slurm_cluster.conf),
            job_dir=job_dir,
        ),
        "rest": SlurmConnection(
            transport="rest", rest_url=slurm_restd.url, user=slurm_sshd.user,
            jwt=SecretStr(token), mount=f"{home}={mounted}", job_dir=job_dir,
        ),
    }  # fmt: skip
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("ssh", "sh"):
        (bin_dir / tool).symlink_to(shutil.which(tool) or tool)
    monkeypatch.setenv("PATH", str(bin_dir))
    assert shutil.which("sbatch") is None and shutil.which("squeue") is None

    for transport, conn in conns.items():
        env = conn.environment()
        assert env["TETHER_SLURM_TRANSPORT"] == transport
        assert token not in str(env) and "PRIVATE KEY" not in str(env)
        with monkeypatch.context() as m:
            for name, value in env.items():
                m.setenv(name, value)
            echo = component_task(slurm_echo, scheduler="slurm", cfg=conn.run_defaults())
            state = run_flow(echo, f"via {transport}")
        assert state.is_completed(), state.message
        result = state.result()
        assert result.state == AppState.SUCCEEDED
        app_id = result.app_handle.rsplit("/", 1)[-1]
        out = Path(job_dir) / f"pfslurm-{app_id}" / "main-0.out"
        assert out.read_text() == f"via {transport}\n"
        wait_for_logs(state.state_details.flow_run_id, f"via {transport}")
    printed = "".join(capfd.readouterr())
    assert token not in printed and "PRIVATE KEY" not in printed
