"""TorchX's module layout: the imports a TorchX code base makes work after the rename."""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

from tether import specs
from tether.runner import get_runner
from tether.schedulers.api import (
    DescribeAppResponse,
    ListAppResponse,
    Scheduler,
    split_lines,
    split_lines_iterator,
)
from tether.specs import AppDef, AppDryRunInfo, CfgVal, Resource, Role

TORCHX_SCHEDULER_MODULES = {
    "local_scheduler": ("LocalScheduler", "local"),
    "docker_scheduler": ("DockerScheduler", "local_docker"),
    "kubernetes_scheduler": ("KubernetesScheduler", "kubernetes"),
    "slurm_scheduler": ("SlurmScheduler", "slurm"),
    "ray_scheduler": ("RayScheduler", "ray"),
    "lsf_scheduler": ("LsfScheduler", "lsf"),
    "aws_batch_scheduler": ("AWSBatchScheduler", "aws_batch"),
    "aws_sagemaker_scheduler": ("AWSSageMakerScheduler", "aws_sagemaker"),
    "gcp_batch_scheduler": ("GCPBatchScheduler", "gcp_batch"),
}


@pytest.mark.parametrize("module", sorted(TORCHX_SCHEDULER_MODULES))
def test_torchx_scheduler_modules_import_under_their_torchx_names(module: str) -> None:
    cls_name, package = TORCHX_SCHEDULER_MODULES[module]
    mod = importlib.import_module(f"tether.schedulers.{module}")
    backend = importlib.import_module(f"tether.schedulers.{package}.scheduler")
    cls = getattr(mod, cls_name)
    assert issubclass(cls, backend_class(backend))
    if module != "local_scheduler":  # that one builds the scheduler as TorchX does
        assert mod.create_scheduler is backend.create_scheduler


def backend_class(backend: Any) -> type:
    return next(
        v for v in vars(backend).values()
        if isinstance(v, type) and issubclass(v, Scheduler) and v is not Scheduler
        and v.__module__ == backend.__name__
    )  # fmt: skip


def test_local_scheduler_from_its_torchx_module_runs_as_local_cwd() -> None:
    from tether.schedulers.local_scheduler import LocalScheduler, create_scheduler

    sched = create_scheduler("test_session")
    assert isinstance(sched, LocalScheduler)
    assert sched.backend == "local_cwd" and sched.session_name == "test_session"


def test_named_resources_generic_has_torchx_sizes() -> None:
    from tether.specs.named_resources_generic import NAMED_RESOURCES

    for name, factory in NAMED_RESOURCES.items():
        res = factory()
        if name.startswith("gpu"):
            assert res.gpu >= 1
        assert res.cpu >= 1 and res.memMB > 0
    sizes = {n: (r.cpu, r.gpu, r.memMB) for n, r in ((n, f()) for n, f in NAMED_RESOURCES.items())}
    assert sizes["gpu.small"] == (8, 1, 32 * 1024)
    assert sizes["cpu.nano"] == (1, 0, 512)
    assert sizes["cpu.micro"] == (1, 0, 1024)
    assert specs.named_resources["cpu.nano"] == NAMED_RESOURCES["cpu.nano"]()


@pytest.mark.parametrize("name", ["NULL", "MISSING"])
def test_named_resources_null_and_missing_are_the_null_resource(name: str) -> None:
    assert name in specs.named_resources
    assert specs.named_resources[name] == specs.NULL_RESOURCE
    assert specs.resource(h=name) == specs.NULL_RESOURCE


def test_split_lines_keeps_a_last_line_without_newline() -> None:
    assert split_lines("foo\nbar") == ["foo\n", "bar"]
    assert split_lines("foo\nbar\n") == ["foo\n", "bar\n"]
    assert split_lines("") == []
    assert split_lines("\n\n") == ["\n", "\n"]


def test_split_lines_iterator_splits_each_chunk() -> None:
    assert list(split_lines_iterator(["1\n2\n", "3", "4\n"])) == ["1\n", "2\n", "3", "4\n"]


def _project(root: Path) -> Path:
    (root / "sub").mkdir(parents=True)
    (root / "main.py").write_text("print('hi')\n")
    (root / "sub" / "util.py").write_text("X = 1\n")
    (root / "secret.key").write_text("k")
    (root / ".tetherignore").write_text("*.key\n")
    return root


def test_dir_workspace_copies_the_workspace_into_job_dir(tmp_path: Path) -> None:
    from tether.workspace.dir_workspace import DirWorkspaceMixin

    proj = _project(tmp_path / "proj")
    role = Role("trainer", image="unused", entrypoint="python")
    job_dir = tmp_path / "job"
    DirWorkspaceMixin().build_workspace_and_update_role(role, str(proj), {"job_dir": str(job_dir)})
    assert role.image == str(job_dir)
    assert (job_dir / "main.py").read_text() == "print('hi')\n"
    assert (job_dir / "sub" / "util.py").exists()
    assert not (job_dir / "secret.key").exists()  # .tetherignore is honoured


def test_dir_workspace_without_job_dir_does_nothing(tmp_path: Path) -> None:
    from tether.workspace.dir_workspace import DirWorkspaceMixin

    role = Role("trainer", image="img", entrypoint="python")
    DirWorkspaceMixin().build_workspace_and_update_role(role, str(_project(tmp_path)), {})
    assert role.image == "img"


def test_dir_workspace_refuses_an_existing_job_dir(tmp_path: Path) -> None:
    from tether.workspace.dir_workspace import DirWorkspaceMixin

    role = Role("trainer", image="img", entrypoint="python")
    with pytest.raises(FileExistsError):
        DirWorkspaceMixin().build_workspace_and_update_role(
            role, str(_project(tmp_path / "p")), {"job_dir": str(tmp_path)}
        )


def test_tmp_dir_workspace_copies_into_a_new_temp_dir(tmp_path: Path) -> None:
    from tether.workspace.dir_workspace import TmpDirWorkspaceMixin

    role = Role("trainer", image="img", entrypoint="python")
    TmpDirWorkspaceMixin().build_workspace_and_update_role(role, str(_project(tmp_path)), {})
    out = Path(role.image)
    try:
        assert out != tmp_path and (out / "main.py").exists() and (out / "sub/util.py").exists()
    finally:
        import shutil

        shutil.rmtree(out)


def test_specs_sentinels() -> None:
    assert specs.MISSING == "<MISSING>"
    assert specs.NONE == "<NONE>"
    assert specs.UNKNOWN == "<UNKNOWN>"
    assert Resource(cpu=-1, gpu=-1, memMB=-1) == specs.NULL_RESOURCE


def test_tether_home_defaults_to_dot_tether_and_is_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TETHER_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "sally"))
    home = specs.TETHER_HOME()
    assert home == tmp_path / "sally" / ".tether" and home.is_dir()


def test_tether_home_override_and_subdirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_HOME", str(tmp_path / "test" / ".tether"))
    assert specs.TETHER_HOME() == tmp_path / "test" / ".tether"
    out = specs.TETHER_HOME("conda-pack", "out")
    assert out == tmp_path / "test" / ".tether" / "conda-pack" / "out" and out.is_dir()
    assert os.environ["TETHER_HOME"] == str(tmp_path / "test" / ".tether")


def test_unknown_scheduler_raises_unknown_scheduler_exception() -> None:
    app = AppDef("app", roles=[Role("r", image="", entrypoint="echo")])
    with get_runner() as runner, pytest.raises(specs.UnknownSchedulerException) as e:
        runner.dryrun(app, "no_such_scheduler")
    assert "no_such_scheduler" in str(e.value)
    assert isinstance(e.value, KeyError)  # what tether raised before: both catch it


class _Plugin(Scheduler[Mapping[str, CfgVal]]):
    """A TorchX plugin that declares no capabilities and keeps the base ``_validate``."""

    def __init__(self, session_name: str, **kwargs: Any) -> None:
        super().__init__("my_plugin", session_name)

    def _submit_dryrun(self, app: AppDef, cfg: Mapping[str, CfgVal]) -> AppDryRunInfo[str]:
        return AppDryRunInfo(app.name, str)

    def schedule(self, dryrun_info: AppDryRunInfo[str]) -> str:
        return dryrun_info.request

    def describe(self, app_id: str) -> DescribeAppResponse | None:
        return None

    def list(self, cfg: Mapping[str, CfgVal] | None = None) -> list[ListAppResponse]:
        return []

    def log_iter(self, *args: Any, **kw: Any) -> Iterable[str]:
        return iter([])

    def _cancel_existing(self, app_id: str) -> None:
        pass


def test_base_validate_rejects_a_role_without_resource() -> None:
    app = AppDef("app", roles=[Role("r", image="img", entrypoint="echo")])
    with pytest.raises(ValueError, match="No resource for role"):
        _Plugin("s").submit_dryrun(app, {})


def test_plugin_without_capabilities_accepts_an_empty_image() -> None:
    app = AppDef("app", roles=[Role("r", image="", entrypoint="echo", resource=Resource(1, 0, 64))])
    assert _Plugin("s").submit_dryrun(app, {}).request == "app"


def test_a_build_workspace_and_update_role_override_is_called_once_per_workspace(
    tmp_path: Path,
) -> None:
    from tether.specs import Workspace
    from tether.workspace.api import WorkspaceMixin

    calls: list[str] = []

    class MyWorkspace(WorkspaceMixin[None]):
        def build_workspace_and_update_role(
            self, role: Role, workspace: str, cfg: Mapping[str, CfgVal]
        ) -> None:
            calls.append(workspace)
            role.image = f"built-from-{os.path.basename(workspace)}"

    ws = Workspace({str(tmp_path): ""})
    roles = [Role(n, image="base", entrypoint="x", workspace=ws) for n in ("a", "b")]
    MyWorkspace().build_workspaces(roles, {})
    assert calls == [str(tmp_path)]
    assert [r.image for r in roles] == [f"built-from-{tmp_path.name}"] * 2
