"""Followed Kubernetes logs on the real kube-apiserver: no requests while pods wait, every
line once when they run, a stream cut mid-way resumed without a loss or a repeat, and a
stream given up ended at once, also while its pod is Pending.

Pods stay Pending (unbound: this cluster has no scheduler) until the test starts a test
kubelet (``tests/e2e/infra/kubelet.py``) whose label selector takes them; the apiserver
proxies the log requests to it. Requests are counted from the apiserver's ``/metrics``.
"""

from __future__ import annotations

import collections
import itertools
import re
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from kubernetes.client import V1Pod

from tests.e2e.infra.kube import KubeCluster, create_namespace
from tests.e2e.infra.kubelet import Behaviour, FakeKubelet
from tests.e2e.infra.tcpproxy import TcpProxy
from tether.runner import Runner, fan_in
from tether.schedulers.kubernetes.watch import KubeReader
from tether.schedulers.watch import get_hub
from tether.specs import AppDef, AppState, Role

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

_ids = itertools.count()


@pytest.fixture
def env(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "tetherconfig.ini").write_text("")
    monkeypatch.setenv("TETHERCONFIG", str(tmp_path / "tetherconfig.ini"))


def _suite(kube_api: Any) -> tuple[str, str]:
    """A namespace and an ``e2e-suite`` label of the test's own."""
    n = next(_ids)
    suite = f"log-follow-{n}-{int(time.time())}"
    create_namespace(kube_api, suite)
    return suite, suite


def _app(name: str) -> AppDef:
    return AppDef(name, [Role("worker", image="busybox:1.36", entrypoint="sh", num_replicas=2)])


def _requests(cluster: KubeCluster) -> dict[str, int]:
    """Pod and job reads the apiserver counted in a namespace or of one object: ``reads``
    (LIST/GET/WATCH of jobs and pods, in JSON: the controllers, which read jobs by name,
    speak protobuf) and ``logs`` (pod log requests)."""
    code, text = cluster.request("/metrics", timeout=30)
    assert code == 200, text[:300]
    out = {"reads": 0, "logs": 0}
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
        scoped = labels.get("scope") in ("namespace", "resource")  # not the kubelet's reads
        if not scoped or labels.get("resource") not in ("jobs", "pods"):
            continue
        count = int(float(line.rsplit(" ", 1)[1]))
        if labels.get("subresource") == "log":
            out["logs"] += count
        elif (
            not labels.get("subresource")
            and labels.get("verb") in ("LIST", "GET", "WATCH")
            and "protobuf" not in labels.get("contentType", "")
        ):
            out["reads"] += count
    return out


def _until(what: str, probe: Callable[[], Any], timeout: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = probe()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


class Streams:
    """Tails every replica's log (``log_lines(should_tail=True)``), each in a thread."""

    def __init__(self, runner: Runner, handles: list[str]) -> None:
        self.lines: dict[tuple[str, int], list[str]] = {}
        self.errors: list[BaseException] = []
        self.threads = [
            threading.Thread(target=self._read, args=(runner, h, k), daemon=True)
            for h in handles
            for k in (0, 1)
        ]
        for t in self.threads:
            t.start()

    def _read(self, runner: Runner, handle: str, k: int) -> None:
        got = self.lines.setdefault((handle, k), [])
        try:
            for line in runner.log_lines(handle, "worker", k, should_tail=True):
                got.append(line)
        except BaseException as e:  # reported by the test
            self.errors.append(e)

    def join(self, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        assert not any(t.is_alive() for t in self.threads), "a log stream did not end"
        assert not self.errors, self.errors


def _waiting(reader_count: int, streams: int) -> bool:
    """Every stream follows its app in the process's hub, whose view has listed."""
    hub = get_hub()
    if hub.stats()["subscribers"] < streams:
        return False
    readers = [v.driver.reader(0) for v in list(hub._views.values())]
    return len(readers) >= reader_count and all(
        isinstance(r, KubeReader) and all(f.synced.is_set() for f in r.reflectors.values())
        for r in readers
    )


def _replica(pod: V1Pod) -> str:
    return f"{pod.metadata.labels['tether.dev/app-id']}/{pod.metadata.name}"


def test_pending_log_streams_cost_nothing_and_get_every_line(
    kube_cluster: KubeCluster, kube_api: Any, env: None
) -> None:
    ns, suite = _suite(kube_api)
    cfg: dict[str, Any] = {"namespace": ns, "labels": {"e2e-suite": suite}}
    with Runner(scheduler_params={"kubernetes": {"client": kube_api}}) as runner:
        handles = [runner.run(_app(f"lf{i}"), "kubernetes", cfg) for i in range(3)]
        streams = Streams(runner, handles)
        _until("every log stream waiting on the hub", lambda: _waiting(1, len(streams.threads)))
        before = _requests(kube_cluster)
        time.sleep(6.0)  # pods Pending: the streams wait (the old code polled twice a second)
        during = _requests(kube_cluster)
        # nothing per stream and nothing that grows with time (a hub watch may reconnect)
        assert during["logs"] == before["logs"]
        # the old streams read each pod at least once a second (36 to 70 reads here); what
        # is left is not theirs (the hub's or the controllers' JSON reads, 6 to 8 in CI)
        assert during["reads"] - before["reads"] < 3 * len(streams.threads), (before, during)

        def logs(pod: V1Pod) -> list[str]:
            return [f"{_replica(pod)} line {i}" for i in range(40)]

        with FakeKubelet(kube_api, node_name=f"{suite}-node", label_selector=f"e2e-suite={suite}",
                         behaviour=lambda pod: Behaviour.succeed(run_seconds=1.0),
                         logs=logs) as kubelet:  # fmt: skip
            streams.join()
            pods = {(r.pod.metadata.labels["tether.dev/app-id"],
                     int(r.pod.metadata.labels["tether.dev/replica-id"])): r.pod
                    for r in kubelet.records().values()}  # fmt: skip
        after = _requests(kube_cluster)
        for handle, k in streams.lines:
            name = handle.rsplit(":", 1)[1]
            assert streams.lines[(handle, k)] == [f"{x}\n" for x in logs(pods[(name, k)])]
        # one long-lived follow request per replica (a retry when a start races the cache)
        assert during["logs"] < after["logs"] <= during["logs"] + 2 * len(streams.threads)
        for h in handles:
            status = runner.wait(h, timeout=60)
            assert status is not None and status.state == AppState.SUCCEEDED


def test_a_cut_log_stream_resumes_without_loss_or_repeat(
    kube_cluster: KubeCluster, kube_api: Any, env: None
) -> None:
    ns, suite = _suite(kube_api)
    cfg: dict[str, Any] = {"namespace": ns, "labels": {"e2e-suite": suite}}
    port = int(kube_cluster.server.rsplit(":", 1)[1])
    api = kube_cluster.api_client()
    release = threading.Event()
    started: dict[str, datetime] = {}

    def logs(pod: V1Pod) -> list[tuple[datetime, str]]:
        # three lines per tenth of a second (lines that share a time stamp), written as time
        # goes: the first 60 at once, the rest only after the test cut the stream
        t0 = started.setdefault(pod.metadata.uid, datetime.now(timezone.utc).replace(microsecond=0))
        items = [(t0 + timedelta(seconds=(i // 3) / 10), f"line {i}") for i in range(120)]
        return items if release.is_set() else items[:60]

    with TcpProxy("127.0.0.1", port) as proxy:
        api.configuration.host = f"https://127.0.0.1:{proxy.port}"
        with Runner(scheduler_params={"kubernetes": {"client": api}}) as runner, FakeKubelet(
            kube_api, node_name=f"{suite}-node", label_selector=f"e2e-suite={suite}",
            behaviour=lambda pod: Behaviour.run_forever(), logs=logs,
        ) as kubelet:  # fmt: skip
            handle = runner.run(_app("cut"), "kubernetes", cfg)
            streams = Streams(runner, [handle])
            _until("the first lines", lambda: all(
                len(v) >= 60 for v in streams.lines.values()) and len(streams.lines) == 2)
            proxy.drop()  # every stream (log and watch) is cut mid-way
            release.set()  # lines written while no stream was open
            _until("the rest of the lines", lambda: all(
                len(v) >= 120 for v in streams.lines.values()))
            runner.cancel(handle)
            streams.join()
            per_pod = collections.Counter(p.split("?")[0] for p in kubelet.requests)
    # each replica's stream was cut and reopened (and the lines above came once each)
    assert len(per_pod) == 2 and min(per_pod.values()) >= 2, per_pod
    expected = [f"line {i}\n" for i in range(120)]
    for got in streams.lines.values():
        assert got == expected


def test_a_stream_given_up_ends_its_readers_also_of_a_pending_pod(
    kube_cluster: KubeCluster, kube_api: Any, env: None
) -> None:
    """Replica 0 runs and writes a line; replica 1 stays Pending (no kubelet takes it). The
    consumer takes the line and gives the fan-in up: both readers end at once (the Pending
    one waited on the watch hub until its app changed) and leave the hub."""
    ns, suite = _suite(kube_api)
    cfg: dict[str, Any] = {"namespace": ns, "labels": {"e2e-suite": suite}}
    with Runner(scheduler_params={"kubernetes": {"client": kube_api}}) as runner:
        handle = runner.run(_app("abandoned"), "kubernetes", cfg)
        subscribers = get_hub().stats()["subscribers"]
        with FakeKubelet(kube_api, node_name=f"{suite}-node",
                         label_selector=f"e2e-suite={suite},tether.dev/replica-id=0",
                         behaviour=lambda pod: Behaviour.run_forever(),
                         logs=lambda pod: ["hello"]):  # fmt: skip
            before = set(threading.enumerate())
            lines = fan_in(runner, handle, should_tail=True)
            first = next(lines)
            assert first.format() == "worker/0 hello"
            readers = [t for t in threading.enumerate()
                       if t not in before and t.name.startswith("logs-")]  # fmt: skip
            assert sorted(t.name for t in readers) == ["logs-worker-0", "logs-worker-1"]
            assert get_hub().stats()["subscribers"] == subscribers + 2
            lines.close()  # given up: replica 0 runs on silently, replica 1 stays Pending
            for t in readers:
                t.join(timeout=120)  # bounded: the Pending one waited until its app changed
            assert not [t.name for t in readers if t.is_alive()]
            assert get_hub().stats()["subscribers"] == subscribers
            status = runner.status(handle)
            assert status is not None and not status.state.is_terminal()
        runner.cancel(handle)
