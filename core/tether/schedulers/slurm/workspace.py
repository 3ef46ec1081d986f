"""The ``dir`` workspace of ``slurm``: the project is copied to a shared directory.

The copy lands in ``<workspace_dir or job_dir/workspaces>/<name>-<digest>/`` (the digest covers
every file's path, size and modification time, so an unchanged project is copied once and
roles sharing it share the copy); ``.tetherignore`` is honoured. The role then runs there: its
step is started with ``srun --chdir=<copy>`` (see :data:`META_WORKSPACE_DIR`).

Over the ``ssh`` transport (:func:`copy_workspace_remote`) the copy is made on the cluster with
rsync over the transport's shared connection, named by a digest of the files' contents (not
their times: a fresh checkout of the same tree is not sent again); a tree already there is not
sent at all.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from tether.schedulers.slurm.files import MountedFiles
from tether.schedulers.slurm.ssh import SshTransport
from tether.schedulers.slurm.transport import SlurmTransportError
from tether.specs import Role
from tether.workspace import Workspace
from tether.workspace.api import walk_workspace

META_WORKSPACE_DIR = "tether.slurm.workspace_dir"
"""``Role.metadata`` key: the copied workspace the role's tasks run in."""


def digest(ws: Workspace) -> str:
    """A short digest of the workspace's files (relative path, size, mtime) and mapping."""
    h = hashlib.sha256()
    for src, dst in sorted(ws.projects.items()):
        h.update(f"{os.path.abspath(src)}\0{dst}\0".encode())
        for rel in sorted(walk_workspace(src)):
            st = os.stat(os.path.join(src, rel))
            h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return h.hexdigest()[:16]


def _fill(ws: Workspace, tmp: Path) -> None:
    """Copies the workspace's files (``.tetherignore`` honoured) into ``tmp``."""
    for src, dst in ws.projects.items():
        root = tmp / dst if dst else tmp
        for rel in walk_workspace(src):
            target = root / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(os.path.join(src, rel), target)


def copy_workspace(ws: Workspace, base: str) -> str:
    """Copies the workspace under ``base`` (once per content) and returns the copy's path.

    Args:
        ws: The workspace.
        base: A directory the nodes see.

    Returns:
        The absolute path of the copy.
    """
    first = os.path.basename(os.path.abspath(next(iter(ws.projects)))) or "workspace"
    dest = Path(base) / f"{first}-{digest(ws)}"
    if dest.is_dir():
        return str(dest)
    Path(base).mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=base))
    try:
        _fill(ws, tmp)
        try:
            tmp.rename(dest)
        except OSError:  # another submission copied the same content first
            if not dest.is_dir():
                raise
    finally:
        with contextlib.suppress(FileNotFoundError):
            if tmp.exists():
                shutil.rmtree(tmp)
    return str(dest)


def content_digest(ws: Workspace) -> str:
    """A short digest of the workspace's files by content (relative path, bytes) and mapping."""
    h = hashlib.sha256()
    for src, dst in sorted(ws.projects.items()):
        h.update(f"{dst}\0".encode())
        for rel in sorted(walk_workspace(src)):
            h.update(f"{rel}\0".encode())
            with open(os.path.join(src, rel), "rb") as f:
                h.update(hashlib.file_digest(f, "sha256").digest())
    return h.hexdigest()[:16]


def copy_workspace_remote(ws: Workspace, base: str, copy: RemoteCopy) -> str:
    """Copies the workspace to ``base`` on the cluster (once per content).

    Args:
        ws: The workspace.
        base: A directory on the cluster the nodes see.
        copy: Sends a local directory's listed files to a remote directory.

    Returns:
        The copy's path on the cluster.
    """
    first = os.path.basename(os.path.abspath(next(iter(ws.projects)))) or "workspace"
    dest = f"{base}/{first}-{content_digest(ws)}"
    copy(ws, dest)
    return dest


RemoteCopy = Callable[[Workspace, str], None]
"""Makes ``dest`` on the cluster hold the workspace (nothing when it is there already)."""


def mounted_copier(
    files: MountedFiles, fail: Callable[[str, str], SlurmTransportError]
) -> RemoteCopy:
    """A :data:`RemoteCopy` into the cluster's shared filesystem mounted on this machine
    (``rest`` with ``mount``): copied to a temporary directory there, renamed once complete.

    Args:
        files: The mount.
        fail: Makes the transport's error from (problem, hint).

    Returns:
        The copier.
    """

    def copy(ws: Workspace, dest: str) -> None:
        here = files.local(dest)
        if here is None:
            raise fail(f"workspace_dir {os.path.dirname(dest)!r} is not under the mounted "
                       f"{files.cluster_dir!r}", "give a workspace_dir (or job_dir) under it")
        if os.path.isdir(here):
            return  # the same content was copied before
        parent = os.path.dirname(here)
        Path(parent).mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = Path(tempfile.mkdtemp(prefix=f".{os.path.basename(here)}-", dir=parent))
        try:
            _fill(ws, tmp)
            try:
                tmp.rename(here)
            except OSError:  # another submission copied the same content first
                if not os.path.isdir(here):
                    raise
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)

    return copy


def build_role_workspace(
    role: Role, base: str, cache: dict[object, object], remote: RemoteCopy | None = None
) -> None:
    """Copies ``role.workspace`` (once per workspace in ``cache``) and records the copy.

    Args:
        role: The role (its metadata gets :data:`META_WORKSPACE_DIR`).
        base: Where copies go.
        cache: Shared between the roles of one submission.
        remote: Copies to the cluster (``ssh``); None copies on this machine.
    """
    assert role.workspace is not None
    key = ("slurm", str(role.workspace), base)
    if key not in cache:
        cache[key] = (
            copy_workspace(role.workspace, base)
            if remote is None
            else copy_workspace_remote(role.workspace, base, remote)
        )
    role.metadata[META_WORKSPACE_DIR] = cache[key]


def rsync_copier(transport: SshTransport) -> RemoteCopy:
    """A :data:`RemoteCopy` that sends files with rsync over the transport's connection.

    The files go to a temporary directory next to ``dest``, renamed into place once complete,
    so an interrupted copy is never taken for a finished one.

    Args:
        transport: The ``ssh`` transport.

    Returns:
        The copier.
    """

    def copy(ws: Workspace, dest: str) -> None:
        if transport.run(["test", "-d", dest]).returncode == 0:
            return  # the same content was sent before
        tmp = f"{dest}.part-{secrets.token_hex(4)}"
        transport.connect()
        rsh = shlex.join([*transport.base_argv(), "-o", "ControlMaster=no"])
        try:
            for src, dst in ws.projects.items():
                files = "\n".join(walk_workspace(src)) + "\n"
                target = f"{tmp}/{dst}/" if dst else f"{tmp}/"
                res = subprocess.run(
                    ["rsync", "-a", "--secluded-args", "--mkpath", "--files-from=-", "-e", rsh,
                     f"{os.path.abspath(src)}/", f"{transport.settings.host}:{target}"],
                    input=files, capture_output=True, text=True, timeout=3600,
                )  # fmt: skip
                if res.returncode != 0:
                    raise SlurmTransportError(
                        "ssh", transport.where, f"copying workspace {src} with rsync failed: "
                        f"{res.stderr.strip()[-500:]}", "rsync must be installed on both ends",
                    )  # fmt: skip
            transport.run(["sh", "-c", 'mv -T -- "$1" "$2" 2>/dev/null || rm -rf -- "$1"',
                           "tether", tmp, dest])  # fmt: skip
        except BaseException:
            transport.run(["rm", "-rf", "--", tmp])
            raise

    return copy
