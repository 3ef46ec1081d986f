"""``kubernetes``: run apps on any Kubernetes cluster, as plain ``batch/v1`` Jobs by default.

Prerequisites: a cluster and a kubeconfig (``$KUBECONFIG``, ``~/.kube/config``, the pod's
service account, or ``scheduler_params={"kubernetes": {"kubeconfig": PATH}}``), and the
``kubernetes`` package (``pip install 'tether[kubernetes]'``), imported only when the
scheduler first talks to the cluster: ``tether run --dryrun -s kubernetes ...`` renders the
manifests offline, without a cluster, a kubeconfig or the package's configuration.

Try it locally: ``tests/e2e/infra/build_kube.sh`` builds a real kube-apiserver, etcd and
kube-controller-manager (cached outside the repository) and ``python -m
tests.e2e.infra.kube --kubelet`` starts them with a small test kubelet, printing a
``KUBECONFIG`` to use.

**Design: one Job per replica.** Every replica of every role is one ``batch/v1`` Job with
``completions=1`` (named ``<app>-<role>-<k>``) whose pod has a stable identity: the hostname
``<app>-<role>-<k>``, the labels ``tether.dev/role``/``tether.dev/replica-id``,
``$TETHER_REPLICA_ID``, and macros (``${replica_id}``, ``${app_id}``) substituted for that
replica. Apps with more than one replica get a headless Service named ``<app>`` (pods set
``subdomain`` to it), so ``$TETHER_RANK0_HOST`` is the DNS name of replica 0 of the first role,
``<app>-<role>-0.<app>.<namespace>.svc.<cluster_domain>`` (``localhost`` for a single replica).
Why not one Indexed Job per role: Indexed Jobs need Kubernetes 1.21+ (alpha, GA in 1.24),
while a Job per replica works on every version (tests run v1.20), lets each replica carry
fully substituted args and env (not just ``$JOB_COMPLETION_INDEX``), and lets tether restart
or stop replicas one by one.

**Retries.** ``RetryPolicy.REPLICA``: the Job's ``backoffLimit`` is ``max_retries`` (Kubernetes
recreates the failed pod). ``ROLE`` and ``APPLICATION``: ``backoffLimit`` is 0 and tether
restarts them in :meth:`~.scheduler.KubernetesScheduler.reconcile` (which the Runner's
``wait`` and the adapters' pollers call; ``describe`` is a pure read and reports such a replica
PENDING, "restarting"): for a failed replica whose role has retries left, it stops the affected
Jobs (the role's, or every Job of the app) and creates their next attempt
(``<app>-<role>-<k>-r<n>``, label ``tether.dev/attempt``, restart count in the
``tether.dev/num-restarts`` annotation). A replica
is restarted at most ``max_retries`` times; names are deterministic, so two processes that
reconcile at once create each attempt once. When a failure is final, the app is FAILED and
``reconcile`` stops its other replicas (they would wait for the failed one forever).
A Job with ``backoffLimit`` 0 whose running pod is *deleted* (the eviction API, its Node
deleted), which Kubernetes before 1.26 replaces silently, is stopped by ``reconcile`` as
``disrupted``, FAILED with the cause (``evicted``, ``node_lost``): see :mod:`.disruption`.

**Status** comes from the Job conditions and the pods (the state tables
:data:`POD_PHASE_STATE`, :data:`JOB_CONDITION_STATE`, :data:`VOLCANO_PHASE_STATE`,
:data:`APPWRAPPER_STATE`, defined with the pure analysis in
:mod:`tether.schedulers.kubernetes.status`, and the rules of
:meth:`~.scheduler.KubernetesScheduler.describe`): an unschedulable pod is PENDING with the
scheduler's reason in ``msg``; ``ErrImagePull``/``ImagePullBackOff`` are PENDING with the reason
until they persisted ``image_pull_timeout`` seconds, then FAILED (``InvalidImageName`` and
``ErrImageNeverPull`` at once) and the app is stopped; ``CrashLoopBackOff`` keeps RUNNING (the
pod runs) with the reason and restart count in ``msg``. UNKNOWN only for a pod in phase Unknown
(its node stopped reporting), a native state tether does not know, or an apiserver that cannot
be reached.

**Cancel** marks the app's Jobs ``tether.dev/stopped=cancelled`` and stops them
(``parallelism=0`` removes the pods, ``activeDeadlineSeconds=1`` makes the Job finish), keeping
every record: the app stays CANCELLED. **Delete** removes every Job, pod, Service, Volcano Job
(and Volcano Command) and AppWrapper labelled with the app, and is idempotent.

**Gang scheduling** (``gang`` option): ``none`` (default, no CRD); ``volcano`` (one
``batch.volcano.sh/v1alpha1`` Job, a task per replica, ``minAvailable`` = the sum of
``min_replicas``, ``queue``; retries by Volcano policies, cancel through a Volcano
``Command``); ``kueue`` (the Jobs get the ``kueue.x-k8s.io/queue-name`` label and start
suspended; Kueue admits each replica's Job as its own workload, so it queues by quota but is
not all-or-nothing); ``appwrapper`` (the Jobs and Service wrapped in an ``mcad.ibm.com/v1beta1``
AppWrapper that MCAD dispatches when ``minAvailable`` pods fit; ``APPLICATION``/``ROLE``
retries become AppWrapper requeuing). Volcano and MCAD cannot restart only one role: ``ROLE``
restarts the whole app there (a warning says so).

**Job identity**: the caller's job key (``app.metadata[JOB_KEY]``) is the label
``tether.dev/job-key`` (and an annotation with the exact value); :meth:`find_jobs` is a label
selector, and :meth:`schedule` returns the existing app instead of creating a second one when
a job with that key is already running or succeeded in the namespace.

**Modules**, one job each: :mod:`.options` (the run options); :mod:`.render`, the pure entry
point of rendering (AppDef + options -> manifests), with :mod:`.checks` (option and app
checks), :mod:`.naming` (names, labels, annotations) and :mod:`.podspec` (a replica's pod
template); :mod:`.client` (the apiserver's REST API); :mod:`.fetch` (reading an app's
objects); :mod:`.status`, the native -> AppState tables applied to those objects, with
:mod:`.fields` (object fields), :mod:`.pods` (a replica's current pod), :mod:`.roles` (roles
read back) and :mod:`.views` (the results); :mod:`.reconcile` (planning restarts and stops);
:mod:`.actions` (creating, stopping and deleting objects); :mod:`.logs` (reading logs);
:mod:`.scheduler`, the scheduler class that combines them; and :mod:`.watch` (the watch hub's
view of a namespace, analyzed from one cache), over :mod:`.reflector` (one kind's list +
watch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.schedulers.kubernetes.scheduler import KubernetesScheduler


def create_scheduler(session_name: str, **kwargs: Any) -> KubernetesScheduler:
    """Creates the ``kubernetes`` scheduler (see :mod:`.scheduler`).

    Args:
        session_name: The runner's session.
        **kwargs: See :func:`tether.schedulers.kubernetes.scheduler.create_scheduler`.

    Returns:
        The scheduler.
    """
    from tether.schedulers.kubernetes.scheduler import create_scheduler as create

    return create(session_name, **kwargs)
