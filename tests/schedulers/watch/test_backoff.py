"""The hub's backoff and the apiserver's ``Retry-After``: pauses that grow, waits as asked."""

from __future__ import annotations

import email.utils
import random
import time

from tether.schedulers.kubernetes.client import RETRY_AFTER_CAP_S, parse_retry_after
from tether.schedulers.watch.backoff import Backoff


def test_each_pause_is_at_least_half_its_doubling_limit_up_to_the_cap() -> None:
    for seed in range(50):
        b = Backoff(base=0.5, cap=30.0, rng=random.Random(seed))
        pauses = [b.next() for _ in range(10)]
        for k, pause in enumerate(pauses):
            limit = min(30.0, 0.5 * 2**k)
            assert limit / 2 <= pause <= limit, (seed, k, pause)
    b = Backoff(base=0.5, rng=random.Random(1))
    for _ in range(5):
        b.next()
    b.reset()
    assert b.next() <= 0.5


def test_retry_after_in_seconds_or_as_a_date() -> None:
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after(" 0 ") == 0.0
    assert parse_retry_after(None) is None
    assert parse_retry_after("") is None
    assert parse_retry_after("soon") is None
    assert parse_retry_after("-5") == 0.0
    assert parse_retry_after("100000") == RETRY_AFTER_CAP_S
    later = email.utils.formatdate(time.time() + 60, usegmt=True)
    got = parse_retry_after(later)
    assert got is not None and 50 <= got <= 61
    past = email.utils.formatdate(time.time() - 60, usegmt=True)
    assert parse_retry_after(past) == 0.0
