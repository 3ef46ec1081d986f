"""Failure causes of ``ray`` jobs as the real Ray head's Jobs API reports them.

A failed Ray job's message ends with the last lines of its log, the replicas' output among
them. The cause comes from Ray's own words and tether's driver's, never from what the
application printed: a replica that prints that a node died and exits 3 is an application
failure with exit code 3 (a recovery policy would otherwise submit it again as a lost node).

What could not be tested here: a real node dying under a replica. The local head binds
127.0.0.1 only (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``), and Ray refuses to join a worker
node to such a head; with the variable set, ``ray start --address`` rewrites a loopback
address to the machine's external one, where the head does not listen. Ray's node-death
messages are mapped in ``tests/schedulers/test_failure_causes.py``.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import pytest

from tether.schedulers.ray.scheduler import RayScheduler
from tether.specs import AppDef, AppState, FailureCause, Role

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

DEADLINE_S = 240.0


def test_an_application_that_prints_a_node_died_is_still_the_applications_failure(
    ray_head: Any,
) -> None:
    sched = RayScheduler("e2e", address=ray_head.address)
    code = ('import sys; print("the node 0a1b2c running my peer died, giving up", flush=True); '
            'sys.exit(3)')  # fmt: skip
    app = AppDef("saysdied", roles=[Role("w", image="", entrypoint=sys.executable,
                                         args=["-c", code])])  # fmt: skip
    app_id = sched.submit(app, {"python": sys.executable})
    deadline = time.monotonic() + DEADLINE_S
    while True:
        desc = sched.describe(app_id)
        assert desc is not None
        if desc.state.is_terminal():
            break
        assert time.monotonic() < deadline, desc
        time.sleep(0.5)
    assert desc.state == AppState.FAILED, desc.msg
    failure = desc.failure
    assert failure is not None, desc.msg
    assert (failure.cause, failure.exit_code) == (FailureCause.APPLICATION, 3), desc.msg
    # the driver waits for each replica's last lines before it exits, so Ray's message (the
    # log's last lines) holds the output the cause was not taken from
    assert "node 0a1b2c running my peer died" in desc.msg, desc.msg
