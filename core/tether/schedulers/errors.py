"""Errors a scheduler raises that callers act on by kind, whatever the backend.

:class:`CapacityError` is a backend's refusal of a job for capacity or quota (a Kubernetes
namespace's ResourceQuota used up, a full queue): a :class:`~tether.errors.BackendError` of
kind ``quota``. The job itself is fine and could run on another backend, so a caller with a
list of candidate schedulers moves on to the next one, where any other submission error is
final.
"""

from __future__ import annotations

from tether.errors import BackendError, BackendErrorKind
from tether.specs.failures import Failure, FailureCause


class CapacityError(BackendError):
    """A backend refused a job for capacity or quota; another backend may take it.

    Args:
        *args: The message.
        backend: The backend that refused (``kubernetes``...).
        kind: Overrides the kind (``quota``).
        quota: The name of the quota or limit that refused it, when the backend says.
        detail: The backend's own words.

    Attributes:
        quota: The name of the quota or limit that refused it, when the backend says.
        detail: The backend's own words.
    """

    kind: BackendErrorKind = "quota"
    quota: str = ""
    detail: str = ""

    def __init__(self, *args: object, backend: str | None = None,
                 kind: BackendErrorKind | None = None, quota: str = "",
                 detail: str = "") -> None:  # fmt: skip
        super().__init__(*args, backend=backend, kind=kind)
        if quota:
            self.quota = quota
        if detail:
            self.detail = detail

    @property
    def failure(self) -> Failure:
        """The refusal as a failure cause (``out_of_capacity``, with the backend's words)."""
        return Failure(FailureCause.OUT_OF_CAPACITY, self.detail)
