"""The one definition of what a replica sees: macros filled and the ``TETHER_*`` environment.

Every backend renders a replica through :func:`materialize`, so a program reads the same
variables everywhere:

* ``TETHER_ROLE_NAME``: its role's name;
* ``TETHER_REPLICA_ID``: its index within the role (0-based);
* ``TETHER_NUM_REPLICAS``: how many replicas the role has (the role's world size);
* ``TETHER_RANK0_HOST``: the address of replica 0 of the app's first role (the rendezvous
  host of distributed jobs; ``localhost`` on one machine).

These win over values of the same name in the role's ``env``. An app with a recovery policy
or a checkpoint location (:mod:`tether.specs.recovery`) also gives every replica, through
:func:`with_recovery_env` (applied once by ``Scheduler.submit_dryrun``):

* ``TETHER_ATTEMPT``: which attempt of the job this is (0 for the first submission, 1 after
  the first recovery...);
* ``TETHER_CHECKPOINT``: the app's checkpoint location (a path or an fsspec URL), when set.
"""

from __future__ import annotations

import dataclasses

from tether.specs import AppDef, Role, macros

ENV_ROLE_NAME = "TETHER_ROLE_NAME"
ENV_REPLICA_ID = "TETHER_REPLICA_ID"
ENV_NUM_REPLICAS = "TETHER_NUM_REPLICAS"
ENV_RANK0_HOST = "TETHER_RANK0_HOST"
REPLICA_ENV = (ENV_ROLE_NAME, ENV_REPLICA_ID, ENV_NUM_REPLICAS, ENV_RANK0_HOST)
"""The variables :func:`replica_env` sets."""
ENV_ATTEMPT = "TETHER_ATTEMPT"
ENV_CHECKPOINT = "TETHER_CHECKPOINT"
RECOVERY_ENV = (ENV_ATTEMPT, ENV_CHECKPOINT)
"""The variables :func:`recovery_env` sets."""


def recovery_env(app: AppDef) -> dict[str, str]:
    """The recovery variables of every replica of ``app`` (none without a recovery policy
    or checkpoint location).

    Args:
        app: The app.

    Returns:
        Name to value.
    """
    if app.recovery is None and app.checkpoint is None:
        return {}
    env = {ENV_ATTEMPT: str(app.attempt)}
    if app.checkpoint is not None:
        env[ENV_CHECKPOINT] = app.checkpoint
    return env


def with_recovery_env(app: AppDef) -> AppDef:
    """``app`` with :func:`recovery_env` in each role's env (winning over the role's own
    values of those names); ``app`` itself when there is nothing to add.

    Args:
        app: The app (not modified).

    Returns:
        The app to render.
    """
    extra = recovery_env(app)
    if not extra:
        return app
    roles = []
    for role in app.roles:
        env = {k: v for k, v in role.env.items() if k not in RECOVERY_ENV}
        roles.append(dataclasses.replace(role, env={**env, **extra}))
    return dataclasses.replace(app, roles=roles)


def replica_env(role: Role, replica_id: int, rank0_host: str) -> dict[str, str]:
    """The ``TETHER_*`` variables of one replica.

    Args:
        role: The role.
        replica_id: The replica's index.
        rank0_host: The address of replica 0 of the first role.

    Returns:
        Name to value.
    """
    return {
        ENV_ROLE_NAME: role.name,
        ENV_REPLICA_ID: str(replica_id),
        ENV_NUM_REPLICAS: str(role.num_replicas),
        ENV_RANK0_HOST: rank0_host,
    }


def replica_argv_env(
    role: Role, *, app_id: str, replica_id: int, rank0_host: str, img_root: str = ""
) -> tuple[list[str], dict[str, str]]:
    """What one replica runs: its command line and environment, macros substituted.

    The cheap form of :func:`materialize` for a backend that needs only these two (no copy
    of the role is made).

    Args:
        role: The role (not modified).
        app_id: The app id the ``${app_id}`` macro stands for.
        replica_id: The replica's index.
        rank0_host: The address of replica 0 of the first role.
        img_root: What ``${img_root}`` stands for (the image's or workspace's root).

    Returns:
        ``[entrypoint, *args]`` and the role's env with the replica environment set.
    """
    values = macros.Values(
        img_root=img_root, app_id=app_id, replica_id=str(replica_id), rank0_env=ENV_RANK0_HOST
    )
    sub = values.substitute
    argv = [role.entrypoint, *(sub(a) for a in role.args)]
    env = {k: sub(v) for k, v in role.env.items() if k not in REPLICA_ENV}
    env.update(replica_env(role, replica_id, rank0_host))
    return argv, env


def materialize(
    role: Role, *, app_id: str, replica_id: int, rank0_host: str, img_root: str = ""
) -> Role:
    """The role as one replica runs it: a copy with macros substituted (args, env, metadata)
    and the replica environment set; the arguments are those of :func:`replica_argv_env`.

    Returns:
        A copy of the role for this replica.
    """
    values = macros.Values(
        img_root=img_root, app_id=app_id, replica_id=str(replica_id), rank0_env=ENV_RANK0_HOST
    )
    rep = values.apply(role)
    _, rep.env = replica_argv_env(
        role, app_id=app_id, replica_id=replica_id, rank0_host=rank0_host, img_root=img_root
    )
    return rep
