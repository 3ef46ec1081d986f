"""The ``image`` workspace: an image built from the project directory on top of a role's image.

:func:`plan_image` is pure and cheap: it lists the files (``.tetherignore`` and
``.dockerignore`` honoured), hashes them with the Dockerfile and the base image, and names
the image by that hash, so an unchanged project maps to the same tag and is never rebuilt.
Schedulers put the plan in the dry-run (what would be built and pushed) and call
:func:`ensure_image` at submission, which builds only when the engine lacks the tag and
pushes to ``image_repo`` when there is one.

The Dockerfile is the project's ``Dockerfile.tether`` when it has one (the role's image is
passed as the build argument ``IMAGE``), else ``ARG IMAGE`` / ``FROM $IMAGE`` / ``COPY . .``:
the project lands in the base image's working directory.
"""

from __future__ import annotations

import fnmatch
import hashlib
import io
import os
import re
import stat
import tarfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from tether.errors import BackendError
from tether.specs import AppDef, CfgVal, Role
from tether.workspace.api import Workspace, WorkspaceMixin, walk_workspace

USER_DOCKERFILE = "Dockerfile.tether"
DOCKER_IGNORE = ".dockerignore"
GENERATED_DOCKERFILE = "ARG IMAGE\nFROM $IMAGE\nCOPY . .\n"
IMAGE_NAME_PREFIX = "tether-workspace"
BUILD_LOG_TAIL = 20
METADATA_KEY = "tether.image_build"
"""``Role.metadata`` key where schedulers keep a role's :class:`ImagePlan` until submission."""


class ImageBuildError(BackendError):
    """Building or pushing a workspace image failed; the message ends with the log's tail."""

    backend, kind = "docker", "build"


@dataclass
class ImagePlan:
    """What would be built for a role.

    Attributes:
        base_image: The role's image (``FROM``).
        image: The image the role runs: ``[image_repo/]tether-workspace-<project>:<hash>``.
        content_hash: sha256 of the files, the Dockerfile and the base image.
        dockerfile: The Dockerfile text.
        dockerfile_source: ``Dockerfile.tether`` or ``generated``.
        files: ``(local path, path in the build context)``, sorted by the latter.
        push: Whether the image is pushed (an ``image_repo`` was given).
        digest: The registry digest once pushed (``sha256:...``; empty before).
    """

    base_image: str
    image: str
    content_hash: str
    dockerfile: str
    dockerfile_source: str
    files: list[tuple[str, str]] = field(default_factory=list)
    push: bool = False
    digest: str = ""

    @property
    def pinned(self) -> str:
        """``repository@digest`` once pushed (what nodes should pull), else :attr:`image`."""
        if not self.digest:
            return self.image
        return f"{self.image.rpartition(':')[0]}@{self.digest}"

    def summary(self) -> dict[str, Any]:
        """What the dry-run shows."""
        return {
            "base_image": self.base_image,
            "image": self.image,
            "content_hash": self.content_hash,
            "dockerfile": self.dockerfile_source,
            "files": len(self.files),
            "push": self.push,
        }


def _docker_ignore(root: str) -> list[str]:
    path = os.path.join(root, DOCKER_IGNORE)
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        pats = [ln.strip() for ln in f if ln.strip() and not ln.lstrip().startswith("#")]
    return [p.strip("/").removeprefix("./") for p in pats]


def _ignored(rel: str, patterns: list[str]) -> bool:
    """``.dockerignore`` semantics: a match on the path or a parent; ``!`` re-includes."""
    parts = rel.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    out = False
    for pat in patterns:
        neg = pat.startswith("!")
        p = pat[1:] if neg else pat
        p = p.replace("**/", "*").replace("/**", "/*")
        if any(fnmatch.fnmatchcase(x, p) for x in prefixes):
            out = not neg
    return out


def project_files(root: str) -> Iterator[str]:
    """The files of a project that go into the image (``.tetherignore``/``.dockerignore``).

    Args:
        root: The project directory.

    Yields:
        Paths relative to ``root``, ``/``-separated.
    """
    patterns = _docker_ignore(root)
    for rel in walk_workspace(root):
        rel = rel.replace(os.sep, "/")
        if not _ignored(rel, patterns):
            yield rel


def _slug(text: str) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return s[:40].strip("-") or "project"


def plan_image(base_image: str, workspace: Workspace, image_repo: str | None = None
               ) -> ImagePlan:
    """Plans the image of a workspace (pure: reads files, builds nothing).

    Args:
        base_image: The role's image.
        workspace: The workspace (each project is copied to its destination in the context).
        image_repo: Registry/repository to push to (e.g. ``127.0.0.1:5000/team``).

    Returns:
        The plan.

    Raises:
        ValueError: When the role has no image to build on.
    """
    if not base_image:
        raise ValueError("an image workspace needs the role's image to build on (image is empty)")
    files: list[tuple[str, str]] = []
    dockerfile, source = GENERATED_DOCKERFILE, "generated"
    for src, dst in workspace.projects.items():
        root = os.path.abspath(src)
        dst = dst.strip("/")
        for rel in project_files(root):
            arc = f"{dst}/{rel}" if dst else rel
            files.append((os.path.join(root, rel), arc))
        user = os.path.join(root, USER_DOCKERFILE)
        if not dst and os.path.exists(user):
            with open(user, encoding="utf-8") as f:
                dockerfile, source = f.read(), USER_DOCKERFILE
    files.sort(key=lambda x: x[1])
    h = hashlib.sha256()
    h.update(f"base={base_image}\0dockerfile={dockerfile}\0".encode())
    for local, arc in files:
        mode = os.stat(local).st_mode
        h.update(f"{arc}\0{int(bool(mode & stat.S_IXUSR))}\0".encode())
        with open(local, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        h.update(b"\0")
    digest = h.hexdigest()
    first = next(iter(workspace.projects), "project")
    name = f"{IMAGE_NAME_PREFIX}-{_slug(os.path.basename(os.path.abspath(first)))}"
    if image_repo:
        name = f"{image_repo.rstrip('/')}/{name}"
    return ImagePlan(base_image=base_image, image=f"{name}:{digest[:16]}", content_hash=digest,
                     dockerfile=dockerfile, dockerfile_source=source, files=files,
                     push=bool(image_repo))


def context_tar(plan: ImagePlan) -> io.BytesIO:
    """The build context: the files plus the Dockerfile (as ``Dockerfile``), reproducible.

    Args:
        plan: The plan.

    Returns:
        An uncompressed tar, positioned at 0.
    """
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for local, arc in plan.files:
            info = tar.gettarinfo(local, arcname=arc)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            with open(local, "rb") as f:
                tar.addfile(info, f)
        data = plan.dockerfile.encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


def _tail(lines: list[str]) -> str:
    return "\n".join(ln.rstrip() for ln in lines[-BUILD_LOG_TAIL:])


def ensure_image(api: Any, plan: ImagePlan, on_log: Callable[[str], None] | None = None
                 ) -> bool:
    """Builds the planned image unless the engine has it, then pushes it when planned.

    Args:
        api: A ``docker.APIClient``.
        plan: The plan.
        on_log: Receives build output lines.

    Returns:
        Whether an image was built (False: the tag existed, nothing changed).

    Raises:
        ImageBuildError: With the build (or push) log's last lines.
    """
    import docker.errors

    built = False
    try:
        api.inspect_image(plan.image)
    except docker.errors.NotFound:
        built = True
        _build(api, plan, on_log)
    if plan.push:
        plan.digest = push(api, plan.image)
    return built


def pin_images(obj: Any, plans: list[ImagePlan]) -> Any:
    """Replaces every ``image`` value naming a pushed plan's tag by its digest reference.

    Args:
        obj: Manifests (dicts and lists, changed in place).
        plans: Plans after :func:`ensure_image`.

    Returns:
        ``obj``.
    """
    pinned = {p.image: p.pinned for p in plans if p.digest}
    if not pinned:
        return obj
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == "image" and isinstance(v, str) and v in pinned:
                obj[k] = pinned[v]
            else:
                pin_images(v, plans)
    elif isinstance(obj, list):
        for v in obj:
            pin_images(v, plans)
    return obj


def _build(api: Any, plan: ImagePlan, on_log: Callable[[str], None] | None) -> None:
    import docker.errors

    lines: list[str] = []
    try:
        for msg in api.build(fileobj=context_tar(plan), custom_context=True, tag=plan.image,
                             buildargs={"IMAGE": plan.base_image}, rm=True, forcerm=True,
                             decode=True, pull=False):
            text = msg.get("stream") or msg.get("status") or ""
            for ln in str(text).splitlines():
                lines.append(ln)
                if on_log is not None:
                    on_log(ln)
            if msg.get("error") or msg.get("errorDetail"):
                err = msg.get("error") or (msg.get("errorDetail") or {}).get("message", "")
                lines.append(str(err))
                raise ImageBuildError(
                    f"building {plan.image} from {plan.base_image} failed:\n{_tail(lines)}")
    except docker.errors.APIError as e:
        lines.append(str(getattr(e, "explanation", None) or e))
        raise ImageBuildError(
            f"building {plan.image} from {plan.base_image} failed:\n{_tail(lines)}") from e
    try:
        api.inspect_image(plan.image)
    except docker.errors.NotFound as e:
        raise ImageBuildError(
            f"building {plan.image} produced no image:\n{_tail(lines)}") from e


def push(api: Any, image: str) -> str:
    """Pushes ``image`` and returns its registry digest (``sha256:...``).

    Args:
        api: A ``docker.APIClient``.
        image: ``registry/repo:tag``.

    Returns:
        The digest the registry reported ("" when the engine reports none).

    Raises:
        ImageBuildError: With the push log's last lines.
    """
    import docker.errors

    repo, _, tag = image.rpartition(":")
    lines: list[str] = []
    digest = ""
    try:
        for msg in api.push(repo, tag=tag, stream=True, decode=True):
            if msg.get("error") or msg.get("errorDetail"):
                err = msg.get("error") or (msg.get("errorDetail") or {}).get("message", "")
                raise ImageBuildError(f"pushing {image} failed:\n{_tail([*lines, str(err)])}")
            aux = msg.get("aux") or {}
            digest = aux.get("Digest", digest)
            text = msg.get("status") or msg.get("stream") or ""
            lines.extend(str(text).splitlines())
            m = re.search(r"digest: (sha256:[0-9a-f]{64})", str(text))
            if m:
                digest = m.group(1)
    except docker.errors.APIError as e:
        raise ImageBuildError(
            f"pushing {image} failed: {getattr(e, 'explanation', None) or e}") from e
    return digest


def planned_images(app: AppDef | None) -> list[ImagePlan]:
    """The distinct image plans the roles of ``app`` carry (see :data:`METADATA_KEY`)."""
    out: list[ImagePlan] = []
    for role in app.roles if app is not None else []:
        plan = role.metadata.get(METADATA_KEY)
        if isinstance(plan, ImagePlan) and all(p.image != plan.image for p in out):
            out.append(plan)
    return out


class ImageWorkspaceMixin(WorkspaceMixin[Any]):
    """For schedulers that run images: plans a role's workspace image at dry-run time.

    The role's image becomes the planned image and the plan goes into ``role.metadata``;
    the scheduler's ``schedule`` calls :func:`ensure_image` for :func:`planned_images` of the
    app before submitting. Schedulers whose nodes pull images set
    :attr:`workspace_needs_push`, so a workspace without ``image_repo`` is an error at
    dry-run instead of a job that cannot pull.
    """

    workspace_needs_push: bool = False
    """Nodes pull the image from a registry: ``image_repo`` is required."""

    def caching_build_workspace_and_update_role(
        self, role: Role, cfg: Mapping[str, CfgVal], build_cache: dict[object, object]
    ) -> None:
        """Plans the role's workspace image and points the role at it (builds nothing).

        Args:
            role: The role (updated in place).
            cfg: Resolved run options (``image_repo``).
            build_cache: Shared by the roles of one submission.

        Raises:
            ValueError: When the image must be pushed and ``image_repo`` is not set.
        """
        if role.workspace is None:
            return
        repo = cfg.get("image_repo")
        if self.workspace_needs_push and not repo:
            raise ValueError(
                f"role {role.name!r} has a workspace ({role.workspace}); its image must be "
                "pushed for the nodes to pull it: set -cfg image_repo=REGISTRY/REPO"
            )
        key = (role.image, str(role.workspace), repo)
        plan = build_cache.get(key)
        if not isinstance(plan, ImagePlan):
            plan = plan_image(role.image, role.workspace, str(repo) if repo else None)
            build_cache[key] = plan
        role.metadata[METADATA_KEY] = plan
        role.image = plan.image
        role.workspace = None
