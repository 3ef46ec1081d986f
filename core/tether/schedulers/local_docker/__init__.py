"""``local_docker``: run every replica as a container of a local Docker Engine (or podman).

Prerequisites: a Docker Engine API, either Docker or podman's compatible socket
(``podman system service --time=0 unix:///tmp/podman.sock`` and
``export DOCKER_HOST=unix:///tmp/podman.sock``), and the ``docker`` package
(``pip install 'tether[docker]'``), imported only when the scheduler first talks to the
engine: ``tether run --dryrun -s local_docker ...`` renders the containers offline.

Try it locally: the e2e tests (``tests/e2e/test_local_docker.py``) start a
private podman with :class:`tests.e2e.infra.podman.PodmanService`.

**Design.** Each app gets its own bridge network named after the app id; every replica is a
container named and hostnamed ``<app_id>-<role>-<k>`` on it. The address of a replica is
fixed at submission (the ``10 + i``-th address of the network's subnet, read back from the
engine) and every container gets every replica's ``name -> address`` in ``/etc/hosts``, so
``$TETHER_RANK0_HOST`` (replica 0 of the first role) resolves without the engine's DNS. That
matters on podman with the CNI backend, which has no name resolution between containers
unless the ``dnsname`` plugin is installed; on Docker the embedded DNS would also work.

Replicas are filled through :func:`tether.schedulers.replica.materialize`. Resources are
container limits (``cpu`` -> ``NanoCpus``, ``memMB`` -> memory limit), GPUs a device request
(``Count`` = ``resource.gpu``), mounts bind/volume mounts and devices, ``port_map`` ports
published on random host ports. ``RetryPolicy.REPLICA`` is the engine's ``on-failure``
restart policy with ``max_retries`` as its maximum retry count; other policies are rejected
at dryrun.

**Identity.** Labels ``tether.dev/app-id``, ``/role``, ``/replica-id``, ``/job-key`` (the
caller's ``JOB_KEY``) on the containers and the app network; ``list`` and ``find_jobs`` are
label filters on the networks. Containers and networks cannot be relabelled, so events
(a cancel, a failure to start) are recorded as empty, labelled volumes ``<app_id>-<event>``.

**Failures before start.** A missing image is pulled (``pull`` option); when that fails, or
the engine refuses a container, no container is left and the app is FAILED with the engine's
reason. **Cancel** stops every container (SIGTERM, then SIGKILL after ``stop_timeout``) and
keeps them for ``describe`` and logs; **delete** removes containers, network and records.
Both are idempotent.

**Logs** are the engine's per-container logs with timestamps; ``since``/``until`` select by
them (podman stamps whole seconds, so lines in the boundary second are kept).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.schedulers.local_docker.scheduler import LocalDockerScheduler


def create_scheduler(session_name: str, **kwargs: Any) -> LocalDockerScheduler:
    """Creates the ``local_docker`` scheduler (see :mod:`.scheduler`).

    Args:
        session_name: The runner's session.
        **kwargs: See :func:`tether.schedulers.local_docker.scheduler.create_scheduler`.

    Returns:
        The scheduler.
    """
    from tether.schedulers.local_docker.scheduler import create_scheduler as create

    return create(session_name, **kwargs)
