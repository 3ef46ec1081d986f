"""The ``kubernetes`` scheduler class (see the package docs for the design).

:class:`KubernetesScheduler` implements the :class:`~tether.schedulers.api.Scheduler`
operations and holds the API clients (one per kubeconfig context). Each operation combines
the package's modules: rendering (:mod:`~tether.schedulers.kubernetes.render`), reading an
app's objects (:mod:`~tether.schedulers.kubernetes.fetch`, analyzed by
:mod:`~tether.schedulers.kubernetes.status`), changing them
(:mod:`~tether.schedulers.kubernetes.actions`) and reading logs
(:mod:`~tether.schedulers.kubernetes.logs`).
"""

from __future__ import annotations

import builtins
import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar

from tether.schedulers.api import (
    DescribeAppResponse,
    ListAppResponse,
    Scheduler,
    Stream,
)
from tether.schedulers.capabilities import Capabilities, Follow, FollowMode, MountKind
from tether.schedulers.ids import make_app_id
from tether.schedulers.kubernetes.actions import (
    apply_actions,
    cancel_app,
    create_app,
    delete_app_objects,
)
from tether.schedulers.kubernetes.checks import check_app, check_opts
from tether.schedulers.kubernetes.client import (
    KubeApi,
    KubernetesApiError,
    KubernetesUnreachableError,
    core_path,
    load_api_client,
)
from tether.schedulers.kubernetes.fetch import (
    app_views,
    fetch_app,
    selector,
    wait_for_pod_change,
)
from tether.schedulers.kubernetes.logfollow import cached_app
from tether.schedulers.kubernetes.logs import AppCache, replica_log
from tether.schedulers.kubernetes.naming import (
    APP_NAME_RULE,
    LABEL_MANAGED_BY,
    MANAGED_BY,
)
from tether.schedulers.kubernetes.options import (
    DEFAULT_NAMESPACE,
    GANG_APPWRAPPER,
    GANG_VOLCANO,
    KubernetesOpts,
)
from tether.schedulers.kubernetes.render import KubernetesRequest, format_request, render
from tether.schedulers.kubernetes.status import (
    APPWRAPPER_STATE,
    IMAGE_ERRORS_FATAL,
    IMAGE_ERRORS_RETRYING,
    JOB_CONDITION_STATE,
    POD_PHASE_STATE,
    STOPPED_STATE,
    VOLCANO_PHASE_STATE,
)
from tether.schedulers.kubernetes.views import AppView, describe_response
from tether.specs import (
    AppDef,
    AppDryRunInfo,
    AppState,
    CfgVal,
    RetryPolicy,
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


# ---- the scheduler -----------------------------------------------------------------------------

class KubernetesScheduler(Scheduler[KubernetesRequest, KubernetesOpts], ImageWorkspaceMixin):
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
        # changes arrive on the watch at once; the interval re-reads time-based states
        follow=Follow(FollowMode.LIST_WATCH, "tether.schedulers.kubernetes.watch", interval=5.0),
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
    def _validate(self, app: AppDef, scheduler: str, opts: KubernetesOpts) -> None:
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
        self, app: AppDef, opts: KubernetesOpts
    ) -> AppDryRunInfo[KubernetesRequest]:
        name = make_app_id(app.name, APP_NAME_RULE)
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
        plans = planned_images(dryrun_info.app)
        if plans:  # workspace images: build when missing, push, then create the Jobs
            from tether.schedulers.docker_engine import connect

            engine = connect()
            try:
                for plan in plans:
                    ensure_image(engine, plan)
            finally:
                engine.close()
            pin_images(req.manifests, plans)  # nodes pull exactly what was pushed
        api = self._kube(req.context)
        self._namespaces_seen.add(req.namespace)
        create_app(api, req)
        return req.app_id

    # ---- describe ------------------------------------------------------------------------
    def _fetch(self, ns: str, name: str) -> AppView | None:
        return fetch_app(self._kube(), ns, name)

    def describe(self, app_id: str) -> DescribeAppResponse | None:
        """Describes an app from its Jobs (or Volcano Job / AppWrapper) and pods.

        Rules, on top of the state tables (:mod:`~tether.schedulers.kubernetes.status`): the
        app is CANCELLED when tether cancelled it; FAILED when a replica failed for good (the
        failed replicas and their reasons in ``msg``); SUCCEEDED when every replica
        succeeded; RUNNING when a replica runs; otherwise PENDING with the reasons
        (unschedulable, image pull, Kueue admission...).
        UNKNOWN when an apiserver that answered before cannot be reached, or answers with a
        server error (the error in ``msg``): a waiter keeps polling through a blip. One never
        reached (a wrong kubeconfig, context or a cluster that is down) raises
        :class:`KubernetesUnreachableError` naming the server, the kubeconfig and context;
        other API errors (forbidden, bad credentials) are raised.
        A failed replica with retries left is PENDING ("restarting"). This is a pure read:
        the restart, and stopping the other replicas after a final failure, are
        :meth:`reconcile`'s.

        Args:
            app_id: ``{namespace}:{name}``.

        Returns:
            The description, or None when no object of the app exists.
        """
        ns, name = self._parse_app_id(app_id)
        api = self._kube()  # a missing kubeconfig is an error, not an UNKNOWN app
        try:
            view = self._fetch(ns, name)
        except KubernetesApiError as e:
            if e.status and e.status < 500:
                raise
            if isinstance(e, KubernetesUnreachableError) and not api.reached:
                raise  # never reached: the configuration, not a blip of a known cluster
            return DescribeAppResponse(app_id=f"{ns}:{name}", state=AppState.UNKNOWN, msg=str(e))
        if view is None:
            return None
        return describe_response(view)

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
        if view is not None and (view.stops or view.creates or view.records or view.disruptions):
            apply_actions(self._kube(), view)

    # ---- list / find ---------------------------------------------------------------------
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
        views = app_views(self._kube(), [ns], selector())
        return sorted((self._listing(v) for v in views), key=lambda a: a.created or 0.0)

    def _find(
        self, job_key: str, namespaces: Sequence[str | None]
    ) -> builtins.list[ListAppResponse]:
        views = app_views(self._kube(), namespaces, selector(job_key=job_key))
        found = [self._listing(v) for v in views if v.job_key == job_key]
        return sorted(found, key=lambda a: a.created or 0.0)

    def find_jobs(
        self, job_key: str, cfg: Mapping[str, CfgVal] | None = None
    ) -> builtins.list[ListAppResponse]:
        """The apps with job identity ``job_key``, oldest first (a label selector query).

        Searches every namespace when allowed, else the namespaces this scheduler knows
        (its default and those it submitted to).

        Args:
            job_key: The identity.
            cfg: Unused (where to look is the scheduler's own setting).

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

        def follow_app() -> AppCache:
            return cached_app(self, f"{ns}:{name}", name)

        return replica_log(self._fetch, self._kube, app_id, ns, name, role_name, k, regex,
                           since, until, should_tail, follow_app)  # fmt: skip

    def wait_for_change(self, app_id: str, timeout: float) -> None:
        """Returns at the next change of one of the app's pods, or after ``timeout`` seconds.

        Args:
            app_id: The app.
            timeout: The longest wait, in seconds.
        """
        ns, name = self._parse_app_id(app_id)
        wait_for_pod_change(self._kube, app_id, ns, name, timeout)

    # ---- stop ----------------------------------------------------------------------------
    def _cancel_existing(self, app_id: str) -> None:
        ns, name = self._parse_app_id(app_id)
        view = self._fetch(ns, name)
        if view is not None:
            cancel_app(self._kube(), view)

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
        delete_app_objects(self._kube(), ns, name)


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

