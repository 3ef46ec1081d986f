"""Free TCP ports on 127.0.0.1 for the services the tests start, and a retry for a lost race.

A port is found by binding port 0 and closing the socket; the service binds it later. In
between, another process can take it (any outgoing connection takes an ephemeral port too),
and the service then fails with "address already in use". Services whose start is cheap and
clean to repeat wrap it in :func:`retry_if_port_taken`, which starts again on new ports.
"""

from __future__ import annotations

import re
import socket
import sys
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

START_ATTEMPTS = 3
"""How often :func:`retry_if_port_taken` starts a service in all."""

# the kernel's EADDRINUSE text (Go, Python), and Prefect's own check before it binds
_IN_USE = re.compile(r"address already in use|port \d+ is already in use", re.IGNORECASE)


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports that were free on 127.0.0.1 a moment ago.

    All ``n`` sockets stay bound until every port is read, so the ports differ.

    Args:
        n: How many ports.

    Returns:
        The ports.
    """
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    return free_ports(1)[0]


def port_taken(text: str) -> bool:
    """Whether a service's failure text says its address was in use."""
    return _IN_USE.search(text) is not None


def retry_if_port_taken(start_once: Callable[[], T], what: str,
                        attempts: int = START_ATTEMPTS) -> T:
    """Calls ``start_once`` again (it picks new ports) while it fails on a taken port.

    ``start_once`` must clean up after itself before it raises, and put the service's output
    in the exception's message (that is where "address already in use" is looked for). Any
    other failure, and the last attempt's, is raised as it is.

    Args:
        start_once: Starts the service once, on ports it picks itself.
        what: The service's name, for the message printed before a new attempt.
        attempts: Starts in all.

    Returns:
        What ``start_once`` returned.
    """
    for attempt in range(1, attempts):
        try:
            return start_once()
        except Exception as e:
            if not port_taken(str(e)):
                raise
            print(f"{what}: start {attempt} of {attempts} lost its port to another process, "
                  f"starting again on new ports", file=sys.stderr, flush=True)
    return start_once()
