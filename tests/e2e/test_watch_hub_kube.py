"""The watch hub on the real kube-apiserver: requests counted from its ``/metrics``, and
faults injected for real (watches cut by a TCP proxy, ``410 Gone`` from an overflowed watch
cache, an apiserver restart, a job deleted out of band, 429 and 500 answers from an HTTP
proxy in front of the apiserver, and one that refuses every request for good).

A test kubelet (``tests/e2e/infra/kubelet.py``) drives the pods' phases.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import re
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.e2e.infra.httpfault import Fault, FaultProxy, Seen
from tests.e2e.infra.kube import KubeCluster, create_namespace
from tests.e2e.infra.kubelet import Behaviour, FakeKubelet
from tests.e2e.infra.tcpproxy import TcpProxy
from tether.runner import Runner
from tether.schedulers.kubernetes.fetch import selector
from tether.schedulers.kubernetes.watch import KubeReader
from tether.schedulers.watch import (
    FailurePolicy,
    JobEvent,
    Subscription,
    WatchHub,
    WatchReadError,
    get_hub,
)
from tether.schedulers.watch import hub as hub_module
from tether.schedulers.watch.backoff import Backoff
from tether.specs import AppDef, AppState, Role

# The test kubelet, not the real node: pods change phase at chosen moments around the faults,
# and one test restarts the apiserver of a control plane of its own, with no node joined.
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(600),
    pytest.mark.fake_kubelet("pod phases at chosen moments around injected apiserver faults"),
]

SUITE = "watch-hub"
CASE = "e2e-case"
_counter = itertools.count()
_behaviours: dict[str, Behaviour] = {}


def _policy(pod: client.V1Pod) -> Behaviour:
    return _behaviours.get(pod.metadata.labels.get(CASE, ""), Behaviour.run_forever())


def _case(behaviour: Behaviour) -> str:
    case = f"w{next(_counter)}"
    _behaviours[case] = behaviour
    return case


@pytest.fixture(scope="module")
def kubelet(kube_api: Any) -> Iterator[FakeKubelet]:
    with FakeKubelet(kube_api, node_name="tether-watch-node", label_selector=f"e2e-suite={SUITE}",
                     behaviour=_policy) as kl:  # fmt: skip
        yield kl


@pytest.fixture(scope="module")
def private(kube_binaries: Any) -> Iterator[tuple[KubeCluster, Any]]:
    """A cluster of this module's own, for faults that would disturb other tests: its
    apiserver restarts, and it reads watches from etcd (no watch cache), so compacting etcd
    makes an old resourceVersion answer ``410 Gone`` as a busy production cluster does."""
    cluster = KubeCluster(kube_binaries, insecure_kubeconfig=False,
                          extra_apiserver_args=["--watch-cache=false"])  # fmt: skip
    with cluster, cluster.api_client() as api, FakeKubelet(
        api, node_name="tether-private-node", label_selector=f"e2e-suite={SUITE}",
        behaviour=_policy,
    ):  # fmt: skip
        yield cluster, api


def _compact_etcd(cluster: KubeCluster) -> None:
    """Compacts etcd up to its current revision (every older resourceVersion is gone)."""
    key = base64.b64encode(b"/registry").decode()
    req = urllib.request.Request(cluster.etcd_url + "/v3/kv/range", method="POST",
                                 data=json.dumps({"key": key}).encode())  # fmt: skip
    with urllib.request.urlopen(req, timeout=10) as resp:
        rev = int(json.loads(resp.read())["header"]["revision"])
    body = json.dumps({"revision": rev, "physical": True}).encode()
    req = urllib.request.Request(cluster.etcd_url + "/v3/kv/compaction", method="POST",
                                 data=body)  # fmt: skip
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 200


def _namespace(api: Any, request: pytest.FixtureRequest) -> str:
    name = "w-" + hashlib.sha256(request.node.name.encode()).hexdigest()[:10]
    create_namespace(api, name)
    return name


@pytest.fixture
def ns(kube_api: Any, request: pytest.FixtureRequest) -> str:
    name = "w-" + hashlib.sha256(request.node.name.encode()).hexdigest()[:10]
    create_namespace(kube_api, name)
    return name


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "tetherconfig.ini").write_text("")
    monkeypatch.setenv("TETHERCONFIG", str(tmp_path / "tetherconfig.ini"))


def _client(cluster: KubeCluster, port: int | None = None) -> Any:
    api = cluster.api_client()
    if port is not None:  # through the proxy (the certificate names 127.0.0.1, any port)
        api.configuration.host = f"https://127.0.0.1:{port}"
    return api


def _app(name: str = "w") -> AppDef:
    return AppDef(name, [Role("worker", image="busybox:1.36", entrypoint="sleep", args=["1"])])


def _cfg(ns: str, behaviour: Behaviour) -> dict[str, Any]:
    return {"namespace": ns, "labels": {"e2e-suite": SUITE, CASE: _case(behaviour)}}


def _until(what: str, probe: Callable[[], Any], timeout: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = probe()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


class Collector:
    """Reads a subscription in a thread and keeps every event, in order."""

    def __init__(self, sub: Subscription) -> None:
        self.sub = sub
        self.events: list[JobEvent] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            ev = self.sub.get(timeout=0.2)
            if ev is not None:
                self.events.append(ev)

    def states(self) -> list[JobEvent]:
        """The events that tell a state (not the notices that reads are failing)."""
        return [e for e in self.events if e.error is None]

    def last(self, ref: str) -> JobEvent | None:
        evs = [e for e in self.events if e.ref == ref]
        return evs[-1] if evs else None

    def running(self, *refs: str) -> bool:
        return all((e := self.last(r)) is not None and e.state == AppState.RUNNING for r in refs)

    def ended(self, *refs: str) -> bool:
        return all(self.finals(r) for r in refs)

    def finals(self, ref: str) -> list[JobEvent]:
        return [e for e in self.events if e.ref == ref and e.final]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _requests(cluster: KubeCluster, ns_scope: bool = True) -> int:
    """LIST/GET/WATCH requests for jobs and pods the apiserver has counted in a namespace scope
    (the test kubelet and the controllers read cluster-wide: not counted)."""
    code, text = cluster.request("/metrics", timeout=30)
    assert code == 200, text[:300]
    total = 0
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
        if labels.get("resource") not in ("jobs", "pods") or labels.get("subresource"):
            continue
        if labels.get("verb") not in ("LIST", "GET", "WATCH"):
            continue
        if ns_scope and labels.get("scope") != "namespace":
            continue
        total += int(float(line.rsplit(" ", 1)[1]))
    return total


def _reader(hub: WatchHub) -> KubeReader:
    views = list(hub._views.values())
    assert len(views) == 1
    reader = views[0].driver._reader
    assert isinstance(reader, KubeReader)
    return reader


# ---- requests do not grow with the number of followed jobs ------------------------------------
def _follow_cost(cluster: KubeCluster, kube_api: Any, ns: str, n: int) -> tuple[int, int]:
    """Submits n running jobs, follows them all through one hub; returns the requests the
    following cost (from subscribing until the watches closed) and the ones a poll of every
    job's status costs once."""
    with Runner(scheduler_params={"kubernetes": {"client": kube_api}}) as runner:
        handles = [runner.run(_app(), "kubernetes", _cfg(ns, Behaviour.run_forever()))
                   for _ in range(n)]  # fmt: skip
        _until(f"{n} pods running", lambda: all(
            (s := runner._scheduler_for(h)[0].describe(runner._scheduler_for(h)[1])) is not None
            and s.state == AppState.RUNNING for h in handles), timeout=300)  # fmt: skip
        get_hub().close()  # the process hub's views of earlier tests would add requests
        time.sleep(1.0)
        hub = WatchHub()
        before = _requests(cluster)
        sub = Subscription(hub)
        for h in handles:
            sched, app_id = runner._scheduler_for(h)
            sub.follow(sched, app_id, ref=h)
        heard: dict[str, AppState] = {}
        while len(heard) < n:
            ev = sub.get(timeout=120)
            assert ev is not None, f"heard {len(heard)} of {n}"
            heard[str(ev.ref)] = ev.state
        assert set(heard.values()) == {AppState.RUNNING}
        driver = next(iter(hub._views.values())).driver
        rounds = driver.rounds
        _until("two more reads of the view", lambda: driver.rounds >= rounds + 2, timeout=60)
        sub.close()
        driver.join(timeout=30)
        _until("the watches to be counted", lambda: True)
        time.sleep(1.0)
        following = _requests(cluster) - before
        before = _requests(cluster)
        for h in handles:
            assert runner._scheduler_for(h)[0].describe(runner._scheduler_for(h)[1]) is not None
        polling = _requests(cluster) - before
        for h in handles:
            runner.cancel(h)
        hub.close()
    return following, polling


def test_requests_to_follow_jobs_do_not_grow_with_their_number(
    kube_cluster: KubeCluster, kube_api: Any, kubelet: FakeKubelet, env: None
) -> None:
    costs = {}
    for n in (10, 100):
        ns = f"w-count-{n}-{next(_counter)}"
        create_namespace(kube_api, ns)
        costs[n] = _follow_cost(kube_cluster, kube_api, ns, n)
    print(f"requests (following, one poll of each job): {costs}")
    (f10, p10), (f100, p100) = costs[10], costs[100]
    # one list + watch per kind, whatever the number of jobs
    assert f100 <= f10 + 4, costs
    assert f100 < 20, costs
    # one poll of every job costs requests per job (what the hub saves)
    assert p100 >= 100 and p10 >= 10, costs


# ---- faults on the real apiserver -------------------------------------------------------------
def test_watch_drop_410_and_out_of_band_delete_miss_nothing(
    private: tuple[KubeCluster, Any], env: None, request: pytest.FixtureRequest
) -> None:
    kube_cluster, kube_api = private
    ns = _namespace(kube_api, request)
    port = int(kube_cluster.server.rsplit(":", 1)[1])
    with TcpProxy("127.0.0.1", port) as proxy, Runner(
        scheduler_params={"kubernetes": {"client": _client(kube_cluster, proxy.port)}}
    ) as runner:  # fmt: skip
        forever = runner.run(_app("forever"), "kubernetes", _cfg(ns, Behaviour.run_forever()))
        ends = runner.run(_app("ends"), "kubernetes", _cfg(ns, Behaviour.succeed(run_seconds=8)))
        deleted = runner.run(_app("deleted"), "kubernetes", _cfg(ns, Behaviour.run_forever()))
        hub = WatchHub()
        subs = [Subscription(hub) for _ in range(3)]
        for sub in subs:
            for h in (forever, ends, deleted):
                sub.follow(*runner._scheduler_for(h), ref=h)
        cols = [Collector(s) for s in subs]
        for col in cols:
            _until("every job running", partial(col.running, forever, ends, deleted))
        lists_before = sum(r.lists for r in _reader(hub).reflectors.values())
        heard_before = [len(c.states()) for c in cols]

        proxy.refuse()  # the apiserver is unreachable ...
        proxy.drop()  # ... and every open watch is cut mid-stream
        v1, batch = client.CoreV1Api(kube_api), client.BatchV1Api(kube_api)
        name = deleted.rsplit(":", 1)[1]
        sel = f"tether.dev/app-id={name}"
        for job in batch.list_namespaced_job(ns, label_selector=sel).items:
            batch.delete_namespaced_job(job.metadata.name, ns, propagation_policy="Background")
        for pod in v1.list_namespaced_pod(ns, label_selector=sel).items:
            try:
                v1.delete_namespaced_pod(pod.metadata.name, ns, grace_period_seconds=0)
            except ApiException as e:  # the Job's deletion took it first: gone all the same
                if e.status != 404:
                    raise
        ends_sel = f"tether.dev/app-id={ends.rsplit(':', 1)[1]}"
        _until("the ending job's pod to succeed", lambda: all(
            p.status.phase == "Succeeded"
            for p in v1.list_namespaced_pod(ns, label_selector=ends_sel).items))  # fmt: skip
        _compact_etcd(kube_cluster)  # the hub's last resourceVersion is now too old: 410
        time.sleep(1.0)
        # nothing was heard while the apiserver could not be read: no status invented
        assert [len(c.states()) for c in cols] == heard_before

        proxy.resume()
        for col in cols:
            _until("the end and the deletion heard", partial(col.ended, ends, deleted), 180)
        time.sleep(2.0)  # anything delivered twice would have come by now
        for col in cols:
            col.stop()
            (end,) = col.finals(ends)
            assert end.state == AppState.SUCCEEDED
            (gone,) = col.finals(deleted)
            assert gone.gone and gone.state == AppState.UNKNOWN
            assert "no longer exists on kubernetes" in gone.msg and "its last state was" in gone.msg
            assert not col.finals(forever)
        # relisted after the 410 (the watch from the old version was refused)
        assert sum(r.lists for r in _reader(hub).reflectors.values()) > lists_before
        for sub in subs:
            sub.close()
        hub.close()
        runner.cancel(forever)


def test_apiserver_restart_loses_no_transition(
    private: tuple[KubeCluster, Any], env: None, request: pytest.FixtureRequest
) -> None:
    kube_cluster, kube_api = private
    ns = _namespace(kube_api, request)
    with Runner(scheduler_params={"kubernetes": {"client": _client(kube_cluster)}}) as runner:
        forever = runner.run(_app("forever"), "kubernetes", _cfg(ns, Behaviour.run_forever()))
        fails = runner.run(_app("fails"), "kubernetes",
                           _cfg(ns, Behaviour.fail(exit_code=4, run_seconds=15)))  # fmt: skip
        hub = WatchHub()
        sub = Subscription(hub)
        for h in (forever, fails):
            sub.follow(*runner._scheduler_for(h), ref=h)
        col = Collector(sub)
        _until("both running", partial(col.running, forever, fails))
        kube_cluster.restart_apiserver()
        _until("the failure heard", lambda: col.finals(fails), timeout=240)
        time.sleep(2.0)
        col.stop()
        (end,) = col.finals(fails)
        assert end.state == AppState.FAILED and "exit code 4" in end.msg
        assert not col.finals(forever)
        assert not any(e.gone for e in col.events)
        sub.close()
        hub.close()
        # Runner.wait follows through the process's hub too
        assert runner.wait(fails, timeout=60) is not None
        runner.cancel(forever)


def test_an_end_heard_before_its_pods_is_told_as_the_pods_tell_it(
    kube_cluster: KubeCluster, kube_api: Any, kubelet: FakeKubelet, ns: str, env: None
) -> None:
    """The Job and pod watches are separate streams: after a reconnect the Job's end can come
    first. The end is then read directly, so the failure names the container's exit code
    (what ``describe`` says), not the Job's ``BackoffLimitExceeded``."""
    pods = f"/api/v1/namespaces/{ns}/pods"
    refused: list[Seen] = []

    def pods_watch_down(seen: Seen) -> Fault | None:
        if seen.path == pods and seen.query.get("watch"):
            refused.append(seen)
            return Fault(500, _STATUS_500.encode(), {"Content-Type": "application/json"})
        return None

    with FaultProxy(kube_cluster.server) as proxy:
        api = _client(kube_cluster)
        api.configuration.host = proxy.url
        with Runner(scheduler_params={"kubernetes": {"client": api}}) as runner:
            fails = runner.run(_app("fails"), "kubernetes",
                               _cfg(ns, Behaviour.fail(exit_code=4, run_seconds=15)))  # fmt: skip
            hub = WatchHub()
            sub = Subscription(hub)
            sub.follow(*runner._scheduler_for(fails), ref=fails)
            col = Collector(sub)
            _until("running", partial(col.running, fails))
            proxy.inject = pods_watch_down
            proxy.drop()  # the pod watch stays down; the Job watch reconnects
            _until("the failure heard", lambda: col.finals(fails), 180)
            col.stop()
            assert refused, "the pod watch was never refused"
            assert proxy.inject is pods_watch_down
            (end,) = col.finals(fails)
            assert end.state == AppState.FAILED
            assert "exit code 4" in end.msg, end.msg
            sub.close()
            hub.close()


# ---- a throttled, failing apiserver (429 with Retry-After, 500) -------------------------------
_STATUS_500 = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                          "message": "injected", "reason": "InternalError", "code": 500})
_STATUS_429 = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                          "message": "too many requests", "reason": "TooManyRequests",
                          "code": 429})  # fmt: skip
RETRY_AFTER = 2


class _Faults:
    """What the proxy answers for the namespace's collections: ``mode`` 429 (with
    ``Retry-After``), 500, or None (forwarded); counts what it injected per path."""

    def __init__(self, paths: set[str]) -> None:
        self.paths = paths
        self.mode: int | None = None
        self.injected: dict[tuple[int, str], int] = {}
        self._lock = threading.Lock()

    def __call__(self, seen: Seen) -> Fault | None:
        with self._lock:
            mode = self.mode
            if mode is None or seen.path not in self.paths:
                return None
            self.injected[(mode, seen.path)] = self.injected.get((mode, seen.path), 0) + 1
        if mode == 429:
            return Fault(429, _STATUS_429.encode(), {"Retry-After": str(RETRY_AFTER),
                                                     "Content-Type": "application/json"})
        return Fault(500, _STATUS_500.encode(), {"Content-Type": "application/json"})

    def each_path_got(self, mode: int, n: int) -> bool:
        with self._lock:
            return all(self.injected.get((mode, p), 0) >= n for p in self.paths)

    def wait(self, proxy: FaultProxy, mode: int, n: int) -> None:
        try:
            _until(f"{n} x {mode} on each collection", partial(self.each_path_got, mode, n), 180)
        except AssertionError as e:
            seen = [(round(s.at, 2), s.method, s.path, s.query.get("watch"), s.status)
                    for s in proxy.requests()[-20:]]  # fmt: skip
            raise AssertionError(f"{e}; injected {self.injected}; last requests {seen}") from None


def test_429_and_500_answers_are_backed_off_and_lose_nothing(
    kube_cluster: KubeCluster, kube_api: Any, kubelet: FakeKubelet, ns: str, env: None
) -> None:
    with FaultProxy(kube_cluster.server) as proxy:
        api = _client(kube_cluster)
        api.configuration.host = proxy.url  # plain HTTP to the proxy, TLS from it on
        with Runner(scheduler_params={"kubernetes": {"client": api}}) as runner:
            _throttled_and_failing(runner, proxy, kube_api, ns)


def _throttled_and_failing(runner: Runner, proxy: FaultProxy, kube_api: Any, ns: str) -> None:
    forever = [runner.run(_app("forever"), "kubernetes", _cfg(ns, Behaviour.run_forever()))
               for _ in range(5)]  # fmt: skip
    ends = runner.run(_app("ends"), "kubernetes", _cfg(ns, Behaviour.succeed(run_seconds=12)))
    hub = WatchHub()
    sub = Subscription(hub)
    for h in (*forever, ends):
        sub.follow(*runner._scheduler_for(h), ref=h)
    col = Collector(sub)
    _until("every job running", partial(col.running, *forever, ends))
    paths = {f"/apis/batch/v1/namespaces/{ns}/jobs", f"/api/v1/namespaces/{ns}/pods"}
    _until("both watches open", lambda: {s.path for s in proxy.requests()
                                         if s.query.get("watch") and s.status == 200} >= paths)
    faults = _Faults(paths)
    proxy.inject = faults
    faults.mode = 429
    start = time.monotonic()
    proxy.drop()  # every watch is cut: the reconnects meet the faults
    heard = len(col.states())
    assert not col.finals(ends), "the job ended before the faults began"
    faults.wait(proxy, 429, 3)
    v1 = client.CoreV1Api(kube_api)  # the test's own client, not through the proxy
    sel = f"tether.dev/app-id={ends.rsplit(':', 1)[1]}"
    _until("the ending job's pod to succeed", lambda: all(
        p.status.phase == "Succeeded"
        for p in v1.list_namespaced_pod(ns, label_selector=sel).items))  # fmt: skip
    faults.mode = 500
    faults.wait(proxy, 500, 2)
    # nothing was heard while the apiserver answered only faults: no state invented
    assert len(col.states()) == heard, col.states()[heard:]
    faults.mode = None
    recovered = time.monotonic()

    _until("the end heard", lambda: col.finals(ends), 180)
    time.sleep(2.0)  # anything delivered twice would have come by now
    col.stop()
    (end,) = col.finals(ends)
    assert end.state == AppState.SUCCEEDED
    assert not any(col.finals(h) for h in forever)
    assert not any(e.gone for e in col.events)

    during = [s for s in proxy.requests(start) if s.at < recovered]
    # only the shared list + watch of each kind was retried, never a request per job
    assert {s.path for s in during} <= paths, {s.path for s in during}
    assert {s.query.get("labelSelector") for s in during} == {selector()}
    for path in paths:
        # the shared list + watch of the kind: once one kind is back, the end of the job is
        # confirmed by a direct read of that app (its own selector) on the same path
        _assert_backed_off([s for s in proxy.requests(start)
                            if s.path == path and s.query.get("labelSelector") == selector()])
    sub.close()
    hub.close()
    for h in forever:
        runner.cancel(h)


def _assert_backed_off(reqs: list[Seen]) -> None:
    """Each request after a 429 waited its Retry-After; after the j-th failure in a row (a
    429 or a 500), at least the backoff's floor: half of its limit, which doubles from
    ``base`` to ``cap``."""
    policy = Backoff()
    in_a_row = 0
    for prev, nxt in itertools.pairwise(reqs):
        gap = nxt.at - prev.at
        floor = min(policy.cap, policy.base * 2**in_a_row) / 2
        if prev.injected and prev.status == 429:
            in_a_row += 1
            assert gap >= max(RETRY_AFTER, floor) - 0.05, (prev, nxt, gap, in_a_row)
        elif prev.injected and prev.status == 500:
            in_a_row += 1
            assert gap >= floor - 0.05, (prev, nxt, gap, in_a_row)
        else:
            in_a_row = 0


# ---- an apiserver that refuses the follower for good ------------------------------------------
_STATUS_401 = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                          "message": "Unauthorized", "reason": "Unauthorized", "code": 401})


def test_a_follower_refused_for_good_gets_an_error_not_a_silent_wait(
    kube_cluster: KubeCluster, kube_api: Any, kubelet: FakeKubelet, ns: str, env: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every request of the follower answered 401 (a revoked token): ``Runner.wait`` raises
    an error naming the backend and the apiserver's answer, instead of waiting forever."""
    with Runner(scheduler_params={"kubernetes": {"client": kube_api}}) as runner:
        handle = runner.run(_app("refused"), "kubernetes", _cfg(ns, Behaviour.run_forever()))
    hub = WatchHub(failing=FailurePolicy(failures=3, seconds=0.0))  # told after 3 failures
    monkeypatch.setattr(hub_module, "_HUB", hub)
    try:
        with FaultProxy(kube_cluster.server) as proxy:
            proxy.inject = lambda seen: Fault(401, _STATUS_401.encode(),
                                              {"Content-Type": "application/json"})
            api = _client(kube_cluster)
            api.configuration.host = proxy.url
            # without the error the wait would time out, then its last read raise a 401
            with Runner(scheduler_params={"kubernetes": {"client": api}}) as follower, \
                    pytest.raises(WatchReadError) as info:  # fmt: skip
                follower.wait(handle, timeout=300)
            refused = proxy.requests()
        err = info.value
        assert err.backend == "kubernetes" and err.kind == "connection"
        text = str(err)
        assert handle in text and "kubernetes" in text and "401" in text, text
        assert "Unauthorized" in text, text
        # only the namespace's shared lists were tried, never a read per job
        assert refused and {s.query.get("labelSelector") for s in refused} == {selector()}
    finally:
        hub.close()
        with Runner(scheduler_params={"kubernetes": {"client": kube_api}}) as runner:
            runner.cancel(handle)
