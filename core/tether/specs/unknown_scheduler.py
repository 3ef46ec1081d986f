"""TorchX's ``specs.UnknownSchedulerException``: no scheduler has the name asked for."""

from __future__ import annotations

from tether.errors import NotFoundError


class UnknownSchedulerException(NotFoundError, KeyError):
    """No scheduler is registered under the name asked for (TorchX's name for the error).

    tether raises :class:`tether.schedulers.UnknownSchedulerError`, a subclass, so
    ``except specs.UnknownSchedulerException``, ``except KeyError`` and
    ``except tether.errors.NotFoundError`` all catch it. ``str()`` is the message itself, not
    ``KeyError``'s quoted repr.
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""
