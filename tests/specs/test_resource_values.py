"""What a Resource's counts may be, and what a user reads when one is wrong.

-1 is the documented "no request" sentinel; other negative values are refused at dryrun
(:func:`tether.specs.validate`; the constructor checks types only, as TorchX's) with the
field, the value and what is allowed (property tests over the whole number line).
"""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.specs import NULL_RESOURCE, AppDef, Resource, Role, validate

FIELDS = ("cpu", "gpu", "memMB")
_OK = {"cpu": 1.0, "gpu": 0, "memMB": 128}


@given(field=st.sampled_from(FIELDS), value=st.integers(min_value=0, max_value=10**9))
def test_every_count_at_or_above_zero_is_kept(field: str, value: int) -> None:
    res = Resource(**{**_OK, field: value})
    assert getattr(res, field) == value
    validate(_app(res))


@given(field=st.sampled_from(FIELDS))
def test_minus_one_is_the_schedulers_default(field: str) -> None:
    res = Resource(**{**_OK, field: -1})
    assert getattr(res, field) == getattr(NULL_RESOURCE, field) == -1
    validate(_app(res))


def _app(res: Resource) -> AppDef:
    return AppDef("a", roles=[Role("r", image="img", entrypoint="true", resource=res)])


@given(
    field=st.sampled_from(FIELDS),
    value=st.one_of(
        st.integers(max_value=-2),
        st.floats(max_value=-1e-9, allow_nan=False, allow_infinity=False).filter(
            lambda v: v != -1),
    ),
)
def test_other_negative_values_are_refused_saying_what_is_allowed(
    field: str, value: float
) -> None:
    if field != "cpu":
        value = min(math.floor(value), -2)  # the integral fields take whole numbers
    with pytest.raises(ValueError) as info:
        validate(_app(Resource(**{**_OK, field: value})))
    msg = str(info.value)
    assert f"resource.{field} = {value!r}" in msg
    assert ">= 0" in msg and "-1 for the scheduler's default" in msg


@pytest.mark.parametrize("component", ["dist.ddp", "utils.sh"])
def test_component_help_says_what_zero_and_minus_one_mean(component: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "tether.cli.main", "run", component, "--help"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout
    text = " ".join(out.split())
    assert "0 or -1: no request, the scheduler's default applies" in text
    assert "(0: none)" in text  # GPUs


def test_minus_five_on_the_command_line_says_what_is_allowed() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tether.cli.main", "run", "--dryrun", "dist.ddp",
         "--script", "train.py", "--cpu", "-5"],
        capture_output=True, text=True, check=False, timeout=60,
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert ("resource.cpu = -5 is negative: must be a number >= 0 (or -1 for the scheduler's "
            "default)") in proc.stderr
