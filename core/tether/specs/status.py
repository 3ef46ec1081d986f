"""Application statuses: :class:`AppStatus` and friends (the states, :class:`AppState` and
:class:`RetryPolicy`, live in :mod:`tether.specs.states`; imported here too)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from tether.errors import TetherError
from tether.specs.secrets import mask_text
from tether.specs.states import AppState, RetryPolicy, is_terminal

if TYPE_CHECKING:  # failures and status_format load when a cause is read or a status shown
    from tether.specs.failures import Failure

__all__ = [
    "AppState",
    "AppStatus",
    "AppStatusError",
    "ReplicaStatus",
    "RetryPolicy",
    "RoleStatus",
    "is_terminal",
]


@dataclass
class ReplicaStatus:
    """Status of one replica.

    Attributes:
        id: Replica index within its role.
        state: The replica's state.
        role: Name of the role.
        hostname: Where it runs, when known.
        exit_code: Exit code of the last attempt, when known.
        msg: Human-readable detail (a failure reason).
        structured_error_msg: A JSON error document the replica wrote, or ``"<NONE>"``.
        hostaddr: The replica's network address (IP), when the scheduler knows it; defaults
            to ``hostname`` (as TorchX).
        failure: Why it failed (an infrastructure or application cause, with the native
            reason), when it failed and the backend could tell.
    """

    id: int
    state: AppState
    role: str
    hostname: str = ""
    exit_code: int | None = None
    msg: str = ""
    structured_error_msg: str = "<NONE>"
    hostaddr: str = ""
    failure: Failure | None = None

    def __post_init__(self) -> None:
        if not self.hostaddr:
            self.hostaddr = self.hostname

    def to_json(self) -> dict[str, object]:
        """TorchX's replica document: ``id``, ``state`` (its number), ``role``, ``hostname``,
        ``structured_error_msg`` and ``hostaddr`` (see :meth:`AppStatus.to_dict` for all
        fields)."""
        return {
            "id": self.id,
            "state": int(self.state),
            "role": self.role,
            "hostname": self.hostname,
            "structured_error_msg": self.structured_error_msg,
            "hostaddr": self.hostaddr,
        }


@dataclass
class RoleStatus:
    """Status of every replica of a role.

    Attributes:
        role: Name of the role.
        replicas: One status per replica.
    """

    role: str
    replicas: list[ReplicaStatus] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        """``{"role": ..., "replicas": [...]}`` with TorchX's replica documents."""
        return {"role": self.role, "replicas": [r.to_json() for r in self.replicas]}


class AppStatusError(TetherError):
    """Raised by :meth:`AppStatus.raise_for_status` when an app did not succeed."""

    def __init__(self, status: AppStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class AppStatus:
    """Status of an application as a scheduler reports it.

    Attributes:
        state: The app's state.
        num_restarts: How many times the app (or its replicas) were restarted; -1 if unknown.
        msg: Human-readable detail, e.g. why it failed.
        structured_error_msg: A JSON error document, when the job wrote one.
        ui_url: A link to the job in the scheduler's UI, if any.
        roles: Per-role replica statuses.
        failure: Why the app failed, when it did and the backend could tell; None here means
            "derive it from the replicas" (see :meth:`cause`).
    """

    state: AppState
    num_restarts: int = 0
    msg: str = ""
    structured_error_msg: str = "<NONE>"
    ui_url: str | None = None
    roles: list[RoleStatus] = field(default_factory=list)
    failure: Failure | None = None

    def is_terminal(self) -> bool:
        """Whether the app reached a final state."""
        return is_terminal(self.state)

    def cause(self) -> Failure | None:
        """Why the app failed: its own :attr:`failure`, else its replicas' (an infrastructure
        cause wins, see :func:`~tether.specs.failures.app_failure`); None unless FAILED."""
        if self.state != AppState.FAILED:
            return None
        if self.failure is not None:
            return self.failure
        from tether.specs.failures import app_failure

        return app_failure(rep.failure for rs in self.roles for rep in rs.replicas)

    def raise_for_status(self) -> None:
        """Raises :class:`AppStatusError` unless the app SUCCEEDED.

        Raises:
            AppStatusError: With the status and its formatted text.
        """
        if self.state != AppState.SUCCEEDED:
            raise AppStatusError(self, f"job did not succeed:\n{self.format()}")

    def _roles(self, filter_roles: list[str] | None) -> list[RoleStatus]:
        return [r for r in self.roles if not filter_roles or r.role in filter_roles]

    def format(self, filter_roles: list[str] | None = None) -> str:
        """Renders the status as TorchX does: state, restarts, one entry per replica (a
        failed one with its exit code, time, host and error message), message, structured
        error and UI URL. Messages are masked.

        Args:
            filter_roles: Show only these roles (all when None or empty).

        Returns:
            The text.
        """
        from tether.specs.status_format import format_status

        roles_text = "".join(
            _replica_line(rs.role, rep)
            for rs in self._roles(filter_roles)
            for rep in sorted(rs.replicas, key=lambda r: r.id)
        )
        failure = self.cause()
        return format_status(
            self.state.name, self.num_restarts, roles_text, self.msg,
            self.structured_error_msg, self.ui_url,
            cause=failure.describe() if failure is not None else "",
        )  # fmt: skip

    def __repr__(self) -> str:
        """TorchX's YAML form: fields in name order, states as ``FAILED (5)``, the structured
        error parsed when it is JSON."""
        import yaml  # only when a status is printed this way

        doc = self.to_dict()
        if doc.get("failure") is None:
            doc.pop("failure", None)  # tether's field: shown only when there is a cause
        doc["state"] = repr(self.state)
        doc["structured_error_msg"] = _parsed(self.structured_error_msg)
        for role in doc["roles"]:  # type: ignore[attr-defined]
            for rep in role["replicas"]:
                if rep.get("failure") is None:
                    rep.pop("failure", None)
                rep["state"] = repr(AppState[rep["state"]])
                rep["structured_error_msg"] = _parsed(rep["structured_error_msg"])
        return str(yaml.safe_dump({"AppStatus": doc}))

    def to_dict(self) -> dict[str, object]:
        """A JSON-serializable form (states as names)."""
        d = asdict(self)
        d["state"] = self.state.name
        d["msg"] = mask_text(self.msg)
        d["failure"] = _failure_dict(self.cause())
        for role, rs in zip(d["roles"], self.roles):
            for rep, rep_status in zip(role["replicas"], rs.replicas):
                rep["state"] = AppState(rep["state"]).name
                rep["msg"] = mask_text(rep.get("msg") or "")
                rep["failure"] = _failure_dict(rep_status.failure)
        return d

    def to_json(self, filter_roles: list[str] | None = None) -> dict[str, object]:
        """A JSON-serializable dict, as TorchX's ``AppStatus.to_json``.

        Args:
            filter_roles: Include only these roles (all when None or empty).

        Returns:
            ``state`` (name), ``num_restarts``, ``roles`` (TorchX's replica documents:
            ``state`` is the state's number), ``msg``, ``structured_error_msg`` and ``url``
            (the UI link).
        """
        return {
            "state": self.state.name,
            "num_restarts": self.num_restarts,
            "roles": [r.to_json() for r in self._roles(filter_roles)],
            "msg": mask_text(self.msg),
            "structured_error_msg": self.structured_error_msg,
            "url": self.ui_url,
        }

    def __str__(self) -> str:
        return self.format()


def _replica_line(role: str, rep: ReplicaStatus) -> str:
    from tether.specs.status_format import replica_line

    failed = rep.state in (AppState.FAILED, AppState.CANCELLED)
    return replica_line(
        rep.role or role, rep.id, rep.state.name, rep.hostname, rep.exit_code, rep.msg,
        rep.structured_error_msg, failed,
    )  # fmt: skip


def _parsed(text: str) -> object:
    if text == "<NONE>":
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


def _failure_dict(failure: Failure | None) -> dict[str, object] | None:
    if failure is None:
        return None
    d = failure.to_dict()
    d["reason"] = mask_text(str(d["reason"]))
    return d
