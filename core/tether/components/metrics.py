"""Metrics: ``metrics.tensorboard`` runs a TensorBoard server next to a job."""

from __future__ import annotations

from tether.components import DEFAULT_IMAGE
from tether.specs import AppDef, Role, resource


def tensorboard(
    logdir: str,
    image: str = DEFAULT_IMAGE,
    timeout: float = 60 * 60,
    port: int = 6006,
    start_on_file: str = "",
    exit_on_file: str = "",
) -> AppDef:
    """Runs TensorBoard on a log directory until a file appears or a timeout passes.

    The server is started under ``tether.apps.utils.process_monitor``, which can wait for
    ``start_on_file`` before starting it and stops it when ``exit_on_file`` exists (files are
    fsspec URLs), so it can run as a sidecar of a training job. The image needs the
    ``tensorboard`` package.

    Args:
        logdir: The log directory (any URL TensorBoard reads, e.g. s3://bucket/tb).
        image: Container image (ignored by local schedulers).
        timeout: Seconds after which TensorBoard is stopped.
        port: Port TensorBoard listens on.
        start_on_file: Wait for this file before starting (empty: start now).
        exit_on_file: Stop when this file exists (empty: run until the timeout).

    Returns:
        The AppDef.
    """
    if timeout <= 0:
        raise ValueError(f"--timeout must be positive, got {timeout}")
    if not 0 < port < 65536:
        raise ValueError(f"--port {port} is not a port (1-65535)")
    args = ["-m", "tether.apps.utils.process_monitor", "--timeout", str(timeout)]
    if start_on_file:
        args += ["--start_on_file", start_on_file]
    if exit_on_file:
        args += ["--exit_on_file", exit_on_file]
    args += ["--", "tensorboard", "--bind_all", "--port", str(port), "--logdir", logdir]
    return AppDef(
        name="tensorboard",
        roles=[
            Role(
                name="tensorboard",
                image=image,
                entrypoint="python",
                args=args,
                env={"PYTHONUNBUFFERED": "1"},
                port_map={"http": port},
                resource=resource(cpu=1, gpu=0, memMB=1024),
            )
        ],
    )
