"""Flow processes for the crash, rerun and log-volume tests.

``python crash_flow.py FLOW_RUN_ID`` runs an existing flow run of :func:`crashy` or
:func:`chatty` (created by the test through the API, as a deployment's run would be), the
way a Prefect worker's flow-run process does; running it again after the flow run was put
back to ``AwaitingRetry`` is the "retry" of that flow run. The result is printed as
``RESULT <json>``.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any
from uuid import UUID

from prefect import flow

from tether.adapters.prefect import component_task

WAIT_CODE = """
import os, time
from tether.tracker import AppRun
open({pidfile!r}, "w").write(str(os.getpid()))
print("waiting", {marker!r}, flush=True)
while not os.path.exists({release!r}):
    time.sleep(0.05)
print("released", {marker!r}, flush=True)
AppRun.run_from_env().add_output("pid", os.getpid())
"""

CHATTY_CODE = """
import sys
for i in range({lines}):
    sys.stdout.write(f"chatty line {{i:05d}} {marker}\\n")
sys.stdout.flush()
"""

job = component_task("utils.python", scheduler="local_cwd")


@flow(name="tether-crashy")
def crashy(pidfile: str, release: str, marker: str, flow_pidfile: str = "") -> int:
    """Runs one job that waits for ``release`` to exist; returns the job's pid output.

    With ``flow_pidfile``, the flow-run process writes its own pid there first.
    """
    if flow_pidfile:
        import os

        with open(flow_pidfile, "w") as f:
            f.write(str(os.getpid()))
    code = WAIT_CODE.format(pidfile=pidfile, release=release, marker=marker)
    return int(job(marker, c=code).outputs["pid"])


@flow(name="tether-chatty")
def chatty(lines: int, marker: str) -> str:
    """Runs one job printing ``lines`` lines; returns its handle."""
    return job(marker, c=CHATTY_CODE.format(lines=lines, marker=marker)).app_handle


FLOWS: dict[str, Any] = {"tether-crashy": crashy, "tether-chatty": chatty}


def main(flow_run_id: str) -> None:
    """Runs the flow run ``flow_run_id`` in this process and prints its result."""
    from prefect.client.orchestration import get_client
    from prefect.flow_engine import run_flow

    with get_client(sync_client=True) as client:
        flow_run = client.read_flow_run(UUID(flow_run_id))
        name = client.read_flow(flow_run.flow_id).name
    result: Any = run_flow(FLOWS[name], flow_run=flow_run, parameters=flow_run.parameters)
    print("RESULT " + json.dumps(result), flush=True)
    # what could hold the process after the flow (the test bounds the exit after RESULT)
    others = [t.name for t in threading.enumerate()
              if t is not threading.current_thread() and not t.daemon]
    print("THREADS " + json.dumps(others), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
