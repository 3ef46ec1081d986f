""":class:`AppDryRunInfo`: the native request a scheduler would submit, and how to show it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from tether.specs.secrets import app_secret_values, mask_text

if TYPE_CHECKING:
    from tether.specs.app import AppDef

T = TypeVar("T")


class AppDryRunInfo(Generic[T]):
    """The result of ``submit_dryrun``: the scheduler's native request, not yet submitted.

    ``str(info)`` renders the request with the scheduler's formatter, with the values of
    secret-looking environment variables of the app redacted.

    Attributes:
        request: The native request (a manifest, an sbatch script, boto3 kwargs...).
    """

    def __init__(self, request: T, fmt: Callable[[T], str] = repr) -> None:
        self.request = request
        self._fmt = fmt
        self._app: AppDef | None = None
        self._cfg: Mapping[str, Any] | None = None
        self._scheduler: str | None = None

    def __str__(self) -> str:
        text = self._fmt(self.request)
        secrets = app_secret_values(self._app.roles) if self._app is not None else []
        return mask_text(text, secrets)

    def __repr__(self) -> str:
        return str(self)
