"""The ``local_docker`` scheduler class (see the package docs)."""

from __future__ import annotations

import builtins
import contextlib
import ipaddress
import itertools
import json
import logging
import os
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime, timedelta
from typing import Any, ClassVar

from tether.schedulers import docker_engine as dc
from tether.schedulers.api import (
    DescribeAppResponse,
    ListAppResponse,
    Scheduler,
    filter_regex,
)
from tether.schedulers.capabilities import Capabilities, Follow, FollowMode, MountKind, Stream
from tether.schedulers.ids import make_app_id
from tether.schedulers.local_docker.options import LocalDockerOpts
from tether.schedulers.local_docker.render import (
    APP_ID_RULE,
    BACKEND,
    FIRST_HOST_OFFSET,
    LABEL_APP_ID,
    LABEL_APP_NAME,
    LABEL_CREATED,
    LABEL_JOB_KEY,
    LABEL_MANAGED_BY,
    LABEL_MAX_RETRIES,
    LABEL_PREFIX,
    LABEL_REPLICA_ID,
    LABEL_ROLE,
    LABEL_ROLE_SPEC,
    LABEL_STOP_TIMEOUT,
    MANAGED_BY,
    DockerRequest,
    format_request,
    render,
)
from tether.schedulers.local_docker.status import (
    EXITED,
    ReplicaView,
    app_state,
    replica_state,
)
from tether.specs import (
    AppDef,
    AppDryRunInfo,
    AppState,
    CfgVal,
    ReplicaStatus,
    Resource,
    RetryPolicy,
    Role,
    RoleStatus,
)
from tether.workspace.image import ImageWorkspaceMixin, ensure_image

log: logging.Logger = logging.getLogger(__name__)

LABEL_EVENT = LABEL_PREFIX + "event"
LABEL_MSG = LABEL_PREFIX + "msg"
EVENT_CANCELLED = "cancelled"
EVENT_FAILED = "failed"
ORPHAN_AFTER_S = 60.0
"""An app network older than this without a container is reported FAILED."""
NETWORK_RETRIES = 3
"""Lookups again of a network just created that the engine does not find (podman's network
cache can miss one for a moment), :data:`NETWORK_RETRY_S` apart."""
NETWORK_RETRY_S = 0.5
_TS = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d) ?")


def parse_log_line(line: str) -> tuple[datetime | None, timedelta, str]:
    """Splits a ``docker logs --timestamps`` line into its time and text.

    Args:
        line: ``2024-01-01T00:00:00.123456789Z text`` (podman gives whole seconds).

    Returns:
        The time (None when the line has none), its precision (one second when the engine
        gave whole seconds) and the text.
    """
    m = _TS.match(line)
    if not m:
        return None, timedelta(0), line
    frac = (m.group(2) or ".0")[:7]
    zone = "+00:00" if m.group(3) == "Z" else m.group(3)
    ts = datetime.fromisoformat(m.group(1) + frac + zone)
    precision = timedelta(microseconds=1) if m.group(2) else timedelta(seconds=1)
    return ts, precision, line[m.end():]


def _aware(t: datetime) -> datetime:
    return t if t.tzinfo is not None else t.astimezone()


class LocalDockerScheduler(Scheduler[DockerRequest, LocalDockerOpts], ImageWorkspaceMixin):
    """Runs every replica as a container of a Docker Engine (Docker or podman).

    Args:
        session_name: The runner's session.
        docker_host: The engine's address (default ``$DOCKER_HOST``).
        api: A ready ``docker.APIClient`` (tests).
    """

    capabilities: ClassVar[Capabilities] = Capabilities(
        runs_on_this_host=True,
        needs_image=True,
        durable=True,
        workspaces=frozenset({"image"}),
        streams=frozenset(Stream),
        log_time_filter=True,
        log_tail=True,
        native_retries=frozenset({RetryPolicy.REPLICA}),
        mounts=frozenset({MountKind.BIND, MountKind.VOLUME, MountKind.DEVICE}),
        secrets=False,
        port_map=True,
        # one container listing and one volume listing per interval for every followed app
        follow=Follow(FollowMode.BATCH_POLL, "tether.schedulers.local_docker.watch", interval=1.0),
    )

    def __init__(self, session_name: str, docker_host: str | None = None, api: Any = None
                 ) -> None:
        super().__init__(BACKEND, session_name)
        self._docker_host = docker_host
        self._api = api
        self.engine_key = f"api@{id(api):x}" if api is not None else (
            docker_host or os.environ.get("DOCKER_HOST") or "default")
        """Names the engine this scheduler talks to (the watch hub reads each engine once)."""

    @property
    def api(self) -> Any:
        """The engine client (connected on first use)."""
        if self._api is None:
            self._api = dc.connect(self._docker_host)
        return self._api

    # ---- render and submit ---------------------------------------------------------------
    def _submit_dryrun(self, app: AppDef, opts: LocalDockerOpts) -> AppDryRunInfo[Any]:
        req = render(app, opts, make_app_id(app.name, APP_ID_RULE))
        return AppDryRunInfo(req, format_request)

    def schedule(self, dryrun_info: AppDryRunInfo[DockerRequest]) -> str:
        """Creates the app network and starts every replica's container.

        When an image is missing and cannot be pulled, or the engine refuses a container, no
        container is left and the app is FAILED with the engine's reason.

        Args:
            dryrun_info: What :meth:`submit_dryrun` returned.

        Returns:
            The app id.
        """
        req = dryrun_info.request
        api = self.api
        for plan in req.builds:  # raises with the build log's tail; nothing is submitted
            if ensure_image(api, plan):
                log.info("built workspace image %s", plan.image)
        api.create_network(req.app_id, driver="bridge", labels=req.network_labels)
        failure = self._ensure_images(req)
        if failure is None:
            failure = self._start_containers(req)
        if failure is not None:
            self._remove_containers(req.app_id)
            self._mark(req.app_id, EVENT_FAILED, failure)
        return req.app_id

    def _ensure_images(self, req: DockerRequest) -> str | None:
        errs = dc.errors()
        for image in req.images:
            try:
                self.api.inspect_image(image)
                continue
            except errs.NotFound as e:
                if not req.pull:
                    return f"image {image!r} not found and pull=False: {dc.engine_message(e)}"
            why = ""
            try:  # the engine reports a failed pull in the stream, not the HTTP status
                for msg in self.api.pull(image, stream=True, decode=True):
                    if msg.get("error") or msg.get("errorDetail"):
                        why = str(msg.get("error") or msg["errorDetail"].get("message", ""))
            except errs.APIError as e:
                why = dc.engine_message(e)
            if not why:
                try:
                    self.api.inspect_image(image)
                except errs.NotFound as e:
                    why = dc.engine_message(e)
            if why:
                return f"image {image!r} is not available and cannot be pulled: {why}"
        return None

    def _start_containers(self, req: DockerRequest) -> str | None:
        errs = dc.errors()
        net = self._network(req.app_id)
        for _ in range(NETWORK_RETRIES):
            if net is not None:
                break
            time.sleep(NETWORK_RETRY_S)
            net = self._network(req.app_id)
        if net is None:
            return f"network {req.app_id} was created but the engine does not find it"
        configs = (net.get("IPAM") or {}).get("Config") or []
        subnet = next((c["Subnet"] for c in configs if "." in c.get("Subnet", "")), None)
        if subnet is not None:
            hosts = [str(h) for h in itertools.islice(
                ipaddress.ip_network(subnet).hosts(), FIRST_HOST_OFFSET + len(req.containers))]
            req = req.with_addresses(hosts)
        for c in req.containers:
            try:
                created = self.api.create_container_from_config(c.body, c.name)
                self.api.start(created["Id"])
            except errs.APIError as e:
                return f"container {c.name} could not start: {dc.engine_message(e)}"
        return None

    # ---- records -------------------------------------------------------------------------
    def _mark(self, app_id: str, event: str, msg: str = "") -> None:
        """Records an app event (cancel, failure to start) as a labelled, empty volume:
        container and network labels cannot change after creation."""
        labels = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_APP_ID: app_id, LABEL_EVENT: event,
                  LABEL_MSG: msg[-4000:]}
        with contextlib.suppress(dc.errors().APIError):
            self.api.create_volume(name=f"{app_id}-{event}", labels=labels)

    def _events(self, app_id: str) -> dict[str, str]:
        vols = self.api.volumes(filters={"label": [f"{LABEL_APP_ID}={app_id}"]}) or {}
        out: dict[str, str] = {}
        for v in vols.get("Volumes") or []:
            labels = v.get("Labels") or {}
            if LABEL_EVENT in labels:
                out[labels[LABEL_EVENT]] = labels.get(LABEL_MSG, "")
        return out

    def _containers(self, app_id: str | None = None) -> list[dict[str, Any]]:
        label = f"{LABEL_APP_ID}={app_id}" if app_id else f"{LABEL_MANAGED_BY}={MANAGED_BY}"
        found = self.api.containers(all=True, filters={"label": [label]})
        out = []
        for c in found:
            with contextlib.suppress(dc.errors().NotFound):
                out.append(self.api.inspect_container(c["Id"]))
        return out

    def _network(self, app_id: str) -> dict[str, Any] | None:
        try:
            net: dict[str, Any] = self.api.inspect_network(app_id)
        except dc.errors().NotFound:
            return None
        if (net.get("Labels") or {}).get(LABEL_MANAGED_BY) != MANAGED_BY:
            return None
        return net

    # ---- query ---------------------------------------------------------------------------
    @staticmethod
    def _replica(c: Mapping[str, Any]) -> ReplicaView:
        labels = c["Config"].get("Labels") or {}
        max_retries = int(labels.get(LABEL_MAX_RETRIES, "0") or 0)
        restarts = int(c.get("RestartCount") or 0)
        state, msg = replica_state(c.get("State") or {}, max_retries, restarts)
        native = c.get("State") or {}
        code = native.get("ExitCode") if str(native.get("Status")) in EXITED else None
        return ReplicaView(
            role=labels.get(LABEL_ROLE, ""),
            replica_id=int(labels.get(LABEL_REPLICA_ID, "0") or 0),
            hostname=c["Config"].get("Hostname", ""),
            state=state, exit_code=code, restarts=restarts, msg=msg,
        )

    def describe(self, app_id: str) -> DescribeAppResponse | None:
        """Describes an app from its network, containers and event records (a pure read).

        Args:
            app_id: The app id.

        Returns:
            The description, or None when there is no such app.
        """
        net = self._network(app_id)
        containers = self._containers(app_id)
        if net is not None:
            app_labels = net.get("Labels") or {}
        else:
            # The app exists while any of its containers does. podman's compatible API can
            # answer 404 for an existing network for a moment (its network cache is reloaded
            # from the shared CNI directory that other podman processes write); a network
            # removed outside tether leaves the containers as the only record.
            mine = [c for c in containers
                    if (c["Config"].get("Labels") or {}).get(LABEL_MANAGED_BY) == MANAGED_BY]
            if not mine:
                return None
            app_labels = mine[0]["Config"].get("Labels") or {}
        events = self._events(app_id)
        reps = sorted((self._replica(c) for c in containers),
                      key=lambda r: (r.role, r.replica_id))
        failure = events.get(EVENT_FAILED)
        created = float(app_labels.get(LABEL_CREATED, "0") or 0.0)
        if not reps and failure is None and time.time() - created > ORPHAN_AFTER_S:
            # a network left without containers (removed outside tether, another engine
            # sharing the network configuration): nothing of the app can run any more
            failure = "the app's containers are gone (removed outside tether?)"
        state = app_state(reps, EVENT_CANCELLED in events, failure)
        roles: dict[str, RoleStatus] = {}
        specs: dict[str, Role] = {}
        for c in containers:
            labels = c["Config"].get("Labels") or {}
            spec = labels.get(LABEL_ROLE_SPEC)
            if spec and labels.get(LABEL_ROLE) not in specs:
                d = json.loads(spec)
                specs[d["name"]] = Role(
                    name=d["name"], image=d["image"], entrypoint=d["entrypoint"],
                    args=d["args"], num_replicas=d["num_replicas"], max_retries=d["max_retries"],
                    retry_policy=(RetryPolicy.REPLICA if d["max_retries"] else
                                  RetryPolicy.APPLICATION),
                    resource=Resource(**d.get("resource", {"cpu": -1, "gpu": -1, "memMB": -1})))
        for r in reps:
            roles.setdefault(r.role, RoleStatus(r.role)).replicas.append(ReplicaStatus(
                id=r.replica_id, state=r.state, role=r.role, hostname=r.hostname,
                exit_code=r.exit_code, msg=r.msg))
        msg = failure if failure is not None else next(
            (f"{r.role}/{r.replica_id}: {r.msg}" for r in reps if r.state == AppState.FAILED),
            "cancelled" if EVENT_CANCELLED in events else "")
        return DescribeAppResponse(
            app_id=app_id, state=state, num_restarts=sum(r.restarts for r in reps), msg=msg,
            roles_statuses=list(roles.values()), roles=list(specs.values()),
            job_key=app_labels.get(LABEL_JOB_KEY),
        )

    def list(self, cfg: Mapping[str, CfgVal] | None = None) -> builtins.list[ListAppResponse]:
        """Every app tether started on this engine, oldest first.

        Args:
            cfg: Unused.

        Returns:
            The apps.
        """
        return self._listing(f"{LABEL_MANAGED_BY}={MANAGED_BY}")

    def find_jobs(
        self, job_key: str, cfg: Mapping[str, CfgVal] | None = None
    ) -> builtins.list[ListAppResponse]:
        """The apps submitted with ``job_key``, oldest first (a label filter).

        Args:
            job_key: The job identity.
            cfg: Unused (where to look is the scheduler's own setting).

        Returns:
            The apps.
        """
        return [a for a in self._listing(f"{LABEL_JOB_KEY}={job_key}") if a.job_key == job_key]

    def _listing(self, label: str) -> builtins.list[ListAppResponse]:
        # An app is its network and its containers, and either may be missing from one
        # listing: podman's network cache is reloaded from the CNI directory that other
        # podman processes write, and a network removed outside tether leaves the containers.
        # The union finds every app, as describe does.
        found: dict[str, Mapping[str, str]] = {}
        nets = self.api.networks(filters={"label": [label]})
        boxes = self.api.containers(all=True, filters={"label": [label]})
        for obj in (*nets, *boxes):
            labels = obj.get("Labels") or {}
            app_id = labels.get(LABEL_APP_ID)
            if labels.get(LABEL_MANAGED_BY) == MANAGED_BY and app_id:
                found.setdefault(app_id, labels)
        out: builtins.list[ListAppResponse] = []
        for app_id, labels in found.items():
            desc = self.describe(app_id)
            if desc is None:
                continue
            out.append(ListAppResponse(
                app_id=app_id, state=desc.state, name=labels.get(LABEL_APP_NAME, ""),
                job_key=labels.get(LABEL_JOB_KEY),
                created=float(labels.get(LABEL_CREATED, "0") or 0.0),
            ))
        return sorted(out, key=lambda a: a.created or 0.0)

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
        found = self.api.containers(all=True, filters={"label": [
            f"{LABEL_APP_ID}={app_id}", f"{LABEL_ROLE}={role_name}", f"{LABEL_REPLICA_ID}={k}"]})
        if not found:
            raise ValueError(
                f"app {app_id!r} has no replica {k} of role {role_name!r} on {self.backend}")
        lines = self._lines(found[0]["Id"], since, until, should_tail, streams)
        return filter_regex(regex, lines)

    def _lines(self, cid: str, since: datetime | None, until: datetime | None,
               follow: bool, streams: Stream) -> Iterator[str]:
        kwargs: dict[str, Any] = {
            "stdout": streams in (Stream.STDOUT, Stream.COMBINED),
            "stderr": streams in (Stream.STDERR, Stream.COMBINED),
            "timestamps": True, "stream": True, "follow": follow,
        }
        lo = _aware(since) if since is not None else None
        hi = _aware(until) if until is not None else None
        if lo is not None:  # engines filter by whole seconds; the exact cut is below
            kwargs["since"] = int(lo.timestamp())
        # every frame (and every line in it) starts with a timestamp, also the continuation
        # of a line the program wrote in pieces: strip each and stamp the line with its first
        buf, stamp = "", ""
        for chunk in self.api.logs(cid, **kwargs):
            for seg in _segments(chunk.decode("utf-8", errors="replace")):
                m = _TS.match(seg)
                if m is not None:
                    if not buf:
                        stamp = seg[: m.end()]
                    seg = seg[m.end():]
                buf += seg
                if buf.endswith("\n"):
                    kept = _keep(stamp + buf[:-1], lo, hi)
                    buf, stamp = "", ""
                    if kept is not None:
                        yield kept + "\n"
        if buf:
            kept = _keep(stamp + buf, lo, hi)
            if kept is not None:
                yield kept + "\n"

    # ---- stop ----------------------------------------------------------------------------
    def _cancel_existing(self, app_id: str) -> None:
        self._mark(app_id, EVENT_CANCELLED)
        errs = dc.errors()
        for c in self._containers(app_id):
            labels = c["Config"].get("Labels") or {}
            timeout = int(labels.get(LABEL_STOP_TIMEOUT, "10") or 10)
            with contextlib.suppress(errs.NotFound, errs.APIError):
                self.api.update_container(c["Id"], restart_policy={"Name": "no"})
            with contextlib.suppress(errs.NotFound):
                self.api.stop(c["Id"], timeout=timeout)

    def _remove_containers(self, app_id: str) -> None:
        errs = dc.errors()
        for c in self.api.containers(all=True, filters={"label": [f"{LABEL_APP_ID}={app_id}"]}):
            with contextlib.suppress(errs.NotFound):
                self.api.remove_container(c["Id"], force=True)

    def _delete_existing(self, app_id: str) -> None:
        errs = dc.errors()
        self._remove_containers(app_id)
        vols = self.api.volumes(filters={"label": [f"{LABEL_APP_ID}={app_id}"]}) or {}
        for v in vols.get("Volumes") or []:
            with contextlib.suppress(errs.NotFound):
                self.api.remove_volume(v["Name"], force=True)
        with contextlib.suppress(errs.NotFound):
            self.api.remove_network(app_id)

    def close(self) -> None:
        """Closes the engine connection. Safe to call more than once."""
        api, self._api = self._api, None
        if api is not None:
            with contextlib.suppress(Exception):
                api.close()


def _segments(text: str) -> list[str]:
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _keep(line: str, lo: datetime | None, hi: datetime | None) -> str | None:
    ts, precision, text = parse_log_line(line.rstrip("\r"))
    if ts is not None:
        # a whole-second stamp stands for any time in that second: keep it when it may match
        if lo is not None and ts + precision <= lo:
            return None
        if hi is not None and ts >= hi:
            return None
    return text


def create_scheduler(session_name: str, **kwargs: Any) -> LocalDockerScheduler:
    """Creates the ``local_docker`` scheduler.

    Args:
        session_name: The runner's session.
        **kwargs: ``docker_host`` (default ``$DOCKER_HOST``) and ``api`` (a ready
            ``docker.APIClient``); other keys are ignored.

    Returns:
        The scheduler.
    """
    return LocalDockerScheduler(session_name, docker_host=kwargs.get("docker_host"),
                                api=kwargs.get("api"))


__all__ = ["LocalDockerScheduler", "create_scheduler"]
