"""The recovery policy and checkpoint location of an AppDef: validation, and what replicas see.

Property tests (hypothesis): whatever is passed, either a valid policy comes out or tether's
own ``SpecError`` naming the field; never a raw ``TypeError``/``ValueError``.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.runner import Runner
from tether.schedulers.replica import ENV_ATTEMPT, ENV_CHECKPOINT, with_recovery_env
from tether.specs import (
    AppDef,
    Failure,
    FailureCause,
    RecoveryPolicy,
    Role,
    SpecError,
    SpecTypeError,
    validate,
)
from tether.specs.recovery import DEFAULT_CAUSES


def _app(**kw: Any) -> AppDef:
    role = Role("trainer", image="busybox", entrypoint="echo", args=["hi"],
                env={ENV_ATTEMPT: "user value", "KEEP": "1"})  # fmt: skip
    return AppDef("train", roles=[role], **kw)


# ---- the policy ------------------------------------------------------------------------------
def test_defaults_recover_from_infrastructure_only() -> None:
    p = RecoveryPolicy()
    assert set(p.on) == set(DEFAULT_CAUSES)
    assert p.recovers(Failure(FailureCause.PREEMPTED), 0)
    assert not p.recovers(Failure(FailureCause.APPLICATION, exit_code=1), 0)
    assert not p.recovers(Failure(FailureCause.NODE_LOST), p.max_recoveries)
    assert not p.recovers(None, 0)


def test_causes_given_as_strings_become_causes() -> None:
    p = RecoveryPolicy(on=["preempted", "Node_Lost", FailureCause.PREEMPTED])  # type: ignore[arg-type]
    assert p.on == (FailureCause.PREEMPTED, FailureCause.NODE_LOST)
    assert RecoveryPolicy(on="evicted").on == (FailureCause.EVICTED,)  # type: ignore[arg-type]


def test_backoff_grows_and_is_capped() -> None:
    p = RecoveryPolicy(backoff_s=5, backoff_factor=3, max_backoff_s=100)
    assert [p.delay(i) for i in range(4)] == [5, 15, 45, 100]


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"max_recoveries": -1}, SpecError, "recovery.max_recoveries = -1 is negative"),
        ({"max_recoveries": 2.5}, SpecTypeError, "recovery.max_recoveries must be an int"),
        ({"max_recoveries": "3"}, SpecTypeError, "recovery.max_recoveries must be an int"),
        ({"on": ["preemptd"]}, SpecError, "did you mean 'preempted'?"),
        ({"on": ["nodelost"]}, SpecError, "did you mean 'node_lost'?"),
        ({"on": [3]}, SpecTypeError, "recovery.on[0] must be a FailureCause"),
        ({"on": []}, SpecError, "recovery.on is empty"),
        ({"backoff_s": -1}, SpecError, "recovery.backoff_s = -1"),
        ({"backoff_factor": 0.5}, SpecError, "recovery.backoff_factor = 0.5"),
        ({"max_backoff_s": math.inf}, SpecError, "recovery.max_backoff_s = inf"),
        ({"placement_timeout_s": 0}, SpecError, "recovery.placement_timeout_s = 0 is not "
         "allowed: must be a finite number of seconds > 0, or None"),
        ({"placement_timeout_s": -5.0}, SpecError, "recovery.placement_timeout_s = -5.0"),
        ({"placement_timeout_s": math.nan}, SpecError, "recovery.placement_timeout_s = nan"),
        ({"placement_timeout_s": "60"}, SpecTypeError,
         "recovery.placement_timeout_s must be a number of seconds > 0 or None, got str"),
        ({"placement_timeout_s": True}, SpecTypeError, "recovery.placement_timeout_s must be"),
    ],
)
def test_bad_policy_names_the_field(kwargs: dict[str, Any], error: type, words: str) -> None:
    with pytest.raises(error) as info:
        RecoveryPolicy(**kwargs)
    assert words in str(info.value)


# ---- the app's fields ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"checkpoint": "s4://bucket/run"}, "unknown URL scheme 's4'; did you mean 's3'?"),
        ({"checkpoint": "gz://bucket/run"}, "unknown URL scheme 'gz'"),
        ({"checkpoint": "://x"}, "empty URL scheme"),
        ({"checkpoint": " "}, "is not a path or URL"),
        ({"checkpoint": 3}, "checkpoint must be a str"),
        ({"attempt": -1}, "attempt = -1 is negative"),
        ({"attempt": True}, "attempt must be an int"),
        ({"recovery": {"max_recoveries": 2}}, "recovery must be a RecoveryPolicy"),
    ],
)
def test_bad_app_fields_name_the_field(kwargs: dict[str, Any], words: str) -> None:
    """Wrong types are refused by the constructor, bad values by validate (as dryrun runs)."""
    with pytest.raises(SpecError) as info:
        validate(_app(**kwargs))
    assert words in str(info.value)


@pytest.mark.parametrize("location", ["/shared/ckpt", "ckpt/run1", "s3://b/run", "gs://b/r",
                                      "file:///tmp/c", "memory://x"])  # fmt: skip
def test_good_checkpoint_locations(location: str) -> None:
    app = _app(checkpoint=location)
    validate(app)
    assert app.checkpoint == location


def test_dryrun_refuses_a_bad_checkpoint(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_STATE_DIR", str(tmp_path))
    with Runner() as r, pytest.raises(SpecError, match="unknown URL scheme 's4'"):
        r.dryrun(_app(checkpoint="s4://b/c"), "local_cwd")


# ---- what replicas see -------------------------------------------------------------------------
def test_replica_env_without_recovery_is_unchanged() -> None:
    app = _app()
    assert with_recovery_env(app) is app


def test_replica_env_has_attempt_and_checkpoint_overriding_the_role() -> None:
    app = _app(recovery=RecoveryPolicy(), checkpoint="s3://b/run", attempt=2)
    env = with_recovery_env(app).roles[0].env
    assert env == {ENV_ATTEMPT: "2", ENV_CHECKPOINT: "s3://b/run", "KEEP": "1"}
    assert app.roles[0].env[ENV_ATTEMPT] == "user value"  # the app is not modified


@pytest.mark.parametrize("scheduler", ["local_cwd", "kubernetes", "slurm"])
def test_dryrun_shows_the_variables_in_the_native_request(
    scheduler: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_STATE_DIR", str(tmp_path))
    app = _app(recovery=RecoveryPolicy(on=["preempted"]), checkpoint="/shared/ckpt/run7",
               attempt=3)  # fmt: skip
    with Runner() as r:
        text = str(r.dryrun(app, scheduler, {"namespace": "n"} if scheduler == "kubernetes"
                                              else {}))  # fmt: skip
    assert ENV_ATTEMPT in text and "/shared/ckpt/run7" in text
    assert "user value" not in text


def test_cli_dryrun_shows_the_policy() -> None:
    from tether.cli.common import format_app

    text = format_app(_app(recovery=RecoveryPolicy(on=["preempted"], max_recoveries=5,
                                                   placement_timeout_s=90)))  # fmt: skip
    assert '"max_recoveries": 5' in text and '"preempted"' in text
    assert '"placement_timeout_s": 90' in text


# ---- properties --------------------------------------------------------------------------------
anything = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 10**6), st.floats(allow_nan=True),
    st.text(max_size=12), st.lists(st.text(max_size=10), max_size=3),
    st.sampled_from([c.value for c in FailureCause]),
    st.lists(st.sampled_from([c.value for c in FailureCause]), max_size=4),
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(n=anything, on=anything, backoff=anything, factor=anything, cap=anything,
       placement=anything)
def test_any_policy_input_is_valid_or_a_spec_error(
    n: Any, on: Any, backoff: Any, factor: Any, cap: Any, placement: Any
) -> None:
    try:
        p = RecoveryPolicy(max_recoveries=n, on=on, backoff_s=backoff, backoff_factor=factor,
                           max_backoff_s=cap, placement_timeout_s=placement)  # fmt: skip
    except SpecError as e:
        assert "recovery." in str(e)
        return
    assert isinstance(p.max_recoveries, int) and p.max_recoveries >= 0
    assert p.on and all(isinstance(c, FailureCause) for c in p.on)
    assert 0 <= p.delay(p.max_recoveries) <= p.max_backoff_s
    t = p.placement_timeout_s
    assert t is None or (not isinstance(t, bool) and math.isfinite(t) and t > 0)


@settings(max_examples=300, deadline=None)
@given(location=st.one_of(st.none(), st.integers(), st.text(max_size=30),
                          st.builds(lambda s, p: f"{s}://{p}", st.text(max_size=6),
                                    st.text(max_size=10))))  # fmt: skip
def test_any_checkpoint_is_valid_or_a_spec_error(location: Any) -> None:
    try:
        app = _app(checkpoint=location)
        validate(app)
    except SpecError as e:
        assert "checkpoint" in str(e)
        return
    assert app.checkpoint == location
