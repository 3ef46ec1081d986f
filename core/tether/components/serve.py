"""Model serving: ``serve.torchserve`` registers a model with a running TorchServe."""

from __future__ import annotations

from tether.components import DEFAULT_IMAGE
from tether.specs import AppDef, Role, resource


def torchserve(
    model_path: str,
    management_api: str,
    image: str = DEFAULT_IMAGE,
    params: dict[str, str] | None = None,
    dryrun: bool = False,
    port: int = 8222,
) -> AppDef:
    """Uploads a model archive (``.mar``) to a TorchServe management API.

    The job downloads the archive from any fsspec URL, serves it over HTTP on ``port`` and
    asks TorchServe to register it (``POST {management_api}/models?url=...``), waiting until
    TorchServe has loaded it.

    Args:
        model_path: fsspec URL of the model archive (e.g. s3://bucket/model.mar).
        management_api: URL of TorchServe's management API (e.g. http://torchserve:8081).
        image: Container image (ignored by local schedulers).
        params: Registration parameters, K=V,K2=V2 (e.g. initial_workers=1,batch_size=4).
        dryrun: Download and serve the archive but do not register it.
        port: Port the archive is served on while TorchServe downloads it.

    Returns:
        The AppDef.
    """
    if not 0 < port < 65536:
        raise ValueError(f"--port {port} is not a port (1-65535)")
    args = [
        "-m", "tether.apps.serve.serve",
        "--model_path", model_path,
        "--management_api", management_api,
        "--port", str(port),
    ]
    for key, value in (params or {}).items():
        args += ["--param", f"{key}={value}"]
    if dryrun:
        args.append("--dryrun")
    return AppDef(
        name="torchserve",
        roles=[
            Role(
                name="torchserve",
                image=image,
                entrypoint="python",
                args=args,
                env={"PYTHONUNBUFFERED": "1"},
                port_map={"model-download": port},
                resource=resource(cpu=1, gpu=0, memMB=1024),
            )
        ],
    )
