"""One root for tether's exceptions (``tether.errors``): every public exception derives from
``TetherError`` and keeps its builtin base, errors raised through public calls of each layer
are caught by ``except TetherError``, and every one survives pickling."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tether.errors import BackendError, NotFoundError, SpecError, SpecTypeError, TetherError
from tether.specs import AppDef, AppState, AppStatus, Role

WALK = r"""
import importlib, inspect, json, pkgutil, sys
import tether
import tether.adapters

# tether.adapters is walked on its own too: an editable install maps it through an import
# hook, whose tree pkgutil does not list under tether.__path__
infos = {i.name: i for i in pkgutil.walk_packages(tether.__path__, "tether.")}
infos.update((i.name, i) for i in pkgutil.walk_packages(tether.adapters.__path__,
                                                         "tether.adapters."))
found, skipped = {}, {}
for info in sorted(infos.values(), key=lambda i: i.name):
    try:
        module = importlib.import_module(info.name)
    except ModuleNotFoundError as e:  # a backend whose SDK (an extra) is not installed
        if (e.name or "").split(".")[0] == "tether":
            raise
        skipped[info.name] = str(e)
        continue
    for obj in vars(module).values():
        if (inspect.isclass(obj) and issubclass(obj, Exception) and not issubclass(obj, Warning)
                and obj.__module__ == info.name):
            found[f"{obj.__module__}.{obj.__qualname__}"] = [c.__name__ for c in obj.__mro__]
print(json.dumps({"found": found, "skipped": skipped}))
"""

# the builtin exception each class had before the root existed: it keeps it
BUILTIN_BASES = {
    "tether.adapters.airflow.attempts.AirflowAdapterError": "ValueError",
    "tether.adapters.common.JobFailedError": "RuntimeError",
    "tether.adapters.kfp.artifacts.ArtifactDeclarationError": "ValueError",
    "tether.adapters.kfp.compile.CompileTargetError": "ValueError",
    "tether.adapters.kfp.inherit.LauncherTaskError": "ValueError",
    "tether.adapters.kfp.native.NativeStepError": "ValueError",
    "tether.adapters.kfp.ship.ShipError": "ValueError",
    "tether.adapters.kfp.stepchecks.StepArgumentError": "ValueError",
    "tether.adapters.kfp.stepchecks.StepSettingError": "ValueError",
    "tether.adapters.prefect.reap.ReapError": "ValueError",
    "tether.adapters.prefect.run.JobStoppedError": "RuntimeError",
    "tether.components.args.ComponentArgError": "ValueError",
    "tether.components.args.InvalidComponentError": "ValueError",
    "tether.components.finder.ComponentNotFoundError": "ValueError",
    "tether.config.ConfigError": "ValueError",
    "tether.runner.launched.UnknownAppError": "LookupError",
    "tether.runner.logs.LogReadError": "RuntimeError",
    "tether.schedulers.UnknownSchedulerError": "KeyError",
    "tether.schedulers.SchedulerRegistryError": "RuntimeError",
    "tether.schedulers.aws_batch.render.AwsBatchRenderError": "ValueError",
    "tether.schedulers.aws_batch.scheduler.AwsBatchSubmitError": "RuntimeError",
    "tether.schedulers.aws_client.AwsClientError": "RuntimeError",
    "tether.schedulers.aws_sagemaker.render.AwsSageMakerRenderError": "ValueError",
    "tether.schedulers.aws_sagemaker.scheduler.AwsSageMakerSubmitError": "RuntimeError",
    "tether.schedulers.capabilities.UnsupportedFeatureError": "ValueError",
    "tether.schedulers.docker_engine.DockerUnavailableError": "RuntimeError",
    "tether.schedulers.gcp_batch.client.GcpBatchClientError": "RuntimeError",
    "tether.schedulers.gcp_batch.render.GcpBatchRenderError": "ValueError",
    "tether.schedulers.kubernetes.client.KubernetesApiError": "RuntimeError",
    "tether.schedulers.kubernetes.client.KubernetesConfigError": "ValueError",
    "tether.schedulers.kubernetes.client.KubernetesUnreachableError": "RuntimeError",
    "tether.schedulers.local.state.CorruptRecordError": "ValueError",
    "tether.schedulers.lsf.render.LsfRenderError": "ValueError",
    "tether.schedulers.lsf.scheduler.LsfCommandError": "RuntimeError",
    "tether.schedulers.lsf.status.LsfOutputError": "RuntimeError",
    "tether.schedulers.ray.render.RayRenderError": "ValueError",
    "tether.schedulers.ray.scheduler.RayConnectionError": "RuntimeError",
    "tether.schedulers.slurm.client.SlurmCommandError": "RuntimeError",
    "tether.schedulers.slurm.overlay.SlurmOverlayError": "ValueError",
    "tether.schedulers.slurm.render.SlurmConfigError": "ValueError",
    "tether.schedulers.slurm.scheduler.SlurmSubmitError": "ValueError",
    "tether.schedulers.slurm.ssh_shell.ShellGone": "RuntimeError",
    "tether.schedulers.slurm.transport.ConnectionDropped": "RuntimeError",
    "tether.schedulers.slurm.transport.SlurmTransportConfigError": "ValueError",
    "tether.schedulers.slurm.transport.SlurmTransportError": "RuntimeError",
    "tether.specs.handles.MalformedAppHandleException": "ValueError",
    "tether.specs.overlays.OverlayError": "TypeError",
    "tether.specs.runopts.InvalidRunConfigException": "ValueError",
    "tether.tracker.query.TrackerNotConfiguredError": "RuntimeError",
    "tether.tracker.query.UnknownArtifactError": "LookupError",
    "tether.tracker.query.UnknownRunError": "LookupError",
    "tether.tracker.registry.TrackerRegistryError": "RuntimeError",
    "tether.tracker.registry.UnknownTrackerError": "LookupError",
    "tether.workspace.image.ImageBuildError": "RuntimeError",
}


def _is_public(qualified: str) -> bool:
    return not any(part.startswith("_") for part in qualified.split("."))


@pytest.mark.slow
def test_every_public_exception_derives_from_tether_error() -> None:
    """Imports every module of tether (each lazily loaded backend too) in a fresh process."""
    proc = subprocess.run([sys.executable, "-c", WALK], capture_output=True, text=True,
                          timeout=240, check=True)
    walked = json.loads(proc.stdout.splitlines()[-1])
    found: dict[str, list[str]] = walked["found"]
    skipped = tuple(f"{m}." for m in walked["skipped"])  # an SDK not installed here
    public = {name: mro for name, mro in found.items() if _is_public(name)}
    expected = {n: b for n, b in BUILTIN_BASES.items() if not n.startswith(skipped)}
    assert set(expected) <= set(public)  # the walk saw every module
    outside = sorted(name for name, mro in public.items() if "TetherError" not in mro)
    assert outside == [], f"public exceptions outside tether.errors.TetherError: {outside}"
    lost = sorted(n for n, base in expected.items() if base not in public[n])
    assert lost == [], f"exceptions that lost their builtin base: {lost}"


def test_the_root_module_imports_nothing_of_tether() -> None:
    code = ("import sys, tether.errors; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'tether'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    assert out.strip() == "['tether', 'tether.errors']"


def test_the_families_keep_their_builtin_meaning() -> None:
    assert issubclass(SpecError, ValueError) and issubclass(SpecTypeError, TypeError)
    assert issubclass(BackendError, RuntimeError) and issubclass(NotFoundError, LookupError)
    assert all(issubclass(c, TetherError)
               for c in (SpecError, SpecTypeError, BackendError, NotFoundError))


# ---- raised through public calls ------------------------------------------------------------
def _specs() -> None:
    from tether.specs import parse_app_handle

    parse_app_handle("not a handle")


def _components() -> None:
    from tether.components.finder import get_component

    get_component("no_such_component_anywhere")


def _config(tmp_path: Path) -> None:
    from tether.config import load_config

    cfg = tmp_path / ".tetherconfig"
    cfg.write_text("[tether]\nthis line has no equals sign\n")
    load_config(files=[str(cfg)])


def _scheduler_name() -> None:
    from tether.runner import get_runner

    with get_runner() as runner:
        runner.dryrun(AppDef("x", [Role("r", image="", entrypoint="true")]), "no_such_scheduler")


def _scheduler_capability() -> None:
    from tether.runner import get_runner

    app = AppDef("x", [Role("r", image="", entrypoint="true", max_retries=99)])
    with get_runner() as runner:  # Batch runs at most 10 attempts
        runner.dryrun(app, "aws_batch", cfg={"queue": "q", "region": "us-east-1"})


def _backend_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tether.runner import get_runner

    monkeypatch.setenv("PATH", str(tmp_path))  # no LSF here: bsub is not on PATH
    app = AppDef("x", [Role("r", image="", entrypoint="/bin/true")])
    with get_runner() as runner:
        runner.run(app, "lsf", cfg={"cwd": str(tmp_path)})


def _runner() -> None:
    from tether.runner import get_runner

    with get_runner() as runner:
        list(runner.log_lines("local_cwd://default/never-launched-x1y2z3", "r"))


def _tracker() -> None:
    from tether.tracker.registry import get_tracker_factory

    get_tracker_factory("no_such_tracker")


def _adapter(tmp_path: Path) -> None:
    from tether.adapters.kfp.compile import compile_pipeline

    compile_pipeline(f"{tmp_path}/missing.py:pipeline", str(tmp_path / "out.yaml"))


LAYERS: dict[str, tuple[Any, type[TetherError]]] = {
    "specs": (_specs, SpecError),
    "components": (_components, NotFoundError),
    "config": (_config, SpecError),
    "schedulers (registry)": (_scheduler_name, NotFoundError),
    "schedulers (capabilities)": (_scheduler_capability, SpecError),
    "schedulers (backend)": (_backend_command, BackendError),
    "runner": (_runner, NotFoundError),
    "tracker": (_tracker, NotFoundError),
    "adapters": (_adapter, SpecError),
}


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_except_tether_error_catches_each_layer(layer: str, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    call, family = LAYERS[layer]
    params = call.__code__.co_varnames[: call.__code__.co_argcount]
    kwargs = {"tmp_path": tmp_path, "monkeypatch": monkeypatch}
    try:
        call(**{p: kwargs[p] for p in params})
    except TetherError as e:
        assert isinstance(e, family), (layer, type(e).__mro__)
        assert str(e)
    else:
        pytest.fail(f"{layer}: the call raised nothing")


def test_a_backend_error_says_which_backend_and_what_went_wrong(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(BackendError) as ei:
        _backend_command(tmp_path, monkeypatch)
    assert (ei.value.backend, ei.value.kind) == ("lsf", "command")
    assert "bsub" in str(ei.value)


# ---- pickling ---------------------------------------------------------------------------------
def _examples() -> list[TetherError]:
    from tether.adapters.common import JobFailedError, JobResult
    from tether.adapters.prefect.run import JobStoppedError
    from tether.cli.common import CLIError
    from tether.runner import UnknownAppError
    from tether.schedulers.kubernetes.client import (
        KubernetesApiError,
        KubernetesConfigError,
        KubernetesUnreachableError,
    )
    from tether.schedulers.local.attempts import StartError
    from tether.schedulers.slurm.client import SlurmCommandError
    from tether.specs import AppStatusError
    from tether.tracker.query import TrackerNotConfiguredError

    result = JobResult("local_cwd://default/x-1", AppState.FAILED, msg="exit 3")
    return [
        SpecError("bad value"),
        BackendError("full", backend="aws_batch", kind="quota"),
        SlurmCommandError(["sbatch", "x.sh"], 1, "sbatch: error: invalid partition\n"),
        KubernetesApiError(0, "apiserver unreachable"),
        KubernetesUnreachableError("cannot reach the Kubernetes apiserver at https://h:1"),
        KubernetesConfigError("no Kubernetes configuration: /k does not exist"),
        UnknownAppError("local_cwd://default/x-1"),
        TrackerNotConfiguredError(),
        AppStatusError(AppStatus(AppState.FAILED, msg="oom"), "app failed"),
        CLIError("no such app", 2),
        StartError("start 'train.py'", OSError(24, "Too many open files")),
        JobFailedError(result),
        JobStoppedError(result, "the flow run was cancelled"),
    ]


def test_every_kind_of_tether_error_survives_pickling() -> None:
    for error in _examples():
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error)
        assert str(copy) == str(error) and repr(copy.args) == repr(error.args)
        mine = {k: v for k, v in vars(error).items() if k not in ("error", "status")}
        assert {k: v for k, v in vars(copy).items() if k in mine} == mine, type(error)
    backend = pickle.loads(pickle.dumps(_examples()[1]))
    assert isinstance(backend, BackendError) and (backend.backend, backend.kind) == (
        "aws_batch", "quota")
