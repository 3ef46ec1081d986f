"""The fan-in queue is bounded by bytes: a writer waits for room, one oversized item passes."""

from __future__ import annotations

import threading

from tether.runner.logs import QUEUE_BYTES, _ByteQueue


def test_writer_waits_while_the_queue_holds_its_bytes_and_an_oversized_item_passes() -> None:
    stop = threading.Event()
    q = _ByteQueue(10, stop)
    assert q.put("big", 25)  # larger than the bound: admitted into an empty queue
    done = threading.Event()
    results: list[bool] = []

    def writer() -> None:
        results.append(q.put("next", 4))
        done.set()

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    assert not done.wait(0.3)  # no room: the writer waits (25 bytes held, bound 10)
    assert q.get() == "big"
    assert done.wait(30)  # room made: it goes in
    assert results == [True] and q.get() == "next"


def test_a_waiting_writer_gives_up_when_the_consumer_stops() -> None:
    stop = threading.Event()
    q = _ByteQueue(10, stop)
    q.put("a", 8)
    results: list[bool] = []
    t = threading.Thread(target=lambda: results.append(q.put("b", 8)), daemon=True)
    t.start()
    stop.set()
    q.close()
    t.join(30)
    assert results == [False]


def test_the_bound_holds_a_few_pieces_of_a_long_line() -> None:
    assert 8 * 2**20 <= QUEUE_BYTES <= 64 * 2**20
