"""The root of tether's exceptions: catch :class:`TetherError` to catch any of them.

Every public exception of tether derives from :class:`TetherError` and keeps the builtin
exception it always had, so ``except ValueError`` code keeps working:

* :class:`SpecError` (a ``ValueError``): invalid input, an app spec, a run option, a
  component argument, a config file; the message names the field, the value and what is
  allowed. :class:`SpecTypeError` is also a ``TypeError``.
* :class:`BackendError` (a ``RuntimeError``): a backend refused or failed a request; it
  carries :attr:`~BackendError.backend` and :attr:`~BackendError.kind` (``submit``,
  ``quota``, ``connection``...), so a caller can tell a refused submission from an
  unreachable cluster without parsing the message.
* :class:`NotFoundError` (a ``LookupError``): an app, run, artifact, tracker or component
  that does not exist.

Every ``TetherError`` survives pickling with its message and attributes (orchestrators
persist exceptions), whatever its ``__init__`` takes. This module imports nothing: it sits
below every other module of tether, ``tether.specs`` included.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (see below)
if TYPE_CHECKING:
    from typing import Any, Literal

    BackendErrorKind = Literal["submit", "quota", "connection", "api", "command", "output",
                               "build", "other"]
else:
    # `tether --help` imports this module and nothing else that needs typing: its import is
    # about a tenth of that command's start. The checker reads the Literal above.
    BackendErrorKind = str
"""What went wrong at a backend: it refused a submission (``submit``), a limit was reached
(``quota``), it cannot be reached or is not set up (``connection``), it refused a request
(``api``), its command failed (``command``), it answered something tether cannot read
(``output``), an image could not be built or pushed (``build``)."""


def _rebuild(cls: type[TetherError], args: tuple[Any, ...], state: dict[str, Any]) -> Any:
    """Unpickles a :class:`TetherError` without calling its ``__init__``."""
    error = cls.__new__(cls, *args)
    error.args = args
    error.__dict__.update(state)
    return error


class TetherError(Exception):
    """The base of every exception tether raises on purpose."""

    def __reduce__(self) -> tuple[Any, ...]:
        # A subclass's __init__ may take other arguments than its args (a status and a
        # message, a result...): rebuild from args and attributes instead of calling it.
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))


class SpecError(TetherError, ValueError):
    """An invalid value in an app spec, run option, configuration or command-line input."""


class SpecTypeError(SpecError, TypeError):
    """A value of the wrong type (also a :class:`SpecError`, hence a ``ValueError``)."""


class NotFoundError(TetherError, LookupError):
    """Something named (an app, a run, an artifact, a tracker) does not exist."""


class BackendError(TetherError, RuntimeError):
    """A backend refused or failed a request; the message holds the backend's own text.

    A subclass sets the class attributes once; a raise site may override them.

    Args:
        *args: The message (the exception's ``args``).
        backend: Overrides :attr:`backend`.
        kind: Overrides :attr:`kind`.

    Attributes:
        backend: The scheduler or service (``slurm``, ``kubernetes``, ``aws``...).
        kind: What went wrong (see :data:`BackendErrorKind`).
    """

    backend: str = ""
    kind: BackendErrorKind = "other"

    def __init__(self, *args: object, backend: str | None = None,
                 kind: BackendErrorKind | None = None) -> None:
        super().__init__(*args)
        if backend is not None:
            self.backend = backend
        if kind is not None:
            self.kind = kind
