"""Kubernetes status rules on plain objects: pods, Jobs, restarts, Volcano and AppWrappers."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from tether.schedulers.ids import make_app_id
from tether.schedulers.kubernetes.fields import parse_time
from tether.schedulers.kubernetes.naming import ANN_SUBMITTED, APP_NAME_RULE
from tether.schedulers.kubernetes.reconcile import next_attempt_job
from tether.schedulers.kubernetes.render import render
from tether.schedulers.kubernetes.roles import parse_quantity
from tether.schedulers.kubernetes.scheduler import KubernetesOpts
from tether.schedulers.kubernetes.status import analyze, pod_view
from tether.schedulers.kubernetes.views import AppView
from tether.specs import AppDef, AppState, RetryPolicy, Role

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=timezone.utc)


def ts(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def make_app(n: int = 2, policy: RetryPolicy = RetryPolicy.APPLICATION, retries: int = 1,
             roles: int = 1, gang: str = "none") -> tuple[str, list[dict[str, Any]]]:  # fmt: skip
    app = AppDef(
        "st",
        roles=[
            Role(f"r{i}", image="img", entrypoint="run", num_replicas=n, max_retries=retries,
                 retry_policy=policy)
            for i in range(roles)
        ],
    )  # fmt: skip
    opts = KubernetesOpts(gang=gang, queue="q" if gang in ("kueue", "volcano") else None)
    req = render(app, opts, make_app_id("st", APP_NAME_RULE, "abcdef"))
    objs = []
    for i, m in enumerate(req.manifests):
        m = copy.deepcopy(m)
        m["metadata"]["uid"] = f"uid-{i}"
        m["metadata"]["creationTimestamp"] = ts(100)
        objs.append(m)
    return req.name, objs


def jobs_of(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == "Job" and o["apiVersion"] == "batch/v1"]


def pod_for(job: dict[str, Any], phase: str, n: int = 0, **status: Any) -> dict[str, Any]:
    tpl = job["spec"]["template"]
    return {
        "metadata": {
            "name": f"{job['metadata']['name']}-{n}",
            "uid": f"{job['metadata']['uid']}-pod{n}",
            "labels": dict(tpl["metadata"]["labels"]),
            "annotations": dict(tpl["metadata"]["annotations"]),
            "creationTimestamp": ts(90 - n),
            "ownerReferences": [{"uid": job["metadata"]["uid"], "kind": "Job"}],
        },
        "spec": {**tpl["spec"], "nodeName": "node-1"},
        "status": {"phase": phase, **status},
    }


def terminated(code: int, reason: str = "Error", message: str = "") -> dict[str, Any]:
    term: dict[str, Any] = {"exitCode": code, "reason": reason}
    if message:
        term["message"] = message
    return {"containerStatuses": [{"name": "c", "state": {"terminated": term}}]}


def waiting(reason: str, message: str = "", image: str = "img") -> dict[str, Any]:
    return {
        "containerStatuses": [
            {"name": "c", "image": image, "state": {"waiting": {"reason": reason,
                                                               "message": message}}}
        ]
    }  # fmt: skip


def condition(job: dict[str, Any], ctype: str, reason: str = "", message: str = "") -> None:
    job.setdefault("status", {}).setdefault("conditions", []).append(
        {"type": ctype, "status": "True", "reason": reason, "message": message}
    )


def view(name: str, jobs: list[dict[str, Any]], pods: list[dict[str, Any]],
         **kw: Any) -> AppView:  # fmt: skip
    return analyze("default", name, jobs, pods, kw.get("vcjob"), kw.get("aw"), NOW)


# ---- pods ------------------------------------------------------------------------------------
def test_pod_phases() -> None:
    assert pod_view({"status": {"phase": "Succeeded"}}, NOW, 60).state == AppState.SUCCEEDED
    failed = pod_view({"status": {"phase": "Failed", **terminated(3, "Error", "boom")}}, NOW, 60)
    assert failed.state == AppState.FAILED and failed.exit_code == 3
    assert failed.msg == "exit code 3 (Error: boom)"
    unknown = pod_view({"status": {"phase": "Unknown"}}, NOW, 60)
    assert unknown.state == AppState.UNKNOWN and "stopped reporting" in unknown.msg
    evicted = pod_view({"status": {"phase": "Failed", "reason": "Evicted",
                                   "message": "low memory"}}, NOW, 60)  # fmt: skip
    assert evicted.msg == "Evicted: low memory"


def test_unschedulable_is_pending_with_the_reason() -> None:
    pv = pod_view(
        {"status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}]}},
        NOW, 60,
    )  # fmt: skip
    assert pv.state == AppState.PENDING
    assert pv.msg == "Unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu."


@pytest.mark.parametrize("reason", ["ErrImagePull", "ImagePullBackOff"])
def test_image_pull_errors_fail_after_the_timeout(reason: str) -> None:
    pod = {"metadata": {"creationTimestamp": ts(30)},
           "status": {"phase": "Pending", "startTime": ts(30), **waiting(reason, "not found")}}
    early = pod_view(pod, NOW, 60)
    assert early.state == AppState.PENDING and early.msg == f"{reason}: not found"
    late = pod_view(pod, NOW, 10)
    assert late.state == AppState.FAILED and not late.retryable
    assert late.msg.startswith(f"{reason}: not found (image 'img' not pulled after 30s")


def test_invalid_image_name_fails_at_once() -> None:
    pv = pod_view({"status": {"phase": "Pending", **waiting("InvalidImageName", "bad")}},
                  NOW, 3600)  # fmt: skip
    assert pv.state == AppState.FAILED and pv.msg == "InvalidImageName: bad"


def test_crash_loop_is_running_with_the_reason() -> None:
    cs = {"name": "main", "restartCount": 4,
          "state": {"waiting": {"reason": "CrashLoopBackOff"}},
          "lastState": {"terminated": {"exitCode": 2, "reason": "Error"}}}  # fmt: skip
    pv = pod_view({"status": {"phase": "Running", "containerStatuses": [cs]}}, NOW, 60)
    assert pv.state == AppState.RUNNING
    assert pv.msg == "CrashLoopBackOff: container main restarted 4 times, last exit code 2 (Error)"


def test_config_error_is_pending_with_reason() -> None:
    pv = pod_view({"status": {"phase": "Pending",
                              **waiting("CreateContainerConfigError", 'secret "x" not found')}},
                  NOW, 60)  # fmt: skip
    assert pv.state == AppState.PENDING and "CreateContainerConfigError" in pv.msg


# ---- jobs ------------------------------------------------------------------------------------
def test_success_and_running() -> None:
    name, objs = make_app(n=2)
    jobs = jobs_of(objs)
    v = view(name, jobs, [pod_for(jobs[0], "Running"), pod_for(jobs[1], "Pending")])
    assert v.state == AppState.RUNNING and not v.stops and not v.creates
    condition(jobs[0], "Complete")
    condition(jobs[1], "Complete")
    v = view(name, jobs, [pod_for(jobs[0], "Succeeded"), pod_for(jobs[1], "Succeeded")])
    assert v.state == AppState.SUCCEEDED
    assert [r.hostname for r in v.replicas] == ["node-1", "node-1"]
    assert v.roles[0].num_replicas == 2 and v.app_name == "st"


def test_final_failure_names_the_replica_and_stops_the_others() -> None:
    name, objs = make_app(n=2, retries=0)
    jobs = jobs_of(objs)
    condition(jobs[1], "Failed", "BackoffLimitExceeded", "Job has reached the backoff limit")
    pods = [pod_for(jobs[0], "Running"), pod_for(jobs[1], "Failed", **terminated(3))]
    v = view(name, jobs, pods)
    assert v.state == AppState.FAILED
    assert v.msg.startswith("r0[1]: exit code 3 (Error); BackoffLimitExceeded")
    assert [(j["metadata"]["name"], kind) for j, kind, _ in v.stops] == [
        (jobs[0]["metadata"]["name"], "superseded")
    ]
    rep = next(r for r in v.replicas if r.replica_id == 1)
    assert rep.exit_code == 3


def test_pod_failure_before_the_job_condition_is_seen() -> None:
    name, objs = make_app(n=1, retries=0)
    (job,) = jobs_of(objs)
    v = view(name, [job], [pod_for(job, "Failed", **terminated(1))])
    assert v.state == AppState.FAILED and "exit code 1" in v.msg


def test_replica_policy_waits_for_kubernetes_retries() -> None:
    name, objs = make_app(n=1, policy=RetryPolicy.REPLICA, retries=2)
    (job,) = jobs_of(objs)
    assert job["spec"]["backoffLimit"] == 2
    pods = [pod_for(job, "Failed", 0, **terminated(1))]
    v = view(name, [job], pods)
    assert v.state == AppState.PENDING and "retrying (pod retry 1 of 2)" in v.msg
    assert not v.creates  # Kubernetes retries REPLICA failures, not tether
    job["status"] = {"failed": 1, "succeeded": 1}
    condition(job, "Complete")
    v = view(name, [job], [*pods, pod_for(job, "Succeeded", 1)])
    assert v.state == AppState.SUCCEEDED and v.num_restarts == 1


def test_application_policy_restarts_every_replica() -> None:
    name, objs = make_app(n=2, roles=2, policy=RetryPolicy.APPLICATION, retries=1)
    jobs = jobs_of(objs)
    condition(jobs[1], "Failed", "BackoffLimitExceeded")
    pods = [pod_for(jobs[0], "Running"), pod_for(jobs[1], "Failed", **terminated(1)),
            pod_for(jobs[2], "Succeeded"), pod_for(jobs[3], "Running")]  # fmt: skip
    v = view(name, jobs, pods)
    assert v.state == AppState.PENDING and v.msg.startswith("restarting after r0[1]")
    created = {j["metadata"]["name"] for j in v.creates}
    assert created == {j["metadata"]["name"] + "-r1" for j in jobs}
    assert {j["metadata"]["name"] for j, kind, _ in v.stops} == {
        jobs[0]["metadata"]["name"], jobs[2]["metadata"]["name"], jobs[3]["metadata"]["name"]
    }
    new = v.creates[0]
    assert new["metadata"]["labels"]["tether.dev/attempt"] == "1"
    assert new["metadata"]["annotations"]["tether.dev/num-restarts"] == "1"
    # after the restart, the new attempts decide; the budget is spent
    superseded = []
    for j in jobs:
        j2 = copy.deepcopy(j)
        j2["metadata"]["annotations"]["tether.dev/stopped"] = "superseded"
        superseded.append(j2)
    news = []
    for i, j in enumerate(v.creates):
        j2 = copy.deepcopy(j)
        j2["metadata"]["uid"] = f"new-{i}"
        j2["metadata"]["creationTimestamp"] = ts(10)
        news.append(j2)
    condition(news[0], "Failed")
    v2 = view(name, superseded + news, [pod_for(news[0], "Failed", **terminated(5))])
    assert v2.state == AppState.FAILED and "exit code 5" in v2.msg
    assert v2.num_restarts == 1 and not v2.creates


def test_role_policy_restarts_only_that_role() -> None:
    name, objs = make_app(n=2, roles=2, policy=RetryPolicy.ROLE, retries=2)
    jobs = jobs_of(objs)
    condition(jobs[2], "Failed")
    pods = [pod_for(j, "Running") for j in jobs[:2]] + [pod_for(jobs[2], "Failed",
                                                                **terminated(1))]
    v = view(name, jobs, pods)
    created = sorted(j["metadata"]["name"] for j in v.creates)
    assert created == sorted(j["metadata"]["name"] + "-r1" for j in jobs[2:])
    assert all(j["metadata"]["labels"]["tether.dev/role"] == "r1" for j in v.creates)


def test_image_pull_failure_is_final_and_recorded() -> None:
    name, objs = make_app(n=2, retries=3)
    jobs = jobs_of(objs)
    pods = [pod_for(jobs[0], "Running"),
            pod_for(jobs[1], "Pending", startTime=ts(500), **waiting("ErrImagePull", "nope"))]
    v = view(name, jobs, pods)
    assert v.state == AppState.FAILED and "ErrImagePull: nope" in v.msg
    kinds = {j["metadata"]["name"]: kind for j, kind, _ in v.stops}
    assert kinds == {jobs[0]["metadata"]["name"]: "superseded",
                     jobs[1]["metadata"]["name"]: "failed"}  # fmt: skip
    assert not v.creates
    # once stopped, the annotation keeps the reason
    jobs[1]["metadata"]["annotations"].update(
        {"tether.dev/stopped": "failed", "tether.dev/stop-reason": "ErrImagePull: nope"}
    )
    jobs[0]["metadata"]["annotations"].update({"tether.dev/stopped": "superseded"})
    v = view(name, jobs, [])
    assert v.state == AppState.FAILED and v.msg == "r0[1]: ErrImagePull: nope"
    assert not v.stops


def test_cancelled_wins_and_plans_nothing() -> None:
    name, objs = make_app(n=2)
    jobs = jobs_of(objs)
    for j in jobs:
        j["metadata"]["annotations"]["tether.dev/stopped"] = "cancelled"
    condition(jobs[0], "Failed", "DeadlineExceeded")
    v = view(name, jobs, [])
    assert v.state == AppState.CANCELLED and not v.stops and not v.creates


def test_kueue_suspended_job_is_pending() -> None:
    name, objs = make_app(n=1, gang="kueue")
    v = view(name, jobs_of(objs), [])
    assert v.state == AppState.PENDING
    assert v.msg == "r0[0]: suspended: waiting for Kueue admission (queue q)"


def test_next_attempt_drops_controller_fields() -> None:
    _, objs = make_app(n=1, gang="kueue")
    (job,) = jobs_of(objs)
    job["spec"]["selector"] = {"matchLabels": {"controller-uid": "u"}}
    job["spec"]["suspend"] = False
    job["spec"]["template"]["metadata"]["labels"]["controller-uid"] = "u"
    job["spec"]["template"]["metadata"]["labels"]["job-name"] = "x"
    job["metadata"]["annotations"]["tether.dev/stopped"] = "superseded"
    new = next_attempt_job(job, 2, 3)
    assert "selector" not in new["spec"] and new["spec"]["suspend"] is True
    assert "controller-uid" not in new["spec"]["template"]["metadata"]["labels"]
    assert "tether.dev/stopped" not in new["metadata"]["annotations"]
    assert new["metadata"]["name"].endswith("-r2") and "uid" not in new["metadata"]


# ---- volcano and appwrapper ------------------------------------------------------------------
def test_volcano_phases_and_pod_reasons() -> None:
    name, objs = make_app(n=2, gang="volcano")
    vcjob = objs[-1]
    tpl = vcjob["spec"]["tasks"][0]["template"]
    pod = {"metadata": {"labels": tpl["metadata"]["labels"],
                        "annotations": tpl["metadata"]["annotations"],
                        "creationTimestamp": ts(5)},
           "spec": tpl["spec"],
           "status": {"phase": "Pending", "conditions": [
               {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "gang is not ready"}]}}  # fmt: skip
    vcjob["status"] = {"state": {"phase": "Pending"}}
    v = view(name, [], [pod], vcjob=vcjob)
    assert v.state == AppState.PENDING and "Unschedulable: gang is not ready" in v.msg
    vcjob["status"] = {"state": {"phase": "Completed"}, "retryCount": 1}
    v = view(name, [], [], vcjob=vcjob)
    assert v.state == AppState.SUCCEEDED and v.num_restarts == 1
    vcjob["status"] = {"state": {"phase": "Terminated", "reason": "PodFailed"}}
    assert view(name, [], [], vcjob=vcjob).state == AppState.FAILED
    vcjob["status"] = {"state": {"phase": "Brandnew"}}
    odd = view(name, [], [], vcjob=vcjob)
    assert odd.state == AppState.UNKNOWN and "Brandnew" in odd.msg
    assert [r.name for r in odd.roles] == ["r0"]


def test_appwrapper_before_and_after_dispatch() -> None:
    name, objs = make_app(n=2, gang="appwrapper")
    (aw,) = objs
    v = view(name, [], [], aw=aw)
    assert v.state == AppState.PENDING and "waiting for MCAD" in v.msg
    assert len(v.replicas) == 2 and v.roles[0].name == "r0"
    items = aw["spec"]["resources"]["GenericItems"]
    jobs = [copy.deepcopy(i["generictemplate"]) for i in items
            if i["generictemplate"]["kind"] == "Job"]  # fmt: skip
    for i, j in enumerate(jobs):
        j["metadata"]["uid"] = f"j{i}"
        condition(j, "Complete")
    assert view(name, jobs, [], aw=aw).state == AppState.SUCCEEDED
    aw["status"] = {"state": "Failed", "conditions": [{"reason": "Timeout", "message": "x"}]}
    assert view(name, [], [], aw=aw).state == AppState.FAILED


# ---- parsing ---------------------------------------------------------------------------------
def test_parse_time_and_quantity() -> None:
    t = parse_time("2024-05-01T12:00:00.123456789Z")
    assert t == datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=timezone.utc)
    assert parse_time("garbage") is None and parse_time(None) is None
    assert parse_quantity("500m") == 0.5 and parse_quantity("2Gi") == 2 * 2**30
    assert parse_quantity("1e3") == 1000
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        parse_quantity("lots")


def test_an_older_attempt_still_running_is_stopped() -> None:
    name, objs = make_app(n=1, retries=2)
    (job,) = jobs_of(objs)
    newer = next_attempt_job(job, 1, 1)
    newer["metadata"]["uid"] = "newer"
    newer["metadata"]["creationTimestamp"] = ts(5)
    v = view(name, [job, newer], [pod_for(job, "Running"), pod_for(newer, "Running")])
    assert v.state == AppState.RUNNING and v.replicas[0].attempt == 1
    assert [(j["metadata"]["uid"], kind) for j, kind, _ in v.stops] == [("uid-0", "superseded")]


def test_a_retry_pod_created_in_the_same_second_is_the_current_one() -> None:
    name, objs = make_app(n=1, policy=RetryPolicy.REPLICA, retries=2)
    (job,) = jobs_of(objs)
    failed = pod_for(job, "Failed", 0, **terminated(9))
    retry = pod_for(job, "Running", 1)
    retry["metadata"]["creationTimestamp"] = failed["metadata"]["creationTimestamp"]
    for pods in ([failed, retry], [retry, failed]):
        v = view(name, [job], pods)
        assert v.state == AppState.RUNNING and v.num_restarts == 1


def test_created_has_sub_second_resolution_from_the_submission_annotation() -> None:
    # creationTimestamp has whole seconds: two apps of one job key submitted within the same
    # second must still list oldest first (the Runner re-attaches to the newest one)
    name, objs = make_app(n=1)
    jobs = jobs_of(objs)
    assert view(name, jobs, []).created == (NOW - timedelta(seconds=100)).timestamp()
    for job in jobs:
        job["metadata"]["annotations"][ANN_SUBMITTED] = "1714564700.250000"
    assert view(name, jobs, []).created == 1714564700.25
