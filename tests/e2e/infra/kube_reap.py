"""Leaves nothing behind: tear-down and reaping of a real test node's host resources.

A real node (:mod:`tests.e2e.infra.kube_node`) leaves host state that outlives its
processes: containerd shims and the containers under them, network namespaces under
``/run/netns``, a CNI bridge, cgroups. Its mounts (the kubelet's bind mount of its root dir,
overlay root filesystems, ``/dev/shm`` tmpfs of pod sandboxes, the private ``/var/log/pods``)
live in the node's own mount namespace, which ends with its last process (the shims are the
last); the host-side unmounting below is for what a node may still have mounted there.

Every node lives in one directory under :data:`NODES_ROOT` whose ``owner`` marker names the
test process that started it. :func:`reap_stale` tears down every node whose owner is gone
(a killed test run) before a new node starts; :func:`teardown_dir` is the same tear-down
used by a clean stop. Everything is found from the node's own directory (runc root, bundle
configs, marker files), never by a process name, so concurrent test runs are left alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from tests.e2e.infra.reaper import OWNER_FILE as OWNER_FILE
from tests.e2e.infra.reaper import owner_alive as owner_alive
from tests.e2e.infra.reaper import write_owner as write_owner

NODES_ROOT = Path("/tmp/tether-kube-nodes")
BRIDGE_FILE = "bridge"
CGROUP_FILE = "cgroup-root"
CGROUP_FS = Path("/sys/fs/cgroup")


def _pids_referencing(node_dir: Path) -> list[int]:
    """Processes whose command line names the node's directory (containerd, kubelet, shims)."""
    needle = str(node_dir).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if needle in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
    return found


def _mount_namespace(pid: int | str) -> str | None:
    """``mnt:[inode]`` of a living process; None when it is gone or a zombie (its
    namespaces already released)."""
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


def _pids_in(namespaces: set[str]) -> list[int]:
    """Living processes in any of the mount namespaces ``namespaces``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _mount_namespace(entry.name) in namespaces:
            found.append(int(entry.name))
    return found


def _kill_node_processes(node_dir: Path) -> None:
    """SIGKILLs the node's processes until none is left: those naming its directory, and
    every process in their private mount namespaces (a shim may fork a ``runc`` after the
    first scan; a process there need not name the directory). A process killed is gone for
    this purpose once it no longer holds a namespace (a zombie waiting for its reaper)."""
    pids = _pids_referencing(node_dir)
    shared = {_mount_namespace("self"), _mount_namespace(1)}
    namespaces = {ns for ns in map(_mount_namespace, pids) if ns is not None} - shared
    deadline = time.monotonic() + 30
    while True:
        alive = {p for p in (*pids, *_pids_referencing(node_dir), *_pids_in(namespaces))
                 if _mount_namespace(p) is not None and p != os.getpid()}  # fmt: skip
        if not alive or time.monotonic() > deadline:
            return
        for pid in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


def _runc_containers(runc_root: Path) -> None:
    """SIGKILLs and deletes every container of a runc root (the pods' processes)."""
    if not runc_root.is_dir() or shutil.which("runc") is None:
        return
    for ns_root in [runc_root, *[p for p in runc_root.iterdir() if p.is_dir()]]:
        for state in ns_root.glob("*/state.json"):
            cid = state.parent.name
            for args in (["kill", cid, "KILL"], ["delete", "--force", cid]):
                subprocess.run(
                    ["runc", "--root", str(ns_root), *args],
                    capture_output=True,
                    timeout=30,
                    check=False,
                )


def _netns_paths(node_dir: Path) -> set[str]:
    """Network namespaces named by the node's container bundles (``/run/netns/cni-...``)."""
    paths: set[str] = set()
    for cfg in node_dir.glob("containerd/state/io.containerd.runtime.v2.task/*/*/config.json"):
        with contextlib.suppress(OSError, ValueError):
            spec = json.loads(cfg.read_text())
            for ns in spec.get("linux", {}).get("namespaces", []):
                if ns.get("type") == "network" and ns.get("path"):
                    paths.add(str(ns["path"]))
    return paths


def _remove_netns(paths: set[str]) -> None:
    for path in paths:
        p = Path(path)
        if p.exists():
            subprocess.run(["umount", "-l", path], capture_output=True, timeout=30, check=False)
            with contextlib.suppress(OSError):
                p.unlink()


def mounts_under(node_dir: Path, pid: int | None = None) -> list[str]:
    """Mount points at or under ``node_dir`` (deepest first).

    Args:
        node_dir: The node's directory.
        pid: Look in this process's mount namespace (default: this process's).
    """
    prefix = str(node_dir)
    found = []
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid or 'self'}/mounts").read_text().splitlines():
            target = line.split()[1].replace("\\040", " ")
            if target == prefix or target.startswith(prefix + "/"):
                found.append(target)
    return sorted(set(found), key=len, reverse=True)


def _unmount_all(node_dir: Path) -> None:
    for _ in range(5):
        targets = mounts_under(node_dir)
        if not targets:
            return
        for target in targets:
            subprocess.run(["umount", "-l", target], capture_output=True, timeout=30, check=False)


def bridge_exists(name: str) -> bool:
    """Whether a network link called ``name`` exists."""
    return Path(f"/sys/class/net/{name}").exists()


def _remove_bridge(node_dir: Path) -> None:
    with contextlib.suppress(OSError):
        name = (node_dir / BRIDGE_FILE).read_text().strip()
        if name and bridge_exists(name):
            cmd = ["ip", "link", "del", name]
            subprocess.run(cmd, capture_output=True, timeout=30, check=False)


def cgroup_dirs(cgroup_root: str) -> list[Path]:
    """The node's cgroup root directory in every mounted hierarchy that has it."""
    rel = cgroup_root.strip("/")
    if not rel or not CGROUP_FS.is_dir():
        return []
    return [h / rel for h in CGROUP_FS.iterdir() if (h / rel).is_dir()]


def _remove_cgroups(node_dir: Path) -> None:
    with contextlib.suppress(OSError):
        root = (node_dir / CGROUP_FILE).read_text().strip()
        for top in cgroup_dirs(root):
            # Children before parents: rmdir of an empty cgroup directory removes it.
            subs = [p for p in top.rglob("*") if p.is_dir()]
            for sub in sorted(subs, key=lambda p: -len(p.parts)):
                with contextlib.suppress(OSError):
                    sub.rmdir()
            with contextlib.suppress(OSError):
                top.rmdir()


def teardown_dir(node_dir: Path) -> None:
    """Removes every trace of the node in ``node_dir`` (its processes must be stopped or
    abandoned): container processes, shims, containerd/kubelet, netns, mounts, bridge,
    cgroups, then the directory itself.

    Args:
        node_dir: The node's directory under :data:`NODES_ROOT`.
    """
    _runc_containers(node_dir / "containerd" / "runc")
    netns = _netns_paths(node_dir)
    _kill_node_processes(node_dir)
    _remove_netns(netns)
    _unmount_all(node_dir)
    _remove_bridge(node_dir)
    _remove_cgroups(node_dir)
    shutil.rmtree(node_dir, ignore_errors=True)


def reap_stale(root: Path = NODES_ROOT) -> list[str]:
    """Tears down every node under ``root`` whose owning test process is gone.

    Args:
        root: Directory holding one directory per node.

    Returns:
        The names of the nodes reaped.
    """
    reaped = []
    if root.is_dir():
        for node_dir in sorted(root.iterdir()):
            if node_dir.is_dir() and not owner_alive(node_dir):
                teardown_dir(node_dir)
                reaped.append(node_dir.name)
    return reaped
