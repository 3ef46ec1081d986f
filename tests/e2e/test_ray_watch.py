"""The watch hub on a real Ray head: every followed job read with one jobs listing per
interval, whatever their number; each end heard exactly once."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from tether.schedulers.ray.scheduler import RayScheduler
from tether.schedulers.ray.watch import RayReader
from tether.schedulers.watch import Subscription, WatchHub
from tether.specs import AppDef, AppState, Resource, Role

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


def test_one_listing_per_read_whatever_the_number_of_jobs(ray_head: Any) -> None:
    sched = RayScheduler("e2e", address=ray_head.address)
    per_read = {}
    for n, code in ((1, 0), (3, 3)):
        role = Role("r", entrypoint=sys.executable, args=["-c", f"import sys; sys.exit({code})"],
                    resource=Resource(cpu=1, gpu=0, memMB=128))  # fmt: skip
        ids = [sched.submit(AppDef("w", [role]), {"python": sys.executable}) for _ in range(n)]
        hub = WatchHub()
        with Subscription(hub) as sub:
            for app_id in ids:
                sub.follow(sched, app_id)
            events = list(sub.events(timeout=300))
            view = next(iter(hub._views.values()))
            reader = view.driver._reader
            assert isinstance(reader, RayReader)
            per_read[n] = reader.listings / max(view.driver.rounds, 1)
        hub.close()
        finals = [e for e in events if e.final]
        assert sorted(e.app_id for e in finals) == sorted(ids)
        want = AppState.SUCCEEDED if code == 0 else AppState.FAILED
        assert {e.state for e in finals} == {want}, finals
    assert per_read == {1: 1.0, 3: 1.0}
