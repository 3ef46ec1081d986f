"""Overlays: TorchX's merge rules and operators, as a platform team writes them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tether.specs import AppDef, Role
from tether.specs.overlays import (
    DEL,
    JOIN,
    PUT,
    OverlayError,
    apply_overlay,
    get_overlay,
    set_overlay,
    validate_overlay,
)


def test_dicts_merge_lists_append_scalars_replace() -> None:
    base: dict[str, Any] = {"spec": {"cpu": "500m"}, "tags": ["prod"], "replicas": 1}
    apply_overlay(base, {"spec": {"memory": "1Gi"}, "tags": ["gpu"], "replicas": 3})
    assert base == {"spec": {"cpu": "500m", "memory": "1Gi"}, "tags": ["prod", "gpu"],
                    "replicas": 3}  # fmt: skip


def test_put_join_del_operators() -> None:
    base: dict[str, Any] = {
        "containers": [{"name": "main", "image": "v1"}, {"name": "side", "image": "p"}],
        "volumes": [{"name": "a"}],
        "hostNetwork": True,
        "keep": 1,
    }
    apply_overlay(base, {
        JOIN("containers", on="name"): [{"name": "main", "memory": "1Gi"}, {"name": "new"}],
        PUT("volumes"): [{"name": "only"}],
        DEL("hostNetwork"): None,
        DEL("absent"): None,
    })  # fmt: skip
    assert base == {
        "containers": [{"name": "main", "image": "v1", "memory": "1Gi"},
                       {"name": "side", "image": "p"}, {"name": "new"}],
        "volumes": [{"name": "only"}],
        "keep": 1,
    }  # fmt: skip


def test_tuple_replaces_a_list_and_overlay_is_not_aliased() -> None:
    overlay: dict[str, Any] = {"args": ("a",), "spec": {"volumes": [{"name": "v"}]}}
    base: dict[str, Any] = {"args": ["x", "y"]}
    apply_overlay(base, overlay)
    assert base == {"args": ["a"], "spec": {"volumes": [{"name": "v"}]}}
    base["spec"]["volumes"].append("mutated")
    assert overlay["spec"]["volumes"] == [{"name": "v"}]


def test_type_mismatch_names_the_key_and_suggests_put() -> None:
    with pytest.raises(OverlayError, match=r"'hostIPC'.*PUT\('hostIPC'\)"):
        apply_overlay({"spec": {"hostIPC": False}}, {"spec": {"hostIPC": {"x": 1}}})
    with pytest.raises(TypeError, match="JOIN"):
        apply_overlay({"c": [1]}, {JOIN("c", on="name"): [{"name": "x"}]})


def test_set_overlay_accumulates_in_metadata_and_get_overlay_reads_it() -> None:
    role = Role("trainer", image="img", entrypoint="train.py")
    set_overlay(role, "kubernetes", "V1Pod", {"spec": {"nodeSelector": {"accel": "a100"}}})
    set_overlay(role, "kubernetes", "V1Pod",
                {"spec": {"tolerations": [{"key": "gpu", "operator": "Exists"}]}})  # fmt: skip
    set_overlay(role, "kubernetes", "V1Pod", {"spec": {PUT("tolerations"): []}})
    ov = get_overlay(role, "kubernetes", "V1Pod")
    assert ov["spec"]["nodeSelector"] == {"accel": "a100"}
    assert "tolerations" not in ov["spec"]  # the later PUT for the field wins
    assert get_overlay(role, "slurm", "sbatch") == {}
    app = AppDef("a", roles=[role])
    set_overlay(app, "kubernetes", "V1Pod", {"metadata": {"labels": {"x": "1"}}})
    assert get_overlay(app, "kubernetes", "V1Pod") == {"metadata": {"labels": {"x": "1"}}}


def test_get_overlay_from_a_file_and_the_flat_form(tmp_path: Path) -> None:
    f = tmp_path / "ov.json"
    f.write_text(json.dumps({"V1Pod": {"spec": {"hostIPC": True}}}))
    role = Role("r", metadata={"kubernetes": str(f)})
    assert get_overlay(role, "kubernetes", "V1Pod") == {"spec": {"hostIPC": True}}
    flat = Role("r", metadata={"kubernetes": {"spec": {"hostIPC": True}}})
    assert get_overlay(flat, "kubernetes", "V1Pod") == {"spec": {"hostIPC": True}}


def test_validate_overlay_blocks_role_fields() -> None:
    with pytest.raises(ValueError, match=r"PodSpec\.env"):
        validate_overlay({PUT("env"): [], "nodeSelector": {}}, blocklist=["env"],
                         overlay_name="PodSpec")  # fmt: skip
    with pytest.raises(ValueError, match="another overlay kind"):
        validate_overlay({"containers": []}, forbidden_keys={"containers"}, suggestion="x")
    validate_overlay({"nodeSelector": {}}, blocklist=["env"])


def test_get_overlay_of_a_backend_with_several_kinds_is_never_the_flat_form() -> None:
    from tether.specs import Role
    from tether.specs.overlays import get_overlay, set_overlay

    role = Role("r", entrypoint="p")
    set_overlay(role, "ray", "Replica", {"cwd": "/x"})
    # set_overlay marks the nested form: another kind's overlay is never handed out
    assert get_overlay(role, "ray", "JobSubmission") == {}
    assert get_overlay(role, "ray", "Replica") == {"cwd": "/x"}
    # a dict written by hand is unmarked: the backend's kinds tell the forms apart
    by_hand = Role("r", entrypoint="p", metadata={"ray": {"Replica": {"cwd": "/x"}}})
    assert get_overlay(by_hand, "ray", "JobSubmission") == {"Replica": {"cwd": "/x"}}  # flat
    kinds = ("Replica", "JobSubmission")
    assert get_overlay(by_hand, "ray", "JobSubmission", kinds=kinds) == {}
    assert get_overlay(by_hand, "ray", "Replica", kinds=kinds) == {"cwd": "/x"}
