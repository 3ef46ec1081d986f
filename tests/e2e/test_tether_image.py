"""The tether image, built from the repository by ``images/build.sh`` into a private podman,
then run by ``local_docker``.

The image comes from the session fixture ``tether_image`` (``tests/e2e/infra/tether_image.py``):
the Debian base is made by debootstrap and cached in ``~/.cache/tether/image`` by
``tests/e2e/infra/setup.d/40-tether-image.sh`` (``make e2e-infra``, so CI runs these tests);
without it the tests skip with the reason (fail under ``CI``).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("docker")

from tests.e2e.infra.tether_image import IMAGE, TetherImage
from tether.schedulers.local_docker.scheduler import LocalDockerScheduler
from tether.specs import AppDef, AppState, BindMount, Role, is_terminal

pytestmark = pytest.mark.e2e


def test_image_runs_tether(tether_image: TetherImage) -> None:
    sched = LocalDockerScheduler("img", docker_host=tether_image.docker_host)
    script = ("import tether, tether.specs, tether.schedulers.local_docker.render as r; "
              "from tether.components import DEFAULT_IMAGE; print('tether-ok', DEFAULT_IMAGE)")
    # `python`, not `python3`: the builtin components (dist.ddp) run `python`
    app = AppDef("img", roles=[Role("main", image=IMAGE, entrypoint="python",
                                    args=["-c", script], env={"TETHER_IMAGE": IMAGE})])
    mine: list[str] = []
    try:
        app_id = sched.submit(app, {})
        mine.append(app_id)
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
        mine.append(hid)
        deadline = time.monotonic() + 120
        while not is_terminal(sched.describe(hid).state):  # type: ignore[union-attr]
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert sched.describe(hid).state == AppState.SUCCEEDED  # type: ignore[union-attr]
        assert "usage" in "".join(sched.log_iter(hid, "main", 0)).lower()
    finally:
        for a in mine:
            sched.delete(a)
        sched.close()


DDP = """
import os, datetime, torch, torch.distributed as dist
rank, world = int(os.environ["TETHER_REPLICA_ID"]), int(os.environ["TETHER_NUM_REPLICAS"])
dist.init_process_group("gloo", init_method=f"tcp://{os.environ['TETHER_RANK0_HOST']}:29500",
                        rank=rank, world_size=world, timeout=datetime.timedelta(seconds=90))
t = torch.tensor([rank + 1.0])
dist.all_reduce(t)
print(f"rank {rank}/{world} sum {t.item():.0f}")
dist.destroy_process_group()
"""


def test_torch_distributed_across_containers(tether_image: TetherImage) -> None:
    """Two containers rendezvous at $TETHER_RANK0_HOST and all-reduce over gloo (CPU).

    The image has no torch: the test's own (CPU) torch is bind-mounted read-only from the
    venv (same Python minor version as the image's python3).
    """
    torch = pytest.importorskip("torch")
    site = str(Path(torch.__file__).resolve().parents[1])
    if sys.version_info[:2] != (3, 11):
        pytest.skip("the image has python3.11; the venv's torch is for another Python")
    sched = LocalDockerScheduler("ddp", docker_host=tether_image.docker_host)
    role = Role("trainer", image=IMAGE, entrypoint="python3", args=["-c", DDP], num_replicas=2,
                env={"PYTHONPATH": "/opt/site"},
                mounts=[BindMount(src_path=site, dst_path="/opt/site", read_only=True)])
    app_id = ""
    try:
        app_id = sched.submit(AppDef("ddp", roles=[role]), {})
        deadline = time.monotonic() + 240
        while True:
            desc = sched.describe(app_id)
            assert desc is not None, tether_image.podman.service_log()[-3000:]
            if is_terminal(desc.state):
                break
            assert time.monotonic() < deadline, desc
            time.sleep(0.5)
        outs = ["".join(sched.log_iter(app_id, "trainer", k)) for k in range(2)]
        assert desc is not None and desc.state == AppState.SUCCEEDED, (desc, outs)
        assert [o.splitlines()[-1] for o in outs] == ["rank 0/2 sum 3", "rank 1/2 sum 3"]
    finally:
        if app_id:
            sched.delete(app_id)
        sched.close()
