"""Application states and statuses: :class:`AppState`, :class:`AppStatus` and friends."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import Enum, IntEnum

from tether.errors import TetherError
from tether.specs.secrets import mask_text


class AppState(IntEnum):
    """Lifecycle state of an application (and of each replica)."""

    UNSUBMITTED = 0
    SUBMITTED = 1
    PENDING = 2
    RUNNING = 3
    SUCCEEDED = 4
    FAILED = 5
    CANCELLED = 6
    UNKNOWN = 7

    def __str__(self) -> str:
        return self.name

    def is_terminal(self) -> bool:
        """Whether the state is final (SUCCEEDED, FAILED or CANCELLED)."""
        return is_terminal(self)


_TERMINAL = frozenset({AppState.SUCCEEDED, AppState.FAILED, AppState.CANCELLED})


def is_terminal(state: AppState) -> bool:
    """Whether ``state`` is final.

    Args:
        state: The state.

    Returns:
        True for SUCCEEDED, FAILED and CANCELLED.
    """
    return state in _TERMINAL


class RetryPolicy(str, Enum):
    """What restarts when a replica fails and the role has retries left.

    * ``REPLICA``: only the failed replica restarts.
    * ``APPLICATION``: every replica of every role restarts.
    * ``ROLE``: every replica of the failed role restarts.
    """

    REPLICA = "REPLICA"
    APPLICATION = "APPLICATION"
    ROLE = "ROLE"

    def __str__(self) -> str:
        return self.value


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
        hostaddr: The replica's network address (IP), when the scheduler knows it.
    """

    id: int
    state: AppState
    role: str
    hostname: str = ""
    exit_code: int | None = None
    msg: str = ""
    structured_error_msg: str = "<NONE>"
    hostaddr: str = ""


@dataclass
class RoleStatus:
    """Status of every replica of a role.

    Attributes:
        role: Name of the role.
        replicas: One status per replica.
    """

    role: str
    replicas: list[ReplicaStatus] = field(default_factory=list)


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
    """

    state: AppState
    num_restarts: int = 0
    msg: str = ""
    structured_error_msg: str = "<NONE>"
    ui_url: str | None = None
    roles: list[RoleStatus] = field(default_factory=list)

    def is_terminal(self) -> bool:
        """Whether the app reached a final state."""
        return is_terminal(self.state)

    def raise_for_status(self) -> None:
        """Raises :class:`AppStatusError` unless the app SUCCEEDED.

        Raises:
            AppStatusError: With the status and its formatted text.
        """
        if self.state != AppState.SUCCEEDED:
            raise AppStatusError(self, f"job did not succeed:\n{self.format()}")

    def _error_lines(self) -> list[str]:
        if self.structured_error_msg in ("", "<NONE>"):
            return []
        try:
            doc = json.loads(self.structured_error_msg)
        except ValueError:
            return [self.structured_error_msg]
        msg = doc.get("message", doc) if isinstance(doc, dict) else doc
        return [json.dumps(msg, indent=2) if not isinstance(msg, str) else msg]

    def format(self, filter_roles: list[str] | None = None) -> str:
        """Renders the status as readable text, one line per replica.

        Args:
            filter_roles: Show only these roles (all when None).

        Returns:
            The text.
        """
        lines = [
            "AppStatus:",
            f"  State: {self.state.name}",
            f"  Num Restarts: {self.num_restarts}",
        ]
        if self.msg:
            lines.append("  Msg: " + mask_text(self.msg).replace("\n", "\n       "))
        err = self._error_lines()
        if err:
            text = mask_text("\n".join(err))
            lines.append("  Error: " + "\n         ".join(text.splitlines()))
        if self.ui_url:
            lines.append(f"  UI URL: {self.ui_url}")
        roles = [r for r in self.roles if filter_roles is None or r.role in filter_roles]
        if roles:
            lines.append("  Roles:")
            for rs in roles:
                for rep in rs.replicas:
                    extra = f" exit_code={rep.exit_code}" if rep.exit_code is not None else ""
                    host = f" on {rep.hostname}" if rep.hostname else ""
                    lines.append(f"    {rs.role}[{rep.id}]: {rep.state.name}{extra}{host}")
                    if rep.msg:
                        lines.append("      " + mask_text(rep.msg).replace("\n", "\n      "))
        return "\n".join(lines)

    def to_dict(self) -> dict[str, object]:
        """A JSON-serializable form (states as names)."""
        d = asdict(self)
        d["state"] = self.state.name
        d["msg"] = mask_text(self.msg)
        for role in d["roles"]:
            for rep in role["replicas"]:
                rep["state"] = AppState(rep["state"]).name
                rep["msg"] = mask_text(rep.get("msg") or "")
        return d

    def to_json(self, filter_roles: list[str] | None = None) -> dict[str, object]:
        """A JSON-serializable dict, keyed like TorchX's ``AppStatus.to_json``.

        Args:
            filter_roles: Include only these roles (all when None).

        Returns:
            ``state`` (name), ``num_restarts``, ``roles``, ``msg``, ``structured_error_msg``
            and ``url`` (the UI link).
        """
        d = self.to_dict()
        roles = d["roles"]
        assert isinstance(roles, list)
        return {
            "state": d["state"],
            "num_restarts": self.num_restarts,
            "roles": [r for r in roles if filter_roles is None or r["role"] in filter_roles],
            "msg": self.msg,
            "structured_error_msg": self.structured_error_msg,
            "url": self.ui_url,
        }

    def __str__(self) -> str:
        return self.format()
