"""The failure cause on :class:`AppStatus`: how it is derived, shown and serialized."""

from __future__ import annotations

from tether.specs import AppState, AppStatus, Failure, FailureCause, ReplicaStatus, RoleStatus
from tether.specs.failures import INFRASTRUCTURE_CAUSES, app_failure


def _status(*failures: Failure | None, state: AppState = AppState.FAILED) -> AppStatus:
    reps = [ReplicaStatus(i, AppState.FAILED, "w", failure=f) for i, f in enumerate(failures)]
    return AppStatus(state, roles=[RoleStatus("w", reps)])


def test_infrastructure_cause_wins_over_peers_application_exits() -> None:
    app_exit = Failure(FailureCause.APPLICATION, "NonZeroExitCode", 1)
    lost = Failure(FailureCause.NODE_LOST, "NODE_FAIL")
    st = _status(app_exit, lost)
    assert st.cause() == lost
    assert app_failure([None, Failure(FailureCause.UNKNOWN), app_exit]) == app_exit


def test_cause_shown_and_serialized_with_secrets_masked() -> None:
    f = Failure(FailureCause.PREEMPTED, "PREEMPTED (token=hunter2hunter2)")
    st = _status(f)
    text = st.format()
    assert "    Cause: preempted (PREEMPTED (token=" in text and "hunter2hunter2" not in text
    doc = st.to_dict()
    assert doc["failure"]["cause"] == "preempted"  # type: ignore[index]
    assert "hunter2hunter2" not in str(doc)
    rep = doc["roles"][0]["replicas"][0]  # type: ignore[index]
    assert rep["failure"]["cause"] == "preempted"
    assert "failure" not in st.to_json()  # TorchX's document stays TorchX's


def test_no_cause_unless_failed() -> None:
    st = _status(Failure(FailureCause.EVICTED), state=AppState.RUNNING)
    assert st.cause() is None and "Cause:" not in st.format()
    assert st.to_dict()["failure"] is None


def test_app_level_failure_overrides_replicas() -> None:
    st = _status(Failure(FailureCause.APPLICATION, "", 2))
    st.failure = Failure(FailureCause.HOST_TERMINATED, "Host EC2 (instance i-1) terminated.")
    assert st.cause() == st.failure
    assert "Cause: host_terminated (Host EC2" in st.format()


def test_infrastructure_set() -> None:
    assert {c for c in FailureCause if c.is_infrastructure} == INFRASTRUCTURE_CAUSES
    assert not FailureCause.APPLICATION.is_infrastructure
    assert not FailureCause.OOM_KILLED.is_infrastructure
    assert Failure(FailureCause.APPLICATION, "x", 3).describe() == "application, exit code 3 (x)"
