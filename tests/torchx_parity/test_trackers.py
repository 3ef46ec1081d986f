"""TorchX's tracker API (``AppRun``, ``FsspecTracker``, ``trackers_from_environ``,
``build_trackers``), renamed to tether; the stores are real fsspec filesystems."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from pathlib import Path

import fsspec
import pytest

from tether.tracker import AppRun, build_trackers, trackers_from_environ
from tether.tracker.backend.fsspec import FsspecTracker


def test_fsspec_tracker_takes_a_filesystem_and_root_path(tmp_path: Path) -> None:
    fs = fsspec.filesystem("file")
    tracker = FsspecTracker(fs, str(tmp_path / "store"))
    tracker.add_metadata("run-1", lr=0.1)
    assert tracker.metadata("run-1")["lr"] == 0.1
    assert FsspecTracker(str(tmp_path / "store")).metadata("run-1")["lr"] == 0.1
    with pytest.raises(ValueError, match="root_path is required"):
        FsspecTracker(fs)


def test_fsspec_create_reads_torchx_config_file(tmp_path: Path) -> None:
    from tether.tracker.backend.fsspec import create

    config = tmp_path / "tracker.cfg"
    config.write_text(f"# the store\nprotocol=file\nroot_path={tmp_path / 'store'}\n")
    tracker = create(str(config))
    tracker.add_metadata("run-1", lr=0.1)
    assert create(str(config)).metadata("run-1")["lr"] == 0.1
    assert (tmp_path / "store").is_dir()

    config.write_text("protocol=file\n")
    with pytest.raises(ValueError, match="missing root_path"):
        create(str(config))


def test_app_run_takes_a_list_of_backends(tmp_path: Path) -> None:
    a = FsspecTracker(fsspec.filesystem("file"), str(tmp_path / "a"))
    b = FsspecTracker(fsspec.filesystem("memory"), "/tether-test-b")
    run = AppRun("job-1", [a, b])
    run.add_metadata(epoch=3)
    assert a.metadata("job-1")["epoch"] == 3 and b.metadata("job-1")["epoch"] == 3
    assert list(run.backends) == ["FsspecTracker", "FsspecTracker_1"]
    assert run.id == "job-1"


def test_trackers_from_environ(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TETHER_TRACKERS", raising=False)
    assert trackers_from_environ() == []
    monkeypatch.setenv("TETHER_TRACKERS", "fsspec")
    monkeypatch.setenv("TETHER_TRACKER_FSSPEC_CONFIG", str(tmp_path / "env-store"))
    (tracker,) = trackers_from_environ()
    assert isinstance(tracker, FsspecTracker) and tracker.url == str(tmp_path / "env-store")


@pytest.fixture
def factory_module(tmp_path: Path) -> Iterator[str]:
    mod = types.ModuleType("tether_test_tracker_factory")

    def make(config: str | None) -> FsspecTracker:
        return FsspecTracker(str(tmp_path / (config or "default")))

    mod.make = make  # type: ignore[attr-defined]
    sys.modules[mod.__name__] = mod
    yield mod.__name__
    del sys.modules[mod.__name__]


def test_build_trackers_loads_module_function_trackers(factory_module: str) -> None:
    (tracker,) = build_trackers({f"{factory_module}:make": "custom"}).values()
    assert isinstance(tracker, FsspecTracker) and tracker.url.endswith("custom")
