"""The tether image, built from the repository by ``images/build.sh`` into a private podman,
then run by ``local_docker``.

The Debian base is made by debootstrap (root and Debian's mirror needed) and cached in
``~/.cache/tether/image`` (or ``$TETHER_CACHE/image``), so only the first build is slow.
Gate: the test runs when that cache exists or ``TETHER_BUILD_IMAGE=1`` (CI), else it skips
with the reason.
"""

from __future__ import annotations

import glob
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("docker")

from tests.e2e.infra.podman import PodmanService, PodmanUnavailable
from tether.schedulers.local_docker.scheduler import LocalDockerScheduler
from tether.specs import AppDef, AppState, Role, is_terminal

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
IMAGE = "localhost/tether:e2e"


def _cache() -> Path:
    return Path(os.environ.get("TETHER_CACHE") or Path.home() / ".cache" / "tether") / "image"


@pytest.fixture(scope="module")
def podman_with_image() -> Iterator[PodmanService]:
    if not os.environ.get("TETHER_BUILD_IMAGE") and not glob.glob(str(_cache() / "base-*.tar")):
        pytest.skip(f"no cached Debian base in {_cache()}; set TETHER_BUILD_IMAGE=1 to make it "
                    "(debootstrap, a few minutes once)")
    service = PodmanService()
    try:
        service.start()
    except PodmanUnavailable as e:
        if os.environ.get("CI"):
            pytest.fail(str(e))
        pytest.skip(f"podman cannot run containers here: {e}")
    try:
        env = {**service.env(), "ENGINE": shlex.join(service.podman()),
               "PYTHON": sys.executable}
        res = subprocess.run([str(REPO / "images" / "build.sh"), IMAGE], env=env,
                             capture_output=True, text=True, timeout=1800)
        assert res.returncode == 0, res.stderr[-4000:]
        yield service
    finally:
        service.stop()


def test_image_runs_tether(podman_with_image: PodmanService) -> None:
    sched = LocalDockerScheduler("img", docker_host=podman_with_image.docker_host)
    script = ("import tether, tether.specs, tether.schedulers.local_docker.render as r; "
              "from tether.components import DEFAULT_IMAGE; print('tether-ok', DEFAULT_IMAGE)")
    app = AppDef("img", roles=[Role("main", image=IMAGE, entrypoint="python3",
                                    args=["-c", script], env={"TETHER_IMAGE": IMAGE})])
    try:
        app_id = sched.submit(app, {})
        deadline = time.monotonic() + 120
        while not is_terminal((desc := sched.describe(app_id)).state):  # type: ignore[union-attr]
            assert time.monotonic() < deadline
            time.sleep(0.2)
        out = "".join(sched.log_iter(app_id, "main", 0))
        assert desc is not None and desc.state == AppState.SUCCEEDED, (desc, out)
        assert out == f"tether-ok {IMAGE}\n"
        help_app = AppDef("help", roles=[Role("main", image=IMAGE, entrypoint="tether",
                                              args=["--help"])])
        hid = sched.submit(help_app, {})
        deadline = time.monotonic() + 120
        while not is_terminal(sched.describe(hid).state):  # type: ignore[union-attr]
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert sched.describe(hid).state == AppState.SUCCEEDED  # type: ignore[union-attr]
        assert "usage" in "".join(sched.log_iter(hid, "main", 0)).lower()
    finally:
        for a in sched.list():
            sched.delete(a.app_id)
        sched.close()
