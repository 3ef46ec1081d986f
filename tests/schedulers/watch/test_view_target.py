"""``view_target``: the one shape every backend's ``follow_target`` takes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.schedulers.local.scheduler import LocalScheduler
from tether.schedulers.local.watch import StateDirReader
from tether.schedulers.local.watch import follow_target as local_target
from tether.schedulers.ray.watch import follow_target as ray_target
from tether.schedulers.watch import WatchKey, resolve_target, view_target


def test_a_backend_target_is_keyed_by_its_connection_and_read_at_its_interval(
    tmp_path: Path,
) -> None:
    sched = LocalScheduler("s", state_dir=tmp_path)
    target = local_target(sched, "any-app")
    assert target.key == WatchKey("local_cwd", str(sched.store.root.parent))
    assert target.interval == sched.capabilities.follow.interval
    assert resolve_target(sched, "other-app").key == target.key  # one view for the directory
    reader = target.make_reader()
    assert isinstance(reader, StateDirReader)


def test_partition_and_region_may_come_from_the_scheduler(tmp_path: Path) -> None:
    sched = LocalScheduler("s", state_dir=tmp_path)
    target = view_target(
        sched, LocalScheduler, lambda s: s.session_name, StateDirReader,
        lambda s: f"part-{s.session_name}", "eu",
    )  # fmt: skip
    assert target.key == WatchKey("local_cwd", "s", "part-s", "eu")


def test_another_backends_scheduler_is_refused(tmp_path: Path) -> None:
    sched = LocalScheduler("s", state_dir=tmp_path)
    with pytest.raises(TypeError, match="not a RayScheduler: LocalScheduler"):
        ray_target(sched, "raysubmit_1")
