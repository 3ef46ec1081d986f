"""The ``kubernetes`` scheduler class (see the package docs)."""

from __future__ import annotations

import builtins
import logging
import math
import re
import secrets
import string
import threading
import time
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, ClassVar

from tether.schedulers.api import (
    DescribeAppResponse,
    ListAppResponse,
    Scheduler,
    Stream,
    filter_regex,
)
from tether.schedulers.capabilities import Capabilities, MountKind
from tether.schedulers.kubernetes.checks import check_app, check_opts
from tether.schedulers.kubernetes.client import (
    KubeApi,
    KubernetesApiError,
    core_path,
    group_path,
    load_api_client,
    path_for,
)
from tether.schedulers.kubernetes.fields import parse_time
from tether.schedulers.kubernetes.naming import (
    ANN_GANG,
    ANN_STOP_REASON,
    ANN_STOPPED,
    ANN_SUBMITTED,
    APPWRAPPER_GROUP,
    APPWRAPPER_PLURAL,
    APPWRAPPER_VERSION,
    LABEL_APP_ID,
    LABEL_JOB_KEY,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    VOLCANO_BUS_GROUP,
    VOLCANO_BUS_VERSION,
    VOLCANO_GROUP,
    VOLCANO_PLURAL,
    VOLCANO_VERSION,
    label_value,
    make_app_name,
)
from tether.schedulers.kubernetes.options import (
    DEFAULT_NAMESPACE,
    GANG_APPWRAPPER,
    GANG_VOLCANO,
    KubernetesOpts,
)
from tether.schedulers.kubernetes.reconcile import job_active
from tether.schedulers.kubernetes.render import KubernetesRequest, format_request, render
from tether.schedulers.kubernetes.status import (
    APPWRAPPER_STATE,
    IMAGE_ERRORS_FATAL,
    IMAGE_ERRORS_RETRYING,
    JOB_CONDITION_STATE,
    POD_PHASE_STATE,
    STOPPED_STATE,
    VOLCANO_PHASE_STATE,
    analyze,
)
from tether.schedulers.kubernetes.views import AppView, Replica
from tether.specs import (
    AppDef,
    AppDryRunInfo,
    AppState,
    CfgVal,
    ReplicaStatus,
    RetryPolicy,
    RoleStatus,
    StructuredOpts,
)
from tether.specs.status import is_terminal
from tether.workspace.image import (
    ImageWorkspaceMixin,
    ensure_image,
    pin_images,
    planned_images,
)

log: logging.Logger = logging.getLogger(__name__)

BACKEND = "kubernetes"
LOG_POLL_S = 1.0
LOG_READ_TIMEOUT_S = 120.0


# ---- the scheduler -----------------------------------------------------------------------------
def _random_suffix(n: int = 6) -> str:
    alphabet = string.ascii_lowercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(n))


def _selector(name: str | None = None, job_key: str | None = None) -> str:
    parts = [f"{LABEL_MANAGED_BY}={MANAGED_BY}"]
    if name:
        parts.append(f"{LABEL_APP_ID}={name}")
    if job_key:
        parts.append(f"{LABEL_JOB_KEY}={label_value(job_key)}")
    return ",".join(parts)


def _jobs_path(ns: str | None, name: str | None = None) -> str:
    return group_path("batch", "v1", "jobs", ns, name)


def _volcano_path(ns: str | None, name: str | None = None) -> str:
    return group_path(VOLCANO_GROUP, VOLCANO_VERSION, VOLCANO_PLURAL, ns, name)


def _appwrapper_path(ns: str | None, name: str | None = None) -> str:
    return group_path(APPWRAPPER_GROUP, APPWRAPPER_VERSION, APPWRAPPER_PLURAL, ns, name)


def _commands_path(ns: str) -> str:
    return group_path(VOLCANO_BUS_GROUP, VOLCANO_BUS_VERSION, "commands", ns)


def _pods_path(ns: str | None) -> str:
    return core_path(ns, "pods") if ns is not None else "/api/v1/pods"


def _as_aware(ts: datetime | None) -> datetime | None:
    if ts is None:
        return None
    return ts if ts.tzinfo is not None else ts.astimezone()


class KubernetesScheduler(Scheduler[KubernetesRequest], ImageWorkspaceMixin):
    """Runs apps as Kubernetes Jobs (see the module docs).

    A role's workspace becomes an image (:mod:`tether.workspace.image`) built by the local
    Docker Engine (``$DOCKER_HOST``) and pushed to ``image_repo`` at submission.

    Args:
        session_name: The runner's session.
        client: A configured ``kubernetes.client.ApiClient`` (tests pass one).
        kubeconfig: Path of a kubeconfig file (default: the usual lookup).
        context: Kubeconfig context.
        namespace: Namespace that ``list``/``find_jobs`` search when not told otherwise.
    """

    capabilities: ClassVar[Capabilities] = Capabilities(
        runs_on_this_host=False,
        durable=True,
        workspaces=frozenset({"image"}),
        streams=frozenset({Stream.COMBINED}),
        log_time_filter=True,
        log_tail=True,
        native_retries=frozenset({RetryPolicy.REPLICA}),
        reconciled_retries=frozenset({RetryPolicy.ROLE, RetryPolicy.APPLICATION}),
        gang=True,
        elastic=True,
        mounts=frozenset(MountKind),
        secrets=True,
        kubernetes_pods=True,
    )
    workspace_needs_push = True

    def __init__(
        self,
        session_name: str,
        client: Any = None,
        kubeconfig: str | None = None,
        context: str | None = None,
        namespace: str | None = None,
    ) -> None:
        super().__init__(BACKEND, session_name)
        self._client = client
        self._own_client = client is None
        self._kubeconfig = kubeconfig
        self._context = context
        self._namespace = namespace or DEFAULT_NAMESPACE
        self._api: KubeApi | None = None
        self._context_apis: dict[str, tuple[Any, KubeApi]] = {}
        self._lock = threading.Lock()
        self._namespaces_seen: set[str] = {self._namespace}

    # ---- plumbing ----------------------------------------------------------------------
    def _kube(self, context: str | None = None) -> KubeApi:
        """The API of the scheduler's context, or of another kubeconfig ``context``."""
        with self._lock:
            if context and context != self._context and self._own_client:
                if context not in self._context_apis:
                    client = load_api_client(self._kubeconfig, context)
                    self._context_apis[context] = (client, KubeApi(client))
                return self._context_apis[context][1]
            if self._api is None:
                if self._client is None:
                    self._client = load_api_client(self._kubeconfig, self._context)
                self._api = KubeApi(self._client)
            return self._api

    def close(self) -> None:
        """Closes the API client this scheduler created (not one passed in)."""
        with self._lock:
            if self._own_client and self._client is not None:
                try:
                    self._client.close()
                except Exception:  # closing is best effort
                    log.debug("closing the kubernetes client failed", exc_info=True)
                self._client = None
            self._api = None
            for client, _ in self._context_apis.values():
                try:
                    client.close()
                except Exception:  # closing is best effort
                    log.debug("closing a kubernetes client failed", exc_info=True)
            self._context_apis.clear()

    def _parse_app_id(self, app_id: str) -> tuple[str, str]:
        ns, sep, name = app_id.partition(":")
        if not sep:
            return self._namespace, app_id
        return ns, name

    # ---- options and render --------------------------------------------------------------
    def _opts_class(self) -> type[StructuredOpts]:
        return KubernetesOpts

    def _validate(self, app: AppDef, scheduler: str, cfg: Mapping[str, CfgVal]) -> None:
        opts = KubernetesOpts(**cfg)  # type: ignore[arg-type]
        check_opts(opts)
        check_app(app)
        if opts.gang in (GANG_VOLCANO, GANG_APPWRAPPER):
            for role in app.roles:
                if role.retry_policy == RetryPolicy.ROLE and role.max_retries > 0:
                    log.warning(
                        "role %r: gang=%s cannot restart one role alone; retry_policy=ROLE "
                        "restarts the whole app (as APPLICATION)", role.name, opts.gang,
                    )

    def _submit_dryrun(
        self, app: AppDef, cfg: Mapping[str, CfgVal]
    ) -> AppDryRunInfo[KubernetesRequest]:
        opts = KubernetesOpts(**cfg)  # type: ignore[arg-type]
        name = make_app_name(app.name, _random_suffix())
        req = render(app, opts, name)
        return AppDryRunInfo(req, format_request)

    # ---- submit --------------------------------------------------------------------------
    def schedule(self, dryrun_info: AppDryRunInfo[KubernetesRequest]) -> str:
        """Creates the rendered objects (Service first); returns ``{namespace}:{name}``.

        The job key is recorded as a label (re-attaching to an existing job of that key is the
        Runner's one job-identity lookup, not this method's). When a create fails, the objects
        created so far are removed again.

        Args:
            dryrun_info: What :meth:`submit_dryrun` returned.

        Returns:
            The app id.

        Raises:
            KubernetesApiError: When the apiserver refuses an object (the message names it).
        """
        req = dryrun_info.request
        plans = planned_images(dryrun_info._app)
        if plans:  # workspace images: build when missing, push, then create the Jobs
            from tether.schedulers.local_docker.client import connect

            engine = connect()
            try:
                for plan in plans:
                    ensure_image(engine, plan)
            finally:
                engine.close()
            pin_images(req.manifests, plans)  # nodes pull exactly what was pushed
        api = self._kube(req.context)
        self._namespaces_seen.add(req.namespace)
        created: list[dict[str, Any]] = []
        submitted = f"{time.time():.6f}"
        for manifest in req.manifests:
            meta = dict(manifest.get("metadata") or {})
            meta["annotations"] = {**(meta.get("annotations") or {}), ANN_SUBMITTED: submitted}
            manifest = {**manifest, "metadata": meta}
            try:
                api.create(path_for(manifest, req.namespace), manifest)
            except KubernetesApiError as e:
                for done in reversed(created):
                    try:
                        api.delete(path_for(done, req.namespace, with_name=True))
                    except KubernetesApiError:
                        log.warning("could not roll back %s", done["metadata"]["name"])
                raise KubernetesApiError(
                    e.status,
                    f"cannot create {manifest['kind']} {manifest['metadata']['name']!r} in "
                    f"namespace {req.namespace!r}: {e}{_create_hint(manifest, e)}",
                ) from e
            created.append(manifest)
        return req.app_id

    # ---- describe ------------------------------------------------------------------------
    def _fetch(self, ns: str, name: str) -> AppView | None:
        api = self._kube()
        sel = _selector(name)
        jobs = api.list(_jobs_path(ns), sel)
        gang = jobs[0]["metadata"].get("annotations", {}).get(ANN_GANG) if jobs else None
        vcjob = aw = None
        if not jobs or gang == GANG_APPWRAPPER:
            if gang is None:
                vcjob = self._get_optional(_volcano_path(ns, name))
            if vcjob is None:
                aw = self._get_optional(_appwrapper_path(ns, name))
        if not jobs and vcjob is None and aw is None:
            return None
        pods = api.list(_pods_path(ns), sel)
        return analyze(ns, name, jobs, pods, vcjob, aw, datetime.now(timezone.utc))

    def _get_optional(self, path: str) -> dict[str, Any] | None:
        try:
            return self._kube().get(path)
        except KubernetesApiError as e:
            if e.status in (403, 405):
                return None
            raise

    def describe(self, app_id: str) -> DescribeAppResponse | None:
        """Describes an app from its Jobs (or Volcano Job / AppWrapper) and pods.

        Rules, on top of the state tables (:mod:`~tether.schedulers.kubernetes.status`): the
        app is CANCELLED when tether cancelled it; FAILED when a replica failed for good (the
        failed replicas and their reasons in ``msg``); SUCCEEDED when every replica
        succeeded; RUNNING when a replica runs; otherwise PENDING with the reasons
        (unschedulable, image pull, Kueue admission...).
        UNKNOWN when the apiserver cannot be reached or answers with a server error (the
        error in ``msg``); other API errors (forbidden, bad credentials) are raised.
        A failed replica with retries left is PENDING ("restarting"). This is a pure read:
        the restart, and stopping the other replicas after a final failure, are
        :meth:`reconcile`'s.

        Args:
            app_id: ``{namespace}:{name}``.

        Returns:
            The description, or None when no object of the app exists.
        """
        ns, name = self._parse_app_id(app_id)
        self._kube()  # a missing kubeconfig is an error, not an UNKNOWN app
        try:
            view = self._fetch(ns, name)
        except KubernetesApiError as e:
            if e.status and e.status < 500:
                raise
            return DescribeAppResponse(app_id=f"{ns}:{name}", state=AppState.UNKNOWN, msg=str(e))
        if view is None:
            return None
        roles_statuses: dict[str, RoleStatus] = {}
        for rep in sorted(view.replicas, key=lambda r: (r.role_index, r.replica_id)):
            rs = roles_statuses.setdefault(rep.role, RoleStatus(rep.role))
            status = ReplicaStatus(
                id=rep.replica_id, state=rep.state, role=rep.role, hostname=rep.hostname,
                exit_code=rep.exit_code, msg=rep.msg,
            )  # fmt: skip
            rs.replicas.append(status)
        return DescribeAppResponse(
            app_id=f"{ns}:{name}",
            state=view.state,
            num_restarts=view.num_restarts,
            msg=view.msg,
            roles_statuses=list(roles_statuses.values()),
            roles=view.roles,
            job_key=view.job_key,
            ui_url=view.ui_url,
        )

    def reconcile(self, app_id: str) -> None:
        """Applies the ROLE/APPLICATION retries and final-failure stops the engine lacks.

        Reads the app, then performs what :func:`~.status.analyze` planned: creates the next
        attempt of replicas that are due a restart, then stops what must stop (the old
        attempts, or every replica after a final failure). Idempotent and safe from two
        watchers at once: attempts have fixed names (a second create gets 409 and is
        ignored), and a watcher killed between the two steps leaves old attempts next to
        newer ones, which the next call stops.

        Args:
            app_id: ``{namespace}:{name}``.
        """
        ns, name = self._parse_app_id(app_id)
        try:
            view = self._fetch(ns, name)
        except KubernetesApiError as e:
            if e.status and e.status < 500:
                raise
            log.warning("reconcile of %s skipped: %s", app_id, e)
            return
        if view is not None and (view.stops or view.creates):
            self._apply(view)

    def _apply(self, view: AppView) -> None:
        """Performs the stops and restarts that :func:`analyze` planned (idempotent)."""
        api = self._kube()
        # New attempts first, then stops: if a call fails midway, the next describe finds the
        # old attempts still running next to newer ones and stops them (see analyze).
        for job in view.creates:
            try:
                api.create(_jobs_path(view.namespace), job)
                log.info("restarted %s as Job %s", view.app_id, job["metadata"]["name"])
            except KubernetesApiError as e:
                if e.status != 409:  # 409: another process created this attempt already
                    raise
        for obj, kind, reason in view.stops:
            self._stop(api, view, obj, kind, reason)

    def _stop(self, api: KubeApi, view: AppView, obj: dict[str, Any], kind: str, why: str) -> None:
        meta = obj["metadata"]
        ann = {ANN_STOPPED: kind, ANN_STOP_REASON: why[:1000]}
        if obj.get("kind") == "Job" and obj.get("apiVersion") == "batch/v1":
            api.merge_patch(
                _jobs_path(view.namespace, meta["name"]),
                {"metadata": {"annotations": ann},
                 "spec": {"parallelism": 0, "activeDeadlineSeconds": 1}},
            )  # fmt: skip
        elif obj.get("kind") == "Job":  # Volcano
            api.merge_patch(_volcano_path(view.namespace, meta["name"]),
                            {"metadata": {"annotations": ann}})  # fmt: skip
            self._volcano_command(api, view.namespace, obj, "AbortJob")
        else:  # AppWrapper: mark it; its Jobs are stopped one by one
            api.merge_patch(_appwrapper_path(view.namespace, meta["name"]),
                            {"metadata": {"annotations": ann}})  # fmt: skip

    def _volcano_command(self, api: KubeApi, ns: str, vcjob: dict[str, Any], action: str) -> None:
        meta = vcjob["metadata"]
        owner = {
            "apiVersion": f"{VOLCANO_GROUP}/{VOLCANO_VERSION}",
            "kind": "Job",
            "name": meta["name"],
            "uid": meta.get("uid", ""),
            "controller": True,
            "blockOwnerDeletion": True,
        }
        command = {
            "apiVersion": f"{VOLCANO_BUS_GROUP}/{VOLCANO_BUS_VERSION}",
            "kind": "Command",
            "metadata": {
                "generateName": f"{meta['name'][:40]}-{action.lower()}-",
                "namespace": ns,
                "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_APP_ID: meta["name"]},
                "ownerReferences": [owner],
            },
            "action": action,
            "target": owner,
        }
        try:
            api.create(_commands_path(ns), command)
        except KubernetesApiError as e:
            log.warning("could not send Volcano command %s to %s: %s", action, meta["name"], e)

    # ---- list / find ---------------------------------------------------------------------
    def _views(self, namespaces: Sequence[str | None], selector: str) -> list[AppView]:
        api = self._kube()
        views: list[AppView] = []
        for ns in namespaces:
            objs: dict[tuple[str, str], dict[str, list[dict[str, Any]]]] = {}
            _group(objs, "jobs", api.list(_jobs_path(ns), selector))
            _group(objs, "vcjobs", self._list_optional(_volcano_path(ns), selector))
            _group(objs, "aws", self._list_optional(_appwrapper_path(ns), selector))
            if not objs:
                continue
            _group(objs, "pods", api.list(_pods_path(ns), selector))
            now = datetime.now(timezone.utc)
            for (app_ns, app_name), kinds in objs.items():
                if not (kinds.get("jobs") or kinds.get("vcjobs") or kinds.get("aws")):
                    continue
                vcjob = next(iter(kinds.get("vcjobs", [])), None)
                aw = next(iter(kinds.get("aws", [])), None)
                views.append(
                    analyze(app_ns, app_name, kinds.get("jobs", []), kinds.get("pods", []),
                            vcjob, aw, now)
                )  # fmt: skip
        return views

    def _list_optional(self, path: str, selector: str) -> list[dict[str, Any]]:
        try:
            return self._kube().list(path, selector)
        except KubernetesApiError as e:
            if e.status in (403, 405):
                return []
            raise

    @staticmethod
    def _listing(view: AppView) -> ListAppResponse:
        return ListAppResponse(
            app_id=view.app_id,
            state=view.state,
            name=view.app_name,
            job_key=view.job_key,
            created=view.created,
        )

    def list(self, cfg: Mapping[str, CfgVal] | None = None) -> list[ListAppResponse]:
        """The apps tether launched in a namespace (``cfg["namespace"]``, else the default).

        Args:
            cfg: Run options; only ``namespace`` is used.

        Returns:
            One entry per app, oldest first.
        """
        ns = str((cfg or {}).get("namespace") or self._namespace)
        views = self._views([ns], _selector())
        return sorted((self._listing(v) for v in views), key=lambda a: a.created or 0.0)

    def _find(
        self, job_key: str, namespaces: Sequence[str | None]
    ) -> builtins.list[ListAppResponse]:
        views = self._views(namespaces, _selector(job_key=job_key))
        found = [self._listing(v) for v in views if v.job_key == job_key]
        return sorted(found, key=lambda a: a.created or 0.0)

    def find_jobs(self, job_key: str) -> builtins.list[ListAppResponse]:
        """The apps with job identity ``job_key``, oldest first (a label selector query).

        Searches every namespace when allowed, else the namespaces this scheduler knows
        (its default and those it submitted to).

        Args:
            job_key: The identity.

        Returns:
            Matching apps.
        """
        try:
            return self._find(job_key, [None])
        except KubernetesApiError as e:
            if e.status not in (401, 403):
                raise
        return self._find(job_key, sorted(self._namespaces_seen))

    # ---- logs ----------------------------------------------------------------------------
    def _log_iter(
        self,
        app_id: str,
        role_name: str,
        k: int,
        regex: str | None,
        since: datetime | None,
        until: datetime | None,
        should_tail: bool,
        streams: Stream,
    ) -> Iterable[str]:
        ns, name = self._parse_app_id(app_id)
        view = self._fetch(ns, name)
        if view is None:
            raise ValueError(f"no app {app_id!r} in namespace {ns!r}")
        roles = sorted({r.role for r in view.replicas})
        if role_name not in roles:
            raise ValueError(f"app {app_id!r} has no role {role_name!r}; roles: {roles}")
        ids = sorted(r.replica_id for r in view.replicas if r.role == role_name)
        if k not in ids:
            raise ValueError(f"role {role_name!r} of app {app_id!r} has replicas {ids}, not {k}")
        lines = self._replica_lines(
            ns, name, role_name, k, _as_aware(since), _as_aware(until), should_tail
        )
        return filter_regex(regex, lines)

    def _replica(self, ns: str, name: str, role: str, k: int) -> Replica | None:
        view = self._fetch(ns, name)
        if view is None:
            return None
        return next((r for r in view.replicas if r.role == role and r.replica_id == k), None)

    def _replica_lines(
        self,
        ns: str,
        name: str,
        role: str,
        k: int,
        since: datetime | None,
        until: datetime | None,
        should_tail: bool,
    ) -> Iterator[str]:
        done: set[str] = set()
        while True:
            rep = self._replica(ns, name, role, k)
            if rep is None:
                return
            pod = rep.pod
            uid = str((pod or {}).get("metadata", {}).get("uid", ""))
            if pod is not None and uid not in done:
                finished = yield from self._pod_lines(ns, pod, since, until, should_tail)
                if not should_tail:
                    return
                if finished:
                    done.add(uid)
                else:
                    time.sleep(LOG_POLL_S)
                if until is not None and datetime.now(timezone.utc) >= until:
                    return
                continue  # a retried replica gets a new pod: follow it too
            if not should_tail or is_terminal(rep.state):
                return
            if until is not None and datetime.now(timezone.utc) >= until:
                return
            time.sleep(LOG_POLL_S)

    def _pod_lines(
        self,
        ns: str,
        pod: dict[str, Any],
        since: datetime | None,
        until: datetime | None,
        follow: bool,
    ) -> Generator[str, None, bool]:
        """Lines of one pod; returns True when its container will write no more."""
        api = self._kube()
        meta = pod["metadata"]
        container = pod["spec"]["containers"][0]["name"]
        path = core_path(ns, "pods", meta["name"]) + "/log"
        last_ts: datetime | None = None
        seen_at_last = 0
        while True:
            query: dict[str, Any] = {"container": container, "timestamps": "true"}
            start = last_ts or since
            if start is not None:
                ago = (datetime.now(timezone.utc) - start).total_seconds()
                query["sinceSeconds"] = max(1, math.ceil(ago) + 1)
            if follow:
                query["follow"] = "true"
            skip_at_last = seen_at_last
            try:
                for raw in api.stream_lines(path, query, LOG_READ_TIMEOUT_S if follow else 60.0):
                    ts, text = _split_timestamp(raw)
                    if ts is not None:
                        if since is not None and ts < since:
                            continue
                        if until is not None and ts >= until:
                            return True
                        if last_ts is not None and ts < last_ts:
                            continue
                        if last_ts is not None and ts == last_ts and skip_at_last > 0:
                            skip_at_last -= 1
                            continue
                        if ts == last_ts:
                            seen_at_last += 1
                        else:
                            last_ts, seen_at_last = ts, 1
                    yield text + "\n"
            except KubernetesApiError as e:
                if e.status not in (400, 404) or not follow:
                    if e.status in (400, 404):
                        return e.status == 404  # not started yet / pod gone
                    raise
            except Exception as e:  # a dropped stream: reconnect below
                log.debug("log stream of %s ended: %r", meta["name"], e)
            if not follow:
                return True
            current = self._kube().get(core_path(ns, "pods", meta["name"]))
            if current is None or current.get("metadata", {}).get("uid") != meta.get("uid"):
                return True
            phase = (current.get("status") or {}).get("phase")
            if phase in ("Succeeded", "Failed"):
                return True
            if until is not None and datetime.now(timezone.utc) >= until:
                return True
            time.sleep(LOG_POLL_S)

    def wait_for_change(self, app_id: str, timeout: float) -> None:
        """Returns at the next change of one of the app's pods, or after ``timeout`` seconds.

        Args:
            app_id: The app.
            timeout: The longest wait, in seconds.
        """
        deadline = time.monotonic() + max(timeout, 0.0)
        if timeout >= 1.0:
            ns, name = self._parse_app_id(app_id)
            sel = _selector(name)
            try:
                api = self._kube()
                first = api.request("GET", _pods_path(ns), query={"labelSelector": sel,
                                                                 "limit": 1}) or {}
                rv = (first.get("metadata") or {}).get("resourceVersion")
                query = {"watch": "true", "labelSelector": sel, "resourceVersion": rv,
                         "timeoutSeconds": max(1, int(timeout))}
                for line in api.stream_lines(_pods_path(ns), query, timeout + 5.0):
                    if line.strip():
                        return
            except Exception as e:
                log.debug("watching %s failed (%r); sleeping instead", app_id, e)
        left = deadline - time.monotonic()
        if left > 0:
            time.sleep(left)

    # ---- stop ----------------------------------------------------------------------------
    def _cancel_existing(self, app_id: str) -> None:
        ns, name = self._parse_app_id(app_id)
        view = self._fetch(ns, name)
        if view is None:
            return
        api = self._kube()
        why = "cancelled by the user"
        if view.vcjob is not None:
            self._stop(api, view, view.vcjob, "cancelled", why)
        if view.appwrapper is not None:
            self._stop(api, view, view.appwrapper, "cancelled", why)
        for rep in view.replicas:  # the current attempt of every replica not done yet
            if rep.job is not None and rep.state != AppState.SUCCEEDED and not rep.stopped:
                self._stop(api, view, rep.job, "cancelled", why)
        for job in view.jobs:  # older attempts still running
            if job_active(job):
                self._stop(api, view, job, "cancelled", why)

    # ---- secrets ------------------------------------------------------------------------
    def put_secret(self, name: str, values: Mapping[str, str], cfg: Mapping[str, CfgVal]) -> None:
        """Creates (or replaces) an Opaque Secret in the run options' namespace.

        Args:
            name: The Secret's name.
            values: Key to value (sent as ``stringData``; never logged).
            cfg: Resolved run options.
        """
        ns = str(cfg.get("namespace") or self._namespace)
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "labels": {LABEL_MANAGED_BY: MANAGED_BY}},
            "type": "Opaque",
            "stringData": {str(k): str(v) for k, v in values.items()},
        }
        api = self._kube()
        try:
            api.create(core_path(ns, "secrets"), body)
        except KubernetesApiError as e:
            if e.status != 409:
                raise
            api.merge_patch(core_path(ns, "secrets", name), {"stringData": body["stringData"]})

    def delete_secret(self, name: str, cfg: Mapping[str, CfgVal]) -> None:
        """Deletes a Secret (a missing one is fine).

        Args:
            name: The Secret's name.
            cfg: Resolved run options.
        """
        ns = str(cfg.get("namespace") or self._namespace)
        self._kube().delete(core_path(ns, "secrets", name))

    def delete(self, app_id: str) -> None:
        """Cancels the app if needed, then removes every object tether created for it.

        Idempotent: also cleans up what a partly deleted app left behind.

        Args:
            app_id: The app.
        """
        desc = self.describe(app_id)
        if desc is not None and not is_terminal(desc.state):
            self._cancel_existing(app_id)
        self._delete_existing(app_id)

    def _delete_existing(self, app_id: str) -> None:
        ns, name = self._parse_app_id(app_id)
        api = self._kube()
        sel = _selector(name)
        for path in (_volcano_path(ns, name), _appwrapper_path(ns, name)):
            try:
                api.delete(path)
            except KubernetesApiError as e:
                if e.status not in (403, 405):
                    raise
        for cmd in self._list_optional(_commands_path(ns), sel):
            api.delete(_commands_path(ns) + "/" + cmd["metadata"]["name"])
        for job in api.list(_jobs_path(ns), sel):
            api.delete(_jobs_path(ns, job["metadata"]["name"]))
        for svc in api.list(core_path(ns, "services"), sel):
            api.delete(core_path(ns, "services", svc["metadata"]["name"]))
        for pod in api.list(_pods_path(ns), sel):
            api.delete(core_path(ns, "pods", pod["metadata"]["name"]))


def _group(
    objs: dict[tuple[str, str], dict[str, list[dict[str, Any]]]],
    kind: str,
    items: list[dict[str, Any]],
) -> None:
    """Sorts objects by ``(namespace, app name)``, from their tether labels."""
    for obj in items:
        meta = obj.get("metadata") or {}
        app = (meta.get("labels") or {}).get(LABEL_APP_ID)
        if app:
            key = (str(meta.get("namespace") or ""), str(app))
            objs.setdefault(key, {}).setdefault(kind, []).append(obj)


_TS_LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)) ?(.*)$")


def _split_timestamp(raw: str) -> tuple[datetime | None, str]:
    m = _TS_LINE.match(raw)
    if not m:
        return None, raw.rstrip("\r")
    return parse_time(m.group(1)), m.group(2).rstrip("\r")


def _create_hint(manifest: Mapping[str, Any], err: KubernetesApiError) -> str:
    api_version = str(manifest.get("apiVersion", ""))
    if err.status == 404 and api_version.startswith(VOLCANO_GROUP):
        return " (is Volcano installed? the cluster has no batch.volcano.sh/v1alpha1 Job API)"
    if err.status == 404 and api_version.startswith(APPWRAPPER_GROUP):
        return " (is MCAD installed? the cluster has no mcad.ibm.com/v1beta1 AppWrapper API)"
    if err.status == 404:
        return " (does the namespace exist?)"
    if err.status == 403:
        return " (your Kubernetes user may not create this kind in that namespace)"
    return ""


# ---- factory ---------------------------------------------------------------------------------
def create_scheduler(session_name: str, **kwargs: Any) -> KubernetesScheduler:
    """Creates the ``kubernetes`` scheduler.

    Args:
        session_name: The runner's session.
        **kwargs: ``client`` (an ``ApiClient``), ``kubeconfig``, ``context``, ``namespace``;
            other keys (meant for other schedulers) are ignored. Without ``context``, the
            ``context`` of ``[kubernetes]`` in .tetherconfig is used, when there is one.

    Returns:
        The scheduler.
    """
    known = {"client", "kubeconfig", "context", "namespace"}
    unknown = sorted(set(kwargs) - known)
    if unknown:
        log.debug("kubernetes scheduler ignores parameters %s", unknown)
    return KubernetesScheduler(
        session_name,
        client=kwargs.get("client"),
        kubeconfig=kwargs.get("kubeconfig"),
        context=kwargs.get("context") or _configured_context(),
        namespace=kwargs.get("namespace"),
    )


def _configured_context() -> str | None:
    from tether.config import load_config

    return load_config().section(BACKEND).get("context") or None


__all__ = [
    "APPWRAPPER_STATE",
    "IMAGE_ERRORS_FATAL",
    "IMAGE_ERRORS_RETRYING",
    "JOB_CONDITION_STATE",
    "POD_PHASE_STATE",
    "STOPPED_STATE",
    "VOLCANO_PHASE_STATE",
    "KubernetesOpts",
    "KubernetesScheduler",
    "create_scheduler",
]

