"""Declared capabilities: checked at dryrun, naming backend, role and field; read, not sniffed."""

from __future__ import annotations

import sys

import pytest

from tether.schedulers.capabilities import (
    Capabilities,
    MountKind,
    UnsupportedFeatureError,
    check_app,
)
from tether.specs import AppDef, BindMount, RetryPolicy, Role, SecretRef, VolumeMount


def _app(**role_kw: object) -> AppDef:
    kw: dict[str, object] = {"image": "img", "entrypoint": "python", **role_kw}
    return AppDef("a", [Role("trainer", **kw)])  # type: ignore[arg-type]


NOTHING = Capabilities(needs_image=True)


def test_an_app_within_the_capabilities_passes() -> None:
    caps = Capabilities(
        native_retries=frozenset({RetryPolicy.REPLICA}), mounts=frozenset(MountKind), secrets=True
    )
    check_app(
        _app(max_retries=2, retry_policy=RetryPolicy.REPLICA,
             mounts=[BindMount("/a", "/b")], secrets={"T": SecretRef("s", "k")}),
        caps, "x",
    )


@pytest.mark.parametrize(
    ("role_kw", "expected"),
    [
        ({"max_retries": 1, "retry_policy": RetryPolicy.ROLE},
         "role 'trainer': retry_policy=ROLE is not supported by mybackend"),
        ({"mounts": [VolumeMount("vol", "/data")]},
         "role 'trainer': mounts has a volume mount, which mybackend does not support"),
        ({"secrets": {"DB_PASS": SecretRef("db")}},
         "role 'trainer': secrets ['DB_PASS'] cannot be given by mybackend"),
        ({"image": ""}, "role 'trainer': image is empty; mybackend runs a container image"),
    ],
)
def test_what_a_backend_cannot_do_is_rejected_by_name(role_kw: dict[str, object],
                                                      expected: str) -> None:
    with pytest.raises(UnsupportedFeatureError) as e:
        check_app(_app(**role_kw), NOTHING, "mybackend")
    assert expected in str(e.value)
    assert isinstance(e.value, ValueError)


def test_max_roles() -> None:
    app = AppDef("a", [Role(n, image="i", entrypoint="e") for n in ("a", "b", "c")])
    with pytest.raises(UnsupportedFeatureError, match="3 roles; x runs at most 2"):
        check_app(app, Capabilities(max_roles=2), "x")


def test_local_dryrun_rejects_a_mount_it_cannot_express() -> None:
    from tether.runner import get_runner

    role = Role("r", entrypoint=sys.executable, mounts=[BindMount("/data", "/mnt/data")])
    with get_runner() as runner, pytest.raises(ValueError, match=r"local_cwd cannot run app"):
        runner.dryrun(AppDef("m", [role]), "local_cwd")


def test_the_cli_reads_capabilities_not_names() -> None:
    from tether.cli.cmd_run import runs_on_this_machine
    from tether.runner import get_runner

    with get_runner() as runner:
        assert runs_on_this_machine(runner, "local_cwd")
        assert not runs_on_this_machine(runner, "kubernetes")
