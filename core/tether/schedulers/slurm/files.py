"""The job directory as the scheduler sees it, through the transport.

The scheduler writes each job's script there and reads logs, exit codes and restart counts
back; ``delete`` leaves a marker and removes logs. :class:`LocalFiles` does that on this
machine (``local``); :class:`ShellFiles` with POSIX commands over a command transport
(``ssh``: ``cat``, ``tail -c``, ``find``, ``rm``, every argument quoted by the transport);
:class:`NoFiles` stands for a transport without file access (``rest``), whose reads find
nothing and whose writes are refused with what to do instead; :class:`MountedFiles` is the
``rest`` transport's job directory where this machine mounts the cluster's shared filesystem
(the ``mount`` setting, ``CLUSTER_DIR=LOCAL_DIR``): every path is translated, then read and
written here.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from tether.schedulers.slurm.transport import SlurmTransportError, Transport


class JobFiles:
    """Files under the job directory (paths are absolute, on the cluster's filesystem)."""

    def write_new(self, directory: str, prefix: str, text: str) -> str:
        """Creates ``directory`` (0700) and a new private (0600) file in it holding ``text``.

        Args:
            directory: Where.
            prefix: The file name's start.
            text: The content.

        Returns:
            The file's path.
        """
        raise NotImplementedError

    def make_dir(self, directory: str) -> bool:
        """Creates ``directory`` and its missing parents (0700; an existing one is fine).

        Args:
            directory: Where.

        Returns:
            False when this transport cannot reach ``directory`` (nothing was done).
        """
        raise NotImplementedError

    def reaches(self, path: str) -> bool:
        """Whether this transport reads and writes ``path`` at all."""
        return True

    def rename(self, src: str, dst: str) -> None:
        """Renames a file (best effort)."""
        raise NotImplementedError

    def read(self, path: str, offset: int = 0, limit: int | None = None) -> bytes | None:
        """Bytes of a file from ``offset`` (at most ``limit``), or None when it is missing."""
        raise NotImplementedError

    def size(self, path: str) -> int | None:
        """A file's size, or None when it is missing."""
        raise NotImplementedError

    def sizes(self, directory: str) -> dict[str, int]:
        """File name -> size of the files in ``directory`` (empty when it is missing)."""
        raise NotImplementedError

    def exists(self, path: str) -> bool:
        """Whether ``path`` exists."""
        raise NotImplementedError

    def probe(self, directory: str, path: str) -> tuple[dict[str, int], bool]:
        """:meth:`sizes` of ``directory`` and :meth:`exists` of ``path`` (one round trip
        where the transport is remote)."""
        return self.sizes(directory), self.exists(path)

    def touch(self, path: str) -> None:
        """Creates an empty file (and its directory)."""
        raise NotImplementedError

    def remove(self, *paths: str) -> None:
        """Removes files and directory trees (missing ones are fine)."""
        raise NotImplementedError


def parse_probe(out: str) -> tuple[dict[str, int], bool]:
    """What the probe program prints (``D`` when the marker exists, then ``SIZE NAME`` lines)
    as (sizes, marker found)."""
    lines = out.splitlines()
    found = bool(lines) and lines[0] == "D"
    sizes: dict[str, int] = {}
    for line in lines[1:] if found else lines:
        n, _, name = line.strip().partition(" ")  # wc pads its counts
        if n.isdigit() and name:
            sizes[name] = int(n)
    return sizes, found


class LocalFiles(JobFiles):
    """The job directory on this machine."""

    def write_new(self, directory: str, prefix: str, text: str) -> str:
        Path(directory).mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".sbatch", dir=directory)
        with os.fdopen(fd, "w") as f:  # mkstemp: mode 0600
            f.write(text)
        return tmp

    def make_dir(self, directory: str) -> bool:
        Path(directory).mkdir(parents=True, exist_ok=True, mode=0o700)
        return True

    def rename(self, src: str, dst: str) -> None:
        with contextlib.suppress(OSError):
            os.replace(src, dst)

    def read(self, path: str, offset: int = 0, limit: int | None = None) -> bytes | None:
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                return f.read() if limit is None else f.read(limit)
        except OSError:
            return None

    def size(self, path: str) -> int | None:
        try:
            return os.stat(path).st_size
        except OSError:
            return None

    def sizes(self, directory: str) -> dict[str, int]:
        out: dict[str, int] = {}
        with contextlib.suppress(OSError):
            for entry in os.scandir(directory):
                if entry.is_file():
                    out[entry.name] = entry.stat().st_size
        return out

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def touch(self, path: str) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        Path(path).touch()

    def remove(self, *paths: str) -> None:
        for p in paths:
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(p)


class ShellFiles(JobFiles):
    """The job directory on the cluster, through POSIX commands run by ``transport``.

    Args:
        transport: A command transport (``ssh``).
    """

    def __init__(self, transport: Transport) -> None:
        self.transport = transport

    def _sh(self, script: str, *args: str, input: str | None = None) -> tuple[int, str]:
        """Runs a fixed ``sh -c`` program with ``args`` as its positional parameters (never
        spliced into the program text)."""
        res = self.transport.run(["sh", "-c", script, "tether", *args], input=input)
        return res.returncode, res.stdout

    def write_new(self, directory: str, prefix: str, text: str) -> str:
        rc, out = self._sh(
            'umask 077 && mkdir -p -- "$1" && f=$(mktemp -- "$1/$2XXXXXXXX.sbatch") '
            '&& cat > "$f" && printf %s "$f"',
            directory, prefix, input=text,
        )  # fmt: skip
        if rc != 0 or not out.strip():
            raise SlurmTransportError(
                self.transport.kind, self.transport.where,
                f"cannot write the job script into {directory}",
                "check that job_dir is writable by the login user",
            )  # fmt: skip
        return out.strip()

    def make_dir(self, directory: str) -> bool:
        rc, _ = self._sh('umask 077 && mkdir -p -- "$1"', directory)
        if rc != 0:
            raise SlurmTransportError(
                self.transport.kind, self.transport.where, f"cannot create {directory}",
                "check that job_dir is writable by the login user",
            )  # fmt: skip
        return True

    def rename(self, src: str, dst: str) -> None:
        self._sh('mv -f -- "$1" "$2"', src, dst)

    def read(self, path: str, offset: int = 0, limit: int | None = None) -> bytes | None:
        # tail -c +N is 1-based; head -c bounds the read
        program = '[ -f "$1" ] || exit 3; tail -c "+$2" -- "$1"'
        if limit is not None:
            program += ' | head -c "$3"'
        res = self.transport.run(
            ["sh", "-c", program, "tether", path, str(offset + 1), str(limit or 0)]
        )
        if res.returncode != 0:
            return None
        return res.stdout.encode("utf-8", errors="surrogateescape")

    def size(self, path: str) -> int | None:
        rc, out = self._sh('[ -f "$1" ] && wc -c < "$1"', path)
        return int(out.strip()) if rc == 0 and out.strip().isdigit() else None

    def sizes(self, directory: str) -> dict[str, int]:
        _, out = self._sh(
            '[ -d "$1" ] || exit 0; find "$1" -mindepth 1 -maxdepth 1 -type f -printf "%s %f\\n"',
            directory,
        )
        found: dict[str, int] = {}
        for line in out.splitlines():
            n, _, name = line.partition(" ")
            if n.isdigit() and name:
                found[name] = int(n)
        return found

    def exists(self, path: str) -> bool:
        return self._sh('[ -e "$1" ]', path)[0] == 0

    def probe(self, directory: str, path: str) -> tuple[dict[str, int], bool]:
        _, out = self._sh(
            '[ -e "$2" ] && echo D; [ -d "$1" ] || exit 0; '
            'find "$1" -mindepth 1 -maxdepth 1 -type f -printf "%s %f\\n"',
            directory, path,
        )  # fmt: skip
        return parse_probe(out)

    def touch(self, path: str) -> None:
        self._sh('umask 077 && mkdir -p -- "$(dirname -- "$1")" && touch -- "$1"', path)

    def remove(self, *paths: str) -> None:
        if paths:
            self._sh('rm -rf -- "$@"', *paths)


class NoFiles(JobFiles):
    """A transport without access to the job directory (``rest``).

    Args:
        transport: The transport's name, for messages.
        where: Its URL.
    """

    def __init__(self, transport: str, where: str) -> None:
        self.transport = transport
        self.where = where

    def _refuse(self, what: str) -> SlurmTransportError:
        return SlurmTransportError(
            self.transport, self.where, f"{what} needs the job directory, which slurmrestd "
            "does not serve", "mount the cluster's shared filesystem here and give "
            "mount=CLUSTER_DIR=LOCAL_DIR, or use transport=ssh (or local on a login node)",
        )  # fmt: skip

    def write_new(self, directory: str, prefix: str, text: str) -> str:
        raise self._refuse("writing the job script")

    def make_dir(self, directory: str) -> bool:
        return False

    def reaches(self, path: str) -> bool:
        return False

    def rename(self, src: str, dst: str) -> None:
        return None

    def read(self, path: str, offset: int = 0, limit: int | None = None) -> bytes | None:
        return None

    def size(self, path: str) -> int | None:
        return None

    def sizes(self, directory: str) -> dict[str, int]:
        return {}

    def exists(self, path: str) -> bool:
        return False

    def touch(self, path: str) -> None:
        raise self._refuse("delete (leaving its marker)")

    def remove(self, *paths: str) -> None:
        raise self._refuse("delete (removing logs)")


class MountedFiles(JobFiles):
    """The cluster's shared filesystem as mounted on this machine (``rest`` with ``mount``).

    Paths under ``cluster_dir`` are read and written at the same place under ``local_dir``;
    other paths are out of reach, as with :class:`NoFiles`.

    Args:
        cluster_dir: A directory as the cluster's nodes see it (absolute).
        local_dir: Where this machine sees it (absolute).
        outside: What stands for paths outside ``cluster_dir``.
    """

    def __init__(self, cluster_dir: str, local_dir: str, outside: NoFiles) -> None:
        self.cluster_dir = cluster_dir.rstrip("/") or "/"
        self.local_dir = local_dir.rstrip("/") or "/"
        self._local = LocalFiles()
        self._outside = outside

    def local(self, path: str) -> str | None:
        """Where this machine sees the cluster's ``path``, or None when it is not mounted."""
        norm = os.path.normpath(path)
        if norm == self.cluster_dir:
            return self.local_dir
        prefix = self.cluster_dir if self.cluster_dir.endswith("/") else self.cluster_dir + "/"
        if not norm.startswith(prefix):
            return None
        return os.path.join(self.local_dir, norm[len(prefix) :])

    def cluster(self, local_path: str) -> str:
        """The cluster's path of a path under ``local_dir``."""
        rel = os.path.relpath(local_path, self.local_dir)
        return self.cluster_dir if rel == "." else os.path.join(self.cluster_dir, rel)

    def _files(self, path: str) -> tuple[JobFiles, str]:
        here = self.local(path)
        return (self._outside, path) if here is None else (self._local, here)

    def write_new(self, directory: str, prefix: str, text: str) -> str:
        files, here = self._files(directory)
        made = files.write_new(here, prefix, text)
        return self.cluster(made) if files is self._local else made

    def reaches(self, path: str) -> bool:
        return self.local(path) is not None

    def make_dir(self, directory: str) -> bool:
        files, here = self._files(directory)
        try:
            return files.make_dir(here)
        except OSError as e:
            raise SlurmTransportError(
                self._outside.transport, self._outside.where,
                f"cannot create {directory} through the mount at {here}: {e.strerror or e}",
                "check that the mount is writable here by the user the jobs run as",
            ) from None  # fmt: skip

    def rename(self, src: str, dst: str) -> None:
        here_src, here_dst = self.local(src), self.local(dst)
        if here_src is not None and here_dst is not None:
            self._local.rename(here_src, here_dst)

    def read(self, path: str, offset: int = 0, limit: int | None = None) -> bytes | None:
        files, here = self._files(path)
        return files.read(here, offset, limit)

    def size(self, path: str) -> int | None:
        files, here = self._files(path)
        return files.size(here)

    def sizes(self, directory: str) -> dict[str, int]:
        files, here = self._files(directory)
        return files.sizes(here)

    def exists(self, path: str) -> bool:
        files, here = self._files(path)
        return files.exists(here)

    def touch(self, path: str) -> None:
        files, here = self._files(path)
        files.touch(here)

    def remove(self, *paths: str) -> None:
        for path in paths:
            files, here = self._files(path)
            files.remove(here)
