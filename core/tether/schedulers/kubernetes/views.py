"""What the status analysis produces: one replica, and one app, as their objects show them.

:class:`AppView` also carries what the scheduler should do about the app (``stops``,
``creates``), planned by :mod:`tether.schedulers.kubernetes.reconcile`. Plain data, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tether.schedulers.api import DescribeAppResponse
from tether.specs import AppState, ReplicaStatus, Role, RoleStatus
from tether.specs.failures import Failure


@dataclass
class Replica:
    """One replica as the objects show it.

    Attributes:
        role: The role's name.
        role_index: The role's index in the app.
        replica_id: The replica index.
        state: Its state.
        msg: Why, when worth saying.
        exit_code: Exit code of its last terminated container.
        hostname: The node it runs on.
        attempt: How many times tether restarted it (Jobs mode).
        job: Its latest Job (Jobs mode).
        pod: Its newest pod.
        retryable: False when a restart cannot help.
        stopped: The ``tether.dev/stopped`` value of its Job, if tether stopped it.
        pod_retries: Pods its latest Job recreated (``REPLICA`` retries).
        failure: Why its pod failed or cannot be placed (cause and native reason).
    """

    role: str
    role_index: int
    replica_id: int
    state: AppState
    msg: str = ""
    exit_code: int | None = None
    hostname: str = ""
    attempt: int = 0
    job: dict[str, Any] | None = None
    pod: dict[str, Any] | None = None
    retryable: bool = True
    stopped: str | None = None
    pod_retries: int = 0
    failure: Failure | None = None

    @property
    def label(self) -> str:
        """``role[k]``."""
        return f"{self.role}[{self.replica_id}]"


@dataclass
class AppView:
    """One app as its objects show it, and what to do about it.

    Attributes:
        namespace: Its namespace.
        name: Its Kubernetes name.
        gang: The gang option it was rendered with.
        state: The app's state.
        msg: Why (failed replicas, pending reasons...).
        num_restarts: Restarts by tether plus pod retries.
        replicas: Every replica.
        roles: The roles, rebuilt from the pod templates.
        jobs: Every ``batch/v1`` Job of the app (all attempts).
        vcjob: The Volcano Job, when there is one.
        appwrapper: The AppWrapper, when there is one.
        app_name: ``AppDef.name``.
        job_key: The job identity.
        created: Creation time (seconds since the epoch).
        ui_url: The job's page in a dashboard (the ``dashboard_url`` option), if any.
        stops: ``(object, stopped-kind, reason)`` to stop.
        creates: Jobs to create (next attempts).
        records: ``(Job, "POD@NODE")``: pods of record to note on their Jobs.
        disruptions: ``(Job, pod, node, the pod or None)``: Jobs whose pod of record was
            deleted under them, to stop as disrupted (see :mod:`~.disruption`).
    """

    namespace: str
    name: str
    gang: str
    state: AppState
    msg: str
    num_restarts: int
    replicas: list[Replica]
    roles: list[Role]
    jobs: list[dict[str, Any]] = field(default_factory=list)
    vcjob: dict[str, Any] | None = None
    appwrapper: dict[str, Any] | None = None
    app_name: str = ""
    job_key: str | None = None
    created: float | None = None
    ui_url: str | None = None
    stops: list[tuple[dict[str, Any], str, str]] = field(default_factory=list)
    creates: list[dict[str, Any]] = field(default_factory=list)
    records: list[tuple[dict[str, Any], str]] = field(default_factory=list)
    disruptions: list[tuple[dict[str, Any], str, str, dict[str, Any] | None]] = field(
        default_factory=list
    )

    @property
    def app_id(self) -> str:
        """``{namespace}:{name}``."""
        return f"{self.namespace}:{self.name}"


def summary(reps: list[Replica], limit: int = 4) -> str:
    """``role[k]: msg`` of the first ``limit`` replicas, for messages."""
    items = [f"{r.label}: {r.msg}" if r.msg else r.label for r in reps]
    more = f" (and {len(items) - limit} more)" if len(items) > limit else ""
    return "; ".join(items[:limit]) + more


def describe_response(view: AppView) -> DescribeAppResponse:
    """What ``describe`` answers for an analyzed app (also the watch hub's view of it).

    Args:
        view: The analyzed app.

    Returns:
        The description, replicas ordered by role and index.
    """
    roles_statuses: dict[str, RoleStatus] = {}
    for rep in sorted(view.replicas, key=lambda r: (r.role_index, r.replica_id)):
        rs = roles_statuses.setdefault(rep.role, RoleStatus(rep.role))
        status = ReplicaStatus(
            id=rep.replica_id, state=rep.state, role=rep.role, hostname=rep.hostname,
            exit_code=rep.exit_code, msg=rep.msg, failure=rep.failure,
        )  # fmt: skip
        rs.replicas.append(status)
    return DescribeAppResponse(
        app_id=view.app_id,
        state=view.state,
        num_restarts=view.num_restarts,
        msg=view.msg,
        roles_statuses=list(roles_statuses.values()),
        roles=view.roles,
        job_key=view.job_key,
        ui_url=view.ui_url,
        actions_due=bool(view.stops or view.creates or view.records or view.disruptions),
    )
