""":class:`AppDryRunInfo`: the native request a scheduler would submit, and how to show it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
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

    @property
    def app(self) -> AppDef | None:
        """The app this request was rendered from (set by ``submit_dryrun``)."""
        return self._app

    @app.setter
    def app(self, value: AppDef | None) -> None:
        self._app = value

    @property
    def cfg(self) -> Mapping[str, Any]:
        """The resolved run options the request was rendered with, read-only (a plain dict is
        given as a read-only view; typed options as they are); empty until ``submit_dryrun``
        sets them, as in TorchX."""
        if self._cfg is None:
            return MappingProxyType({})
        if isinstance(self._cfg, dict):
            return MappingProxyType(self._cfg)
        return self._cfg

    @cfg.setter
    def cfg(self, value: Mapping[str, Any] | None) -> None:
        self._cfg = value

    @property
    def scheduler(self) -> str | None:
        """The backend name of the scheduler that rendered the request."""
        return self._scheduler

    @scheduler.setter
    def scheduler(self, value: str | None) -> None:
        self._scheduler = value

    def _text(self) -> Any:
        text = self._fmt(self.request)
        if not isinstance(text, str):  # a formatter that breaks its contract: given back as is
            return text
        secrets = app_secret_values(self._app.roles) if self._app is not None else []
        return mask_text(text, secrets)

    def __str__(self) -> str:
        return str(self._text())

    def __repr__(self) -> str:
        """The formatter's text for the request (as TorchX's ``repr``), secrets masked."""
        return self._text()
