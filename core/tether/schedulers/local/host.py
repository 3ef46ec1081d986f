"""The supervisor host of ``local_cwd``: a supervisor costs a fork, not an interpreter.

A new Python interpreter that imports the supervisor takes 60-80 ms, more than everything
else a local launch does. So the first launch starts a small, single-threaded host process
(one per user, Python interpreter, tether installation, cgroup and resource limits) that has
the supervisor imported and listens on an abstract Unix socket. A fork of it, the *spare*
(forked twice ahead of time: a session of its own, nobody's child; named ``tether-spare``),
waits on that socket for the next launch and becomes its supervisor; the host then forks the
next spare. So a launch costs no fork and no switch through the host::

    launcher                        spare (forked ahead)            host
    connect, check peer uid  --->   accept, check peer uid
    send {state, cwd, env, ...}     check its code is current
                             <---   "F" (taking it)          "T" ---> fork the next spare
                                    adopt cwd, umask, env, log
    wait for "R"             <---   "R" once the app is claimed

What every supervisor would do the same way (imports, logging set up, libc looked up) is done
once, in the host, before it forks. The next spare is forked while the supervisor claims its
app, with the launcher waiting: later it would compete with the app's start and end, and with
its follower, for the cores (measured slower on two cores).

While it has no spare (one could not be forked, or was killed within the last
:data:`SPARE_RETRY_S`), the host serves a launch itself: it answers ``F`` and forks the
supervisor twice (fork -> setsid -> fork). A spare exits when the host does; one that finds
the code changed has the host stop listening and exit before it answers "stale".

Crash safety does not depend on the host: the app's record is written before the request,
and a supervisor only runs an app that no supervisor has claimed yet (the claim is taken
under the app's lock), so whatever dies when, at most one supervisor runs an app. When the
host cannot be reached, fails, or answers too late, the launcher starts the supervisor as
its own process (``python -m tether.schedulers.local.supervisor``), as before.

The host exits after :data:`IDLE_ENV` seconds without a request (default
:data:`DEFAULT_IDLE_S`), and at once when a module it has loaded changed on disk (it would run
old code). ``TETHER_LOCAL_SUPERVISOR_HOST=0`` turns it off.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import resource
import socket
import struct
import sys
import time
import zlib
from pathlib import Path
from typing import Any, NoReturn

from tether.schedulers.local.state import SUPERVISOR_NAME

ENABLE_ENV = "TETHER_LOCAL_SUPERVISOR_HOST"
"""Set to ``0`` (or ``false``, ``off``, ``no``) to start each supervisor as its own process."""
IDLE_ENV = "TETHER_LOCAL_SUPERVISOR_HOST_IDLE_S"
"""Seconds the host waits for a request before it exits."""
DEFAULT_IDLE_S = 120.0
"""Default of :data:`IDLE_ENV`."""
PROTOCOL = 1
"""Version of the request format (part of the host's address)."""
ANSWER_TIMEOUT_S = 10.0
"""How long a launcher waits for the host's answer before it starts the supervisor itself."""
START_TIMEOUT_S = 30.0
"""How long a launcher waits for a host it started to listen."""
MAX_REQUEST = 64 * 1024 * 1024
"""The largest request the host reads (an environment is far smaller)."""
FORKING = b"F"
STALE = b"S"
TAKEN = b"T"
SPARE_NAME = b"tether-spare"
"""The process name (``comm``) of the host's spare: the fork that waits for the next request."""
SPARE_RETRY_S = 1.0
"""After a spare ended without taking a request (killed), how long the host serves requests
itself before it forks another."""
RETIRE_WAIT_S = 5.0
"""How long a spare that found the code changed waits for the host to stop listening."""
_LEN = struct.Struct("!I")
_CRED = struct.Struct("3i")
log = logging.getLogger(__name__)


_ON = ("1", "true", "on", "yes", "")
_OFF = ("0", "false", "off", "no")


def enabled() -> bool:
    """Whether launches go through the host (Linux only; see :data:`ENABLE_ENV`).

    An unknown value is reported (a warning naming the variable, the value and what is
    allowed) and means the default, on: a typo must not stop the launch.
    """
    if not sys.platform.startswith("linux"):
        return False
    raw = os.environ.get(ENABLE_ENV, "1")
    value = raw.strip().lower()
    if value in _OFF:
        return False
    if value not in _ON:
        log.warning("%s=%r is not one of %s (on) or %s (off); using the supervisor host",
                    ENABLE_ENV, raw, "/".join(v for v in _ON if v), "/".join(_OFF))
    return True


def idle_seconds() -> float:
    """The host's idle timeout (:data:`IDLE_ENV`). A value that is not a positive number is
    reported (a warning naming the variable and the value) and means the default."""
    raw = os.environ.get(IDLE_ENV)
    if raw is None:
        return DEFAULT_IDLE_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        log.warning("%s=%r is not a positive number of seconds; using %.0f",
                    IDLE_ENV, raw, DEFAULT_IDLE_S)
        return DEFAULT_IDLE_S
    return value


def address() -> bytes:
    """The abstract socket address of the host that fits this process.

    A host is shared only by launchers that would start identical supervisors: the same user
    and groups, interpreter, tether installation, cgroup (so a service's jobs stay in the
    service's cgroup) and resource limits.
    """
    limits = [
        resource.getrlimit(getattr(resource, name))
        for name in sorted(dir(resource))
        if name.startswith("RLIMIT_")
    ]
    try:
        with open("/proc/self/cgroup", "rb") as f:
            cgroup = f.read()
    except OSError:
        cgroup = b""
    data = bytearray()
    for part in (
        PROTOCOL,
        (os.getuid(), os.geteuid(), os.getgid(), os.getegid()),
        sys.executable,
        sys.version,
        str(Path(__file__).resolve().parent),
        cgroup,
        limits,
    ):
        data += repr(part).encode() + b"\0"
    # a fingerprint of the settings, not a secret: who may use a host is decided by the peer
    # credentials (checked both ways), never by the name. So zlib's checksums (zlib is loaded
    # anyway), 64 bits, rather than hashlib, whose import loads OpenSSL: milliseconds of every
    # launch from a fresh process
    raw = bytes(data)
    digest = f"{zlib.crc32(raw):08x}{zlib.adler32(raw):08x}"
    return b"\0tether-supervisor-host-" + digest.encode()


def _peer_uid(sock: socket.socket) -> int:
    _pid, uid, _gid = _CRED.unpack(
        sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size)
    )
    return int(uid)


# ---- the launcher's side ------------------------------------------------------------------
def request_supervisor(
    state_path: Path, cwd: Path, supervisor_log: str, env: dict[str, str], host_log: Path
) -> socket.socket | None:
    """Asks the host (started when there is none) to fork the app's supervisor.

    Args:
        state_path: The app's ``state.json``.
        cwd: The supervisor's working directory (the app's directory).
        supervisor_log: Where the supervisor's own output goes.
        env: The supervisor's environment (the replicas inherit it).
        host_log: Where a host started now writes its own messages.

    Returns:
        A socket that delivers ``R`` once the supervisor claimed the app (EOF when it
        ended before), or None when the host was not usable: then nothing was forked and the
        caller starts the supervisor itself.
    """
    addr = address()
    umask = os.umask(0o077)
    os.umask(umask)
    message = json.dumps(
        {"state": str(state_path), "cwd": str(cwd), "log": supervisor_log, "env": env,
         "umask": umask}
    ).encode()
    started = False
    for _ in range(3):  # a stale host answers, then a host is started (once), then used
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(addr)
        except OSError:
            sock.close()
            if started or not _start_host(addr, env, host_log):
                return None
            started = True
            continue
        try:
            if _peer_uid(sock) != os.getuid():  # somebody else holds the name: never talk
                sock.close()
                return None
            sock.settimeout(ANSWER_TIMEOUT_S)
            sock.sendall(_LEN.pack(len(message)) + message)
            answer = sock.recv(1)
        except OSError:
            answer = b""
        if answer == FORKING:
            sock.settimeout(None)
            return sock
        sock.close()
        if answer != STALE:
            return None
        # a host of older code exits after answering: start a current one, once
    return None


def _start_host(addr: bytes, env: dict[str, str], host_log: Path) -> bool:
    """Starts a host for ``addr`` and waits until it listens. Returns whether one listens."""
    import subprocess

    from tether.schedulers.local.procs import wait_readable
    from tether.schedulers.local.state import APP_TOKEN_ENV

    # the host serves every app: it must carry no app's id (the launching app's, or an outer
    # app's when the launcher runs in a replica). What is found by that id is stopped with
    # the app, and the host's forks, the supervisors, keep the environment it was started
    # with as the one the system shows for them
    env = {k: v for k, v in env.items() if k != APP_TOKEN_ENV}
    ready_r, ready_w = os.pipe()
    try:
        host_log.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        log_fd = os.open(host_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tether.schedulers.local.host", addr[1:].decode(),
                 "--ready-fd", str(ready_w)],
                stdin=subprocess.DEVNULL,
                stdout=log_fd,
                stderr=subprocess.STDOUT,
                cwd="/",
                env=env,
                start_new_session=True,
                pass_fds=(ready_w,),
            )
        finally:
            os.close(log_fd)
    except OSError:
        os.close(ready_r)
        os.close(ready_w)
        return False
    os.close(ready_w)
    try:
        ready = wait_readable(ready_r, START_TIMEOUT_S) and os.read(ready_r, 1)
    finally:
        os.close(ready_r)
    with contextlib.suppress(Exception):
        proc.wait(timeout=5.0)  # the host forked away at once; reap its first half
    return bool(ready)  # "R": it listens; "B": another host listened first (also fine)


# ---- the host's side ----------------------------------------------------------------------
def _loaded_files() -> dict[str, int]:
    """The tether modules this process loaded, with their files' mtimes."""
    out: dict[str, int] = {}
    for name, mod in list(sys.modules.items()):
        path = getattr(mod, "__file__", None)
        spec = getattr(mod, "__spec__", None)
        if name == "__main__" and spec is not None:
            name = spec.name  # the host itself, run with -m: its own file counts too
        if path and (name == "tether" or name.startswith("tether.")):
            with contextlib.suppress(OSError):
                out[path] = os.stat(path).st_mtime_ns
    return out


def _changed(files: dict[str, int]) -> bool:
    for path, mtime in files.items():
        try:
            if os.stat(path).st_mtime_ns != mtime:
                return True
        except OSError:
            return True
    return False


def _read_request(conn: socket.socket) -> dict[str, Any]:
    head = _recv_exact(conn, _LEN.size)
    (size,) = _LEN.unpack(head)
    if size > MAX_REQUEST:
        raise ValueError(f"request of {size} bytes")
    doc = json.loads(_recv_exact(conn, size))
    if not isinstance(doc, dict):
        raise ValueError("request is not a JSON object")
    return doc


def _recv_exact(conn: socket.socket, size: int) -> bytes:
    buf = bytearray()
    while len(buf) < size:
        chunk = conn.recv(size - len(buf))
        if not chunk:
            raise ConnectionError("launcher went away")
        buf += chunk
    return bytes(buf)


def _set_name(name: bytes) -> None:
    """Sets this process's name (``comm``: what ``top`` and ``ps -o comm`` show)."""
    from tether.schedulers.local.procsetup import set_name  # loaded: this is the host's side

    set_name(name)


def _become_supervisor(conn: socket.socket, req: dict[str, Any]) -> NoReturn:
    """In the forked grandchild: takes on the launcher's settings and runs the supervisor."""
    from tether.schedulers.local.supervisor import serve

    code = 1
    try:
        _set_name(SUPERVISOR_NAME)
        log_fd = os.open(str(req["log"]), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        null_fd = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null_fd, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(null_fd)
        os.close(log_fd)
        os.chdir(str(req["cwd"]))
        os.umask(int(req["umask"]))
        _adopt_environment({str(k): str(v) for k, v in req["env"].items()})
        serve(Path(str(req["state"])), conn.fileno())  # ends the process
    except BaseException as e:  # reported, then this process ends
        with contextlib.suppress(Exception):
            os.write(2, f"tether supervisor host: could not start the supervisor: {e!r}\n"
                     .encode())
    os._exit(code)


def _adopt_environment(env: dict[str, str]) -> None:
    """Makes ``os.environ`` ``env``, changing only what differs: the host's environment is
    the one of the launcher that started it, so a launch changes a few variables (its app's
    token) of about a hundred, and each change is a ``putenv``."""
    current = os.environ
    for key in [k for k in current if k not in env]:
        del current[key]
    for key, value in env.items():
        if current.get(key) != value:
            current[key] = value


def _handle(listener: socket.socket, conn: socket.socket, files: dict[str, int]) -> bool:
    """Serves one request. Returns False when the host must exit (its code is old)."""
    if _peer_uid(conn) != os.getuid():
        return True
    conn.settimeout(ANSWER_TIMEOUT_S)
    req = _read_request(conn)
    if _changed(files):
        listener.close()  # first: the launcher's next connect must find no old host
        conn.sendall(STALE)
        return False
    conn.sendall(FORKING)
    conn.settimeout(None)
    pid = os.fork()
    if pid == 0:  # the first child: a new session, then the supervisor is nobody's child
        try:
            listener.close()
            os.setsid()
            if os.fork() == 0:
                _become_supervisor(conn, req)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    return True


def serve_host(addr: bytes, ready_fd: int, idle_s: float) -> int:
    """Listens on ``addr`` and has supervisors forked until idle for ``idle_s`` seconds.

    A spare (see :func:`_fork_spare`) waits for each next request; the host serves a
    request itself only while it has none.

    Args:
        addr: The abstract socket address (from :func:`address`).
        ready_fd: Gets ``R`` once the host listens, ``B`` when another host already does.
        idle_s: Seconds without a request before the host exits.

    Returns:
        The exit code.
    """
    import gc
    import select

    import tether.schedulers.local.supervisor  # noqa: F401 (what each fork runs, loaded once)
    from tether.schedulers.local.procsetup import configure_logging, libc_prctl

    configure_logging()  # done once, here, not in each supervisor
    libc_prctl()

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(addr)
    except OSError:
        _tell(ready_fd, b"B")
        return 0
    listener.listen(128)
    files = _loaded_files()
    gc.freeze()  # what the forks share: no collection of theirs writes to (copies) its pages
    _tell(ready_fd, b"R")
    spare: socket.socket | None = None
    idle_until = time.monotonic() + idle_s
    spare_at = 0.0  # no spare before this time (one was killed)
    while True:
        now = time.monotonic()
        if spare is None and now >= spare_at:
            spare = _fork_spare(listener, files)
            if spare is None:  # out of processes or memory: serve requests meanwhile
                spare_at = now + SPARE_RETRY_S
        if now >= idle_until:
            return 0
        wait = idle_until - now if spare is not None else min(idle_until, spare_at) - now
        watched = spare if spare is not None else listener
        ready, _, _ = select.select([watched], [], [], max(wait, 0.0))
        if not ready:
            continue
        if spare is not None:  # the spare took a request, found the code old, or died
            try:
                said = spare.recv(1)
            except OSError:
                said = b""
            if said == STALE:
                listener.close()  # first: the spare answers the launcher once ours closes
                spare.close()
                return 0
            spare.close()
            spare = None
            if said == TAKEN:
                idle_until = time.monotonic() + idle_s
            else:
                spare_at = time.monotonic() + SPARE_RETRY_S
            continue
        idle_until = time.monotonic() + idle_s
        if not _accept_and_handle(listener, files):
            return 0


def _accept_and_handle(listener: socket.socket, files: dict[str, int]) -> bool:
    """The host serves a request itself. Returns False when it must exit (its code is old)."""
    try:
        conn, _ = listener.accept()
    except (BlockingIOError, InterruptedError):
        return True
    try:
        return _handle(listener, conn, files)
    except Exception as e:  # one bad request must not end the host
        print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} request failed: {e!r}", flush=True)
        return True
    finally:
        conn.close()


# ---- the spare ----------------------------------------------------------------------------
def _fork_spare(listener: socket.socket, files: dict[str, int]) -> socket.socket | None:
    """Forks the spare: a supervisor-to-be that waits for the next request itself.

    It is forked twice, as a supervisor would be (a session of its own, whose leader exited,
    nobody's child), before any request: so taking one costs no fork and no process switch
    through the host. It accepts on the host's socket (the host does not, while it has a
    spare) and tells the host on their socket pair when it took a request (``T``, then it
    closes its end) or found the code changed (``S``); it exits when the host's end closes.

    Args:
        listener: The host's listening socket.
        files: The host's modules and their mtimes (see :func:`_loaded_files`).

    Returns:
        The host's end of the pair, or None when the spare could not be forked.
    """
    ours, theirs = socket.socketpair()
    try:
        pid = os.fork()
    except OSError:
        ours.close()
        theirs.close()
        return None
    if pid == 0:
        try:
            _set_name(SPARE_NAME)  # before its fork: the spare has its name from the start
            ours.close()
            os.setsid()
            if os.fork() == 0:
                _wait_as_spare(listener, theirs, files)
        finally:
            os._exit(0)
    theirs.close()
    os.waitpid(pid, 0)
    return ours


def _wait_as_spare(listener: socket.socket, host_end: socket.socket,
                   files: dict[str, int]) -> NoReturn:
    """The spare's loop: takes the next request (becomes its supervisor), or exits with the
    host."""
    import select

    try:
        while True:
            ready, _, _ = select.select([listener, host_end], [], [])
            if listener not in ready:
                break  # the host exited (idle, killed) or went away
            try:
                conn, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                continue
            with conn:
                _take(listener, host_end, conn, files)  # returns for what is no request
    finally:
        os._exit(0)


def _take(listener: socket.socket, host_end: socket.socket, conn: socket.socket,
          files: dict[str, int]) -> None:
    """In the spare: becomes the supervisor a request asks for (never returns then), answers
    one of a changed code base (and exits), or returns for anything that is no request."""
    try:
        if _peer_uid(conn) != os.getuid():
            return
        conn.settimeout(ANSWER_TIMEOUT_S)
        req = _read_request(conn)
    except Exception:  # junk, or the launcher went away: the spare waits for the next one
        return
    if _changed(files):
        with contextlib.suppress(OSError):  # the host stops listening first...
            host_end.sendall(STALE)
            _readable(host_end, RETIRE_WAIT_S)  # ...and exits: its end closes
        listener.close()  # so the launcher's next connect finds no old host
        with contextlib.suppress(OSError):
            conn.sendall(STALE)
        os._exit(0)
    listener.close()  # the supervisor serves no other launcher
    with contextlib.suppress(OSError):
        host_end.sendall(TAKEN)  # the host forks the next spare
    host_end.close()
    try:
        conn.sendall(FORKING)
    except OSError:
        os._exit(0)  # the launcher went away before F: it starts nothing, nor does this
    conn.settimeout(None)
    _become_supervisor(conn, req)


def _readable(sock: socket.socket, timeout: float) -> bool:
    """Whether ``sock`` becomes readable (data or EOF) within ``timeout`` seconds."""
    import select

    ready, _, _ = select.select([sock], [], [], timeout)
    return bool(ready)


def _tell(fd: int, what: bytes) -> None:
    if fd >= 0:
        with contextlib.suppress(OSError):
            os.write(fd, what)
        with contextlib.suppress(OSError):
            os.close(fd)


def main(argv: list[str] | None = None) -> NoReturn:
    """Entry point: ``python -m tether.schedulers.local.host NAME [--ready-fd N]``.

    Args:
        argv: Arguments (default ``sys.argv[1:]``).
    """
    import argparse  # here: launchers import this module too, and never parse its flags

    parser = argparse.ArgumentParser(prog="python -m tether.schedulers.local.host")
    parser.add_argument("name", help="the abstract socket name (without the leading NUL)")
    parser.add_argument("--ready-fd", type=int, default=-1)
    args = parser.parse_args(argv)
    if os.fork() != 0:
        os._exit(0)  # the launcher reaps this parent; the host is nobody's child
    code = serve_host(b"\0" + args.name.encode(), args.ready_fd, idle_seconds())
    sys.stdout.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
