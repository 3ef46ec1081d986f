"""Specs rebuilt from tether's own checked data (:mod:`tether.specs.trusted`)."""

from __future__ import annotations

import pytest

from tether.errors import SpecTypeError
from tether.specs import AppDef, Resource, RetryPolicy, Role
from tether.specs.trusted import unchecked_app, unchecked_role


def test_an_unchecked_role_and_app_equal_the_constructed_ones() -> None:
    values = {"name": "r", "image": "img", "entrypoint": "python", "args": ["-c", "1"],
              "env": {"A": "1"}, "num_replicas": 2, "retry_policy": RetryPolicy.ROLE,
              "resource": Resource(cpu=2, gpu=0, memMB=512)}
    role = unchecked_role(**values)
    assert type(role) is Role and role == Role(**values)  # type: ignore[arg-type]
    app = unchecked_app(name="demo", roles=[role])
    assert type(app) is AppDef and app == AppDef("demo", [Role(**values)])  # type: ignore[arg-type]
    # defaults are made per instance, as the constructor makes them
    other = unchecked_role(name="o")
    assert other == Role("o") and other.env is not unchecked_role(name="o").env
    assert other.resource is not unchecked_role(name="o").resource


def test_unchecked_builds_skip_the_checks_but_not_the_field_names() -> None:
    # for tether's own checked data only: a wrong type is kept, where Role(...) raises it
    with pytest.raises(SpecTypeError):
        Role("r", num_replicas="2")  # type: ignore[arg-type]
    assert unchecked_role(name="r", num_replicas="2").num_replicas == "2"
    with pytest.raises(SpecTypeError, match="Role has no field 'replicas'"):
        unchecked_role(name="r", replicas=2)
    with pytest.raises(SpecTypeError, match="AppDef needs field 'name'"):
        unchecked_app(roles=[])
