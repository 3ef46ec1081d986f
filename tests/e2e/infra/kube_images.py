"""Container images for the real test node, made without a registry or a container engine.

A Docker image archive (``docker save`` format: ``manifest.json``, an image config and one
layer tar) is written directly from Debian's ``busybox-static`` and imported into the node's
containerd with ``ctr images import`` (pods use ``imagePullPolicy: Never``). The same archive
carries the busybox image used by tests and the pause (sandbox) image: its default command
is ``sleep`` forever, which is all a pod sandbox needs.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
from pathlib import Path

BUSYBOX_IMAGE = "localhost/tether-busybox:latest"
PAUSE_IMAGE = "localhost/tether-pause:latest"
BUSYBOX_STATIC = Path("/bin/busybox")
# Applets linked into /bin of the image (busybox `wget` segfaults in a scratch image; `nc`
# works).
APPLETS = (
    "sh", "sleep", "echo", "cat", "ls", "env", "nc", "nslookup", "kill", "true", "false",
    "hostname", "head", "tail", "grep", "dd", "date", "id", "ps", "mkdir", "rm", "touch",
    "wc", "seq", "trap", "printf", "test", "[", "expr", "ip", "ifconfig", "timeout",
    "sha256sum",
)  # fmt: skip


class ImageUnavailable(RuntimeError):
    """The busybox-static binary needed for the test images is missing."""


def _add_file(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    tar.addfile(info, io.BytesIO(data))


def _add_dir(tar: tarfile.TarFile, name: str, mode: int = 0o755) -> None:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = mode
    tar.addfile(info)


def _rootfs_layer(busybox: Path) -> bytes:
    """The image's single layer: busybox as /bin/busybox plus applet symlinks."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("bin", "etc", "tmp", "proc", "sys", "dev", "var", "root"):
            _add_dir(tar, d, 0o1777 if d == "tmp" else 0o755)
        _add_file(tar, "bin/busybox", busybox.read_bytes(), 0o755)
        for applet in APPLETS:
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type = tarfile.SYMTYPE
            link.linkname = "busybox"
            tar.addfile(link)
        _add_file(tar, "etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n")
        _add_file(tar, "etc/group", b"root:x:0:\n")
    return buf.getvalue()


def write_busybox_archive(dest: Path, busybox: Path = BUSYBOX_STATIC) -> Path:
    """Writes a Docker image archive tagged as both :data:`BUSYBOX_IMAGE` and
    :data:`PAUSE_IMAGE`.

    Args:
        dest: The archive file to write.
        busybox: A statically linked busybox (Debian ``busybox-static``).

    Returns:
        ``dest``.

    Raises:
        ImageUnavailable: If ``busybox`` is missing.
    """
    if not busybox.is_file():
        raise ImageUnavailable(
            f"{busybox} not found: apt-get install busybox-static "
            "(tests/e2e/infra/setup.d/15-kube-node.sh)"
        )
    layer = _rootfs_layer(busybox)
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Env": ["PATH=/bin"],
            "Cmd": ["/bin/sleep", "2147483647"],
            "WorkingDir": "/",
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": "tests/e2e/infra/kube_images.py"}],
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    manifest = [
        {
            "Config": config_name,
            "RepoTags": [BUSYBOX_IMAGE, PAUSE_IMAGE],
            "Layers": [f"{diff_id[7:]}/layer.tar"],
        }
    ]
    tmp = dest.with_suffix(".tmp")
    with tarfile.open(tmp, mode="w") as tar:
        _add_file(tar, config_name, config_bytes)
        _add_dir(tar, diff_id[7:])
        _add_file(tar, f"{diff_id[7:]}/layer.tar", layer)
        _add_file(tar, "manifest.json", json.dumps(manifest).encode())
    shutil.move(str(tmp), dest)
    return dest
