"""A flow process for the termination-signal tests: runs one long tether job, then waits.

Usage: ``python sigterm_flow.py {direct|submit} PIDFILE MARKER``. The job writes its PID to
PIDFILE and sleeps; the test sends SIGTERM to this process once the PID is there. ``direct``
calls the task in the flow's (main) thread, ``submit`` runs it in the task runner's thread.
"""

from __future__ import annotations

import sys

from prefect import flow

from tether.adapters.prefect import component_task

CODE = """
import os, time
open({pidfile!r}, "w").write(str(os.getpid()))
print("sleeping", {marker!r}, flush=True)
time.sleep(120)
"""

job = component_task("utils.python", scheduler="local_cwd")


@flow
def terminated(how: str, pidfile: str, marker: str) -> None:
    """Runs the long job (``how``: direct or submit)."""
    code = CODE.format(pidfile=pidfile, marker=marker)
    if how == "submit":
        job.submit(marker, c=code).result()
    else:
        job(marker, c=code)


if __name__ == "__main__":
    terminated(*sys.argv[1:4])
