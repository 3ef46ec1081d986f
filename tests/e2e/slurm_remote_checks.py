"""Checks the ``ssh`` and ``rest`` transports' e2e tests share (not a test module)."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.infra.slurm_remote import SSH_USER, ensure_user
from tether.specs import AppDef, AppState, Role

PUBLISH = (
    'mkdir -p "$TETHER_OUTPUTS_URL" && printf \'{"name": "where", "value": "%s"}\' '
    '"$TETHER_OUTPUTS_URL" > "$TETHER_OUTPUTS_URL/where.json"'
)
"""Publishes an output without tether on the cluster (the document write_output makes)."""


def outputs_through_the_mount(params: dict[str, Any], cfg: dict[str, Any], tmp_path: Path,
                              monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """A Runner whose outputs root is under the mount (the dedicated user's home, "mounted"
    here as a symbolic link): the job publishes at the cluster's path of it, and
    ``Runner.outputs`` reads the same files here.

    Args:
        params: The transport's scheduler parameters.
        cfg: Run options (``job_dir``).
        tmp_path: Scratch directory.
        monkeypatch: Sets ``TETHER_OUTPUTS_ROOT``.
    """
    from tether.runner import get_runner

    home = ensure_user(SSH_USER).pw_dir
    here = tmp_path / "hpc-home"
    here.symlink_to(home)
    name = f"tether-outputs-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("TETHER_OUTPUTS_ROOT", str(here / name))
    app = AppDef("pub", roles=[Role("w", entrypoint="bash", args=["-c", PUBLISH])])
    try:
        with get_runner(**params, mount=f"{home}={here}") as runner:
            handle = runner.run(app, "slurm", cfg)
            status = runner.wait(handle, wait_interval=0.3, timeout=120)
            assert status is not None and status.state == AppState.SUCCEEDED, status
            app_id = handle.rsplit("/", 1)[-1]
            assert runner.outputs(handle) == {"where": f"{home}/{name}/slurm/{app_id}"}
    finally:
        shutil.rmtree(Path(home) / name, ignore_errors=True)



def retry_finds_the_job_over_the_cfg_transport(
    params: dict[str, Any], cfg: dict[str, Any], deadline_s: float
) -> None:
    """The transport given only in the run options (no scheduler parameter names it, no
    ``TETHER_SLURM_*``): an orchestrator's retry, in a new process (a new Runner), finds the
    job its first try launched over that transport and re-attaches; nothing is submitted twice.

    Args:
        params: Scheduler parameters naming no transport (``slurm_conf``: where the login
            node's Slurm commands find the test cluster, a fixed path at a real site).
        cfg: Run options with the transport settings and ``job_dir``.
        deadline_s: Longest wait for the cancelled job to end.
    """
    assert "transport" not in params
    from tether.adapters.common.session import JobSession
    from tether.runner import Runner
    from tether.runner.reattach import Action
    from tether.schedulers.slurm.scheduler import create_scheduler

    key = f"dag/run-{uuid.uuid4().hex[:8]}/task"
    app = AppDef("retried", roles=[Role("w", entrypoint="bash", args=["-c", "exec sleep 600"])])
    sp = {"slurm": params}
    sched = create_scheduler("e2e", **params)  # the transport only in the options here too
    try:
        with Runner("e2e", scheduler_params=sp) as r, JobSession(app, "slurm", cfg, key,
                                                                  runner=r) as first:  # fmt: skip
            assert first.submit().action is Action.LAUNCH
            launched = first.app_handle
        with Runner("e2e", scheduler_params=sp) as r, JobSession(app, "slurm", cfg, key,
                                                                  runner=r) as retry:  # fmt: skip
            decision = retry.submit()  # the orchestrator's retry: a new process, the same key
            assert decision.action is Action.ATTACH, decision.reason
            assert retry.app_handle == launched and retry.reattached
        with Runner("e2e", scheduler_params=sp) as r:
            outcome = r.run_or_attach(app, "slurm", cfg, job_key=key)
            assert outcome.reattached and outcome.app_handle == launched
            status = r.status(launched)  # the re-attached scheduler stays on the transport
            assert status is not None and not status.is_terminal(), status
            r.cancel(launched)
            status = r.wait(launched, wait_interval=0.5, timeout=deadline_s)
            assert status is not None and status.state == AppState.CANCELLED, status
        assert [f"slurm://e2e/{a.app_id}" for a in sched.find_jobs(key, cfg)] == [launched]
    finally:  # a failed check leaves no job holding a node for ten minutes
        for job in sched.find_jobs(key, cfg):
            sched.cancel(job.app_id)
        sched.close()
