"""Builtin components take TorchX's parameters: a TorchX user's CLI args still work."""

from __future__ import annotations

import inspect

import pytest

from tether.components import dist, utils
from tether.components.args import materialize
from tether.components.finder import get_component


def test_ddp_has_the_reference_signature() -> None:
    params = list(inspect.signature(dist.ddp).parameters)
    assert params == [
        "script_args", "script", "m", "image", "name", "h", "cpu", "gpu", "memMB", "j", "env",
        "metadata", "max_retries", "rdzv_port", "rdzv_backend", "rdzv_conf", "mounts",
        "debug", "tee",
    ]  # fmt: skip


def test_ddp_metadata_rdzv_conf_and_tee_from_the_command_line() -> None:
    app = materialize(
        get_component("dist.ddp").fn,
        ["--script", "train.py", "-j", "2x2", "--metadata", "team=ml,prio=high",
         "--rdzv_conf", "join_timeout=600,timeout=900", "--tee", "1"],
    )  # fmt: skip
    assert app.metadata == {"team": "ml", "prio": "high"}
    cmd = app.roles[0].args[1]
    assert "--rdzv_conf join_timeout=600,timeout=900" in cmd and "--tee 1" in cmd
    with pytest.raises(ValueError, match="--tee 7"):
        dist.ddp(script="t.py", tee=7)


def test_hydra_component_passes_config_and_overrides() -> None:
    app = materialize(
        get_component("utils.hydra").fn,
        ["--script", "train.py", "--config_name", "sweep", "--multirun", "--", "lr=0.1",
         "+trainer.gpus=1", "~debug"],
    )  # fmt: skip
    (role,) = app.roles
    assert role.entrypoint == "python"
    assert role.args == [
        "train.py", "--config-name", "sweep", "--multirun", "lr=0.1", "+trainer.gpus=1",
        "~debug",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="Hydra overrides must be"):
        utils.hydra("lr", script="t.py")


# The builtin signatures the TorchX reference documents (../shared/reference/, the diff of
# torchx/components/dist.py, new side), copied verbatim; test_excerpt_matches_the_reference
# checks the copy where the reference is at hand.
REFERENCE_DIST = '''
def spmd(
    *args: str,
    script: Optional[str] = None,
    m: Optional[str] = None,
    image: str = torchx.IMAGE,
    name: str = "/",
    h: str = "gpu.small",
    j: str = "1x1",
    env: Optional[Dict[str, str]] = None,
    max_retries: int = 0,
    mounts: Optional[List[str]] = None,
    debug: bool = False,
) -> specs.AppDef:
    pass
def ddp(
    *script_args: str,
    script: Optional[str] = None,
    m: Optional[str] = None,
    image: str = torchx.IMAGE,
    name: str = "/",
    h: Optional[str] = None,
    cpu: int = 2,
    gpu: int = 0,
    memMB: int = 1024,
    j: str = "1x2",
    env: Optional[Dict[str, str]] = None,
    max_retries: int = 0,
    rdzv_port: int = 29500,
    rdzv_backend: str = "c10d",
    mounts: Optional[List[str]] = None,
    debug: bool = False,
) -> specs.AppDef:
    pass
'''
EXTRAS = {
    "ddp": ["metadata", "rdzv_conf", "tee"],  # newer TorchX's ddp (issue 14)
    "spmd": ["rdzv_port", "metadata"],  # rdzv_port: the reference's spmd docstring; metadata:
    # newer TorchX's spmd (issue 35)
}
"""Parameters a builtin has beyond the reference (docs/migrating-from-torchx.md says so)."""


def _reference_params() -> dict[str, list[tuple[str, str, object]]]:
    """Function name -> [(parameter, kind, default)] of the reference excerpt."""
    import ast

    out: dict[str, list[tuple[str, str, object]]] = {}
    for fn in ast.parse(REFERENCE_DIST).body:
        assert isinstance(fn, ast.FunctionDef)
        a = fn.args
        params: list[tuple[str, str, object]] = []
        if a.vararg is not None:
            params.append((a.vararg.arg, "VAR_POSITIONAL", inspect.Parameter.empty))
        for arg, default in zip(a.kwonlyargs, a.kw_defaults, strict=True):
            value: object = inspect.Parameter.empty
            if default is not None:
                text = ast.unparse(default)
                value = "<image>" if text == "torchx.IMAGE" else ast.literal_eval(default)
            params.append((arg.arg, "KEYWORD_ONLY", value))
        out[fn.name] = params
    return out


def test_every_builtin_the_reference_documents_has_its_signature() -> None:
    from tether.components.finder import get_components

    reference = _reference_params()
    compared = []
    for name, info in sorted(get_components().items()):
        ref = reference.get(info.fn.__name__) if name.startswith("dist.") else None
        if ref is None:
            continue  # the reference documents no signature for it
        sig = inspect.signature(info.fn).parameters
        ours = [(p.name, p.kind.name, "<image>" if p.name == "image" else p.default)
                for p in sig.values() if p.name not in EXTRAS.get(info.fn.__name__, [])]
        assert ours == ref, f"{name}: {ours} != reference {ref}"
        assert sig["image"].default == dist.DEFAULT_IMAGE
        compared.append(name)
    assert compared == ["dist.ddp", "dist.spmd"]


def test_excerpt_matches_the_reference() -> None:
    import re
    from pathlib import Path

    ref_dir = Path(__file__).resolve().parents[2].parent / "shared" / "reference"
    files = sorted(ref_dir.glob("*.txt")) if ref_dir.is_dir() else []
    texts = [f.read_text(errors="replace") for f in files]
    source = next((t for t in texts if "## torchx/components/dist.py" in t
                   and "+def spmd(" in t), None)
    if source is None:
        pytest.skip(f"the TorchX reference is not at {ref_dir}")
    lines = source.splitlines()
    for fn in ("spmd", "ddp"):
        start = next(k for k, ln in enumerate(lines) if re.match(rf"^[+ ]def {fn}\(", ln))
        new_side: list[str] = []
        for ln in lines[start:]:
            if ln[:1] != "-":
                new_side.append(ln[1:])
                if ln[1:].startswith(")"):
                    break
        assert "\n".join(new_side) in REFERENCE_DIST, fn
