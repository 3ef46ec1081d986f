"""Kubernetes manifests: golden files, naming, resources, options and offline dry-runs.

Regenerate the golden files with ``TETHER_REGEN_GOLDEN=1 pytest tests/schedulers``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.golden import GoldenDir
from tether.schedulers.api import JOB_KEY
from tether.schedulers.ids import make_app_id
from tether.schedulers.kubernetes.checks import parse_toleration
from tether.schedulers.kubernetes.naming import (
    APP_NAME_RULE,
    KUEUE_QUEUE_LABEL,
    LABEL_JOB_KEY,
    dns_label,
    is_label_value,
    job_name,
    label_value,
)
from tether.schedulers.kubernetes.podspec import container_resources, resolve_image
from tether.schedulers.kubernetes.render import format_request, render
from tether.schedulers.kubernetes.roles import rebuild_role, role_meta
from tether.schedulers.kubernetes.scheduler import KubernetesOpts, create_scheduler
from tether.specs import (
    AppDef,
    BindMount,
    DeviceMount,
    Resource,
    RetryPolicy,
    Role,
    VolumeMount,
    macros,
    resource,
)

GOLDEN = GoldenDir(Path(__file__).parent / "golden" / "kubernetes", suffix=".yaml")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
SUFFIX = "x1y2z3"


def rendered(app: AppDef, **opts: Any) -> tuple[str, list[dict[str, Any]]]:
    req = render(app, KubernetesOpts(**opts), make_app_id(app.name, APP_NAME_RULE, SUFFIX))
    text = format_request(req)
    return text, list(yaml.safe_load_all(text))


def ddp_role(name: str = "trainer", n: int = 2, **kw: Any) -> Role:
    return Role(
        name,
        image="ghcr.io/acme/train:1.0",
        entrypoint="python",
        args=["-m", "train", "--rank", macros.replica_id, "--job", macros.app_id],
        env={"LR": "0.1", "HF_TOKEN": "hf_very_secret"},
        num_replicas=n,
        resource=resource(cpu=4, gpu=0, memMB=8192),
        port_map={"c10d": 29500},
        **kw,
    )


def containers(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o["spec"]["template"]["spec"]["containers"][0] for o in objs if o["kind"] == "Job"]


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"]}


# ---- golden manifests ------------------------------------------------------------------------
def test_single_role() -> None:
    app = AppDef(
        "hello",
        roles=[Role("echo", image="busybox:1.36", entrypoint="echo", args=["hi", macros.app_id])],
    )
    text, objs = rendered(app)
    GOLDEN.check("single", text)
    assert [o["kind"] for o in objs] == ["Job"]  # one replica: no Service
    (ctr,) = containers(objs)
    assert ctr["command"] == ["echo", "hi", f"default:hello-{SUFFIX}"]
    assert env_of(ctr)["TETHER_RANK0_HOST"] == "localhost"
    assert "subdomain" not in objs[0]["spec"]["template"]["spec"]


def test_ttl_seconds_after_finished_on_every_job() -> None:
    app = AppDef("ttl", roles=[Role("echo", image="busybox:1.36", entrypoint="echo",
                                    args=["hi"], num_replicas=2)])
    text, objs = rendered(app, ttl_seconds_after_finished=300)
    GOLDEN.check("ttl", text)
    jobs = [o for o in objs if o["kind"] == "Job"]
    assert len(jobs) == 2
    assert all(j["spec"]["ttlSecondsAfterFinished"] == 300 for j in jobs)
    _, default = rendered(app)
    assert all("ttlSecondsAfterFinished" not in o["spec"] for o in default if o["kind"] == "Job")


def test_recovery_policy_makes_a_disruption_fail_the_job() -> None:
    """With a recovery policy every Job fails at once on a pod with the DisruptionTarget
    condition (the Job's own retries never restart a disrupted pod)."""
    from tether.specs import RecoveryPolicy

    role = Role("w", image="busybox:1.36", entrypoint="echo", num_replicas=2, max_retries=2,
                retry_policy=RetryPolicy.REPLICA)  # fmt: skip
    _, objs = rendered(AppDef("rec", roles=[role], recovery=RecoveryPolicy()))
    jobs = [o for o in objs if o["kind"] == "Job"]
    assert len(jobs) == 2 and all(j["spec"]["backoffLimit"] == 2 for j in jobs)
    assert all(j["spec"]["podFailurePolicy"] == {"rules": [
        {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
        for j in jobs)  # fmt: skip
    assert all(j["spec"]["template"]["spec"]["restartPolicy"] == "Never" for j in jobs)



def test_without_a_recovery_policy_a_disruption_uses_up_no_pod_retry() -> None:
    """Without a recovery policy, a Job that retries its pod (``REPLICA``) ignores a
    disrupted pod (Kubernetes replaces it without counting it against ``backoffLimit``); a
    Job tether restarts itself (``backoffLimit`` 0) gets no pod failure policy."""
    role = Role("w", image="busybox:1.36", entrypoint="echo", num_replicas=2, max_retries=2,
                retry_policy=RetryPolicy.REPLICA)  # fmt: skip
    _, plain = rendered(AppDef("rec", roles=[role]))
    jobs = [o for o in plain if o["kind"] == "Job"]
    assert len(jobs) == 2 and all(j["spec"]["podFailurePolicy"] == {"rules": [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
        for j in jobs)  # fmt: skip
    for policy in (RetryPolicy.ROLE, RetryPolicy.APPLICATION):
        role = Role("w", image="busybox:1.36", entrypoint="echo", max_retries=2,
                    retry_policy=policy)  # fmt: skip
        _, objs = rendered(AppDef("rec", roles=[role]))
        assert all("podFailurePolicy" not in o["spec"] for o in objs if o["kind"] == "Job")
    no_retries = Role("w", image="busybox:1.36", entrypoint="echo",
                      retry_policy=RetryPolicy.REPLICA)  # fmt: skip
    _, objs = rendered(AppDef("rec", roles=[no_retries]))
    assert all("podFailurePolicy" not in o["spec"] for o in objs if o["kind"] == "Job")


def test_multi_role_multi_replica_headless_service_and_rank0_dns() -> None:
    app = AppDef(
        "ddp",
        roles=[ddp_role("trainer", 2), ddp_role("ps", 1, max_retries=2)],
        metadata={JOB_KEY: "airflow-0123abcd"},
    )
    text, objs = rendered(app, namespace="ml")
    GOLDEN.check("multi_role", text)
    name = f"ddp-{SUFFIX}"
    assert [o["kind"] for o in objs] == ["Service", "Job", "Job", "Job"]
    svc = objs[0]
    assert svc["spec"]["clusterIP"] == "None" and svc["metadata"]["name"] == name
    assert svc["spec"]["publishNotReadyAddresses"] is True
    rank0 = f"{name}-trainer-0.{name}.ml.svc.cluster.local"
    jobs = objs[1:]
    assert [j["metadata"]["name"] for j in jobs] == [
        f"{name}-trainer-0", f"{name}-trainer-1", f"{name}-ps-0",
    ]  # fmt: skip
    for job in jobs:
        pod = job["spec"]["template"]["spec"]
        assert pod["subdomain"] == name
        assert pod["hostname"] == job["metadata"]["name"]
        assert env_of(pod["containers"][0])["TETHER_RANK0_HOST"] == rank0
        assert job["metadata"]["labels"][LABEL_JOB_KEY] == "airflow-0123abcd"
    # macros per replica, stable identity
    trainer1 = containers(jobs)[1]
    assert trainer1["command"][4] == "1" and env_of(trainer1)["TETHER_REPLICA_ID"] == "1"
    assert trainer1["command"][6] == f"ml:{name}"
    # secrets are masked in the rendering
    assert "hf_very_secret" not in text and env_of(trainer1)["HF_TOKEN"] == "****"


def test_gpus_devices_named_resource_shm_and_mounts() -> None:
    res = resource(h="aws_p4d.24xlarge")
    role = Role(
        "trainer",
        image="train:2",
        entrypoint="torchrun",
        args=["train.py"],
        resource=res,
        mounts=[
            BindMount("/data/imagenet", "/data", read_only=True),
            VolumeMount("checkpoints", "/ckpt"),
            DeviceMount("/dev/fuse", "/dev/fuse", permissions="rwm"),
        ],
    )
    text, objs = rendered(
        AppDef("big", roles=[role]),
        image_repo="registry.example.com/team",
        service_account="trainer-sa",
        priority_class="high",
        image_pull_secrets=["regcred"],
        node_selector={"topology.kubernetes.io/zone": "us-east-1a"},
        tolerations=["nvidia.com/gpu:NoSchedule", "dedicated=ml:NoExecute"],
        labels={"team": "vision"},
        annotations={"owner": "alice@example.com"},
        image_pull_policy="IfNotPresent",
    )
    GOLDEN.check("gpu_mounts", text)
    pod = objs[0]["spec"]["template"]["spec"]
    ctr = pod["containers"][0]
    assert ctr["image"] == "registry.example.com/team/train:2"
    assert ctr["resources"]["limits"] == {
        "cpu": "96000m", "memory": f"{1152 * 983}Mi", "nvidia.com/gpu": "8",
        "vpc.amazonaws.com/efa": "4",
    }  # fmt: skip
    assert ctr["resources"]["requests"]["cpu"] == "95900m"
    assert ctr["resources"]["requests"]["memory"] == f"{1152 * 983 - 1024}Mi"
    assert pod["nodeSelector"] == {
        "node.kubernetes.io/instance-type": "p4d.24xlarge",
        "topology.kubernetes.io/zone": "us-east-1a",
    }
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["dshm"] == {"name": "dshm", "emptyDir": {"medium": "Memory"}}
    assert vols["mount-0"]["hostPath"] == {"path": "/data/imagenet"}
    assert vols["mount-1"]["persistentVolumeClaim"] == {"claimName": "checkpoints",
                                                        "readOnly": False}
    assert vols["device-2"]["hostPath"] == {"path": "/dev/fuse"}
    mounts = {m["mountPath"]: m for m in ctr["volumeMounts"]}
    assert mounts["/dev/shm"]["name"] == "dshm" and mounts["/data"]["readOnly"] is True
    assert ctr["securityContext"] == {"privileged": True}
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoExecute"},
    ]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["serviceAccountName"] == "trainer-sa" and pod["priorityClassName"] == "high"
    assert objs[0]["metadata"]["labels"]["team"] == "vision"


def gang_app() -> AppDef:
    return AppDef(
        "gang",
        roles=[
            ddp_role("trainer", 3, min_replicas=2, max_retries=3,
                     retry_policy=RetryPolicy.APPLICATION),
            ddp_role("evaluator", 1, max_retries=1, retry_policy=RetryPolicy.REPLICA),
        ],
    )  # fmt: skip


def test_gang_volcano() -> None:
    text, objs = rendered(gang_app(), gang="volcano", queue="research")
    GOLDEN.check("volcano", text)
    assert [o["kind"] for o in objs] == ["Service", "Job"]
    vc = objs[1]
    assert vc["apiVersion"] == "batch.volcano.sh/v1alpha1"
    assert vc["spec"]["minAvailable"] == 3  # 2 of 3 trainers + the evaluator
    assert vc["spec"]["queue"] == "research" and vc["spec"]["schedulerName"] == "volcano"
    assert vc["spec"]["maxRetry"] == 3
    tasks = vc["spec"]["tasks"]
    assert [t["name"] for t in tasks] == ["trainer-0", "trainer-1", "trainer-2", "evaluator-0"]
    assert tasks[0]["policies"][0] == {"event": "PodFailed", "action": "RestartJob"}
    assert tasks[3]["policies"] == [{"event": "PodFailed", "action": "RestartTask"}]
    assert all(t["template"]["spec"]["schedulerName"] == "volcano" for t in tasks)


def test_gang_kueue() -> None:
    text, objs = rendered(gang_app(), gang="kueue", queue="team-a")
    GOLDEN.check("kueue", text)
    jobs = [o for o in objs if o["kind"] == "Job"]
    assert len(jobs) == 4
    for job in jobs:
        assert job["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "team-a"
        assert job["spec"]["suspend"] is True


def test_gang_appwrapper() -> None:
    text, objs = rendered(gang_app(), gang="appwrapper")
    GOLDEN.check("appwrapper", text)
    (aw,) = objs
    assert aw["apiVersion"] == "mcad.ibm.com/v1beta1" and aw["kind"] == "AppWrapper"
    items = aw["spec"]["resources"]["GenericItems"]
    kinds = [i["generictemplate"]["kind"] for i in items]
    assert kinds == ["Service", "Job", "Job", "Job", "Job"]
    assert aw["spec"]["schedulingSpec"]["minAvailable"] == 3
    assert aw["spec"]["schedulingSpec"]["requeuing"]["maxNumRequeuings"] == 3
    assert items[1]["custompodresources"][0]["limits"]["cpu"] == "4000m"


def test_name_sanitizing_long_odd_app_name() -> None:
    odd = "My App_with odd/chars & ünïcode!" * 7  # 231 characters
    role = Role("Data Loader (v2)", image="img", entrypoint="run", num_replicas=2)
    other = Role("data_loader-v2", image="img", entrypoint="run")
    app = AppDef(odd, roles=[role, other], metadata={JOB_KEY: "prefect flow/run:42 " * 5})
    text, objs = rendered(app)
    GOLDEN.check("long_name", text)
    names: list[str] = []
    for obj in objs:
        names.append(obj["metadata"]["name"])
        if obj["kind"] == "Job":
            tpl = obj["spec"]["template"]
            names += [tpl["spec"]["hostname"], tpl["spec"]["containers"][0]["name"]]
            for labels in (obj["metadata"]["labels"], tpl["metadata"]["labels"]):
                assert all(is_label_value(v) for v in labels.values()), labels
    for n in names:
        assert len(n) <= 63 and DNS_LABEL.match(n), n
    assert len(set(o["metadata"]["name"] for o in objs)) == len(objs)
    assert objs[0]["metadata"]["name"][0].isalpha()  # the Service name is a DNS-1035 label
    # the original names survive in annotations
    assert objs[1]["metadata"]["annotations"]["tether.dev/app-name"] == odd
    tpl_ann = objs[1]["spec"]["template"]["metadata"]["annotations"]
    assert tpl_ann["tether.dev/role-name"] == "Data Loader (v2)"


def test_app_names_are_unique_per_submission() -> None:
    sched = create_scheduler("test")
    app = AppDef("same", roles=[Role("r", image="img", entrypoint="run")])
    names = {sched.submit_dryrun(app, {}).request.name for _ in range(5)}
    assert len(names) == 5 and all(n.startswith("same-") for n in names)


# ---- naming helpers --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text", ["a", "Trainer", "a_b", "a.b", "-x-", "", "9lives", "x" * 100, "ü" * 70]
)
def test_dns_label_valid_and_distinct(text: str) -> None:
    out = dns_label(text)
    assert DNS_LABEL.match(out) and len(out) <= 63
    assert dns_label(text) == out  # stable


def test_similar_names_do_not_collide() -> None:
    assert dns_label("a_b") != dns_label("a.b") != dns_label("a-b")
    assert label_value("x" * 70) != label_value("x" * 71)
    assert job_name("app", "r", 0, 1).endswith("-r1")
    long = job_name("a" * 40, "b" * 40, 123, 7)
    assert len(long) <= 63 and long.endswith("-r7")


def test_label_value_keeps_valid_values() -> None:
    assert label_value("airflow-3f2a9c") == "airflow-3f2a9c"
    assert is_label_value(label_value("has spaces/and:colons"))


def test_app_name_starting_with_digit_gets_a_letter() -> None:
    assert make_app_id("123-train", APP_NAME_RULE, "abc").startswith("t-123-train")
    assert make_app_id("!!!", APP_NAME_RULE, "abc") == "t-abc"


# ---- resources -------------------------------------------------------------------------------
@pytest.mark.parametrize("cpu", [0.001, 0.05, 0.1, 0.15, 0.5, 1, 2.5, 96])
@pytest.mark.parametrize("mem", [1, 100, 512, 1024, 1025, 2048, 1_000_000])
def test_reserve_never_yields_zero_or_negative_requests(cpu: float, mem: int) -> None:
    res = container_resources(Resource(cpu=cpu, gpu=0, memMB=mem), KubernetesOpts())
    req, lim = res["requests"], res["limits"]
    req_cpu, lim_cpu = int(req["cpu"][:-1]), int(lim["cpu"][:-1])
    req_mem, lim_mem = int(req["memory"][:-2]), int(lim["memory"][:-2])
    assert 0 < req_cpu <= lim_cpu and 0 < req_mem <= lim_mem
    assert req_cpu >= lim_cpu // 2 and req_mem >= lim_mem // 2


def test_reserve_applies_to_large_resources() -> None:
    res = container_resources(Resource(cpu=8, gpu=1, memMB=65536), KubernetesOpts())
    assert res["requests"]["cpu"] == "7900m" and res["requests"]["memory"] == "64512Mi"
    assert res["limits"]["nvidia.com/gpu"] == res["requests"]["nvidia.com/gpu"] == "1"
    custom = container_resources(
        Resource(cpu=8, gpu=2, memMB=65536),
        KubernetesOpts(reserved_millicpu=0, reserved_memory_mb=0, gpu_resource="amd.com/gpu"),
    )
    assert custom["requests"]["cpu"] == "8000m" and custom["limits"]["amd.com/gpu"] == "2"


def test_default_resource_asks_for_nothing() -> None:
    assert container_resources(resource(cpu=None, gpu=None, memMB=None), KubernetesOpts()) != {}
    from tether.specs import NULL_RESOURCE

    assert container_resources(NULL_RESOURCE, KubernetesOpts()) == {}


def test_image_repo_only_prefixes_images_without_registry() -> None:
    assert resolve_image("train:1", "reg.io/team") == "reg.io/team/train:1"
    assert resolve_image("library/ubuntu", "reg.io/") == "reg.io/library/ubuntu"
    assert resolve_image("ghcr.io/a/b:1", "reg.io") == "ghcr.io/a/b:1"
    assert resolve_image("localhost:5000/a", "reg.io") == "localhost:5000/a"
    assert resolve_image("train:1", None) == "train:1"


# ---- retries ---------------------------------------------------------------------------------
@pytest.mark.parametrize("policy", list(RetryPolicy))
@pytest.mark.parametrize("gang", ["none", "volcano", "kueue", "appwrapper"])
def test_every_retry_policy_renders_for_every_gang(policy: RetryPolicy, gang: str) -> None:
    role = Role("r", image="img", entrypoint="run", num_replicas=2, max_retries=2,
                retry_policy=policy)  # fmt: skip
    opts: dict[str, Any] = {"gang": gang}
    if gang in ("volcano", "kueue"):
        opts["queue"] = "q"
    _, objs = rendered(AppDef("retry", roles=[role]), **opts)
    if gang in ("none", "kueue"):
        jobs = [o for o in objs if o["kind"] == "Job"]
        expected = 2 if policy == RetryPolicy.REPLICA else 0
        assert {j["spec"]["backoffLimit"] for j in jobs} == {expected}
        tpl = jobs[0]["spec"]["template"]["metadata"]["annotations"]
        assert tpl["tether.dev/retry-policy"] == policy.value
        assert tpl["tether.dev/max-retries"] == "2"


# ---- user errors -----------------------------------------------------------------------------
def dryrun_error(cfg: dict[str, Any], app: AppDef | None = None) -> str:
    app = app or AppDef("x", roles=[Role("r", image="img", entrypoint="run")])
    with pytest.raises(ValueError) as ei:
        create_scheduler("test").submit_dryrun(app, cfg)
    return str(ei.value)


def test_unknown_gang_option_lists_the_allowed_ones() -> None:
    msg = dryrun_error({"gang": "volcanoo"})
    assert "gang='volcanoo'" in msg and "did you mean 'volcano'" in msg
    assert "none, volcano, kueue, appwrapper" in msg


def test_queue_errors() -> None:
    assert "gang=kueue needs queue=" in dryrun_error({"gang": "kueue"})
    assert "only used with gang=volcano or gang=kueue" in dryrun_error({"queue": "q"})


def test_bad_options_are_named() -> None:
    msg = dryrun_error(
        {
            "namespace": "Not_A_Namespace",
            "image_pull_policy": "always",
            "labels": {"bad key!": "v", "ok": "bad value!"},
            "tolerations": ["key:NoSchedul"],
            "reserved_millicpu": -1,
            "ttl_seconds_after_finished": -5,
        }
    )
    assert "namespace='Not_A_Namespace'" in msg
    assert "image_pull_policy='always'" in msg and "did you mean 'Always'" in msg
    assert "'bad key!' is not a valid label key" in msg
    assert "value 'bad value!' of 'ok'" in msg
    assert "unknown effect 'NoSchedul'" in msg and "did you mean 'NoSchedule'" in msg
    assert "reserved_millicpu must be >= 0" in msg
    assert "ttl_seconds_after_finished must be >= 0, got -5" in msg


def test_unknown_run_option_suggests() -> None:
    msg = dryrun_error({"namespce": "a"})
    assert "unknown run option 'namespce'" in msg and "namespace" in msg


def test_app_errors_name_the_role() -> None:
    role = Role("r", image="", entrypoint="run")
    bad_cap = Role("c", image="img", entrypoint="run",
                   resource=Resource(cpu=1, gpu=0, memMB=10, capabilities={"bad key!": 1}))
    # what the declared capabilities rule out, named with the backend
    msg = dryrun_error({}, AppDef("x", roles=[role, bad_cap]))
    assert "kubernetes cannot run app 'x'" in msg
    assert "role 'r': image is empty" in msg
    # what only Kubernetes checks
    msg = dryrun_error({}, AppDef("x", roles=[bad_cap]))
    assert "role 'c': capability 'bad key!'" in msg


def test_toleration_syntax() -> None:
    assert parse_toleration("a") == {"key": "a", "operator": "Exists"}
    assert parse_toleration("a=b") == {"key": "a", "operator": "Equal", "value": "b"}
    with pytest.raises(ValueError, match="not a valid taint key"):
        parse_toleration("=x")


# ---- describe rebuilds what render wrote -----------------------------------------------------
def test_roles_round_trip_through_the_pod_template() -> None:
    role = Role(
        "worker",
        image="img:1",
        entrypoint="python",
        args=["-m", "x", "--id", macros.replica_id],
        env={"A": "1"},
        num_replicas=3,
        min_replicas=2,
        max_retries=4,
        retry_policy=RetryPolicy.ROLE,
        resource=Resource(cpu=2, gpu=1, memMB=4096, devices={"vpc.amazonaws.com/efa": 2},
                          capabilities={"node.kubernetes.io/instance-type": "p3.2xlarge"}),
        port_map={"Web_UI": 8080, "c10d": 29500},
        mounts=[BindMount("/a", "/b", True), VolumeMount("pvc", "/c"),
                DeviceMount("/dev/x", "/dev/x")],
    )  # fmt: skip
    _, objs = rendered(AppDef("rt", roles=[role]))
    job = next(o for o in objs if o["kind"] == "Job")
    back = rebuild_role(role_meta(job["spec"]["template"]))
    assert (back.name, back.image, back.entrypoint) == ("worker", "img:1", "python")
    assert back.args == ["-m", "x", "--id", "0"]
    assert back.env == {"A": "1"}
    assert (back.num_replicas, back.min_replicas, back.max_retries) == (3, 2, 4)
    assert back.retry_policy == RetryPolicy.ROLE
    assert (back.resource.cpu, back.resource.gpu, back.resource.memMB) == (2, 1, 4096)
    assert back.resource.devices == {"vpc.amazonaws.com/efa": 2}
    assert back.resource.capabilities == {"node.kubernetes.io/instance-type": "p3.2xlarge"}
    assert back.port_map == {"Web_UI": 8080, "c10d": 29500}
    assert back.mounts == role.mounts


# ---- offline, lazily imported ----------------------------------------------------------------
def test_importing_the_scheduler_does_not_import_kubernetes() -> None:
    code = (
        "import sys, tether.schedulers.kubernetes.scheduler, tether.schedulers.kubernetes.render;"
        "print([m for m in sys.modules if m == 'kubernetes' or m.startswith('kubernetes.')])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_dryrun_works_offline_without_kubeconfig(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import json, sys
        from tether.runner import Runner
        from tether.specs import AppDef, Role
        app = AppDef("offline", roles=[Role("r", image="img", entrypoint="run", num_replicas=2,
                                            env={"API_TOKEN": "s3cr3t-value"})])
        with Runner() as runner:
            info = runner.dryrun(app, "kubernetes", {"namespace": "ml", "gang": "volcano"})
            text = str(info)
        loaded = [m for m in sys.modules if m == "kubernetes" or m.startswith("kubernetes.")]
        print(json.dumps({"text": text, "loaded": loaded}))
        """
    )
    env = {
        **os.environ,
        "KUBECONFIG": "/nonexistent/kubeconfig",
        "HOME": str(tmp_path),
        "TETHER_STATE_DIR": str(tmp_path / "state"),
    }
    env.pop("KUBERNETES_SERVICE_HOST", None)
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path,
        timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    assert doc["loaded"] == []
    docs = list(yaml.safe_load_all(doc["text"]))
    assert [d["kind"] for d in docs] == ["Service", "Job"]
    assert docs[1]["metadata"]["namespace"] == "ml"
    assert "s3cr3t-value" not in doc["text"]


# ---- secrets and env_from --------------------------------------------------------------------
def test_role_secrets_render_as_secret_key_refs_never_values() -> None:
    from tether.specs import SecretRef

    role = Role("r", image="img", entrypoint="run", env={"A": "1"},
                secrets={"DB_PASSWORD": SecretRef("db-creds", "password")})
    _, objs = rendered(AppDef("s", roles=[role]))
    (ctr,) = containers(objs)
    entries = {e["name"]: e for e in ctr["env"]}
    # only the reference is rendered
    assert entries["DB_PASSWORD"] == {
        "name": "DB_PASSWORD",
        "valueFrom": {"secretKeyRef": {"name": "db-creds", "key": "password"}},
    }
    assert entries["A"]["value"] == "1"


def test_env_from_secrets_and_config_maps() -> None:
    app = AppDef("e", roles=[Role("r", image="img", entrypoint="run")])
    _, objs = rendered(app, env_from=["secret:api-keys", "configmap:settings"])
    (ctr,) = containers(objs)
    assert ctr["envFrom"] == [{"secretRef": {"name": "api-keys"}},
                              {"configMapRef": {"name": "settings"}}]


def test_bad_env_from_and_secret_refs_are_named() -> None:
    from tether.specs import SecretRef

    msg = dryrun_error({"env_from": ["vault:x"]})
    assert "env_from: 'vault:x' is not allowed" in msg and "'secret:NAME'" in msg
    role = Role("r", image="img", entrypoint="run", secrets={"TOKEN": SecretRef("Bad_Name")})
    msg = dryrun_error({}, AppDef("x", roles=[role]))
    assert "role 'r': secrets['TOKEN']" in msg and "needs a Secret name" in msg


def test_dashboard_url_is_rendered_into_an_annotation() -> None:
    app = AppDef("d", roles=[Role("r", image="img", entrypoint="run")])
    _, objs = rendered(app, namespace="ml", dashboard_url="https://dash/#/{namespace}/{name}")
    ann = objs[0]["metadata"]["annotations"]
    assert ann["tether.dev/ui-url"] == f"https://dash/#/ml/d-{SUFFIX}"
    msg = dryrun_error({"dashboard_url": "https://dash/{job}"})
    assert "dashboard_url='https://dash/{job}' may only use {namespace} and {name}" in msg

# ---- overlays --------------------------------------------------------------------------------
def test_overlays_merge_into_pod_and_container_last_and_dryrun_shows_them() -> None:
    from tether.specs.overlays import DEL, JOIN, PUT, set_overlay

    role = Role("echo", image="busybox:1.36", entrypoint="echo", args=["hi"])
    set_overlay(role, "kubernetes", "V1Pod", {
        "metadata": {"labels": {"team": "ml"}},
        "spec": {
            "hostIPC": True,
            "tolerations": [{"key": "gpu", "operator": "Exists"}],
            PUT("restartPolicy"): "OnFailure",
            DEL("enableServiceLinks"): None,
            JOIN("containers", on="name"): [
                {"name": "echo", "lifecycle": {"preStop": {"exec": {"command": ["sleep", "5"]}}}},
            ],
        },
    })  # fmt: skip
    app = AppDef("hello", roles=[role])
    text, objs = rendered(app, tolerations=["dedicated=ml:NoSchedule"])
    GOLDEN.check("overlays", text)
    pod = objs[0]["spec"]["template"]
    assert pod["metadata"]["labels"]["team"] == "ml"
    assert pod["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "tether"
    spec = pod["spec"]
    assert spec["hostIPC"] is True and spec["restartPolicy"] == "OnFailure"
    assert "enableServiceLinks" not in spec
    assert [t["key"] for t in spec["tolerations"]] == ["dedicated", "gpu"]  # appended
    (ctr,) = containers(objs)  # JOIN merged into the role's container, no second one
    assert "TETHER_ROLE_NAME" in env_of(ctr)
    assert ctr["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", "5"]
    info = create_scheduler("test").submit_dryrun(app, {})
    assert "hostIPC: true" in str(info) and "preStop" in str(info)
