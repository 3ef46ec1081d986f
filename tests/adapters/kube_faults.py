"""A Kubernetes pod evicted under an adapter's running job, and the checks of its recovery.

The adapter tests run ``tests/adapters/recovering_app.py:evictable`` on the session's e2e
kube-apiserver (``kube_cluster``, no scheduler) through the orchestrator, which blocks while
it follows the job. Their pods are run by a test kubelet (``tests/e2e/infra/kubelet.py``,
as ``tests/e2e/test_kubernetes_recovery_e2e.py`` does): attempt 0's pod runs until
:class:`EvictUnder` evicts it the way a kubelet under node pressure does (pod ``Evicted``,
``DisruptionTarget``), and the Job controller fails its Job; a later attempt's pod succeeds.
Each pod "prints" its attempt and checkpoint (the kubelet serves those lines as its log).
:func:`check_recovered` checks what a user cares about: one logical job, two attempts
(an ``evicted`` one and a ``SUCCEEDED`` one), one Job and one pod per attempt.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Iterator
from types import TracebackType
from typing import Any

from tether.runner import get_runner

INJECT_TIMEOUT_S = 240.0
"""How long attempt 0's pod may take to run (generous: a loaded CI)."""


def _env(pod: Any) -> dict[str, str]:
    return {e.name: e.value for e in pod.spec.containers[0].env or []}


def _behaviour(pod: Any) -> Any:
    from tests.e2e.infra.kubelet import Behaviour

    if _env(pod).get("TETHER_ATTEMPT") == "0":
        return Behaviour.run_forever()  # until evicted
    return Behaviour.succeed(run_seconds=0.3)


def _logs(pod: Any) -> list[str]:
    env = _env(pod)
    return [f"attempt {env.get('TETHER_ATTEMPT')} from {env.get('TETHER_CHECKPOINT')}"]


@contextlib.contextmanager
def adapter_kubelet(kube_api: Any, suite: str) -> Iterator[Any]:
    """A test kubelet (its own node) for the pods labelled ``e2e-suite=<suite>``."""
    from tests.e2e.infra.kubelet import FakeKubelet

    with FakeKubelet(kube_api, node_name=f"tether-{suite}", label_selector=f"e2e-suite={suite}",
                     behaviour=_behaviour, logs=_logs) as kubelet:  # fmt: skip
        yield kubelet


def namespace(kube_api: Any, test_name: str) -> str:
    """A fresh namespace for one test."""
    from tests.e2e.infra.kube import create_namespace

    name = "ar-" + hashlib.sha256(test_name.encode()).hexdigest()[:10]
    create_namespace(kube_api, name)
    return name


class EvictUnder:
    """Evicts attempt 0's pod in ``ns`` once the test kubelet runs it.

    Args:
        kube_api: An admin API client.
        kubelet: The test kubelet running the namespace's pods.
        ns: The namespace.
    """

    def __init__(self, kube_api: Any, kubelet: Any, ns: str) -> None:
        self.kube_api = kube_api
        self.kubelet = kubelet
        self.ns = ns
        self.pod: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._inject, daemon=True)

    def __enter__(self) -> EvictUnder:
        self._thread.start()
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:  # fmt: skip
        self._stop.set()
        self._thread.join(timeout=60)

    def _inject(self) -> None:
        import time

        from kubernetes import client

        v1 = client.CoreV1Api(self.kube_api)
        deadline = time.monotonic() + INJECT_TIMEOUT_S
        while not self._stop.is_set() and time.monotonic() < deadline:
            for pod in v1.list_namespaced_pod(self.ns).items:
                rec = self.kubelet.record(self.ns, pod.metadata.name)
                if rec is not None and rec.state == "running" and (
                    _env(pod).get("TETHER_ATTEMPT") == "0"
                ):
                    self.kubelet.evict(self.ns, pod.metadata.name)
                    self.pod = pod.metadata.name
                    return
            self._stop.wait(0.2)


def check_recovered(kube_api: Any, evict: EvictUnder, handle: str, ckpt: str) -> list[str]:
    """Checks the logical job ``handle`` recovered from the eviction of attempt 0's pod.

    Args:
        kube_api: An admin API client.
        evict: The injector (it evicted a pod).
        handle: The logical job's handle (``chain://...``).
        ckpt: The app's checkpoint location.

    Returns:
        The logical job's log lines of role ``train``.
    """
    from kubernetes import client

    assert evict.pod is not None, "attempt 0's pod never ran"
    assert handle.startswith("chain://"), handle
    with get_runner() as runner:
        attempts = runner.attempts(handle)
        lines = list(runner.log_lines(handle, "train"))
    assert [(a["attempt"], a["scheduler"], a["state"], a["cause"]) for a in attempts] == [
        (0, "kubernetes", "FAILED", "evicted"),
        (1, "kubernetes", "SUCCEEDED", None),
    ], attempts
    # one Job and one pod per attempt (no duplicate), each told its attempt and checkpoint
    pods = client.CoreV1Api(kube_api).list_namespaced_pod(evict.ns).items
    assert sorted((_env(p)["TETHER_ATTEMPT"], _env(p)["TETHER_CHECKPOINT"]) for p in pods) == [
        ("0", ckpt), ("1", ckpt)]
    assert len(client.BatchV1Api(kube_api).list_namespaced_job(evict.ns).items) == 2
    assert lines == ["[tether] attempt 0 on kubernetes\n", f"attempt 0 from {ckpt}\n",
                     "[tether] attempt 1 on kubernetes\n", f"attempt 1 from {ckpt}\n"], lines
    return lines
