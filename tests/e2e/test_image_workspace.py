"""The ``image`` workspace for real: built by podman on top of the busybox image, cached by
content hash, run by ``local_docker``, and pushed to a real registry on 127.0.0.1.

Needs podman (``setup.d/20-podman.sh``) and docker-registry (``setup.d/30-registry.sh``);
skipped with the reason when they are missing, except in CI (``CI`` set).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("docker")

from tests.e2e.infra.podman import (
    BUSYBOX_IMAGE,
    PodmanService,
    PodmanUnavailable,
    tether_apps_here,
)
from tests.e2e.infra.registry import Registry, RegistryUnavailable
from tether.runner import get_runner
from tether.specs import AppDef, AppState, Role
from tether.workspace import Workspace
from tether.workspace.image import ImageBuildError, ensure_image, plan_image

pytestmark = pytest.mark.e2e


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def registry() -> Iterator[Registry]:
    reg = Registry()
    try:
        reg.start()
    except RegistryUnavailable as e:
        _unavailable(str(e))
    try:
        yield reg
    finally:
        reg.stop()


@pytest.fixture(scope="module")
def podman(registry: Registry) -> Iterator[PodmanService]:
    service = PodmanService(insecure_registries=(registry.address,))
    try:
        service.start()
    except PodmanUnavailable as e:
        _unavailable(f"podman cannot run containers here: {e}")
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture
def api(podman: PodmanService) -> Iterator[Any]:
    import docker

    client = docker.APIClient(base_url=podman.docker_host, version="auto", timeout=300)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    proj = tmp_path / "myproj"
    proj.mkdir()
    (proj / "main.sh").write_text("echo version-1\n")
    (proj / "secret.env").write_text("TOKEN=x\n")
    (proj / "build").mkdir()
    (proj / "build" / "big.bin").write_text("junk")
    (proj / "notes.txt").write_text("not shipped")
    (proj / ".dockerignore").write_text("build\n*.env\n")
    (proj / ".tetherignore").write_text("notes.txt\n")
    return proj


def role(image: str = BUSYBOX_IMAGE) -> Role:
    return Role("main", image=image, entrypoint="sh", args=["-c", "sh main.sh; ls"])


def run_app(podman: PodmanService, project: Path, cfg: dict[str, Any] | None = None
            ) -> tuple[str, list[str], str]:
    with get_runner("ws", docker_host=podman.docker_host) as runner:
        info = runner.dryrun(AppDef("ws", roles=[role()]), "local_docker", cfg or {},
                             workspace=str(project))
        image = info.request.containers[0].body["Image"]
        handle = runner.schedule(info)
        deadline = time.monotonic() + 120
        while True:
            st = runner.status(handle)
            assert st is not None
            if st.is_terminal():
                break
            assert time.monotonic() < deadline, st
            time.sleep(0.2)
        assert st.state == AppState.SUCCEEDED, st
        out = list(runner.log_lines(handle, "main", 0))
        runner.delete(handle)
        return image, [ln.rstrip("\n") for ln in out], str(info)


def test_build_run_cache_and_rebuild(podman: PodmanService, project: Path, api: Any) -> None:
    image, out, dry = run_app(podman, project)
    assert out[0] == "version-1"
    assert "main.sh" in out and "secret.env" not in out and "build" not in out
    assert "notes.txt" not in out
    assert '"image": "' + image in dry and '"push": false' in dry
    created = api.inspect_image(image)["Id"]

    # unchanged project: same tag, no build
    plan = plan_image(BUSYBOX_IMAGE, Workspace({str(project): ""}))
    assert plan.image == image
    assert ensure_image(api, plan) is False
    again, out2, _ = run_app(podman, project)
    assert out2[0] == "version-1"
    assert again == image and api.inspect_image(image)["Id"] == created

    # an ignored file changes nothing; a shipped file changes the tag and the output
    (project / "build" / "big.bin").write_text("other junk")
    assert plan_image(BUSYBOX_IMAGE, Workspace({str(project): ""})).image == image
    (project / "main.sh").write_text("echo version-2\n")
    changed, out3, _ = run_app(podman, project)
    assert changed != image and out3[0] == "version-2"


def test_dryrun_builds_nothing(podman: PodmanService, project: Path, api: Any) -> None:
    (project / "main.sh").write_text("echo dry\n")
    with get_runner("ws", docker_host=podman.docker_host) as runner:
        info = runner.dryrun(AppDef("ws", roles=[role()]), "local_docker", {},
                             workspace=str(project))
    image = info.request.builds[0].image
    import docker.errors

    with pytest.raises(docker.errors.ImageNotFound):
        api.inspect_image(image)


def test_user_dockerfile_and_build_failure(podman: PodmanService, project: Path, api: Any
                                           ) -> None:
    (project / "Dockerfile.tether").write_text(
        "ARG IMAGE\nFROM $IMAGE\nCOPY main.sh /opt/main.sh\nRUN echo built > /opt/flag\n")
    plan = plan_image(BUSYBOX_IMAGE, Workspace({str(project): ""}))
    assert plan.dockerfile_source == "Dockerfile.tether"
    assert ensure_image(api, plan) is True
    (project / "Dockerfile.tether").write_text(
        "ARG IMAGE\nFROM $IMAGE\nRUN echo about-to-fail && exit 42\n")
    bad = plan_image(BUSYBOX_IMAGE, Workspace({str(project): ""}))
    with pytest.raises(ImageBuildError) as e:
        ensure_image(api, bad)
    assert "about-to-fail" in str(e.value) or "42" in str(e.value)
    # nothing is submitted when the build fails
    with get_runner("ws", docker_host=podman.docker_host) as runner:
        info = runner.dryrun(AppDef("ws", roles=[role()]), "local_docker", {},
                             workspace=str(project))
        app_id = info.request.app_id
        before = tether_apps_here(api)
        with pytest.raises(ImageBuildError):
            runner.schedule(info)
        # neither the app nor its network exists; nothing of any app was made on the engine
        # (the listing shows other podmans' apps, whose networks share the host's CNI
        # directory: another test group's, changing meanwhile)
        assert app_id not in [a.app_id for a in runner.list("local_docker")]
        assert api.networks(names=[app_id]) == []
        assert tether_apps_here(api) == before


def test_push_to_registry(podman: PodmanService, registry: Registry, project: Path, api: Any
                          ) -> None:
    repo = f"{registry.address}/team"
    plan = plan_image(BUSYBOX_IMAGE, Workspace({str(project): ""}), image_repo=repo)
    assert plan.image.startswith(repo + "/tether-workspace-myproj:") and plan.push
    ensure_image(api, plan)
    name, tag = plan.image[len(registry.address) + 1:].rsplit(":", 1)
    assert registry.tags(name) == [tag]
    digest = registry.manifest_digest(name, tag)
    assert digest.startswith("sha256:") and plan.digest == digest
    assert plan.pinned == f"{repo}/tether-workspace-myproj@{digest}"


def test_kubernetes_submission_pins_the_pushed_digest(
    podman: PodmanService, registry: Registry, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Kubernetes path: the dry-run names the tag; submission builds, pushes, and the
    Jobs reference the pushed digest (the apiserver here is replaced by a recorder: the
    kubernetes e2e tests cover creating Jobs for real)."""
    from tether.schedulers.kubernetes.scheduler import create_scheduler

    monkeypatch.setenv("DOCKER_HOST", podman.docker_host)
    created: list[dict[str, Any]] = []

    class Recorder:  # stands in for the apiserver (see the docstring)
        def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
            created.append(body)
            return body

    sched = create_scheduler("t")
    monkeypatch.setattr(sched, "_kube", lambda context=None: Recorder())
    repo = f"{registry.address}/k8s"
    info = sched.submit_dryrun(_with_workspace(sched, project, {"image_repo": repo}),
                               {"image_repo": repo})
    assert info.app is not None
    tag_ref = info.app.roles[0].image
    assert f"image: {tag_ref}" in str(info) and "@sha256:" not in str(info)
    sched.schedule(info)
    images = [c["image"] for m in created if m["kind"] == "Job"
              for c in m["spec"]["template"]["spec"]["containers"]]
    name, tag = tag_ref[len(registry.address) + 1:].rsplit(":", 1)
    assert images == [f"{tag_ref.rsplit(':', 1)[0]}@{registry.manifest_digest(name, tag)}"]


def _with_workspace(sched: Any, project: Path, cfg: dict[str, Any]) -> AppDef:
    r = role()
    r.workspace = Workspace({str(project): ""})
    sched.build_workspaces([r], sched.run_opts().resolve(cfg, "kubernetes"))
    return AppDef("ws", roles=[r])
