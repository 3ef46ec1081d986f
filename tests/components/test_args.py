"""Component arguments: signature + docstring -> command line, and the edge cases users hit."""

from __future__ import annotations

import ast

import pytest

from tests.components import sample_components as sc
from tether.components.args import (
    ComponentArgError,
    InvalidComponentError,
    component_help,
    materialize,
    parse_args,
    wants_help,
)


def values(app: object) -> dict[str, object]:
    """The keyword values a sample component was called with."""
    return ast.literal_eval(app.metadata["values"])  # type: ignore[attr-defined]


def test_every_supported_type_is_converted() -> None:
    app = materialize(sc.typed, [
        "--s", "hello", "--i", "7", "--f", "2.5", "--b", "--o", "3",
        "--items", "a,b", "--nums", "1,2", "--env", "A=1,B=x=y",
    ])
    assert values(app) == {
        "s": "hello", "i": 7, "f": 2.5, "b": True, "o": 3, "items": ["a", "b"],
        "nums": [1, 2], "env": {"A": "1", "B": "x=y"}, "config_name": "default",
        "max_retries": 0,
    }


def test_signature_defaults_apply_when_not_given() -> None:
    v = values(materialize(sc.typed, ["--s", "x"]))
    assert v["i"] == 1 and v["f"] == 0.5 and v["b"] is False and v["o"] is None


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--b"], True),
        (["--b", "true"], True),
        (["--b", "False"], False),
        (["--b=no"], False),
        (["--b=1"], True),
        (["--no-b"], False),
    ],
)
def test_bool_forms(argv: list[str], expected: bool) -> None:
    assert values(materialize(sc.typed, ["--s", "x", *argv]))["b"] is expected


def test_bool_flag_does_not_swallow_the_positional_that_follows() -> None:
    v = values(materialize(sc.with_varargs, ["--flag", "train.py", "--lr", "1"]))
    assert v == {"args": ["train.py", "--lr", "1"], "flag": True, "name": "x"}


def test_bad_bool_value_is_an_error() -> None:
    with pytest.raises(ComponentArgError, match="expects true or false, got 'maybe'"):
        materialize(sc.typed, ["--s", "x", "--b=maybe"])


def test_repeated_list_and_dict_options_accumulate() -> None:
    v = values(materialize(sc.typed, [
        "--s", "x", "--items", "a", "--items", "b,c", "--env", "A=1", "--env", "B=2",
    ]))
    assert v["items"] == ["a", "b", "c"]
    assert v["env"] == {"A": "1", "B": "2"}


def test_dict_value_with_commas_continues_the_previous_value() -> None:
    v = values(materialize(sc.typed, ["--s", "x", "--env", "HOSTS=a,b,PORT=1"]))
    assert v["env"] == {"HOSTS": "a,b", "PORT": "1"}


def test_dict_without_key_is_an_error() -> None:
    with pytest.raises(ComponentArgError, match="K=V pairs"):
        materialize(sc.typed, ["--s", "x", "--env", "novalue"])


def test_equals_form_and_negative_numbers() -> None:
    v = values(materialize(sc.typed, ["--s=a=b", "--i", "-3", "--f=-0.5"]))
    assert v["s"] == "a=b" and v["i"] == -3 and v["f"] == -0.5


def test_optional_none_literal() -> None:
    assert values(materialize(sc.typed, ["--s", "x", "--o", "None"]))["o"] is None


def test_short_alias_from_annotated_and_dashed_alias() -> None:
    v = values(materialize(sc.typed, ["--s", "x", "-cn", "prod", "--max-retries", "2"]))
    assert v["config_name"] == "prod" and v["max_retries"] == 2


def test_varargs_after_double_dash_even_when_they_look_like_options() -> None:
    v = values(materialize(sc.with_varargs, ["--name", "n", "--", "--flag", "--name", "z"]))
    assert v == {"args": ["--flag", "--name", "z"], "flag": False, "name": "n"}


def test_varargs_start_at_first_unknown_token() -> None:
    v = values(materialize(sc.with_varargs, ["--name", "n", "--unknown", "v", "--flag"]))
    assert v["args"] == ["--unknown", "v", "--flag"] and v["flag"] is False


def test_parameter_before_varargs_is_passed_positionally() -> None:
    v = values(materialize(sc.positional_then_varargs, ["--first", "a", "b", "c"]))
    assert v == {"first": "a", "rest": ["b", "c"]}


def test_missing_required_argument_names_it_and_carries_usage() -> None:
    with pytest.raises(ComponentArgError) as ei:
        materialize(sc.typed, ["--i", "2"], prog="tether run typed")
    assert "missing required argument: -s" in str(ei.value)
    assert ei.value.usage.startswith("usage: tether run typed")


def test_missing_required_hints_at_misplaced_option() -> None:
    with pytest.raises(ComponentArgError, match="taken as a positional argument"):
        materialize(sc.positional_then_varargs, ["x", "--first", "a"])


def test_wrong_type_names_argument_and_value() -> None:
    with pytest.raises(ComponentArgError, match=r"argument --i expects int, got 'seven'"):
        materialize(sc.typed, ["--s", "x", "--i", "seven"])


def test_option_without_value() -> None:
    with pytest.raises(ComponentArgError, match="argument --i expects a value"):
        materialize(sc.typed, ["--s", "x", "--i"])


def test_unknown_option_without_varargs_suggests_close_match() -> None:
    with pytest.raises(ComponentArgError, match=r"unrecognized argument '--itmes'.*--items"):
        materialize(sc.typed, ["--s", "x", "--itmes", "a"])


def test_mapping_arguments_are_converted_and_checked() -> None:
    v = values(materialize(sc.typed, {"s": "x", "i": "4", "f": 3, "items": ["a"],
                                      "env": {"K": "V"}, "cn": "c"}))
    assert v["i"] == 4 and v["f"] == 3.0 and v["items"] == ["a"] and v["config_name"] == "c"
    with pytest.raises(ComponentArgError, match="argument 'i' expects int, got 'x'"):
        materialize(sc.typed, {"s": "x", "i": "x"})
    with pytest.raises(ComponentArgError, match="expects int, got bool"):
        materialize(sc.typed, {"s": "x", "i": True})
    with pytest.raises(ComponentArgError, match="unknown argument 'itmes'; did you mean items"):
        materialize(sc.typed, {"s": "x", "itmes": "x"})


def test_mapping_varargs() -> None:
    v = values(materialize(sc.with_varargs, {"args": ["a", "--b"], "flag": True}))
    assert v["args"] == ["a", "--b"] and v["flag"] is True


def test_config_defaults_beat_signature_and_lose_to_the_command_line() -> None:
    defaults = {"i": "10", "cn": "from-config", "s": "cfg"}
    v = values(materialize(sc.typed, [], defaults))
    assert v["i"] == 10 and v["config_name"] == "from-config" and v["s"] == "cfg"
    v = values(materialize(sc.typed, ["--i", "11"], defaults))
    assert v["i"] == 11


def test_config_default_for_unknown_argument_is_an_error() -> None:
    with pytest.raises(ComponentArgError, match=r"default 'nope'.*not an argument"):
        materialize(sc.typed, ["--s", "x"], {"nope": "1"})


def test_config_default_of_wrong_type_is_an_error() -> None:
    with pytest.raises(ComponentArgError, match=r"default 'i' from \.tetherconfig expects int"):
        materialize(sc.typed, ["--s", "x"], {"i": "many"})


def test_component_value_error_becomes_arg_error_with_usage() -> None:
    with pytest.raises(ComponentArgError, match="x must be >= 0") as ei:
        materialize(sc.rejects, ["--x", "-1"], prog="rejects")
    assert "usage: rejects" in ei.value.usage


def test_component_that_does_not_return_an_appdef() -> None:
    with pytest.raises(TypeError, match="returned str, not an AppDef"):
        materialize(sc.not_an_app, [])


def test_invalid_component_is_rejected_before_calling() -> None:
    with pytest.raises(InvalidComponentError, match="returns int"):
        materialize(sc.helper, ["--x", "1"])


def test_string_args_are_rejected() -> None:
    with pytest.raises(TypeError, match="list of strings or a mapping"):
        parse_args(sc.typed, "--s x")  # type: ignore[arg-type]


def test_help_shows_docstring_help_defaults_and_config_defaults() -> None:
    text = component_help(sc.typed, "tether run typed", {"i": "9"})
    assert "usage: tether run typed" in text
    assert "A component with one parameter of each supported type." in text
    assert "An integer. (default from .tetherconfig: 9)" in text
    assert "A required string. (required)" in text
    assert "-cn CONFIG_NAME" in text


def test_wants_help_only_for_the_components_own_options() -> None:
    assert wants_help(sc.with_varargs, ["--name", "x", "--help"])
    assert not wants_help(sc.with_varargs, ["script.py", "--help"])
    assert not wants_help(sc.with_varargs, ["--", "--help"])
    assert wants_help(sc.typed, ["--help"])
    with pytest.raises(ComponentArgError, match="--help was requested"):
        materialize(sc.typed, ["--help"])
