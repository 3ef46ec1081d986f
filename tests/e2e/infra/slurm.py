"""A real Slurm cluster on one host for tests: munged, slurmctld and two slurmd "nodes".

:class:`SlurmCluster` keeps everything in a temporary directory: a munge key and socket, a
generated ``slurm.conf`` (free ports on 127.0.0.1, ``SlurmUser=root``, no accounting), the
controller's state and each node's spool, logs and PID files. The two nodes ``n1`` and ``n2``
are two ``slurmd`` processes on this host (heterogeneous jobs and two-node jobs need two
nodes). The cluster knows the ``gpu`` GRES type but its nodes have none, as a CPU partition of
a GPU cluster: a GPU request is refused with Slurm's "Requested node configuration is not
available". Client commands find the cluster through ``SLURM_CONF``; use :meth:`SlurmCluster.env`::

    with SlurmCluster() as cluster:  # doctest: +SKIP
        subprocess.run(["sinfo"], env=cluster.env(), check=True)

Every daemon is stopped by its PID on exit. Install the packages with
``tests/e2e/infra/setup.d/30-slurm.sh`` (Debian's ``slurm-wlm`` and ``munge``). Without
accounting (slurmdbd), ``sacct`` is disabled: finished jobs stay visible to ``squeue`` for
``MinJobAge`` seconds (set to 600 here). ``cred_expire=30`` (default 120) is also how long
Slurm holds a requeued job before it may run again, so requeue tests take half a minute.

Run ``python -m tests.e2e.infra.slurm [--accounting]`` to start a cluster by hand; it prints the
``SLURM_CONF`` to export and waits for Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from tests.e2e.infra.ports import free_ports
from tests.e2e.infra.reaper import (
    OWNER_FILE,
    forget,
    kill_processes,
    owner_alive,
    processes_naming,
    start_service,
    write_owner,
)

DIR_PREFIX = "tether-slurm-"
"""Each cluster's directory is ``/tmp/<DIR_PREFIX>...`` (see :func:`reap_stale`)."""

CLUSTER = "tether-test"
ACCOUNT = "tether"
"""With accounting: the one account (the current user's default); the cluster enforces
associations and QOS, so another account or QOS is refused at submission."""
NODES = ("n1", "n2")
CPUS_PER_NODE = 2
MEMORY_MB_PER_NODE = 2048
PARTITION = "debug"
URGENT_PARTITION = "urgent"
"""With ``preemption=True``: a partition whose jobs preempt those of :data:`PARTITION`."""
MUNGED_CANDIDATES = ("/usr/sbin/munged", "/usr/bin/munged")
INSTALL_HINT = (
    "install them with tests/e2e/infra/setup.d/30-slurm.sh "
    "(apt-get install -y --no-install-recommends slurm-wlm munge)"
)


class SlurmUnavailable(RuntimeError):
    """Slurm or munge is missing or does not start here; the message says why."""


def _munged() -> str | None:
    for p in MUNGED_CANDIDATES:
        if os.access(p, os.X_OK):
            return p
    return shutil.which("munged")


def missing_tools() -> list[str]:
    """The programs the cluster needs that this host lacks (empty when all are there)."""
    missing = [
        b
        for b in ("slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "sinfo")
        if shutil.which(b) is None
    ]
    if _munged() is None:
        missing.append("munged")
    return missing


def slurm_conf(
    d: Path,
    ctld_port: int,
    node_ports: dict[str, int],
    dbd_port: int | None = None,
    jwt_key: Path | None = None,
    preemption: bool = False,
) -> str:
    """The ``slurm.conf`` of a test cluster rooted at ``d``.

    Args:
        d: The cluster's directory.
        ctld_port: slurmctld's port.
        node_ports: Each node's slurmd port.
        dbd_port: slurmdbd's port, for a cluster with accounting.
        jwt_key: The HS256 key of ``auth/jwt`` (slurmrestd's tokens), as an alternative
            authentication next to munge.
        preemption: Add the partition :data:`URGENT_PARTITION` over the same nodes, whose
            jobs preempt the default partition's (``PreemptType=preempt/partition_prio``,
            ``PreemptMode=REQUEUE``: a requeueable job is requeued, another cancelled as
            ``PREEMPTED``).

    Returns:
        The file's text.
    """
    accounting = (
        "AccountingStorageType=accounting_storage/none"
        if dbd_port is None
        else "AccountingStorageType=accounting_storage/slurmdbd\n"
        f"AccountingStorageHost=127.0.0.1\nAccountingStoragePort={dbd_port}\n"
        f"AccountingStoragePass={d}/munge/munge.sock\n"  # the munge socket for slurmdbd messages
        "AccountingStoreFlags=job_comment\n"  # sacct then shows tether's marker
        # unknown accounts and QOS are refused; a QOS's or association's limits hold
        "AccountingStorageEnforce=associations,qos,limits"
    )
    nodes = "\n".join(
        f"NodeName={n} NodeHostname=localhost NodeAddr=127.0.0.1 Port={p} "
        f"CPUs={CPUS_PER_NODE} RealMemory={MEMORY_MB_PER_NODE} State=UNKNOWN"
        for n, p in node_ports.items()
    )
    jwt = f"AuthAltTypes=auth/jwt\nAuthAltParameters=jwt_key={jwt_key}\n" if jwt_key else ""
    names = ",".join(node_ports)
    preempt = (
        "PreemptType=preempt/partition_prio\nPreemptMode=REQUEUE\n"
        f"PartitionName={URGENT_PARTITION} Nodes={names} MaxTime=INFINITE State=UP "
        "PriorityTier=2 PreemptMode=OFF\n"
        if preemption else ""
    )  # fmt: skip
    return f"""\
ClusterName={CLUSTER}
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={next(iter(node_ports.values()))}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={d}/munge/munge.sock,cred_expire=30
{jwt}SlurmUser=root
SlurmdUser=root
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool-%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_min_interval=100000
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=128
JobAcctGatherFrequency=task=1
JobAcctGatherParams=OverMemoryKill
SlurmdParameters=config_overrides
MpiDefault=none
GresTypes=gpu
ReturnToService=2
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/linux
{accounting}
MinJobAge=600
KillWait=5
MailProg=/bin/true
{nodes}
PartitionName={PARTITION} Nodes={names} Default=YES MaxTime=INFINITE State=UP
{preempt}"""


def slurmdbd_conf(d: Path, dbd_port: int, db_port: int, jwt_key: Path | None = None) -> str:
    """The ``slurmdbd.conf`` of a test cluster: MariaDB on ``db_port``, no password; with
    ``jwt_key`` it accepts slurmrestd's JWTs too (the ``slurmdb`` API calls slurmdbd)."""
    jwt = f"AuthAltTypes=auth/jwt\nAuthAltParameters=jwt_key={jwt_key}\n" if jwt_key else ""
    return f"""\
AuthType=auth/munge
AuthInfo=socket={d}/munge/munge.sock
{jwt}DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={dbd_port}
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={db_port}
StorageUser=root
StorageLoc=slurm_acct_db
PidFile={d}/slurmdbd.pid
LogFile={d}/slurmdbd.log
"""


def jwt_available() -> bool:
    """Whether Slurm's ``auth/jwt`` plugin is installed (Debian's slurm-wlm-jwt-plugin)."""
    import glob

    return bool(glob.glob("/usr/lib/*/slurm-wlm/auth_jwt.so"))


def missing_accounting_tools() -> list[str]:
    """What accounting (slurmdbd + MariaDB) needs that this host lacks."""
    return [
        b for b in ("slurmdbd", "mariadbd", "mariadb-install-db", "sacct", "sacctmgr")
        if shutil.which(b) is None and not os.access(f"/usr/sbin/{b}", os.X_OK)
    ]  # fmt: skip


def _wait_port(port: int, what: str, timeout: float, alive: Callable[[], None]) -> None:
    deadline = time.monotonic() + timeout
    while True:
        alive()
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        if time.monotonic() > deadline:
            raise SlurmUnavailable(f"{what} does not listen on 127.0.0.1:{port}")
        time.sleep(0.1)


class SlurmCluster:
    """munged + slurmctld + two slurmd in a temporary directory (see the module docs).

    Args:
        start_timeout: Seconds to wait for both nodes to be idle.
        accounting: Also start MariaDB and slurmdbd (``sacct`` then works); install them
            with ``tests/e2e/infra/setup.d/31-slurmdbd.sh``.
        jwt: Also accept JWTs (``AuthAltTypes=auth/jwt``, a random key in the cluster's
            directory), as slurmrestd needs; ``scontrol token`` then mints them.
        preemption: Also a partition :data:`URGENT_PARTITION` whose jobs preempt the
            default partition's (see :func:`slurm_conf`).
    """

    def __init__(
        self, start_timeout: float = 60.0, accounting: bool = False, jwt: bool = False,
        preemption: bool = False,
    ) -> None:  # fmt: skip
        self.start_timeout = start_timeout
        self.preemption = preemption
        self.accounting = accounting
        self.jwt = jwt
        self.dir: Path | None = None
        self._procs: list[tuple[str, int]] = []
        self._popen: dict[int, subprocess.Popen[bytes]] = {}

    # ---- paths -------------------------------------------------------------------------
    @property
    def conf(self) -> Path:
        """The cluster's ``slurm.conf``."""
        assert self.dir is not None, "start() first"
        return self.dir / "slurm.conf"

    @property
    def partition(self) -> str:
        """The default partition."""
        return PARTITION

    @property
    def nodes(self) -> tuple[str, ...]:
        """The node names."""
        return NODES

    def env(self) -> dict[str, str]:
        """Environment for Slurm client commands of this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Runs a Slurm command against this cluster.

        Args:
            *argv: The command line.
            check: Raise on a non-zero exit.

        Returns:
            The finished process (text output).
        """
        res = subprocess.run(list(argv), env=self.env(), capture_output=True, text=True, timeout=60)
        if check and res.returncode != 0:
            raise SlurmUnavailable(
                f"`{' '.join(argv)}` failed ({res.returncode}): {res.stderr.strip()}"
            )
        return res

    # ---- lifecycle ---------------------------------------------------------------------
    def start(self) -> SlurmCluster:
        """Starts munged, slurmctld and the slurmd nodes; returns once both nodes are idle.

        Returns:
            self.

        Raises:
            SlurmUnavailable: When tools are missing or the cluster does not come up.
        """
        missing = missing_tools()
        if missing:
            raise SlurmUnavailable(f"missing {', '.join(missing)}; {INSTALL_HINT}")
        missing = missing_accounting_tools() if self.accounting else []
        if missing:
            raise SlurmUnavailable(
                f"missing {', '.join(missing)}; install them with "
                "tests/e2e/infra/setup.d/31-slurmdbd.sh"
            )
        # short path: the munge socket path is limited to ~108 bytes
        self.dir = Path(tempfile.mkdtemp(prefix=DIR_PREFIX, dir="/tmp"))
        try:
            write_owner(self.dir)  # a killed run's job steps are reaped by it (reap_stale)
            self._start_munge()
            ports = free_ports(3 + len(NODES))
            node_ports = dict(zip(NODES, ports[3:]))
            (self.dir / "state").mkdir()
            dbd_port = ports[1] if self.accounting else None
            jwt_key = self._write_jwt_key() if self.jwt else None
            self.conf.write_text(slurm_conf(self.dir, ports[0], node_ports, dbd_port, jwt_key,
                                             self.preemption))  # fmt: skip
            if self.accounting:
                self._start_accounting(ports[1], ports[2], jwt_key)
            self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])
            for node in NODES:
                (self.dir / f"spool-{node}").mkdir()
                self._spawn(f"slurmd-{node}", ["slurmd", "-D", "-N", node, "-f", str(self.conf)])
            self._wait_idle()
        except BaseException:
            self.stop()
            raise
        return self

    def _write_jwt_key(self) -> Path:
        assert self.dir is not None
        key = self.dir / "jwt_hs256.key"
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # owned by SlurmUser
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(32))
        return key

    def token(self, user: str, lifespan_s: int = 3600) -> str:
        """A JWT for ``user`` (``scontrol token``; the cluster needs ``jwt=True``).

        Args:
            user: The Slurm user.
            lifespan_s: Seconds it is valid.

        Returns:
            The token.
        """
        out = self.run("scontrol", "token", f"username={user}", f"lifespan={lifespan_s}").stdout
        return out.strip().partition("SLURM_JWT=")[2]

    def _start_munge(self) -> None:
        assert self.dir is not None
        mdir = self.dir / "munge"
        mdir.mkdir(mode=0o755)
        key = mdir / "munge.key"
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(1024))
        munged = _munged()
        assert munged is not None
        argv = [
            munged, "--force", "--foreground", f"--socket={mdir}/munge.sock",
            f"--key-file={key}", f"--pid-file={mdir}/munged.pid",
            f"--log-file={mdir}/munged.log", f"--seed-file={mdir}/munged.seed",
        ]  # fmt: skip
        self._spawn("munged", argv)
        deadline = time.monotonic() + 20
        while not (mdir / "munge.sock").exists():
            self._check_alive()
            if time.monotonic() > deadline:
                raise SlurmUnavailable(
                    f"munged did not create its socket: {self._tail('munge/munged.log')}"
                )
            time.sleep(0.05)

    def _start_accounting(self, dbd_port: int, db_port: int, jwt_key: Path | None) -> None:
        assert self.dir is not None
        d = self.dir
        res = subprocess.run(
            ["mariadb-install-db", "--no-defaults", f"--datadir={d}/mysql", "--user=root",
             "--auth-root-authentication-method=normal", "--skip-test-db"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        if res.returncode != 0:
            raise SlurmUnavailable(f"mariadb-install-db failed: {res.stderr[-2000:]}")
        self._spawn(
            "mariadbd",
            ["mariadbd", "--no-defaults", "--user=root", f"--datadir={d}/mysql",
             f"--port={db_port}", "--bind-address=127.0.0.1", f"--socket={d}/mysql.sock",
             f"--pid-file={d}/mysql.pid", "--skip-grant-tables", "--skip-name-resolve",
             "--innodb-buffer-pool-size=16M"],
        )  # fmt: skip
        _wait_port(db_port, "mariadbd", 60, self._check_alive)
        dbd_conf = d / "slurmdbd.conf"  # found next to slurm.conf
        fd = os.open(dbd_conf, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(slurmdbd_conf(d, dbd_port, db_port, jwt_key))
        self._spawn("slurmdbd", ["slurmdbd", "-D"])
        _wait_port(dbd_port, "slurmdbd", 60, self._check_alive)
        self.run("sacctmgr", "-i", "add", "cluster", CLUSTER)
        self.run("sacctmgr", "-i", "add", "account", ACCOUNT, f"cluster={CLUSTER}")
        self.add_user(getpass.getuser())

    def add_user(self, user: str) -> None:
        """Gives ``user`` an association (the cluster enforces them) on a cluster with
        accounting.

        Args:
            user: The Slurm (Unix) user.
        """
        self.run("sacctmgr", "-i", "add", "user", user, f"account={ACCOUNT}",
                 f"defaultaccount={ACCOUNT}", f"cluster={CLUSTER}")  # fmt: skip

    def _spawn(self, name: str, argv: list[str]) -> None:
        assert self.dir is not None
        out = open(self.dir / f"{name}.stdout", "wb")  # noqa: SIM115 - closed below
        try:
            proc = start_service(
                argv, f"slurm-{name}", stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "SLURM_CONF": str(self.dir / "slurm.conf")},
            )  # fmt: skip
        finally:
            out.close()
        self._procs.append((name, proc.pid))
        self._popen[proc.pid] = proc

    def _check_alive(self) -> None:
        for name, pid in self._procs:
            proc = self._popen[pid]
            if proc.poll() is not None:
                raise SlurmUnavailable(
                    f"{name} exited with {proc.returncode}: {self._tail(f'{name}.stdout')} "
                    f"{self._tail(f'{name}.log')}"
                )

    def _tail(self, rel: str, n: int = 2000) -> str:
        assert self.dir is not None
        p = self.dir / rel
        return p.read_text(errors="replace")[-n:].strip() if p.exists() else ""

    def _wait_idle(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        last = ""
        while time.monotonic() < deadline:
            self._check_alive()
            res = self.run("sinfo", "-h", "-N", "-o", "%N %t", check=False)
            last = (res.stdout + res.stderr).strip()
            states = dict(line.split() for line in res.stdout.splitlines() if line.strip())
            if res.returncode == 0 and all(states.get(n) == "idle" for n in NODES):
                return
            time.sleep(0.2)
        raise SlurmUnavailable(
            f"nodes not idle after {self.start_timeout:.0f}s (sinfo: {last!r}); "
            f"slurmctld log: {self._tail('slurmctld.log')}"
        )

    def cancel_all(self, timeout: float = 30.0) -> None:
        """Cancels every job of the cluster and waits (bounded) until Slurm has ended them, so
        no job step (``slurmstepd`` and the tasks, which outlive the daemons) is left behind."""
        if self.dir is None or not any(n == "slurmctld" for n, _ in self._procs):
            return
        self.run("scancel", f"--user={getpass.getuser()}", check=False)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            res = self.run("squeue", "--noheader", "--format=%i", check=False)
            if res.returncode != 0 or not res.stdout.strip():
                return
            time.sleep(0.2)

    def stop(self) -> None:
        """Cancels every job, stops every daemon by its PID (TERM, then KILL) and removes the
        directory."""
        with contextlib.suppress(Exception):
            self.cancel_all()
        for _name, pid in reversed(self._procs):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        for _name, pid in reversed(self._procs):
            proc = self._popen.get(pid)
            if proc is None:
                continue
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                proc.wait(timeout=5)
            forget(proc)
        self._procs = []
        self._popen = {}
        if self.dir is not None and not os.environ.get("TETHER_KEEP_SLURM_DIR"):
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
        elif self.dir is not None:  # kept for a look: not a killed run's to reap
            with contextlib.suppress(OSError):
                (self.dir / OWNER_FILE).unlink()

    def __enter__(self) -> SlurmCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def reap_stale(root: Path = Path("/tmp")) -> list[str]:
    """Tears down the clusters whose test process is gone (a killed run): the daemons and the
    job steps, ``slurmstepd`` and its tasks, which run in sessions of their own (found by the
    cluster's directory in their command line, or in the ``SLURM_CONF`` of a ``slurmstepd``,
    with its session), then the directory.
    A directory without an owner is left alone.

    Args:
        root: Where the clusters' directories are.

    Returns:
        The directories reaped.
    """
    reaped = []
    for cluster_dir in sorted(root.glob(f"{DIR_PREFIX}*")):
        if (cluster_dir / OWNER_FILE).is_file() and not owner_alive(cluster_dir):
            kill_processes(processes_naming(f"{cluster_dir}/", daemons=("slurmstepd",)))
            shutil.rmtree(cluster_dir, ignore_errors=True)
            reaped.append(str(cluster_dir))
    return reaped


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> None:
    """Starts a cluster and waits for Ctrl-C or SIGTERM (then stops every daemon)."""
    import sys

    signal.signal(signal.SIGTERM, _interrupt)
    with SlurmCluster(accounting="--accounting" in sys.argv[1:]) as cluster:
        print(f"export SLURM_CONF={cluster.conf}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()


if __name__ == "__main__":
    main()
