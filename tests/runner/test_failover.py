"""Failover lists at the Runner: bad input (an unknown scheduler, an option no candidate
declares, a candidate without a capability the app needs) is refused before anything is
submitted, and each candidate gets the options it declares.

The failover itself (a real quota refusal moving the job to ``local_cwd``) is tested on the
e2e kube-apiserver: ``tests/e2e/test_kubernetes_failure_causes_e2e.py``; the CLI's lists in
``tests/cli/test_recovery_cli.py``.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether.errors import SpecError
from tether.runner import Runner
from tether.runner.logical import (
    CandidateCapabilityError,
    UnknownRunOptionError,
    check_candidates_can_run,
)
from tether.schedulers import UnknownSchedulerError
from tether.schedulers.capabilities import UnsupportedFeatureError
from tether.specs import AppDef, AppState, RetryPolicy, Role, SecretRef, VolumeMount


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runner]:
    monkeypatch.setenv("TETHER_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "tetherconfig.ini").write_text("")
    monkeypatch.setenv("TETHERCONFIG", str(tmp_path / "tetherconfig.ini"))
    with Runner() as r:
        yield r


def _app() -> AppDef:
    return AppDef("fo", roles=[Role("w", image=".", entrypoint=sys.executable,
                                    args=["-c", "print('ran')"])])  # fmt: skip


def _nothing_submitted(tmp_path: Path) -> bool:
    return not (tmp_path / "state" / "local_cwd").exists() or not any(
        (tmp_path / "state" / "local_cwd").rglob("state.json"))


def test_an_option_no_candidate_declares_is_refused(runner: Runner, tmp_path: Path) -> None:
    with pytest.raises(UnknownRunOptionError, match=r"run option 'no_such' is not an option "
                       r"of any of the schedulers local_cwd, kubernetes"):  # fmt: skip
        runner.run(_app(), ["local_cwd", "kubernetes"], {"no_such": "1"})
    assert _nothing_submitted(tmp_path)


def test_an_unknown_scheduler_in_the_list_is_refused(runner: Runner, tmp_path: Path) -> None:
    with pytest.raises(UnknownSchedulerError, match=r"unknown scheduler 'kubernets'\. Did you "
                       r"mean kubernetes"):  # fmt: skip
        runner.run(_app(), ["local_cwd", "kubernets"])
    with pytest.raises(SpecError, match="not a list of scheduler names"):
        runner.run(_app(), [])
    assert _nothing_submitted(tmp_path)


def test_each_candidate_gets_the_options_it_declares(runner: Runner) -> None:
    """``namespace`` is kubernetes's only: local_cwd, the first candidate with room, runs
    the job without it (one logical handle)."""
    handle = runner.run(_app(), ["local_cwd", "kubernetes"], {"namespace": "ml"})
    assert handle.startswith("chain://")
    status = runner.wait(handle, wait_interval=0.2)
    assert status is not None and status.state == AppState.SUCCEEDED
    assert [a["scheduler"] for a in runner.attempts(handle)] == ["local_cwd"]


# ---- candidates without a capability the app needs -------------------------------------------
def _role(**kw: Any) -> Role:
    return Role("w", image=kw.pop("image", "img"), entrypoint=sys.executable,
                args=["-c", "print('ran')"], **kw)  # fmt: skip


VOLUME = VolumeMount(src="data", dst_path="/data")


@pytest.mark.parametrize(
    ("app", "schedulers", "workspace", "lacks"),
    [
        (AppDef("m", roles=[_role(mounts=[VOLUME])]), ["kubernetes", "local_cwd"], None,
         ["local_cwd lacks the capability `mounts`: role 'w': mounts has a volume mount"]),
        (AppDef("s", roles=[_role(secrets={"TOKEN": SecretRef("tok", "password")})]),
         ["kubernetes", "slurm"], None,
         ["slurm lacks the capability `secrets`: role 'w': secrets ['TOKEN']"]),
        (AppDef("r", roles=[_role(max_retries=2, retry_policy=RetryPolicy.ROLE)]),
         ["local_cwd", "slurm"], None,
         ["slurm lacks the capability `retries`: role 'w': retry_policy=ROLE is not supported "
          "by slurm (supported: APPLICATION, REPLICA)"]),
        (AppDef("p", roles=[_role(port_map={"http": 8080})]), ["local_cwd", "ray", "lsf"], None,
         ["ray lacks the capability `port_map`", "lsf lacks the capability `port_map`"]),
        (AppDef("i", roles=[_role(image="")]), ["local_cwd", "kubernetes"], None,
         ["kubernetes lacks the capability `needs_image`: role 'w': image is empty"]),
        (AppDef("two", roles=[_role(), dataclasses.replace(_role(), name="v")]),
         ["local_cwd", "gcp_batch"], None,
         ["gcp_batch lacks the capability `max_roles`: the app has 2 roles; gcp_batch runs at "
          "most 1"]),
        (AppDef("ws", roles=[_role()]), ["local_cwd", "aws_batch"], ".",
         ["aws_batch lacks the capability `workspaces`: role 'w': has a workspace"]),
    ],
)  # fmt: skip
def test_a_candidate_without_a_capability_the_app_needs_is_refused(
    runner: Runner, tmp_path: Path, app: AppDef, schedulers: list[str], workspace: str | None,
    lacks: list[str],
) -> None:  # fmt: skip
    """Before anything is submitted, and by a dry-run of the list: the error names the
    ``scheduler`` field, each candidate and the capability it lacks."""
    for call in (
        lambda: runner.run(app, schedulers, workspace=workspace),
        lambda: runner.run(app, schedulers, workspace=workspace, dryrun=True),
    ):
        with pytest.raises(CandidateCapabilityError) as info:
            call()
        text = str(info.value)
        assert text.startswith(f"scheduler: the failover list {', '.join(schedulers)} names "
                               f"schedulers that cannot run app {app.name!r}")  # fmt: skip
        for words in lacks:
            assert words in text
        assert schedulers[0] + " lacks" not in text  # the first one can run it
        assert isinstance(info.value, UnsupportedFeatureError)
    assert _nothing_submitted(tmp_path)


@pytest.fixture
def secrets_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The secret ``tok`` (key ``password``) where local_cwd reads secrets."""
    (tmp_path / "secrets" / "tok").mkdir(parents=True)
    (tmp_path / "secrets" / "tok" / "password").write_text("s3cret")
    monkeypatch.setenv("TETHER_SECRETS_DIR", str(tmp_path / "secrets"))
    return tmp_path / "secrets"


FEATURES: dict[str, dict[str, Any]] = {
    "mount": {"mounts": [VOLUME]},
    "secret": {"secrets": {"TOKEN": SecretRef("tok", "password")}},
    "role_retry": {"max_retries": 1, "retry_policy": RetryPolicy.ROLE},
    "port": {"port_map": {"http": 8080}},
}
CANDIDATES = ["local_cwd", "kubernetes", "slurm", "ray", "local_docker"]


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(
    features=st.sets(st.sampled_from(sorted(FEATURES))),
    schedulers=st.lists(st.sampled_from(CANDIDATES), min_size=2, max_size=4, unique=True),
)
def test_a_list_is_refused_exactly_when_a_candidates_own_dryrun_would_refuse_the_app(
    runner: Runner, secrets_dir: Path, features: set[str], schedulers: list[str]
) -> None:
    """The promise to a user: the list check refuses the app for a candidate exactly when
    that candidate's own dry-run refuses it as something it cannot do."""
    kw: dict[str, Any] = {}
    for f in features:
        kw.update(FEATURES[f])
    app = AppDef("prop", roles=[_role(**kw)])
    refusing = []
    for sched in schedulers:
        try:
            runner.dryrun(app, sched, {"namespace": "ml"} if sched == "kubernetes" else {})
        except UnsupportedFeatureError:
            refusing.append(sched)
    if not refusing:
        check_candidates_can_run(app, schedulers, runner.scheduler_capabilities)
        return
    with pytest.raises(CandidateCapabilityError) as info:
        check_candidates_can_run(app, schedulers, runner.scheduler_capabilities)
    named = {line.split(" lacks ")[0].strip("- ") for line in str(info.value).splitlines()[1:]}
    assert named == set(refusing)
