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
