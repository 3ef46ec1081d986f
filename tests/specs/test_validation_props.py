"""One validation layer: hostile inputs to every public constructor, run options and component args.

Property tests (hypothesis): whatever is passed, either a valid object comes out or tether's
own ``SpecError`` (a ``ValueError``; ``SpecTypeError`` is also a ``TypeError``) naming the
field; never a raw ``TypeError``/``AttributeError``/``OverflowError``. The number of inputs
tried is printed (``-s``) and recorded in docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import math
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether.components import dist, utils
from tether.components.args import ComponentArgError, materialize
from tether.schedulers.local.options import LocalOpts
from tether.specs import (
    AppDef,
    InvalidRunConfigException,
    Resource,
    RetryPolicy,
    Role,
    SecretRef,
    SpecError,
    SpecTypeError,
    validate,
)

TRIED: Counter[str] = Counter()
EXAMPLES = 300

anything = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.binary(max_size=4),
    st.lists(st.text(max_size=3), max_size=3),
    st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2),
    st.tuples(st.integers()),
)
numbers = st.one_of(
    st.integers(min_value=-5, max_value=10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    anything,
)
texts = st.one_of(st.text(max_size=12), st.text(alphabet="A=\0$ {}_", max_size=6), anything)
keys = st.one_of(
    st.text(max_size=12),
    st.text(alphabet="A=\0$ {}_", max_size=6),
    st.none(),
    st.integers(),
    st.floats(allow_nan=False),
    st.binary(max_size=3),
)
env_maps = st.one_of(st.dictionaries(keys, texts, max_size=3), anything)


def expect_clean(fn: Callable[[], Any], kind: str) -> Any:
    """Runs ``fn``: a result, or one of tether's own errors; anything else fails the test."""
    TRIED[kind] += 1
    try:
        return fn()
    except SpecError as e:
        assert str(e).startswith("invalid") or "run option" in str(e), e
        return None


def checked(spec: Any) -> Any:
    """``spec`` (a Resource, Role or AppDef) after :func:`validate` accepted it: values are
    checked when the app is (as in TorchX, a constructor checks types only)."""
    if isinstance(spec, Resource):
        validate(AppDef("a", [Role("r", entrypoint="x", resource=spec)]))
    elif isinstance(spec, Role):
        validate(AppDef("a", [spec]))
    else:
        validate(spec)
    return spec


@pytest.fixture(scope="module", autouse=True)
def report() -> Iterator[None]:
    yield
    print(f"\n[validation] inputs tried: {dict(TRIED)} total={sum(TRIED.values())}")


@settings(max_examples=EXAMPLES, deadline=None)
@given(cpu=numbers, gpu=numbers, mem=numbers, devices=anything)
def test_resource_never_raises_raw(cpu: Any, gpu: Any, mem: Any, devices: Any) -> None:
    kw = {} if devices is None else {"devices": devices}
    res = expect_clean(lambda: checked(Resource(cpu=cpu, gpu=gpu, memMB=mem, **kw)), "Resource")
    if res is not None:
        assert math.isfinite(res.cpu) and (res.cpu >= 0 or res.cpu == -1)
        assert isinstance(res.gpu, int) and not isinstance(res.gpu, bool)
        assert isinstance(res.memMB, int)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=texts,
    entrypoint=texts,
    args=st.one_of(st.lists(texts, max_size=3), anything),
    env=env_maps,
    num_replicas=numbers,
    max_retries=numbers,
    retry_policy=st.one_of(
        st.sampled_from(list(RetryPolicy)), st.sampled_from(["REPLICA", "replica", "x"]), anything
    ),
    port_map=st.one_of(st.dictionaries(keys, numbers, max_size=2), anything),
    secrets=st.one_of(
        st.dictionaries(keys, st.builds(SecretRef, texts, texts), max_size=2), anything
    ),
)
def test_role_and_app_never_raise_raw(
    name: Any,
    entrypoint: Any,
    args: Any,
    env: Any,
    num_replicas: Any,
    max_retries: Any,
    retry_policy: Any,
    port_map: Any,
    secrets: Any,
) -> None:
    role = expect_clean(
        lambda: Role(
            name,
            entrypoint=entrypoint,
            args=args,
            env=env,
            num_replicas=num_replicas,
            max_retries=max_retries,
            retry_policy=retry_policy,
            port_map=port_map,
            secrets=secrets,
        ),
        "Role",
    )
    if role is None:
        return
    app = expect_clean(
        lambda: AppDef(name if isinstance(name, str) else "x", roles=[role]), "AppDef"
    )
    if app is not None and expect_clean(lambda: checked(app), "validate") is not None:
        assert 1 <= role.num_replicas <= 10_000 and isinstance(role.max_retries, int)
        assert all("\0" not in a for a in role.args)
        assert all("=" not in k and k for k in role.env)


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    cfg=st.one_of(
        st.dictionaries(
            st.sampled_from(
                ["grace_period", "cwd", "log_dir", "auto_set_cuda_visible_devices", "nope", "grace"]
            ),
            numbers,
            max_size=3,
        ),
        anything,
    )
)
def test_runopts_resolve_never_raises_raw(cfg: Any) -> None:
    opts = LocalOpts.as_runopts()
    TRIED["runopts"] += 1
    try:
        out = opts.resolve(cfg, "local_cwd")
    except InvalidRunConfigException:
        return
    gp = out.get("grace_period")
    assert gp is None or math.isfinite(gp)  # type: ignore[arg-type]


@settings(max_examples=EXAMPLES, deadline=None)
@given(text=st.text(max_size=40))
def test_runopts_from_string_never_raises_raw(text: str) -> None:
    opts = LocalOpts.as_runopts()
    TRIED["runopts-string"] += 1
    with contextlib.suppress(InvalidRunConfigException):
        opts.resolve(opts.cfg_from_str(text), "local_cwd")


tokens = st.one_of(
    st.sampled_from(
        [
            "-j",
            "1x2",
            "0x0",
            "--script",
            "t.py",
            "--cpu",
            "nan",
            "--gpu",
            "1.5",
            "--memMB",
            "inf",
            "--env",
            "A=B",
            "--env",
            "A=B=C",
            "--max_retries",
            "-1",
            "--",
            "--name",
            "-h",
            "1e9x1",
            "--num_replicas",
            "100000",
            "-m",
            "mod",
            "--nope",
        ]
    ),
    st.text(max_size=6),
)


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    fn=st.sampled_from([dist.ddp, dist.spmd, utils.echo, utils.sh, utils.python, utils.binary]),
    argv=st.lists(tokens, max_size=8),
)
def test_component_args_never_raise_raw(fn: Callable[..., AppDef], argv: list[str]) -> None:
    if "-h" in argv or "--help" in argv:
        argv = [a for a in argv if a not in ("-h", "--help")]
    TRIED["component args"] += 1
    try:  # values are checked at dry-run (as TorchX does): validate is where they fail
        validate(materialize(fn, argv))
    except (ComponentArgError, SpecError):
        return


# ---- the values the issue found accepted or crashing -------------------------------------
@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda: Resource(cpu=float("nan"), gpu=0, memMB=1), "resource.cpu = nan"),
        (lambda: Resource(cpu=1, gpu=1.5, memMB=1), "resource.gpu = 1.5 is not a whole number"),  # type: ignore[arg-type]
        (lambda: Role("r", entrypoint="x", env={"A=B": "1"}), "env key 'A=B'"),
        (lambda: Role("r", entrypoint="x", args=["a\0b"]), "args[0] = 'a\\x00b' contains a NUL"),
        (lambda: Role("r", entrypoint="x", max_retries=float("inf")), "max_retries must be an int"),  # type: ignore[arg-type]
        (
            lambda: Role("r", entrypoint="x", num_replicas=10**9),
            "num_replicas = 1000000000 is out of range 1..10000",
        ),
        (lambda: Role("r", entrypoint="x", retry_policy="REPLICAS"), "did you mean 'REPLICA'"),  # type: ignore[arg-type]
    ],
)
def test_known_bad_values_are_rejected_naming_the_field(
    make: Callable[[], Any], needle: str
) -> None:
    with pytest.raises(SpecError) as ei:
        checked(make())
    assert needle in str(ei.value)


def test_wrong_types_are_spec_type_errors() -> None:
    with pytest.raises(SpecTypeError, match=r"resource\.cpu must be a number"):
        Resource(cpu="2", gpu=0, memMB=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):  # also a TypeError
        Role("r", num_replicas="3")  # type: ignore[arg-type]


def test_replica_bound_has_an_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_MAX_REPLICAS", "20000")
    assert Role("r", entrypoint="x", num_replicas=15000).num_replicas == 15000
    with pytest.raises(SpecError, match="TETHER_MAX_REPLICAS"):
        checked(Role("r", entrypoint="x", num_replicas=20001))


@pytest.mark.parametrize("value", ["inf", "nan", "-inf"])
def test_non_finite_grace_period_is_rejected(value: str) -> None:
    opts = LocalOpts.as_runopts()
    with pytest.raises(InvalidRunConfigException, match="grace_period"):
        opts.resolve(opts.cfg_from_str(f"grace_period={value}"), "local_cwd")
    with pytest.raises(InvalidRunConfigException, match="finite"):
        opts.resolve({"grace_period": float(value)}, "local_cwd")


def mostly(
    valid: st.SearchStrategy[Any], hostile: st.SearchStrategy[Any]
) -> st.SearchStrategy[Any]:
    """``valid`` nine times in ten, else ``hostile`` (so whole valid objects get built)."""
    return st.integers(0, 9).flatmap(lambda i: hostile if i == 0 else valid)


names = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=mostly(names, texts),
    args=mostly(st.lists(st.text(max_size=8), max_size=3), st.lists(texts, max_size=3)),
    env=mostly(st.dictionaries(names.map(str.upper), st.text(max_size=6), max_size=2), env_maps),
    num_replicas=mostly(st.integers(1, 16), numbers),
    max_retries=mostly(st.integers(0, 5), numbers),
    cpu=mostly(st.floats(0, 64), numbers),
    gpu=mostly(st.integers(0, 8), numbers),
    mem=mostly(st.integers(0, 1 << 20), numbers),
    policy=mostly(st.sampled_from(list(RetryPolicy)), anything),
)
def test_mostly_valid_apps_validate_or_fail_cleanly(
    name: Any,
    args: Any,
    env: Any,
    num_replicas: Any,
    max_retries: Any,
    cpu: Any,
    gpu: Any,
    mem: Any,
    policy: Any,
) -> None:
    def build() -> AppDef:
        res = Resource(cpu=cpu, gpu=gpu, memMB=mem)
        role = Role(
            name,
            entrypoint="python",
            args=args,
            env=env,
            num_replicas=num_replicas,
            max_retries=max_retries,
            retry_policy=policy,
            resource=res,
        )
        app = AppDef("app", roles=[role])
        validate(app)
        return app

    app = expect_clean(build, "AppDef (mostly valid)")
    if app is not None:
        TRIED["valid apps built"] += 1
