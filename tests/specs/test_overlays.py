"""Overlays: the merge rules a platform team relies on (PUT / JOIN / DEL, dict upsert)."""

from __future__ import annotations

import pytest

from tether.specs import Role
from tether.specs.overlays import DEL, JOIN, PUT, OverlayError, apply_overlay, apply_role_overlay


def test_dicts_merge_lists_append_scalars_replace() -> None:
    base = {"spec": {"hostIPC": False, "tolerations": [{"key": "a"}], "nodeSelector": {"x": "1"}}}
    apply_overlay(
        base,
        {"spec": {"hostIPC": True, "tolerations": [{"key": "b"}], "nodeSelector": {"y": "2"}}},
    )
    assert base == {
        "spec": {
            "hostIPC": True,
            "tolerations": [{"key": "a"}, {"key": "b"}],
            "nodeSelector": {"x": "1", "y": "2"},
        }
    }


def test_put_replaces_join_appends_del_removes() -> None:
    base = {"a": [1, 2], "b": {"keep": 1, "old": 2}, "c": 3, "d": [0]}
    apply_overlay(base, {"a": PUT([9]), "b": PUT({"new": 1}), "c": DEL, "d": JOIN([1]), "e": DEL})
    assert base == {"a": [9], "b": {"new": 1}, "d": [0, 1]}


def test_new_keys_get_plain_values_and_overlay_is_not_aliased() -> None:
    overlay = {"spec": {"volumes": [{"name": "v"}], "x": {"y": PUT(1), "z": DEL}}}
    base: dict[str, object] = {}
    apply_overlay(base, overlay)
    assert base == {"spec": {"volumes": [{"name": "v"}], "x": {"y": 1}}}
    base["spec"]["volumes"].append("mutated")  # type: ignore[index]
    assert overlay["spec"]["volumes"] == [{"name": "v"}]


def test_type_mismatch_names_the_path_and_suggests_put() -> None:
    with pytest.raises(OverlayError, match=r"'spec\.hostIPC'.*use PUT"):
        apply_overlay({"spec": {"hostIPC": False}}, {"spec": {"hostIPC": {"x": 1}}})
    with pytest.raises(TypeError, match="is a list but the base value 1 is not"):
        apply_overlay({"a": 1}, {"a": [1]})


def test_role_overlay_by_target() -> None:
    role = Role("r", overlays={"kubernetes": {"spec": {"hostIPC": True}}})
    pod: dict[str, object] = {"spec": {}}
    apply_role_overlay(pod, role, "slurm")
    assert pod == {"spec": {}}
    apply_role_overlay(pod, role, "kubernetes")
    assert pod == {"spec": {"hostIPC": True}}
