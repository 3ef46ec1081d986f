"""TorchX's runner events: each Runner call recorded as a :class:`TetherEvent`.

``Runner.dryrun``, ``schedule``, ``status``, ``describe``, ``list``, ``log_lines`` and
``cancel`` each record one event (its api, scheduler, app id, times, and the exception if
the call raised) through a :mod:`logging` handler chosen by destination::

    from tether.runner.events import TetherEvent, log_event, record

    with log_event("my_api", scheduler="local_cwd", app_id="app-1"):
        ...

The destination is ``$TETHER_EVENTS_DESTINATION`` (default ``null``: events are dropped).
:func:`get_logging_handler` gives its handler: an event-handler plugin of that name
(``@tether.plugins.register.event_handler(name=...)`` or the ``tether.event_handlers``
entry-point group) wins over the built-in ``console`` and ``null`` handlers. Secrets in an
event are masked (the policy of :mod:`tether.specs.secrets`) before a handler sees it.

Which Runner calls record, and the check that skips an event no handler would see, are in
:mod:`tether.runner.recording` (this module loads with the first event recorded); the
destination and its handler plugins in :mod:`tether.runner.event_sinks`.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import logging
import os
import time
import traceback
from types import TracebackType

from tether.errors import NotFoundError
from tether.runner.event_sinks import DESTINATION_ENV, ENTRY_POINT_GROUP, plugin_handlers
from tether.runner.event_sinks import destination as _destination

__all__ = [
    "DESTINATION_ENV",
    "ENTRY_POINT_GROUP",
    "SourceType",
    "TetherEvent",
    "UnknownEventDestinationError",
    "get_logging_handler",
    "log_event",
    "record",
    "reset",
]

# one id per process, as TorchX's session id: 16 random bytes (os.urandom, not the uuid
# module, whose import loads platform: a few milliseconds of every command's start)
_SESSION = os.urandom(16).hex()
_loggers: dict[str, logging.Logger] = {}
_FREE_TEXT = ("app_image", "raw_exception", "workspace", "exception_message",
              "exception_source_location")
log = logging.getLogger(__name__)


class SourceType(str, enum.Enum):
    """Where an event comes from (TorchX's ``SourceType``)."""

    UNKNOWN = "<unknown>"
    INTERNAL = "INTERNAL"
    EXTERNAL = "EXTERNAL"


@dataclasses.dataclass
class TetherEvent:
    """One recorded Runner call (TorchX's ``TorchxEvent``; same fields).

    Attributes:
        session: The process's session id.
        scheduler: The scheduler's name.
        api: The call (``schedule``, ``status``...).
        app_id: The app's id, when the call is about one app.
        app_image: The image of the app's first role.
        app_metadata: The app's metadata.
        runcfg: The run options, as JSON.
        raw_exception: The traceback, when the call raised.
        source: Where the event comes from.
        cpu_time_usec: CPU time of the call in microseconds.
        wall_time_usec: Wall time of the call in microseconds.
        start_epoch_time_usec: When the call started (microseconds since the epoch).
        workspace: The workspace, as text.
        exception_type: The exception's class name.
        exception_message: The exception's message.
        exception_source_location: JSON ``{"filename", "lineno", "name"}`` of where it rose.
        error_code: A scheduler's error code, if it classified the failure.
    """

    session: str
    scheduler: str
    api: str
    app_id: str | None = None
    app_image: str | None = None
    app_metadata: dict[str, str] | None = None
    runcfg: str | None = None
    raw_exception: str | None = None
    source: SourceType = SourceType.UNKNOWN
    cpu_time_usec: int | None = None
    wall_time_usec: int | None = None
    start_epoch_time_usec: int | None = None
    workspace: str | None = None
    exception_type: str | None = None
    exception_message: str | None = None
    exception_source_location: str | None = None
    error_code: int | None = None

    def __str__(self) -> str:
        return self.serialize()

    def serialize(self) -> str:
        """The event as a JSON object, secrets masked.

        Returns:
            The JSON text.
        """
        from tether.specs.secrets import mask_text, mask_value

        # a shallow dict (the fields are flat; the dicts are masked into copies or only
        # encoded): asdict would deep-copy every value of every event
        doc = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        doc["source"] = self.source.value
        if self.app_metadata:
            doc["app_metadata"] = mask_value("app_metadata", self.app_metadata)
        if self.runcfg:
            try:
                doc["runcfg"] = json.dumps(mask_value("runcfg", json.loads(self.runcfg)))
            except ValueError:
                doc["runcfg"] = mask_text(self.runcfg)
        for key in _FREE_TEXT:
            if doc[key]:
                doc[key] = mask_text(doc[key])
        return json.dumps(doc)

    @staticmethod
    def deserialize(data: str | TetherEvent) -> TetherEvent:
        """Reads an event from :meth:`serialize`'s JSON (an event is returned as is).

        Args:
            data: The JSON text or an event.

        Returns:
            The event (an unknown ``source`` reads as ``UNKNOWN``).
        """
        if isinstance(data, TetherEvent):
            return data
        doc = json.loads(data)
        try:
            doc["source"] = SourceType(doc.get("source", SourceType.UNKNOWN))
        except ValueError:
            doc["source"] = SourceType.UNKNOWN
        return TetherEvent(**doc)


class UnknownEventDestinationError(NotFoundError, KeyError):
    """No event handler is registered under the destination asked for."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


def get_logging_handler(destination: str = "null") -> logging.Handler:
    """The handler that records events for ``destination``.

    An event-handler plugin of that name (a ``() -> logging.Handler`` factory) wins over the
    built-in ``console`` (stderr) and ``null`` (dropped) handlers, as in TorchX.

    Args:
        destination: The destination's name.

    Returns:
        A handler (a new one each call).

    Raises:
        UnknownEventDestinationError: When nothing has that name (a ``KeyError``).
    """
    factory = plugin_handlers().get(destination)
    if factory is not None:
        handler = factory()
        if not isinstance(handler, logging.Handler):
            raise TypeError(
                f"event handler plugin {destination!r} returned {type(handler).__name__}, "
                "not a logging.Handler"
            )
        return handler
    if destination == "console":
        return logging.StreamHandler()
    if destination == "null":
        return logging.NullHandler()
    known = sorted({"console", "null", *plugin_handlers()})
    raise UnknownEventDestinationError(
        f"no event handler for destination {destination!r}; known: {', '.join(known)} "
        f"(register one with @tether.plugins.register.event_handler(name={destination!r}))"
    )


def _logger(destination: str) -> logging.Logger:
    logger = _loggers.get(destination)
    if logger is None:
        handler = get_logging_handler(destination)
        handler.setLevel(logging.DEBUG)
        logger = logging.getLogger(f"tether-events-{destination}")
        logger.setLevel(logging.DEBUG)
        logger.propagate = False  # an event is handled once, not by the root logger too
        logger.handlers = [handler]
        _loggers[destination] = logger
    return logger


def reset() -> None:
    """Forgets the handlers made so far (the next event builds its destination's again)."""
    _loggers.clear()


def record(event: TetherEvent, destination: str | None = None) -> None:
    """Hands an event to its destination's handler (as a log record of its JSON).

    A failure to serialize or record is logged, never raised: events must not break a call.

    Args:
        event: The event.
        destination: The destination (default ``$TETHER_EVENTS_DESTINATION``, else ``null``).
    """
    dest = destination or _destination()
    try:
        text = event.serialize()
        _logger(dest).info(text)
    except Exception:
        log.exception("could not record event %s for destination %r", event.api, dest)


class log_event:  # TorchX's name: a context manager
    """Records one event for the code it wraps, with its times and any exception.

    Args:
        api: The call's name.
        scheduler: The scheduler's name.
        app_id: The app's id.
        app_image: The image.
        app_metadata: The app's metadata.
        runcfg: The run options, as JSON text.
        workspace: The workspace, as text.
        destination: Where to record (see :func:`record`).
    """

    def __init__(self, api: str, scheduler: str | None = None, app_id: str | None = None,
                 app_image: str | None = None, app_metadata: dict[str, str] | None = None,
                 runcfg: str | None = None, workspace: str | None = None,
                 destination: str | None = None) -> None:
        self._event = TetherEvent(
            session=_SESSION, scheduler=scheduler or "", api=api, app_id=app_id,
            app_image=app_image, app_metadata=app_metadata, runcfg=runcfg,
            workspace=workspace)
        self._destination = destination
        self._cpu = self._wall = 0

    @property
    def event(self) -> TetherEvent:
        """The event being recorded (fill in fields learnt inside the block)."""
        return self._event

    def __enter__(self) -> log_event:
        self._cpu = time.process_time_ns()
        self._wall = time.perf_counter_ns()
        self._event.start_epoch_time_usec = time.time_ns() // 1000
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        ev = self._event
        ev.cpu_time_usec = (time.process_time_ns() - self._cpu) // 1000
        ev.wall_time_usec = (time.perf_counter_ns() - self._wall) // 1000
        if exc_type is not None and exc is not None:
            ev.exception_type = exc_type.__name__
            ev.exception_message = str(exc)
            ev.raw_exception = "".join(traceback.format_exception(exc_type, exc, tb))
            if tb is not None:
                last = traceback.extract_tb(tb)[-1]
                ev.exception_source_location = json.dumps(
                    {"filename": last.filename, "lineno": last.lineno, "name": last.name})
        record(ev, self._destination)
