"""The tests' port helper (:mod:`tests.e2e.infra.ports`), without any service."""

from __future__ import annotations

import socket

import pytest

from tests.e2e.infra.ports import free_port, free_ports, port_taken, retry_if_port_taken


def test_free_ports_are_distinct_and_bindable() -> None:
    ports = free_ports(16)
    assert len(set(ports)) == 16
    socks = [socket.socket() for _ in ports]
    try:
        for s, port in zip(socks, ports, strict=True):
            s.bind(("127.0.0.1", port))  # raises if it was not free
    finally:
        for s in socks:
            s.close()


def test_free_port_is_bindable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", free_port()))


def test_port_taken_reads_the_services_messages() -> None:
    assert port_taken("listen tcp 127.0.0.1:5000: bind: address already in use")  # Go
    assert port_taken("OSError: [Errno 98] Address already in use")  # Python
    assert port_taken("Port 4200 is already in use. Please specify a different port")  # Prefect
    assert not port_taken("permission denied")


def test_a_start_that_lost_its_port_is_tried_again() -> None:
    calls: list[int] = []

    def start() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("server exited: bind: address already in use")
        return "up"

    assert retry_if_port_taken(start, "svc") == "up"
    assert len(calls) == 2


def test_other_failures_are_not_retried() -> None:
    calls: list[int] = []

    def start() -> str:
        calls.append(1)
        raise RuntimeError("the binary is missing")

    with pytest.raises(RuntimeError, match="binary is missing"):
        retry_if_port_taken(start, "svc")
    assert len(calls) == 1


def test_the_last_attempts_failure_is_raised() -> None:
    calls: list[int] = []

    def start() -> str:
        calls.append(1)
        raise ValueError(f"attempt {len(calls)}: address already in use")

    with pytest.raises(ValueError, match="attempt 3: address already in use"):
        retry_if_port_taken(start, "svc", attempts=3)
    assert len(calls) == 3
