"""Component discovery: builtins, files, modules and entry points."""

from __future__ import annotations

import textwrap
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from tether.components.args import materialize
from tether.components.finder import (
    ComponentNotFoundError,
    discover,
    get_component,
    get_components,
    registered_groups,
)

BUILTINS = {
    "dist.ddp", "dist.spmd", "utils.echo", "utils.touch", "utils.sh", "utils.python",
    "utils.binary", "utils.copy", "utils.booth", "serve.torchserve", "metrics.tensorboard",
}


def test_builtins_are_registered_and_valid() -> None:
    comps = get_components()
    assert set(comps) >= BUILTINS
    for name in BUILTINS:
        assert comps[name].is_valid, comps[name].validation_errors
        assert comps[name].description
    # the machinery modules hold no components
    assert not [n for n in comps if n.startswith(("args.", "finder.", "params.", "validate."))]


def test_builtin_by_name() -> None:
    info = get_component("utils.echo")
    assert info.name == "utils.echo"
    assert info.fn.__module__ == "tether.components.utils"
    assert info.file and info.file.endswith("utils.py") and info.line


def test_file_component(tmp_path: Path) -> None:
    f = tmp_path / "my_comps.py"
    f.write_text(textwrap.dedent('''
        from tether.specs import AppDef, Role

        def trainer(epochs: int = 1) -> AppDef:
            """Trains.

            Args:
                epochs: How long.
            """
            return AppDef(name="t", roles=[Role(name="t", entrypoint="echo",
                                                args=[str(epochs)])])
    '''))
    info = get_component(f"{f}:trainer")
    assert info.is_valid and info.description == "Trains."
    assert materialize(info.fn, ["--epochs", "3"]).roles[0].args == ["3"]


def test_relative_file_component(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.py").write_text(
        "from tether.specs import AppDef, Role\n"
        "def f() -> AppDef:\n"
        "    return AppDef(name='f', roles=[Role(name='f', entrypoint='true')])\n"
    )
    monkeypatch.chdir(tmp_path)
    assert get_component("sub/c.py:f").fn().name == "f"


def test_module_component() -> None:
    info = get_component("tests.components.sample_components:typed")
    assert info.is_valid
    assert info.fn.__name__ == "typed"


def test_invalid_component_is_found_with_errors_naming_file_and_line() -> None:
    info = get_component("tests.components.sample_components:helper")
    assert not info.is_valid
    (err,) = info.validation_errors
    assert "sample_components.py:" in err and "returns int" in err


def test_unknown_builtin_lists_close_matches() -> None:
    with pytest.raises(ComponentNotFoundError, match=r"unknown component 'dist.dpd'.*dist.ddp"):
        get_component("dist.dpd")
    with pytest.raises(ComponentNotFoundError, match=r"utils\.echo"):
        get_component("echo")


def test_missing_function_in_module_lists_close_matches() -> None:
    with pytest.raises(ComponentNotFoundError, match=r"no function 'typd'.*did you mean typed"):
        get_component("tests.components.sample_components:typd")


def test_missing_module_and_file() -> None:
    with pytest.raises(ComponentNotFoundError, match="no module 'no_such_mod'"):
        get_component("no_such_mod:f")
    with pytest.raises(ComponentNotFoundError, match="does not exist"):
        get_component("nope/missing.py:f")


def test_file_that_fails_to_import(tmp_path: Path) -> None:
    f = tmp_path / "broken.py"
    f.write_text("raise RuntimeError('boom at import')\n")
    with pytest.raises(ComponentNotFoundError, match="boom at import"):
        get_component(f"{f}:x")


# ---- entry points ---------------------------------------------------------------------------
@pytest.mark.usefixtures("test_plugin")
def test_entry_point_components_get_the_prefix() -> None:
    comps = get_components()
    assert "foo.baz.trainer" in comps
    assert "foo.nested.deep.deep_fn" in comps
    # helper() does not return an AppDef; nsdir/ has no __init__.py
    assert "foo.baz.helper" not in comps
    assert not [n for n in comps if "hidden" in n]
    # the plugin registers `_ = tether.components`: builtins keep their names
    assert set(comps) >= BUILTINS
    app = materialize(get_component("foo.baz.trainer").fn, ["--epochs", "4"])
    assert app.roles[0].args == ["epochs", "4"]


def test_registering_a_group_replaces_the_builtins() -> None:
    assert registered_groups([]) == {"_": "tether.components"}
    ep = EntryPoint(name="foo", value="tests.components", group="tether.components")
    assert registered_groups([ep]) == {"foo": "tests.components"}
    comps, problems = discover({"foo": "tests.components"})
    assert not problems
    assert "foo.sample_components.typed" in comps
    assert "dist.ddp" not in comps


def test_underscore_keys_drop_the_prefix() -> None:
    comps, _ = discover({"_0": "tests.components", "_1": "tether.components"})
    assert "sample_components.typed" in comps
    assert "dist.ddp" in comps


@pytest.mark.usefixtures("test_plugin")
def test_overlapping_registrations_expose_a_component_under_both_names() -> None:
    comps, _ = discover({"foo": "tether_test_plugin.components", "test": "tether_test_plugin"})
    assert {"foo.baz.trainer", "test.components.baz.trainer"} <= set(comps)
    assert comps["foo.baz.trainer"].fn is comps["test.components.baz.trainer"].fn


def test_registered_module_not_package() -> None:
    comps, _ = discover({"s": "tests.components.sample_components"})
    assert "s.typed" in comps and "s.with_varargs" in comps


def test_unimportable_and_namespace_registrations_are_reported() -> None:
    comps, problems = discover({"bad": "no_such_package_xyz", "ns": "tether"})
    assert not comps
    messages = " ".join(p.message for p in problems)
    assert "cannot import no_such_package_xyz" in messages
    assert "namespace package" in messages


# ---- the targeted lookup of one name ---------------------------------------------------------
@pytest.mark.usefixtures("test_plugin")
def test_looking_up_one_name_finds_what_the_full_search_finds() -> None:
    """A dryrun imports only the module its component's name points at; the answer must be
    the full search's, for every registered name and for names that are not components."""
    from tether.components.finder import _lookup

    comps = get_components()
    not_components = [
        "foo.baz.helper",  # not annotated -> AppDef
        "foo.nsdir.hidden.hidden",  # a namespace package: not searched
        "foo.baz", "foo", "foo.nope.x", "nope", "dist.nope", "dist.ddp.x", "utils._private",
        "foo..baz.trainer", "validate.x", "foo.nested.deep.nope",
    ]
    for name in [*comps, *not_components]:
        found = _lookup(name)
        expected = comps.get(name)
        assert (found.fn if found else None) is (expected.fn if expected else None), name
