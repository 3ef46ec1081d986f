"""Small utility components: echo, touch, sh, python, binary, copy and booth."""

from __future__ import annotations

import os
import shlex

from tether.components import DEFAULT_IMAGE
from tether.specs import AppDef, Role, parse_mounts, resource


def _one_role_app(name: str, role: Role) -> AppDef:
    return AppDef(name=name, roles=[role])


def _with_loglevel(env: dict[str, str] | None) -> dict[str, str]:
    """A copy of ``env`` with ``LOGLEVEL`` defaulting to the caller's (else ``WARNING``)."""
    out = dict(env or {})
    out.setdefault("LOGLEVEL", os.environ.get("LOGLEVEL", "WARNING"))
    return out


def echo(
    msg: str = "hello world", image: str = DEFAULT_IMAGE, num_replicas: int = 1
) -> AppDef:
    """Prints a message: the smallest job, for trying a scheduler out.

    Args:
        msg: The message.
        image: Container image (ignored by local schedulers).
        num_replicas: How many replicas print it.

    Returns:
        The AppDef.
    """
    return _one_role_app(
        "echo",
        Role(
            name="echo",
            image=image,
            entrypoint="echo",
            args=[msg],
            num_replicas=num_replicas,
            resource=resource(cpu=1, gpu=0, memMB=256),
        ),
    )


def touch(file: str, image: str = DEFAULT_IMAGE) -> AppDef:
    """Creates an empty file (or updates its time), e.g. to signal another job.

    Args:
        file: The file to touch.
        image: Container image (ignored by local schedulers).

    Returns:
        The AppDef.
    """
    return _one_role_app(
        "touch",
        Role(
            name="touch",
            image=image,
            entrypoint="touch",
            args=[file],
            resource=resource(cpu=1, gpu=0, memMB=256),
        ),
    )


def sh(
    *args: str,
    image: str = DEFAULT_IMAGE,
    num_replicas: int = 1,
    cpu: int = 1,
    gpu: int = 0,
    memMB: int = 1024,
    h: str | None = None,
    env: dict[str, str] | None = None,
    max_retries: int = 0,
    mounts: list[str] | None = None,
) -> AppDef:
    """Runs a shell command with ``sh -c``.

    One argument is the whole script (``tether run utils.sh "ls | wc -l"``); several are a
    command and its arguments, each quoted (``tether run utils.sh echo "a b"``).

    Args:
        args: The script, or a command and its arguments.
        image: Container image (ignored by local schedulers).
        num_replicas: How many replicas run it.
        cpu: CPUs per replica (0 or -1: no request, the scheduler's default applies).
        gpu: GPUs per replica (0: none).
        memMB: Memory per replica in MiB (0 or -1: no request, the scheduler's default applies).
        h: A named resource; wins over --cpu/--gpu/--memMB.
        env: Environment variables, K=V,K2=V2 (``LOGLEVEL`` defaults to yours, else
            ``WARNING``).
        max_retries: How many times the scheduler retries the job.
        mounts: Mounts, e.g. type=bind,src=/data,dst=/data.

    Returns:
        The AppDef.
    """
    if not args:
        raise ValueError("utils.sh needs a command, e.g. `tether run utils.sh echo hi`")
    script = args[0] if len(args) == 1 else shlex.join(args)
    return _one_role_app(
        "sh",
        Role(
            name="sh",
            image=image,
            entrypoint="sh",
            args=["-c", script],
            env=_with_loglevel(env),
            num_replicas=num_replicas,
            max_retries=max_retries,
            resource=resource(cpu=cpu, gpu=gpu, memMB=memMB, h=h),
            mounts=parse_mounts(mounts) if mounts else [],
        ),
    )


def python(
    *args: str,
    m: str | None = None,
    c: str | None = None,
    script: str | None = None,
    image: str = DEFAULT_IMAGE,
    name: str = "tether_utils_python",
    cpu: int = 1,
    gpu: int = 0,
    memMB: int = 1024,
    h: str | None = None,
    num_replicas: int = 1,
    env: dict[str, str] | None = None,
    max_retries: int = 0,
    mounts: list[str] | None = None,
) -> AppDef:
    """Runs Python: a script, a module (``-m``) or a snippet (``-c``).

    Args:
        args: Arguments to the script, module or snippet (``sys.argv[1:]``).
        m: A module to run, as with ``python -m``.
        c: Python code to run, as with ``python -c``.
        script: A script to run.
        image: Container image (ignored by local schedulers).
        name: The app's name.
        cpu: CPUs per replica (0 or -1: no request, the scheduler's default applies).
        gpu: GPUs per replica (0: none).
        memMB: Memory per replica in MiB (0 or -1: no request, the scheduler's default applies).
        h: A named resource; wins over --cpu/--gpu/--memMB.
        num_replicas: How many replicas run it.
        env: Environment variables, K=V,K2=V2 (``LOGLEVEL`` defaults to yours, else
            ``WARNING``).
        max_retries: How many times the scheduler retries the job.
        mounts: Mounts, e.g. type=bind,src=/data,dst=/data.

    Returns:
        The AppDef.
    """
    given = [flag for flag, v in (("-m", m), ("-c", c), ("--script", script)) if v is not None]
    if len(given) != 1:
        raise ValueError(
            "exactly one of -m, -c and --script must be given"
            + (f" (got {', '.join(given)})" if given else "")
        )
    if m is not None:
        head = ["-m", m]
    elif c is not None:
        head = ["-c", c]
    else:
        head = [str(script)]
    role_env = _with_loglevel(env)
    role_env.setdefault("PYTHONUNBUFFERED", "1")
    return _one_role_app(
        name,
        Role(
            name="python",
            image=image,
            entrypoint="python",
            args=[*head, *args],
            env=role_env,
            num_replicas=num_replicas,
            max_retries=max_retries,
            resource=resource(cpu=cpu, gpu=gpu, memMB=memMB, h=h),
            mounts=parse_mounts(mounts) if mounts else [],
        ),
    )


def binary(
    *args: str,
    entrypoint: str,
    name: str = "tether_utils_binary",
    num_replicas: int = 1,
    image: str = DEFAULT_IMAGE,
    env: dict[str, str] | None = None,
) -> AppDef:
    """Runs a program with arguments.

    Args:
        args: Arguments to the program.
        entrypoint: The program (a path or a name on PATH).
        name: The app's name.
        num_replicas: How many replicas run it.
        image: Container image (ignored by local schedulers).
        env: Environment variables, K=V,K2=V2.

    Returns:
        The AppDef.
    """
    if not entrypoint.strip():
        raise ValueError("--entrypoint must name a program")
    return _one_role_app(
        name,
        Role(
            name=name,
            image=image,
            entrypoint=entrypoint,
            args=list(args),
            env=dict(env or {}),
            num_replicas=num_replicas,
        ),
    )


def copy(
    src: str, dst: str, image: str = DEFAULT_IMAGE, mounts: list[str] | None = None
) -> AppDef:
    """Copies a file between any two fsspec URLs (local paths, s3://, gs://, memory://...).

    Args:
        src: Source URL.
        dst: Destination URL.
        image: Container image (ignored by local schedulers).
        mounts: Mounts, e.g. type=bind,src=/data,dst=/data.

    Returns:
        The AppDef.
    """
    return _one_role_app(
        "copy",
        Role(
            name="copy",
            image=image,
            entrypoint="python",
            args=["-m", "tether.apps.utils.copy_main", "--src", src, "--dst", dst],
            env={"PYTHONUNBUFFERED": "1"},
            resource=resource(cpu=1, gpu=0, memMB=1024),
            mounts=parse_mounts(mounts) if mounts else [],
        ),
    )


def booth(
    x1: float,
    x2: float,
    trial_idx: int = 0,
    tracker_base: str = "/tmp/tether-booth",
    image: str = DEFAULT_IMAGE,
) -> AppDef:
    """Evaluates the Booth function, a tiny objective for hyper-parameter search examples.

    ``booth(x1, x2) = (x1 + 2*x2 - 7)^2 + (2*x1 + x2 - 5)^2``, minimal (0) at (1, 3). The
    value is printed and written as JSON to ``{tracker_base}/{trial_idx}.json``.

    Args:
        x1: First coordinate.
        x2: Second coordinate.
        trial_idx: Index of the trial (names the result file).
        tracker_base: Directory (fsspec URL) the result is written to.
        image: Container image (ignored by local schedulers).

    Returns:
        The AppDef.
    """
    return _one_role_app(
        "booth",
        Role(
            name="booth",
            image=image,
            entrypoint="python",
            args=[
                "-m", "tether.apps.utils.booth_main",
                "--x1", repr(float(x1)),
                "--x2", repr(float(x2)),
                "--trial_idx", str(trial_idx),
                "--tracker_base", tracker_base,
            ],
            env={"PYTHONUNBUFFERED": "1"},
            resource=resource(cpu=1, gpu=0, memMB=256),
        ),
    )


def hydra(
    *overrides: str,
    script: str | None = None,
    m: str | None = None,
    config_path: str | None = None,
    config_name: str | None = None,
    multirun: bool = False,
    image: str = DEFAULT_IMAGE,
    name: str = "tether_utils_hydra",
    cpu: int = 1,
    gpu: int = 0,
    memMB: int = 1024,
    h: str | None = None,
    env: dict[str, str] | None = None,
    max_retries: int = 0,
    mounts: list[str] | None = None,
) -> AppDef:
    """Runs a Hydra application with config overrides (TorchX's Hydra launcher recipe).

    Example: ``tether run utils.hydra --script train.py --config_name sweep -- lr=0.1
    +trainer.gpus=1``.

    Args:
        overrides: Hydra overrides: ``key=value``, ``+key=value``, ``++key=value`` or ``~key``.
        script: The Hydra script to run.
        m: The module to run (``python -m``), instead of ``--script``.
        config_path: Hydra's ``--config-path`` (directory of the primary config).
        config_name: Hydra's ``--config-name`` (the primary config's name).
        multirun: Run Hydra in ``--multirun`` mode (sweeps).
        image: Container image (ignored by local schedulers).
        name: The app's name.
        cpu: CPUs per replica (0 or -1: no request, the scheduler's default applies).
        gpu: GPUs per replica (0: none).
        memMB: Memory per replica in MiB (0 or -1: no request, the scheduler's default applies).
        h: A named resource; wins over --cpu/--gpu/--memMB.
        env: Environment variables, K=V,K2=V2.
        max_retries: How many times the scheduler retries the job.
        mounts: Mounts, e.g. type=bind,src=/data,dst=/data.

    Returns:
        The AppDef.
    """
    bad = [o for o in overrides if not (o.startswith("~") or "=" in o)]
    if bad:
        raise ValueError(
            f"Hydra overrides must be key=value, +key=value, ++key=value or ~key; got {bad}"
        )
    if (script is None) == (m is None):
        raise ValueError("exactly one of --script and -m must be given")
    hydra_args: list[str] = []
    if config_path:
        hydra_args += ["--config-path", config_path]
    if config_name:
        hydra_args += ["--config-name", config_name]
    if multirun:
        hydra_args.append("--multirun")
    return python(
        *hydra_args,
        *overrides,
        m=m,
        script=script,
        image=image,
        name=name,
        cpu=cpu,
        gpu=gpu,
        memMB=memMB,
        h=h,
        env=env,
        max_retries=max_retries,
        mounts=mounts,
    )
