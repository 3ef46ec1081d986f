"""What a backend provides to run the contract suite: one :class:`BackendHarness`.

A harness knows how to make the backend's scheduler and a Runner for it, which run options
each case uses, and how to start a small Python program on it (the image and the entrypoint).
The cases (``test_contract.py``) use nothing else, so a new backend passes the suite by
writing one harness (see ``docs/schedulers.md``).
"""

from __future__ import annotations

import abc
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import pytest

from tether.runner import Runner
from tether.schedulers.api import DescribeAppResponse, Scheduler
from tether.schedulers.capabilities import Capabilities
from tether.specs import AppDef, AppState, CfgVal, Role
from tether.specs.status import is_terminal

DEADLINE_S = 120.0
"""The most any case waits for a state (generous: the machine may be loaded)."""


class BackendHarness(abc.ABC):
    """How the contract suite drives one backend.

    Subclasses set :attr:`name` and implement the abstract methods. ``host_dir`` is a
    directory the test and the backend's programs both see (the programs get its path in
    ``$CONTRACT_DIR``): cases use it to hold a program until the test lets it go, count
    attempts and record process ids. A backend whose programs cannot see the test's file
    system returns None, and the cases that need it are skipped, saying why.

    Attributes:
        name: The scheduler's registered name.
        image: The image roles use (ignored by backends that run on the host).
        python: The entrypoint that runs Python (``-c CODE`` works).
        log_time_precision: Seconds of the backend's log timestamps' resolution (0: exact);
            ``since``/``until`` cases cut the log on a boundary of it.
    """

    name: str = ""
    image: str = ""
    python: str = sys.executable
    unsupported_cases: ClassVar[dict[str, str]] = {}
    """Case (test function) name -> why it cannot hold on this backend's test setup; the
    case is skipped with that reason. ``name[PARAM]`` names one parametrization only
    (``test_retry_policy[APPLICATION]``)."""
    log_time_precision: float = 0.0

    def __init__(self, request: pytest.FixtureRequest, tmp_path: Path) -> None:
        self.request = request
        self.tmp_path = tmp_path

    # ---- what every backend provides ---------------------------------------------------
    @abc.abstractmethod
    def scheduler(self) -> Scheduler[Any]:
        """A scheduler connected to the backend (the case closes it)."""

    @abc.abstractmethod
    def offline_scheduler(self) -> Scheduler[Any]:
        """A scheduler configured for a backend that cannot be reached (dryrun must work)."""

    @abc.abstractmethod
    def cfg(self) -> dict[str, CfgVal]:
        """The run options of this case (e.g. a namespace of its own)."""

    @abc.abstractmethod
    def scheduler_params(self) -> dict[str, Any]:
        """``Runner(scheduler_params=...)`` for this backend."""

    @property
    def host_dir(self) -> Path | None:
        """A directory both the test and the programs see, or None."""
        return None

    def state_snapshot(self, sched: Scheduler[Any]) -> object:
        """Everything the backend keeps (compared before/after a dryrun); None: not checked."""
        return None

    @abc.abstractmethod
    def fingerprint(self, sched: Scheduler[Any], app_id: str) -> object:
        """The app's stored state, exactly (record bytes, resourceVersions...).

        Equal fingerprints before and after a call prove the call changed nothing.
        """

    def kill_controller(self, sched: Scheduler[Any], app_id: str) -> bool:
        """Kills what tether runs to control the app (e.g. a supervisor process) and waits
        until it is gone; False when the backend has no such thing of tether's own."""
        return False

    def program_alive(self, sched: Scheduler[Any], app_id: str, pid: int) -> bool:
        """Whether the app's program that wrote ``pid`` (its ``os.getpid()``) still runs.

        The default reads this host's process table; a backend whose programs have a pid
        namespace of their own maps ``pid`` first.
        """
        return pid_alive(pid)

    def expected_rank0_host(self, app_id: str, app: AppDef) -> str | None:
        """What ``$TETHER_RANK0_HOST`` must be for a multi-replica app (None: not checked)."""
        return None

    # ---- derived -----------------------------------------------------------------------
    @property
    def capabilities(self) -> Capabilities:
        """The backend's declared capabilities."""
        with self.open_scheduler() as sched:
            return sched.capabilities

    @contextmanager
    def open_scheduler(self) -> Iterator[Scheduler[Any]]:
        """A scheduler, closed on exit."""
        sched = self.scheduler()
        try:
            yield sched
        finally:
            sched.close()

    @contextmanager
    def runner(self) -> Iterator[Runner]:
        """A Runner for this backend, closed on exit."""
        with Runner(scheduler_params=self.scheduler_params()) as r:
            yield r

    def role(self, name: str, code: str, *, num_replicas: int = 1, **kw: Any) -> Role:
        """A role running the Python program ``code`` (with ``$CONTRACT_DIR`` set).

        Args:
            name: The role's name.
            code: Python source, run with ``python -c``; extra ``args`` follow it.
            num_replicas: Replicas.
            **kw: More Role fields (``args`` are appended after the code, ``env`` merged).

        Returns:
            The role.
        """
        env = dict(kw.pop("env", {}))
        if self.host_dir is not None:
            env.setdefault("CONTRACT_DIR", str(self.host_dir))
        env.setdefault("PYTHONUNBUFFERED", "1")
        args = ["-c", code, *kw.pop("args", [])]
        return Role(
            name, image=self.image, entrypoint=self.python, args=args, env=env,
            num_replicas=num_replicas, **kw,
        )  # fmt: skip


# ---- helpers the cases share ---------------------------------------------------------------
def pid_alive(pid: int) -> bool:
    """Whether a process of this host runs (a zombie is dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(what: str, probe: Callable[[], Any], timeout: float = DEADLINE_S) -> Any:
    """Polls ``probe`` until it returns something truthy (an event, not a timing).

    Args:
        what: For the error.
        probe: The check.
        timeout: Deadline in seconds.

    Returns:
        What ``probe`` returned.

    Raises:
        AssertionError: At the deadline, with the last value.
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def wait_state(
    sched: Scheduler[Any],
    app_id: str,
    done: Callable[[DescribeAppResponse], bool] = lambda d: is_terminal(d.state),
    timeout: float = DEADLINE_S,
    seen: list[AppState] | None = None,
) -> DescribeAppResponse:
    """Waits as the Runner does (``reconcile``, ``describe``, ``wait_for_change``).

    Args:
        sched: The scheduler.
        app_id: The app.
        done: When to stop (default: a terminal state).
        timeout: Deadline in seconds.
        seen: Appended with every state described.

    Returns:
        The description that satisfied ``done``.
    """
    deadline = time.monotonic() + timeout
    desc: DescribeAppResponse | None = None
    while time.monotonic() < deadline:
        sched.reconcile(app_id)
        desc = sched.describe(app_id)
        assert desc is not None, f"app {app_id} vanished"
        if seen is not None and (not seen or seen[-1] != desc.state):
            seen.append(desc.state)
        if done(desc):
            return desc
        sched.wait_for_change(app_id, 0.5)
    raise AssertionError(f"app {app_id} did not get there in {timeout}s; last: {desc!r}")


def read_log(sched: Scheduler[Any], app_id: str, role: str, k: int = 0, **kw: Any) -> list[str]:
    """The replica's log lines, without their newlines."""
    return [line.rstrip("\n") for line in sched.log_iter(app_id, role, k, **kw)]


def go_code(body: str, *, before: str = "") -> str:
    """A program that runs ``before``, waits for ``$CONTRACT_DIR/go`` to exist, then ``body``."""
    return (
        "import os, sys, time\n"
        f"{before}\n"
        "d = os.environ['CONTRACT_DIR']\n"
        "while not os.path.exists(os.path.join(d, 'go')):\n"
        "    time.sleep(0.02)\n"
        f"{body}\n"
    )


def env_dump_code(marker: str) -> str:
    """A program printing ``marker`` then its argv and TETHER_*/CONTRACT_* env as JSON."""
    return (
        "import json, os, sys\n"
        "env = {k: v for k, v in os.environ.items() if k.startswith(('TETHER_', 'CONTRACT_'))}\n"
        f"print({marker!r} + json.dumps({{'argv': sys.argv[1:], 'env': env}}))\n"
    )
