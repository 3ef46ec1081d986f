"""The tether image built from this checkout into a private podman, for the tests that run it.

``images/build.sh`` makes the image on top of a Debian base made by debootstrap from Debian's
packages (nothing is pulled). The base tarball is cached outside the repository, in
``${TETHER_CACHE:-~/.cache/tether}/image/``, keyed by the suite, the package list and the
mirror; ``tests/e2e/infra/setup.d/40-tether-image.sh`` (run by ``make e2e-infra``) makes it.
Each test session imports it and installs tether's wheel on top (about a minute).

Gate: the image is built when the base is cached or ``TETHER_BUILD_IMAGE=1`` is set (then a
missing base is made first, which needs root and debootstrap). Otherwise the tests skip and
say why; under ``CI`` that is a failure, since the setup step makes the base.
"""

from __future__ import annotations

import glob
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.e2e.infra.podman import PodmanService, PodmanUnavailable

REPO = Path(__file__).resolve().parents[3]
IMAGE = "localhost/tether:e2e"
"""The name the tests give the image (never the default, which is a remote one)."""
BUILD_TIMEOUT_S = 1800


class TetherImageUnavailable(RuntimeError):
    """The image cannot be built here; the message says why."""


def cache_dir() -> Path:
    """Where ``images/build.sh`` caches the Debian base."""
    root = os.environ.get("TETHER_CACHE") or str(Path.home() / ".cache" / "tether")
    return Path(root) / "image"


def base_cached() -> bool:
    """Whether a Debian base tarball is cached."""
    return bool(glob.glob(str(cache_dir() / "base-*.tar")))


def skip_reason() -> str | None:
    """Why the image is not built in this run (None: it is)."""
    if base_cached() or os.environ.get("TETHER_BUILD_IMAGE"):
        return None
    return (f"no cached Debian base for the tether image in {cache_dir()}; run "
            "tests/e2e/infra/setup.d/40-tether-image.sh (debootstrap, a few minutes once) or "
            "set TETHER_BUILD_IMAGE=1")


@dataclass
class TetherImage:
    """A podman serving the Docker API that holds the tether image.

    Attributes:
        podman: The running service (its busybox image is there too).
        image: The tether image's name in it.
    """

    podman: PodmanService
    image: str = IMAGE

    @property
    def docker_host(self) -> str:
        """``DOCKER_HOST`` of the service."""
        return self.podman.docker_host


def build_into(podman: PodmanService, image: str = IMAGE) -> None:
    """Builds the tether image from this checkout into a running private podman.

    Args:
        podman: The started service.
        image: The tag to give it.

    Raises:
        TetherImageUnavailable: When the build fails (with the end of its log).
    """
    env = {**podman.env(), "ENGINE": shlex.join(podman.podman()), "PYTHON": sys.executable}
    try:
        res = subprocess.run(["bash", str(REPO / "images" / "build.sh"), image], env=env,
                             capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        raise TetherImageUnavailable(f"images/build.sh ran past {BUILD_TIMEOUT_S}s") from e
    if res.returncode != 0:
        raise TetherImageUnavailable(
            f"images/build.sh {image} failed ({res.returncode}): {res.stderr[-4000:]}")


def start() -> TetherImage:
    """Starts a private podman and builds the image into it (stop ``.podman`` when done).

    Raises:
        PodmanUnavailable: podman cannot run containers here.
        TetherImageUnavailable: The build failed.
    """
    service = PodmanService().start()
    try:
        build_into(service)
    except BaseException:
        service.stop()
        raise
    return TetherImage(service)


__all__ = ["IMAGE", "PodmanUnavailable", "TetherImage", "TetherImageUnavailable",
           "base_cached", "build_into", "cache_dir", "skip_reason", "start"]
