"""Reading local_cwd log files: lines, bad bytes, time windows, following a growing log."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from tether.schedulers.local.logindex import LogIndexWriter
from tether.schedulers.local.logs import read_log_lines


def write_timed(path: Path, pieces: list[tuple[bytes, float]]) -> None:
    """Writes a log and its index as the supervisor does (index entry before the bytes)."""
    idx = LogIndexWriter(str(path) + ".idx", 0)
    with open(path, "wb") as f:
        for data, t in pieces:
            idx.wrote(len(data), t)
            f.write(data)
    idx.close()


def test_lines_keep_newlines_and_bad_bytes_are_replaced(tmp_path: Path) -> None:
    p = tmp_path / "out.log"
    p.write_bytes(b"a\r\nb\xff\n\nc\rd\x0be\n" + "é\n".encode() + b"last")
    assert list(read_log_lines(str(p))) == ["a\r\n", "b\ufffd\n", "\n", "c\rd\x0be\n", "é\n",
                                            "last\n"]
    assert list(read_log_lines(str(p), finished=lambda: True)) == list(read_log_lines(str(p)))
    assert list(read_log_lines(str(tmp_path / "missing.log"))) == []


def test_large_logs_are_read_whole(tmp_path: Path) -> None:
    p = tmp_path / "big.log"
    lines = [f"line {i} " + "x" * (i % 200) + "\n" for i in range(60_000)]
    p.write_text("".join(lines))  # about 7 MiB: spans several read chunks
    assert list(read_log_lines(str(p))) == lines
    assert list(read_log_lines(str(p), finished=lambda: True)) == lines
    assert list(read_log_lines(str(p), since=0.0)) == lines  # no index: no time filter


def test_since_and_until_use_the_time_index(tmp_path: Path) -> None:
    p = tmp_path / "out.log"
    # one line arrives in two pieces: it is dated by its first byte
    write_timed(p, [(b"one\ntw", 10.0), (b"o\nthree\n", 20.0), (b"four\nfive\n", 30.0)])
    assert list(read_log_lines(str(p), since=10.0)) == ["one\n", "two\n", "three\n", "four\n",
                                                        "five\n"]
    assert list(read_log_lines(str(p), since=15.0)) == ["three\n", "four\n", "five\n"]
    assert list(read_log_lines(str(p), since=25.0)) == ["four\n", "five\n"]
    assert list(read_log_lines(str(p), since=31.0)) == []
    assert list(read_log_lines(str(p), until=20.0)) == ["one\n", "two\n"]
    assert list(read_log_lines(str(p), until=30.5)) == ["one\n", "two\n", "three\n", "four\n",
                                                        "five\n"]
    assert list(read_log_lines(str(p), since=15.0, until=25.0)) == ["three\n"]


def test_following_a_growing_log(tmp_path: Path) -> None:
    p = tmp_path / "out.log"
    done = threading.Event()

    def writer() -> None:
        time.sleep(0.1)  # the file does not exist yet when the reader starts
        with open(p, "ab", buffering=0) as f:
            for i in range(5):
                f.write(f"part {i}".encode())  # a line arrives in two writes
                time.sleep(0.03)
                f.write(b"!\n")
            f.write(b"tail without newline")
        done.set()

    t = threading.Thread(target=writer)
    t.start()
    got = list(read_log_lines(str(p), finished=done.is_set, poll_s=0.01))
    t.join()
    assert got == [f"part {i}!\n" for i in range(5)] + ["tail without newline\n"]


def test_following_with_until_a_log_that_is_still_empty_dates_its_lines(tmp_path: Path) -> None:
    """A quiet replica's log has no index yet (the first entry creates it): a follower with a
    time window must still date the lines that come later, not drop the window."""
    p = tmp_path / "out.log"
    p.touch()
    now = time.time()
    done = threading.Event()
    idx = LogIndexWriter(str(p) + ".idx", 0)

    def writer() -> None:
        time.sleep(0.05)
        with open(p, "ab", buffering=0) as f:
            for data, t in ((b"early\n", now - 100), (b"inside\n", now), (b"late\n", now + 100)):
                idx.wrote(len(data), t)
                f.write(data)
        idx.close()
        done.set()

    t = threading.Thread(target=writer)
    t.start()
    got = list(read_log_lines(str(p), since=now - 50, until=now + 50, finished=done.is_set,
                              poll_s=0.01))
    t.join()
    assert got == ["inside\n"]


def test_a_follower_waits_with_the_given_wait(tmp_path: Path) -> None:
    p = tmp_path / "out.log"
    p.write_bytes(b"one\n")
    waits: list[float] = []
    ended = threading.Event()

    def wait(t: float) -> None:  # e.g. the scheduler's wait for the app's end
        waits.append(t)
        ended.set()

    got = list(read_log_lines(str(p), finished=ended.is_set, poll_s=0.25, wait=wait))
    assert got == ["one\n"]
    assert waits == [0.25]
