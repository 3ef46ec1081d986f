"""The spec model: validation, macros, mounts, named resources, statuses, handles."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable

import pytest

from tether.specs import (
    AppDef,
    AppState,
    AppStatus,
    AppStatusError,
    BindMount,
    DeviceMount,
    MalformedAppHandleException,
    ReplicaStatus,
    Resource,
    RetryPolicy,
    Role,
    RoleStatus,
    SpecError,
    SpecTypeError,
    VolumeMount,
    macros,
    make_app_handle,
    parse_app_handle,
    parse_mounts,
    reload_named_resources,
    resource,
    validate,
)


def _role(**kw: object) -> Role:
    base: dict[str, object] = {"name": "trainer", "image": "img", "entrypoint": "python"}
    base.update(kw)
    return Role(**base)  # type: ignore[arg-type]


class TestValidate:
    def test_valid_app_passes(self) -> None:
        validate(AppDef("ok", roles=[_role(), _role(name="ps")]))

    @pytest.mark.parametrize(
        ("make", "needle"),
        [
            (lambda: AppDef("x", roles=[]), "has no roles"),
            (
                lambda: AppDef("x", roles=[_role(entrypoint="")]),
                "role 'trainer': entrypoint is empty",
            ),
            (lambda: AppDef("x", roles=[_role(), _role()]), "duplicate role name 'trainer'"),
            (
                lambda: AppDef("x", roles=[_role(resource=Resource(cpu=-2, gpu=0, memMB=10))]),
                "resource.cpu = -2 is negative",
            ),
            (
                lambda: AppDef("x", roles=[_role(num_replicas=2, min_replicas=3)]),
                "role 'trainer': min_replicas = 3 must be in 0..num_replicas (2)",
            ),
            (
                lambda: AppDef("x", roles=[_role(num_replicas=0)]),
                "num_replicas = 0 is out of range",
            ),
            (lambda: AppDef("x", roles=[_role(port_map={"tb": 70000})]), "port_map['tb']"),
        ],
    )
    def test_errors_name_role_and_field(self, make: Callable[[], AppDef], needle: str) -> None:
        with pytest.raises(SpecError, match="invalid") as ei:
            validate(make())
        assert needle in str(ei.value)

    def test_all_problems_reported_at_once(self) -> None:
        app = AppDef("x", roles=[_role(entrypoint="")])
        app.roles[0].max_retries = -1  # changed after construction: validate() sees it
        with pytest.raises(ValueError) as ei:
            validate(app)
        assert "entrypoint is empty" in str(ei.value)
        assert "max_retries = -1 must be >= 0" in str(ei.value)

    def test_default_resource_is_not_shared_between_roles(self) -> None:
        a, b = _role(), _role(name="b")
        a.resource.devices["x"] = 1
        assert b.resource.devices == {}


class TestMacros:
    def test_substitutes_args_env_metadata_and_escapes(self) -> None:
        role = _role(
            args=["--id", macros.app_id, "--r", macros.replica_id, "$$HOME", "$PATH"],
            env={"ROOT": macros.img_root, "HOST": f"${{{macros.rank0_env[2:-1]}}}"},
            metadata={"m": f"app-{macros.app_id}", "n": 3},
        )
        values = macros.Values(img_root="/img", app_id="app-1", replica_id="2")
        out = values.apply(role)
        # no macro in "$$HOME": passed through byte for byte
        assert out.args == ["--id", "app-1", "--r", "2", "$$HOME", "$PATH"]
        assert out.env["ROOT"] == "/img"
        assert out.metadata == {"m": "app-app-1", "n": 3}
        assert role.args[1] == macros.app_id  # original untouched

    def test_rank0_env_names_the_variable(self) -> None:
        values = macros.Values(img_root="", app_id="a", replica_id="0")
        assert values.substitute(f"$${macros.rank0_env}:29500") == "$TETHER_RANK0_HOST:29500"
        assert values.substitute(macros.base_img_root) == ""

    @pytest.mark.parametrize("value", ["pa$$word", "$$", "a$$b$c", "${unknown}$$", "$", "$$$"])
    def test_values_without_macros_pass_through_byte_for_byte(self, value: str) -> None:
        values = macros.Values(img_root="/img", app_id="a", replica_id="0")
        assert values.substitute(value) == value
        assert values.substitute(f"{value}-{macros.app_id}") == (
            value.replace("$$", "$") + "-a"
        )


class TestMounts:
    def test_parse_each_kind(self) -> None:
        got = parse_mounts(
            [
                "type=bind,src=/a,dst=/b,readonly",
                "type=volume,src=pvc1,dst=/ckpt",
                "type=device,src=/dev/fuse",
            ]
        )
        assert got == [
            BindMount("/a", "/b", read_only=True),
            VolumeMount("pvc1", "/ckpt", read_only=False),
            DeviceMount("/dev/fuse", "/dev/fuse", "rwm"),
        ]

    def test_shell_split_form(self) -> None:
        assert parse_mounts(["type=bind", "src=/x", "dst=/y"]) == [BindMount("/x", "/y")]

    @pytest.mark.parametrize(
        ("spec", "needle"),
        [
            ("src=/a,dst=/b", "has no type"),
            ("type=nfs,src=/a,dst=/b", "unknown type 'nfs'; allowed: bind, volume, device"),
            ("type=bind,src=/a", "dst= is required"),
            ("type=bind,src=/a,dst=/b,color=red", "unknown option(s) ['color']"),
            ("type=device,src=/dev/x,perm=rx", "may only contain r, w and m"),
        ],
    )
    def test_errors(self, spec: str, needle: str) -> None:
        with pytest.raises(ValueError) as ei:
            parse_mounts([spec])
        assert needle in str(ei.value)


class TestNamedResources:
    def test_generic_table(self) -> None:
        tag = "resource_name"  # a named resource carries its name (get_resource_name())
        assert resource(h="gpu.small") == Resource(cpu=8, gpu=1, memMB=32 * 1024,
                                                   tags={tag: "gpu.small"})
        assert resource(h="cpu.large") == Resource(cpu=2, gpu=0, memMB=8 * 1024,
                                                   tags={tag: "cpu.large"})
        assert resource(h="gpu.xlarge").gpu == 8

    def test_aws_instance_types(self) -> None:
        p4d = resource(h="aws_p4d.24xlarge")
        # TorchX's memory tax: 96% of the instance's memory, as int(1024 * 0.96) MiB per GiB
        assert (p4d.cpu, p4d.gpu, p4d.memMB) == (96, 8, 1152 * 983)
        assert p4d.devices == {"vpc.amazonaws.com/efa": 4}
        assert p4d.capabilities["node.kubernetes.io/instance-type"] == "p4d.24xlarge"
        assert resource(h="aws_trn1.32xlarge").devices["aws.amazon.com/neurondevice"] == 16
        assert resource(h="aws_g5.48xlarge").gpu == 8

    def test_fresh_copy_each_time(self) -> None:
        a = resource(h="aws_p3.2xlarge")
        a.capabilities["x"] = 1
        assert "x" not in resource(h="aws_p3.2xlarge").capabilities

    def test_unknown_name_lists_close_matches(self) -> None:
        with pytest.raises(KeyError) as ei:
            resource(h="gpu.smal")
        assert "did you mean gpu.small" in str(ei.value)

    def test_explicit_values(self) -> None:
        assert resource(cpu=3, memMB=100) == Resource(cpu=3, gpu=0, memMB=100)

    def test_custom_module_env(self, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
        (tmp_path / "my_res.py").write_text(
            textwrap.dedent(
                """
                from tether.specs import Resource
                NAMED_RESOURCES = {"gpu_x2": lambda: Resource(cpu=16, gpu=2, memMB=122000)}
                """
            )
        )
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.setenv("TETHER_CUSTOM_NAMED_RESOURCES", "my_res")
        reload_named_resources()
        try:
            assert resource(h="gpu_x2").gpu == 2
        finally:
            monkeypatch.delenv("TETHER_CUSTOM_NAMED_RESOURCES")
            sys.modules.pop("my_res", None)
            reload_named_resources()


class TestStatus:
    def test_terminal_states(self) -> None:
        assert {s for s in AppState if s.is_terminal()} == {
            AppState.SUCCEEDED, AppState.FAILED, AppState.CANCELLED,
        }

    def test_raise_for_status_and_format(self) -> None:
        st = AppStatus(
            AppState.FAILED,
            msg="trainer/1 exited with code 3",
            roles=[RoleStatus("trainer", [ReplicaStatus(1, AppState.FAILED, "trainer",
                                                         exit_code=3)])],
        )
        with pytest.raises(AppStatusError) as ei:
            st.raise_for_status()
        text = str(ei.value)
        assert "State: FAILED" in text and "trainer[1]:FAILED (exitcode: 3)" in text
        AppStatus(AppState.SUCCEEDED).raise_for_status()
        assert st.to_dict()["state"] == "FAILED"

    def test_retry_policy_values(self) -> None:
        assert [p.value for p in RetryPolicy] == ["REPLICA", "APPLICATION", "ROLE"]


class TestHandles:
    def test_roundtrip(self) -> None:
        h = make_app_handle("kubernetes", "sess", "ns:job-1")
        p = parse_app_handle(h)
        assert (p.scheduler_backend, p.session_name, p.app_id) == ("kubernetes", "sess", "ns:job-1")

    @pytest.mark.parametrize("bad", ["", "local_cwd", "local_cwd://sess", "://s/app", "a b://s/x"])
    def test_malformed(self, bad: str) -> None:
        with pytest.raises(MalformedAppHandleException, match=r"\{scheduler\}://"):
            parse_app_handle(bad)


def test_secret_refs_are_validated_and_never_values() -> None:
    from tether.specs import SecretRef

    ok = AppDef("a", [Role("r", entrypoint="x", secrets={"DB_PASS": SecretRef("db", "password")})])
    validate(ok)
    assert str(ok.roles[0].secrets["DB_PASS"]) == "secret:db/password"
    both = Role("r", entrypoint="x", env={"T": "v"}, secrets={"T": SecretRef("s")})
    with pytest.raises(SpecError, match="'T' is set in both env and secrets"):
        validate(AppDef("a", [both]))  # a value problem: reported when the app is checked
    with pytest.raises(SpecTypeError, match=r"secrets\['T'\] must be a SecretRef"):
        Role("r", entrypoint="x", secrets={"T": "plaintext"})  # type: ignore[dict-item]
