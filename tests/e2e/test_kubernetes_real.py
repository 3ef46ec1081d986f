"""The kubernetes backend on a real kubelet: what only a container runtime can show.

Runs on the session's real single-node cluster (``tests/e2e/infra/kube_node.py``): pods are
containers of the tether image under containerd. What the test kubelet of
``test_kubernetes_e2e.py`` could only simulate is checked here for real: cancel delivers
SIGTERM and, after the pod's grace period, SIGKILL; a container over its memory limit is
reported as OOM-killed; exit codes and messages come from the runtime.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from tests.e2e.infra.kube import create_namespace
from tests.e2e.infra.kube_node_fixtures import RealKube
from tests.schedulers.contract.harness import wait_for, wait_state
from tether.schedulers.api import Scheduler
from tether.specs import AppDef, AppState, BindMount, Resource, Role
from tether.specs.overlays import set_overlay

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]


@pytest.fixture
def sched(real_kube: RealKube, request: pytest.FixtureRequest) -> Iterator[Scheduler[Any]]:
    """A kubernetes scheduler on a namespace of its own."""
    from tether.schedulers.kubernetes import create_scheduler

    ns = "real-" + hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:10]
    create_namespace(real_kube.api, ns)
    s = create_scheduler("e2e", client=real_kube.api, namespace=ns)
    s.test_namespace = ns  # type: ignore[attr-defined]
    try:
        yield s
    finally:
        s.close()


def py_role(image: str, code: str, shared: Path, **kw: Any) -> Role:
    """A role running ``python3 -c code`` of the tether image, ``shared`` mounted."""
    return Role(
        "main", image=image, entrypoint="python3", args=["-c", code],
        env={"SHARED": str(shared), "PYTHONUNBUFFERED": "1"},
        mounts=[BindMount(src_path=str(shared), dst_path=str(shared))], **kw,
    )  # fmt: skip


def submit(sched: Scheduler[Any], app: AppDef) -> str:
    """Submits with the node's imported images (nothing can be pulled)."""
    ns = sched.test_namespace  # type: ignore[attr-defined]
    return sched.schedule(sched.submit_dryrun(app, {"namespace": ns, "image_pull_policy": "Never"}))


def container_pid(real_kube: RealKube, app_id: str) -> int:
    """Host pid of the app's running container's init process (from runc's state)."""
    from kubernetes import client

    from tether.schedulers.kubernetes.naming import LABEL_APP_ID

    ns, _, name = app_id.partition(":")
    pods = (
        client.CoreV1Api(real_kube.api)
        .list_namespaced_pod(ns, label_selector=f"{LABEL_APP_ID}={name}")
        .items
    )
    for pod in pods:
        for st in pod.status.container_statuses or []:
            if st.state.running and st.container_id:
                cid = st.container_id.rpartition("://")[2]
                root = real_kube.node.dir / "containerd" / "runc" / "k8s.io"
                out = subprocess.run(
                    ["runc", "--root", str(root), "state", cid],
                    capture_output=True,
                    text=True,
                    check=False,
                    timeout=30,
                )
                if out.returncode == 0:
                    return int(json.loads(out.stdout)["pid"])
    return 0


def test_cancel_sends_sigterm_then_sigkill_after_the_grace_period(
    sched: Scheduler[Any], real_kube: RealKube, real_kube_tether_image: str, tmp_path: Path
) -> None:
    """A program that ignores SIGTERM gets it on cancel, and is killed (SIGKILL) once the
    pod's grace period is over."""
    tmp_path.chmod(0o777)
    code = (
        "import os, signal, time\n"
        "def on_term(*_):\n"
        "    open(os.environ['SHARED'] + '/term', 'w').write('TERM')\n"
        "signal.signal(signal.SIGTERM, on_term)\n"
        "open(os.environ['SHARED'] + '/started', 'w').write('1')\n"
        "while True:\n"
        "    time.sleep(0.1)\n"
    )
    role = py_role(real_kube_tether_image, code, tmp_path)
    set_overlay(role, "kubernetes", "V1Pod", {"spec": {"terminationGracePeriodSeconds": 2}})
    app_id = submit(sched, AppDef("term", roles=[role]))
    wait_for("the program to start", lambda: (tmp_path / "started").exists())
    pid = wait_for("its container", lambda: container_pid(real_kube, app_id))
    sched.cancel(app_id)
    assert wait_state(sched, app_id).state == AppState.CANCELLED
    wait_for("SIGTERM to reach the program", lambda: (tmp_path / "term").exists())
    # it ignores SIGTERM: only the kubelet's SIGKILL after the grace period ends it
    wait_for("the container to be killed", lambda: not Path(f"/proc/{pid}").exists())
    assert (tmp_path / "term").read_text() == "TERM"


def test_container_over_its_memory_limit_is_reported_oom_killed(
    sched: Scheduler[Any], real_kube_tether_image: str, tmp_path: Path
) -> None:
    """The kernel's OOM killer ends a container over its memory limit; tether reports the
    replica FAILED with the runtime's reason (OOMKilled) and exit code 137."""
    code = "b = bytearray(512 * 1024 * 1024)\nprint('unreachable', len(b))\n"
    role = py_role(real_kube_tether_image, code, tmp_path,
                   resource=Resource(cpu=0.5, gpu=0, memMB=64))  # fmt: skip
    app_id = submit(sched, AppDef("oom", roles=[role]))
    desc = wait_state(sched, app_id)
    assert desc.state == AppState.FAILED, desc
    rep = desc.roles_statuses[0].replicas[0]
    assert rep.exit_code == 137, rep
    assert "OOMKilled" in rep.msg, rep


def test_exit_code_and_message_come_from_the_runtime(
    sched: Scheduler[Any], real_kube_tether_image: str, tmp_path: Path
) -> None:
    """A program's exit code reaches describe, with the runtime's reason in the message,
    and its output comes back through the kubelet."""
    code = "import sys\nprint('about to fail')\nsys.exit(3)\n"
    app_id = submit(sched, AppDef("exit3", roles=[py_role(real_kube_tether_image, code, tmp_path)]))
    desc = wait_state(sched, app_id)
    assert desc.state == AppState.FAILED, desc
    rep = desc.roles_statuses[0].replicas[0]
    assert rep.exit_code == 3, rep
    assert "exit code 3" in rep.msg and "Error" in rep.msg, rep
    assert "about to fail" in "".join(sched.log_iter(app_id, "main", 0))


# ---- distributed training ---------------------------------------------------------------------
TRAIN_DDP = Path(__file__).resolve().parents[2] / "examples" / "apps" / "train_ddp.py"


def torch_for_the_image(tmp_path: Path) -> tuple[dict[str, str], list[str]]:
    """The env and mounts that lend the tether image this venv's torch (the image has none;
    nothing can be installed in a pod here): a directory of links to the venv's packages,
    tether's own left out so the image's tether is the one imported. ``dist.ddp`` runs the
    image's own ``python`` (``python -m torch.distributed.run``)."""
    import torch

    site = Path(torch.__file__).resolve().parents[1]
    lib = tmp_path / "pylib"
    lib.mkdir()
    for entry in site.iterdir():
        if entry.suffix == ".pth" or entry.name.startswith(("tether", "__editable__")):
            continue
        (lib / entry.name).symlink_to(entry)
    env = {"PYTHONPATH": str(lib)}
    mounts = [f"type=bind,src={p},dst={p},readonly" for p in (site, lib, TRAIN_DDP.parent)]
    return env, mounts


def test_ddp_two_nodes_by_two_processes_trains_as_on_local_cwd(
    sched: Scheduler[Any], real_kube: RealKube, real_kube_tether_image: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """``dist.ddp -j 2x2`` on gloo: two pods (each torchrun with two workers) meet at rank 0's
    pod by its DNS name (the headless Service) and train the same model, weight for weight,
    as the same job on ``local_cwd`` (run alongside). Rank 0 saves the model (``--model-dir``,
    a ``hostPath`` on the node). The logs of both replicas come back whole through the
    kubelet: every epoch's loss, as logged by rank 0, is the one logged on ``local_cwd``, and
    all four ranks report the end of their training."""
    torch = pytest.importorskip("torch")
    from tests.e2e.infra.ports import free_port
    from tether.components.dist import ddp
    from tether.runner import Runner

    env, mounts = torch_for_the_image(tmp_path)
    on_kube, on_local = tmp_path / "kube-model", tmp_path / "local-model"
    on_kube.mkdir(mode=0o777)
    mounts.append(f"type=bind,src={on_kube},dst={on_kube}")
    job = ddp("--model-dir", str(on_kube), script=str(TRAIN_DDP), j="2x2", cpu=0, memMB=0,
              image=real_kube_tether_image, env=env, mounts=mounts)  # fmt: skip
    local = ddp("--model-dir", str(on_local), script=str(TRAIN_DDP), j="2x2", cpu=0, memMB=0,
                rdzv_port=free_port())  # fmt: skip
    monkeypatch.setenv("TETHER_STATE_DIR", str(tmp_path / "state"))
    # dist.ddp runs `python -m torch.distributed.run`: on local_cwd, this venv's python (the
    # one with torch), whether or not the venv is activated
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    with Runner() as runner:
        app_id = submit(sched, job)
        handle = runner.run(local, "local_cwd", {})
        st = runner.wait(handle, wait_interval=0.5, timeout=600)
        local_text = "".join(ln for k in (0, 1) for ln in runner.log_lines(handle, "train_ddp", k))
    assert st is not None and st.state == AppState.SUCCEEDED, local_text[-3000:]
    desc = wait_state(sched, app_id, timeout=600)
    kube_text = "".join(ln for k in (0, 1) for ln in sched.log_iter(app_id, "train_ddp", k))
    if desc.state != AppState.SUCCEEDED:
        pytest.fail(f"{desc}\n{kube_text[-3000:]}")
    losses = re.compile(r"epoch (\d+): loss ([0-9.]+)")
    kube_losses, local_losses = losses.findall(kube_text), losses.findall(local_text)
    assert len(kube_losses) == len(local_losses) > 0, kube_text[-3000:]
    for (epoch, kube_loss), (local_epoch, local_loss) in zip(kube_losses, local_losses):
        assert epoch == local_epoch and abs(float(kube_loss) - float(local_loss)) < 2e-5
    assert sorted(re.findall(r"rank (\d): done", kube_text)) == ["0", "1", "2", "3"], kube_text
    assert [r.hostname for r in desc.roles_statuses[0].replicas] == [real_kube.node.name] * 2
    kube_weights = torch.load(on_kube / "model.pt")
    local_weights = torch.load(on_local / "model.pt")
    assert kube_weights.keys() == local_weights.keys() == {"weight", "bias"}
    for name, value in kube_weights.items():
        assert torch.allclose(value, local_weights[name], atol=1e-5), (name, value)
