"""``torchx.specs.overlays`` as a TorchX user and a scheduler author use it: ``OverlaySpec``,
``get_overlay(flat_fallback=)``, the nested-form marker and JOIN accumulation."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.specs import AppDef, Role
from tether.specs.overlays import (
    FORMAT_KEY,
    JOIN,
    PUT,
    OverlaySpec,
    apply_overlay,
    get_overlay,
    set_overlay,
)

V1POD = OverlaySpec("kubernetes", "V1Pod", blocklist=("command", "env"))


def role() -> Role:
    return Role(name="trainer", image="img", entrypoint="train.py")


def test_overlay_spec_sets_and_gets_its_kind() -> None:
    r = role()
    V1POD.set(r, {"spec": {"nodeSelector": {"gpu": "true"}}})
    V1POD.set(r, {"spec": {"tolerations": [{"key": "gpu"}]}})  # accumulates
    assert V1POD.get(r) == {"spec": {"nodeSelector": {"gpu": "true"},
                                     "tolerations": [{"key": "gpu"}]}}
    assert get_overlay(r, "kubernetes", "V1Pod") == V1POD.get(r)
    assert OverlaySpec("kubernetes", "V1Pod") == OverlaySpec("kubernetes", "V1Pod")  # a value


def test_overlay_spec_rejects_a_blocked_key_when_set_and_stores_nothing() -> None:
    r = role()
    with pytest.raises(ValueError, match=r"V1Pod\.env"):
        V1POD.set(r, {PUT("env"): [], "spec": {}})
    assert V1POD.get(r) == {}


def test_overlay_spec_rejects_a_blocked_key_written_around_it() -> None:
    r = role()
    set_overlay(r, "kubernetes", "V1Pod", {"command": ["x"]})
    with pytest.raises(ValueError, match=r"V1Pod\.command"):
        V1POD.get(r)


def test_overlay_spec_never_reads_the_flat_form() -> None:
    flat = Role("trainer", image="img", entrypoint="t",
                metadata={"kubernetes": {"spec": {"hostIPC": True}}})
    assert V1POD.get(flat) == {}
    assert get_overlay(flat, "kubernetes", "V1Pod") == {"spec": {"hostIPC": True}}
    assert get_overlay(flat, "kubernetes", "V1Pod", flat_fallback=False) == {}


def test_set_overlay_marks_the_nested_form_so_another_kind_reads_nothing() -> None:
    app = AppDef("a", roles=[role()])
    set_overlay(app, "ray", "Replica", {"cwd": "/x"})
    assert app.metadata["ray"][FORMAT_KEY] is True
    assert get_overlay(app, "ray", "JobSubmission") == {}
    assert get_overlay(app, "ray", "Replica") == {"cwd": "/x"}


def test_the_marker_is_not_a_kind() -> None:
    with pytest.raises(ValueError, match="reserved"):
        set_overlay(role(), "kubernetes", FORMAT_KEY, {})
    with pytest.raises(ValueError, match="reserved"):
        get_overlay(role(), "kubernetes", FORMAT_KEY)


def test_join_joins_into_what_earlier_calls_stored() -> None:
    r = role()
    set_overlay(r, "kubernetes", "V1Pod", {"spec": {"containers": [{"name": "a", "x": 1}]}})
    set_overlay(r, "kubernetes", "V1Pod",
                {"spec": {JOIN("containers", on="name"): [{"name": "a", "y": 2},
                                                          {"name": "b"}]}})
    base = {"spec": {"containers": [{"name": "a", "image": "v1"}]}}
    apply_overlay(base, get_overlay(r, "kubernetes", "V1Pod"))
    assert base == {"spec": {"containers": [{"name": "a", "image": "v1", "x": 1, "y": 2},
                                            {"name": "b"}]}}


def test_a_yaml_overlay_file_with_a_python_tag_is_refused_naming_the_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ov.yaml"
    path.write_text("V1Pod:\n  spec:\n    tolerations: !!python/tuple [a]\n")
    r = Role("trainer", image="img", entrypoint="t", metadata={"kubernetes": str(path)})
    with pytest.raises(ValueError, match=r"(?s)ov\.yaml.*PUT"):
        get_overlay(r, "kubernetes", "V1Pod")
