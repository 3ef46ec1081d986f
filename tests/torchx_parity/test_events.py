"""TorchX's runner events (``torchx.runner.events``) and ``@register.event_handler``.

The handler plugin is a real module in a ``tether_plugins.event_handlers`` namespace package
whose handler writes each event to a file.
"""

from __future__ import annotations

import json
import logging
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether import plugins
from tether.runner import event_log
from tether.runner.events import (
    SourceType,
    TetherEvent,
    get_logging_handler,
    log_event,
    record,
)

HANDLERS = '''
import logging
import os

from tether.plugins import register


@register.event_handler(name="to_file")
def file_sink() -> logging.Handler:
    return logging.FileHandler(os.environ["EVENTS_TEST_FILE"])


@register.event_handler(name="null")
def quiet() -> logging.Handler:
    return logging.FileHandler(os.environ["EVENTS_TEST_FILE"] + ".null")
'''


def _forget() -> None:
    for name in [m for m in sys.modules if m.split(".")[0] == "tether_plugins"]:
        del sys.modules[name]
    plugins.registry().clear()
    event_log.reset()


@pytest.fixture
def sink(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    dist = tmp_path / "dist"
    mod = dist / "tether_plugins" / "event_handlers" / "files.py"
    mod.parent.mkdir(parents=True)
    mod.write_text(textwrap.dedent(HANDLERS))
    out = tmp_path / "events.jsonl"
    monkeypatch.syspath_prepend(str(dist))
    monkeypatch.setenv("EVENTS_TEST_FILE", str(out))
    monkeypatch.setenv("TETHER_EVENTS_DESTINATION", "to_file")
    _forget()
    yield out
    for logger in event_log._loggers.values():
        for handler in logger.handlers:
            handler.close()
    _forget()


def _events(path: Path) -> list[TetherEvent]:
    return [TetherEvent.deserialize(line) for line in path.read_text().splitlines()]


def test_runner_calls_are_recorded_through_the_plugin_handler(
    sink: Path, tmp_path: Path,
) -> None:
    from tether.runner import get_runner
    from tether.specs import AppDef, Role

    assert "to_file" in plugins.registry().get(plugins.PluginType.EVENT_HANDLER)
    app = AppDef("evt", [Role("r", image=str(tmp_path), entrypoint="true")],
                 metadata={"team": "ml", "api_token": "s3cr3t"})
    with get_runner() as runner:
        runner.dryrun(app, "local_cwd", cfg={"log_dir": str(tmp_path / "logs")})
        with pytest.raises(ValueError, match="unknown run option"):
            runner.dryrun(app, "local_cwd", cfg={"password": "pw123"})
        runner.list("local_cwd")
        assert runner.status("local_cwd://x/no-such-app") is None
        with pytest.raises(KeyError):
            runner.dryrun(app, "no_such_scheduler")
    dry, bad_cfg, listed, status, failed = _events(sink)
    assert json.loads(bad_cfg.runcfg or "{}") == {"password": "****"}
    assert bad_cfg.exception_message and "pw123" not in sink.read_text()
    assert (dry.api, dry.scheduler, dry.app_image) == ("dryrun", "local_cwd", str(tmp_path))
    assert dry.app_metadata == {"team": "ml", "api_token": "****"}  # secrets masked
    assert json.loads(dry.runcfg or "{}") == {"log_dir": str(tmp_path / "logs")}
    assert dry.wall_time_usec is not None and dry.cpu_time_usec is not None
    assert dry.start_epoch_time_usec and dry.exception_type is None
    assert (listed.api, listed.scheduler) == ("list", "local_cwd")
    assert (status.api, status.scheduler, status.app_id) == ("status", "local_cwd", "no-such-app")
    assert failed.api == "dryrun" and failed.scheduler == "no_such_scheduler"
    assert failed.exception_type and "no_such_scheduler" in (failed.exception_message or "")
    assert failed.raw_exception and "Traceback" in failed.raw_exception
    assert json.loads(failed.exception_source_location or "{}")["lineno"] > 0
    assert len({e.session for e in (dry, listed, status, failed)}) == 1


def test_a_plugin_wins_over_the_built_in_handler_of_its_name(sink: Path) -> None:
    handler = get_logging_handler("null")
    try:
        assert isinstance(handler, logging.FileHandler)  # the plugin, not NullHandler
    finally:
        handler.close()


def test_built_in_handlers_and_an_unknown_destination() -> None:
    _forget()
    assert type(get_logging_handler("console")) is logging.StreamHandler
    assert isinstance(get_logging_handler(), logging.NullHandler)
    with pytest.raises(KeyError, match="no event handler for destination 'nowhere'"):
        get_logging_handler("nowhere")


def test_log_event_records_the_exception_and_reraises(sink: Path) -> None:
    with pytest.raises(RuntimeError, match="boom"), log_event("my_api", scheduler="s",
                                                              app_id="a1"):
        raise RuntimeError("boom")
    record(TetherEvent(session="s1", scheduler="s", api="by_hand",
                       source=SourceType.EXTERNAL))
    raised, by_hand = _events(sink)
    assert (raised.api, raised.app_id, raised.exception_type) == ("my_api", "a1", "RuntimeError")
    assert raised.exception_message == "boom"
    assert by_hand.source is SourceType.EXTERNAL and by_hand.api == "by_hand"


def test_event_round_trips_through_json() -> None:
    ev = TetherEvent(session="s", scheduler="k8s", api="schedule", app_id="a",
                     runcfg='{"queue": "q"}', source=SourceType.INTERNAL)
    assert TetherEvent.deserialize(ev.serialize()) == ev
    assert TetherEvent.deserialize(ev) is ev
    assert json.loads(str(ev))["source"] == "INTERNAL"


def test_the_default_destination_records_through_a_plugin_named_null(
    sink: Path, tmp_path: Path,
) -> None:
    """Without a destination a call's event goes to ``null``, dropped unless a plugin of that
    name is installed. The Runner skips the event only when none is: checked in a fresh
    process, where no event was recorded yet (the CLI's case)."""
    import os
    import subprocess

    code = textwrap.dedent(f"""
        import sys
        from tether.runner import get_runner
        from tether.specs import AppDef, Role
        app = AppDef("evt", [Role("r", image={str(tmp_path)!r}, entrypoint="true")])
        with get_runner() as runner:
            runner.dryrun(app, "local_cwd", cfg={{"log_dir": {str(tmp_path / "logs")!r}}})
    """)
    env = {k: v for k, v in os.environ.items() if k != "TETHER_EVENTS_DESTINATION"}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)  # the plugin's directory first
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
    (dry,) = _events(Path(f"{sink}.null"))
    assert (dry.api, dry.scheduler, dry.app_image) == ("dryrun", "local_cwd", str(tmp_path))
