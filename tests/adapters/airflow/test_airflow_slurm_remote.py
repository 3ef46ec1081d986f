"""``tether_slurm`` Airflow Connections in their ssh and rest forms, against the real cluster.

The Connections come from ``AIRFLOW_CONN_*`` variables read by Airflow's own ``Connection``;
the Runner they configure submits through the e2e sshd and slurmrestd
(``tests/e2e/infra/slurm_remote.py``) with no Slurm client on PATH. The key and the JWT are
secrets: neither may show in anything printed.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("airflow_db"), pytest.mark.timeout(300)]


@pytest.fixture
def job_dir() -> Iterator[str]:
    from tests.e2e.infra.slurm_remote import ensure_user

    user = ensure_user()
    path = Path(user.pw_dir) / "tether-airflow-e2e" / uuid.uuid4().hex[:12]
    path.mkdir(parents=True)
    for p in (path, path.parent):
        os.chown(p, user.pw_uid, user.pw_gid)
    yield str(path)
    shutil.rmtree(path, ignore_errors=True)


def test_ssh_and_rest_connections_run_a_job_without_a_slurm_client(
    slurm_cluster: Any, slurm_sshd: Any, slurm_restd: Any, job_dir: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    from tether.adapters.airflow.connections import connection_settings
    from tether.runner import get_runner
    from tether.specs import AppDef, AppState, Role

    token = slurm_cluster.token(slurm_sshd.user)
    key = Path(slurm_sshd.identity_file).read_text()
    host_key = " ".join(Path(slurm_sshd.known_hosts).read_text().split()[1:3])
    conns = {
        "TETHER_SLURM_SSH": {
            "conn_type": "tether_slurm", "host": "127.0.0.1", "port": slurm_sshd.port,
            "login": slurm_sshd.user,
            "extra": {"private_key": key, "host_key": host_key, "job_dir": job_dir,
                      "slurm_conf": str(slurm_cluster.conf)},
        },
        "TETHER_SLURM_REST": {
            "conn_type": "tether_slurm", "host": slurm_restd.url, "login": slurm_sshd.user,
            "password": token, "extra": {"job_dir": job_dir},
        },
    }  # fmt: skip
    for name, conn in conns.items():
        monkeypatch.setenv(f"AIRFLOW_CONN_{name}", json.dumps(conn))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("ssh", "sh"):
        (bin_dir / tool).symlink_to(shutil.which(tool) or tool)
    monkeypatch.setenv("PATH", str(bin_dir))
    assert shutil.which("sbatch") is None

    for conn_id, transport in (("tether_slurm_ssh", "ssh"), ("tether_slurm_rest", "rest")):
        params, defaults = connection_settings(conn_id)
        assert params["transport"] == transport
        app = AppDef(f"af-{transport}", roles=[Role("w", entrypoint="echo", args=[transport])])
        with get_runner(**params) as runner:
            handle = runner.run(app, "slurm", dict(defaults))
            status = runner.wait(handle, wait_interval=0.5, timeout=120)
        assert status is not None and status.state == AppState.SUCCEEDED, status
        app_id = handle.rsplit("/", 1)[-1]
        out = Path(job_dir) / f"af-{transport}-{app_id}" / "w-0.out"
        assert out.read_text() == f"{transport}\n"
    printed = "".join(capfd.readouterr())
    assert token not in printed and "PRIVATE KEY" not in printed


def test_a_dag_runs_tether_jobs_over_ssh_and_rest_without_a_slurm_client(
    slurm_cluster: Any, slurm_sshd: Any, slurm_restd: Any, job_dir: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """A whole DAG (``dag.test()``): one task over each remote transport (the rest one
    deferred, its trigger run inline), on a worker with no Slurm client on PATH; the rest
    connection reads the job's files through its ``mount``."""
    from tests.adapters.airflow.airflow_testlib import run_dag, task_states, xcoms
    from tests.e2e.infra.slurm_remote import ensure_user

    token = slurm_cluster.token(slurm_sshd.user)
    key = Path(slurm_sshd.identity_file).read_text()
    host_key = " ".join(Path(slurm_sshd.known_hosts).read_text().split()[1:3])
    home = ensure_user(slurm_sshd.user).pw_dir
    mounted = tmp_path / "hpc-home"
    mounted.symlink_to(home)
    conns = {
        "TETHER_SLURM_SSH_E2E": {
            "conn_type": "tether_slurm", "host": "127.0.0.1", "port": slurm_sshd.port,
            "login": slurm_sshd.user,
            "extra": {"private_key": key, "host_key": host_key, "job_dir": job_dir,
                      "slurm_conf": str(slurm_cluster.conf)},
        },
        "TETHER_SLURM_REST_E2E": {
            "conn_type": "tether_slurm", "host": slurm_restd.url, "login": slurm_sshd.user,
            "password": token, "extra": {"job_dir": job_dir, "mount": f"{home}={mounted}"},
        },
    }  # fmt: skip
    for name, conn in conns.items():
        monkeypatch.setenv(f"AIRFLOW_CONN_{name}", json.dumps(conn))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("ssh", "sh"):
        (bin_dir / tool).symlink_to(shutil.which(tool) or tool)
    monkeypatch.setenv("PATH", str(bin_dir))
    assert shutil.which("sbatch") is None and shutil.which("squeue") is None

    dr = run_dag("tether_t_slurm_remote")
    assert task_states(dr) == {"over_ssh": "success", "over_rest": "success"}, task_states(dr)
    for task, transport in (("over_ssh", "ssh"), ("over_rest", "rest")):
        handle = xcoms("tether_t_slurm_remote", dr.run_id, task)["app_handle"]
        app_id = handle.rsplit("/", 1)[-1]
        out = Path(job_dir) / f"afslurm-{app_id}" / "main-0.out"
        assert out.read_text() == f"via {transport}\n"
    printed = "".join(capfd.readouterr())
    assert token not in printed and "PRIVATE KEY" not in printed
