"""Component arguments as TorchX's ``torchx.specs.builders`` takes them, written as a TorchX
user's tests would be: nested generic types, ``config=``, ``component_args_from_str``, and
the list/dict literal grammar (``torchx.util.types.to_list``/``to_dict``)."""

from __future__ import annotations

import contextlib
import sys
from dataclasses import asdict
from typing import Dict, List, Optional  # noqa: UP035 - TorchX components spell them so
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.components.builders import (
    ComponentArgs,
    component_args_from_str,
    materialize_appdef,
    parse_args,
)
from tether.components.literals import parse_dict, parse_list
from tether.specs import AppDef, Resource, Role

# ---------------------------------------------------------------- components, as TorchX's


def complex_fn(
    app_name: str,
    containers: List[str],  # noqa: UP006
    roles_scripts: Dict[str, str],  # noqa: UP006
    num_cpus: Optional[List[int]] = None,  # noqa: UP006, UP045
    num_gpus: Optional[Dict[str, int]] = None,  # noqa: UP006, UP045
    nnodes: int = 4,
    first_arg: Optional[str] = None,  # noqa: UP045
    nested_arg: Optional[Dict[str, List[str]]] = None,  # noqa: UP006, UP045
    env: dict[str, str] | None = None,
    *roles_args: str,
) -> AppDef:
    """An app with one role per script.

    Args:
        app_name: AppDef name
        containers: List of containers
        roles_scripts: Dict role_name -> role_script
        num_cpus: CPUs per role
        num_gpus: GPUs by role
        nnodes: replicas per role
        first_arg: first argument of each role
        nested_arg: arguments by role
        env: environment
        roles_args: arguments of every role
    """
    roles = []
    for idx, (name, script) in enumerate(roles_scripts.items()):
        if first_arg:
            args = [first_arg, *roles_args]
        elif nested_arg:
            args = nested_arg[name]
        else:
            args = [*roles_args]
        roles.append(Role(
            name, image=containers[idx], entrypoint=script, args=args,
            resource=Resource(cpu=(num_cpus or [1] * len(roles_scripts))[idx],
                              gpu=(num_gpus or {}).get(name, 1), memMB=1),
            num_replicas=nnodes, env=env or {},
        ))
    return AppDef(app_name, roles)


CALLS: list[tuple[object, ...]] = []


def var_args_fn(foo: str, *args: str, bar: str = "asdf") -> AppDef:
    """Mixes varargs with a keyword-only parameter.

    Args:
        foo: arg
        args: varargs
        bar: kwarg
    """
    CALLS.append((foo, args, bar))
    return AppDef(name="varargs")


def flag_fn(flag: bool = False) -> AppDef:
    """With or without a flag.

    Args:
        flag: the flag
    """
    return AppDef(name="with-flag" if flag else "without-flag")


BASE_ARGV = ["--app_name", "test_app", "--containers", "img1,img2",
             "--roles_scripts", "worker=worker.py,master=master.py"]
ROLE_ARGS = ["--train", "data_source", "random", "--epochs", "128"]


def same_app(a: AppDef, b: AppDef) -> None:
    assert asdict(a) == asdict(b)


# ---------------------------------------------------------------- nested generic types


def test_a_component_with_a_nested_generic_parameter_is_materialized() -> None:
    argv = [*BASE_ARGV, "--num_cpus", "1,2", "--num_gpus", "worker=1,master=4",
            "--nnodes", "8", "--first_arg", "first_arg", "--env", "FOO=BAR,HELLO=WORLD",
            "--", *ROLE_ARGS]
    expected = complex_fn("test_app", ["img1", "img2"],
                          {"worker": "worker.py", "master": "master.py"}, [1, 2],
                          {"worker": 1, "master": 4}, 8, "first_arg", None,
                          {"FOO": "BAR", "HELLO": "WORLD"}, *ROLE_ARGS)
    same_app(materialize_appdef(complex_fn, argv), expected)


def test_defaults_apply_for_every_optional_generic_parameter() -> None:
    app = materialize_appdef(complex_fn, [*BASE_ARGV, "--", *ROLE_ARGS])
    expected = complex_fn("test_app", ["img1", "img2"],
                          {"worker": "worker.py", "master": "master.py"}, None, None, 4,
                          None, None, None, *ROLE_ARGS)
    same_app(app, expected)


def test_a_dict_of_lists_is_read_from_the_command_line() -> None:
    # to_dict's rule: a value keeps its list delimiters; the list is then split on , and ;
    app = materialize_appdef(complex_fn, [*BASE_ARGV, "--nested_arg",
                                          "worker=1;2,master=3,4"])
    assert [r.args for r in app.roles] == [["1", "2"], ["3", "4"]]


def test_a_dict_of_lists_from_config_is_used_as_given() -> None:
    nested = {"worker": ["1", "2"], "master": ["3", "4"]}
    app = materialize_appdef(complex_fn, BASE_ARGV, config={"nested_arg": nested})
    assert [r.args for r in app.roles] == [["1", "2"], ["3", "4"]]


def test_a_dict_of_int_lists_converts_each_item() -> None:
    def fn(m: dict[str, list[int]]) -> AppDef:
        """Doc.

        Args:
            m: lists
        """
        return AppDef(name="x", metadata={"m": m})

    assert materialize_appdef(fn, ["--m", "a=1;2,b=3"]).metadata["m"] == {"a": [1, 2], "b": [3]}
    with pytest.raises(SystemExit):  # an item that is not an int, as argparse
        materialize_appdef(fn, ["--m", "a=1;x"])


def test_a_list_of_lists_is_not_a_component_parameter() -> None:
    # TorchX: "List types support only primitives"; tether says so before calling
    from tether.components.args import InvalidComponentError

    def fn(m: list[list[int]]) -> AppDef:
        return AppDef(name="x")

    with pytest.raises(InvalidComponentError, match="lists must name their element type"):
        materialize_appdef(fn, ["--m", "1"])


def test_bool_parameters_take_true_and_false_in_any_case() -> None:
    for text, name in [("True", "with-flag"), ("true", "with-flag"),
                       ("False", "without-flag"), ("false", "without-flag")]:
        assert materialize_appdef(flag_fn, ["--flag", text]).name == name
    assert materialize_appdef(flag_fn, []).name == "without-flag"


# ---------------------------------------------------------------- config= and defaults


def test_config_makes_a_parameter_optional_and_wins_over_the_command_line() -> None:
    app = materialize_appdef(complex_fn, ["--containers", "img1,img2", "--roles_scripts",
                                          "worker=w.py", "--nnodes", "2"],
                             config={"app_name": "from_config", "nnodes": 3})
    assert app.name == "from_config" and app.roles[0].num_replicas == 3


def test_config_keys_that_are_not_parameters_are_ignored() -> None:
    app = materialize_appdef(complex_fn, BASE_ARGV, config={"not_a_param": 1})
    assert app.name == "test_app"


def test_component_defaults_that_are_not_parameters_are_ignored() -> None:
    # TorchX's own test passes {"worker": [...], ...} as cmpnt_defaults
    app = materialize_appdef(complex_fn, [*BASE_ARGV, "--first_arg", "x"],
                             {"worker": ["1", "2"], "master": ["3", "4"]})
    assert app.roles[0].args == ["x"]


def test_varargs_default_is_split_on_whitespace_when_none_are_given() -> None:
    CALLS.clear()
    materialize_appdef(var_args_fn, ["--foo", "f", "--bar", "b", "a1", "a2"],
                       {"args": "arg3 arg4"})
    materialize_appdef(var_args_fn, ["--foo", "f", "--bar", "b"], {"args": "arg3 arg4"})
    assert CALLS == [("f", ("a1", "a2"), "b"), ("f", ("arg3", "arg4"), "b")]


def test_parse_args_takes_config() -> None:
    ns = parse_args(var_args_fn, ["--bar", "b"], config={"foo": "from config"})
    assert (ns.foo, ns.bar, ns.args) == ("from config", "b", [])


# ---------------------------------------------------------------- component_args_from_str


@pytest.mark.parametrize("argv", [
    ["--foo", "fooval", "--bar", "barval", "arg1", "arg2"],
    ["--foo=fooval", "--bar=barval", "arg1", "arg2"],
])
def test_component_args_from_str_splits_the_call(argv: list[str]) -> None:
    parsed = component_args_from_str(var_args_fn, argv)
    assert isinstance(parsed, ComponentArgs)
    assert parsed.positional_args == {"foo": "fooval"}
    assert parsed.var_args == ["arg1", "arg2"]
    assert parsed.kwargs == {"bar": "barval"}


def test_component_args_from_str_types_the_values_and_drops_the_double_dash() -> None:
    parsed = component_args_from_str(complex_fn, [*BASE_ARGV, "--num_cpus", "1,2", "--",
                                                  "--lr", "1"])
    assert parsed.positional_args["num_cpus"] == [1, 2]
    assert parsed.positional_args["roles_scripts"] == {"worker": "worker.py",
                                                       "master": "master.py"}
    assert parsed.var_args == ["--lr", "1"] and parsed.kwargs == {}


def test_a_missing_required_argument_calls_sys_exit(capsys: pytest.CaptureFixture[str]) -> None:
    with patch.object(sys, "exit") as exit_mock, contextlib.suppress(Exception):
        materialize_appdef(complex_fn, [])  # TorchX's test ignores what follows the exit
    exit_mock.assert_called_once_with(2)
    assert "--app_name" in capsys.readouterr().err


# ---------------------------------------------------------------- the literal grammar


@pytest.mark.parametrize(("text", "expected"), [
    ("", {}),
    ("FOO=v1", {"FOO": "v1"}),
    ("FOO=''", {"FOO": ""}),
    ('FOO=""', {"FOO": ""}),
    ("FOO=v1,v2", {"FOO": "v1,v2"}),
    ("FOO=v1;v2", {"FOO": "v1;v2"}),
    ("FOO=,", {"FOO": ","}),
    ("FOO=;", {"FOO": ";"}),
    ("FOO=v1,v2,", {"FOO": "v1,v2,"}),
    ("FOO=v1;v2,", {"FOO": "v1;v2,"}),
    ("FOO=v1,v2,BAR=v3", {"FOO": "v1,v2", "BAR": "v3"}),
    ("FOO=v1;v2;BAR=v3", {"FOO": "v1;v2", "BAR": "v3"}),
    ("FOO=v1,v2;BAR=v3", {"FOO": "v1,v2", "BAR": "v3"}),
    ("key1=value1,,foo=bar", {"key1": "value1,", "foo": "bar"}),
    ("foo=bar1,bar2,bar3,my_key=my_value,new_foo=new_bar1,new_bar2",
     {"foo": "bar1,bar2,bar3", "my_key": "my_value", "new_foo": "new_bar1,new_bar2"}),
    ('FOO="value with = and , and ;"', {"FOO": "value with = and , and ;"}),
    (" A = 1 , B = 2 ", {"A": "1", "B": "2"}),
    # where TorchX loses or rejects the value (documented differences)
    ("BAR=v3==", {"BAR": "v3=="}),
    ("FOO=", {"FOO": ""}),
])
def test_dict_literals_read_as_torchx_reads_them(text: str, expected: dict[str, str]) -> None:
    assert parse_dict(text) == expected


@pytest.mark.parametrize("text", ["FOO", "FOO,", "FOO;", "=v", ",A=1"])
def test_malformed_dict_literals_are_rejected(text: str) -> None:
    with pytest.raises(ValueError, match=r"K=V pairs|empty key"):
        parse_dict(text)


def test_list_literals_keep_empty_items_as_torchx() -> None:
    assert parse_list("") == [] and parse_list("a, b") == ["a", "b"]
    assert parse_list("a,,b,") == ["a", "", "b", ""]


def _torchx_to_dict(arg: str) -> dict[str, str]:
    """TorchX's documented ``to_dict`` rules (without quoting), the oracle for the fuzz test:
    cut at ``=``, blank pieces dropped; the first piece is a key, the last a value, and each
    middle piece is ``value<delim>key`` cut at its last ``,`` or ``;``."""
    if not arg:
        return {}
    parts = [p.strip() for p in arg.split("=") if p.strip()]
    if len(parts) < 2:
        raise ValueError(arg)
    out: dict[str, str] = {}
    key = parts[0]
    for middle in parts[1:-1]:
        cut = max(middle.rfind(","), middle.rfind(";"))
        if cut <= 0 or cut == len(middle) - 1:
            raise ValueError(arg)
        out[key], key = middle[:cut].strip(), middle[cut + 1:].strip()
    out[key] = parts[-1]
    return out


PAIRS = st.lists(st.tuples(st.text("ab1 ", max_size=4), st.sampled_from(",;"),
                           st.text("ab1,; ", max_size=6)), min_size=1, max_size=4)
LITERALS = st.one_of(
    st.text(alphabet="ab1=,; ", max_size=24),  # anything
    PAIRS.map(lambda ps: "".join(  # mostly well-formed pair lists
        f"{d if i else ''}{k}={v}" for i, (k, d, v) in enumerate(ps))),
)


@settings(max_examples=500, deadline=None)
@given(LITERALS)
def test_dict_parser_agrees_with_torchx_wherever_torchx_reads_the_text(text: str) -> None:
    try:
        ours: dict[str, str] | None = parse_dict(text)
    except ValueError:
        ours = None
    try:
        theirs = _torchx_to_dict(text)
    except ValueError:
        return  # TorchX rejects it; tether may read more (e.g. "=" inside a value)
    pieces = text.split("=")
    torchx_merges_pieces = any(not p.strip() for p in pieces)  # "==": TorchX drops text
    bad_keys = any(not k or "," in k or ";" in k for k in theirs)  # TorchX keeps junk keys
    if not torchx_merges_pieces and not bad_keys:
        assert ours == theirs


KEYS = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True)
ITEMS = st.from_regex(r"[a-z0-9./-]{1,6}", fullmatch=True)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(KEYS, st.lists(ITEMS, min_size=1, max_size=4), max_size=4),
       st.sampled_from([",", ";"]), st.sampled_from([",", ";"]))
def test_dict_of_lists_round_trips(value: dict[str, list[str]], pair_delim: str,
                                   item_delim: str) -> None:
    def fn(m: Optional[Dict[str, List[str]]] = None) -> AppDef:  # noqa: UP006, UP045
        return AppDef(name="x", metadata={"m": m})

    text = pair_delim.join(f"{k}={item_delim.join(v)}" for k, v in value.items())
    got = materialize_appdef(fn, ["--m", text] if value else []).metadata["m"]
    assert got == (value or None)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=-10**6, max_value=10**6), max_size=6))
def test_int_lists_round_trip(value: list[int]) -> None:
    def fn(n: list[int]) -> AppDef:
        return AppDef(name="x", metadata={"n": n})

    assert materialize_appdef(fn, ["--n", ",".join(map(str, value))]).metadata["n"] == value


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(KEYS, st.from_regex(r"[^'\"\\]{0,8}", fullmatch=True), max_size=4))
def test_quoted_dict_values_are_taken_literally(value: dict[str, str]) -> None:
    text = ",".join(f'{k}="{v}"' for k, v in value.items())
    assert parse_dict(text) == value


# ---------------------------------------------------------------- documented differences


def typed_fn(n: Optional[int] = None, items: Optional[List[str]] = None,  # noqa: UP006, UP045
             env: Optional[Dict[str, str]] = None) -> AppDef:  # noqa: UP006, UP045
    """Typed values.

    Args:
        n: a number
        items: a list
        env: a dict
    """
    return AppDef(name="typed", metadata={"n": n, "items": items, "env": env})


def test_parse_args_gives_typed_values_not_strings() -> None:
    ns = parse_args(typed_fn, ["--n", "3", "--items", "a,b", "--env", "A=1"])
    assert (ns.n, ns.items, ns.env) == (3, ["a", "b"], {"A": "1"})
    assert parse_args(typed_fn, ["--n", "None"]).n is None


def test_an_empty_list_or_dict_argument_is_empty_not_none() -> None:
    md = materialize_appdef(typed_fn, ["--items", "", "--env", ""]).metadata
    assert (md["items"], md["env"]) == ([], {})


def test_config_values_are_converted_and_checked(capsys: pytest.CaptureFixture[str]) -> None:
    assert materialize_appdef(typed_fn, [], config={"n": "3"}).metadata["n"] == 3
    with pytest.raises(SystemExit):
        materialize_appdef(typed_fn, [], config={"n": "three"})
    assert "expects int, got 'three'" in capsys.readouterr().err


def test_a_dict_of_lists_from_config_may_give_each_list_as_text() -> None:
    app = materialize_appdef(complex_fn, BASE_ARGV,
                             config={"nested_arg": {"worker": "1;2", "master": "3,4"}})
    assert [r.args for r in app.roles] == [["1", "2"], ["3", "4"]]


def test_an_abbreviated_option_is_not_taken_for_the_full_name(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):  # TorchX's argparse takes --fla for --flag
        materialize_appdef(flag_fn, ["--fla", "true"])
    assert "did you mean --flag?" in capsys.readouterr().err
