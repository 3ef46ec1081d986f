"""The slurm transports without a cluster: settings checks, quoting, ssh's diagnoses, the
REST job description, and dry runs that work offline for every transport.

The quoting test runs the command string through a real ``sh``, as sshd hands it to the
login shell. The end-to-end behaviour over real sshd and slurmrestd is in
``tests/e2e/test_slurm_ssh_e2e.py`` and ``tests/e2e/test_slurm_rest_e2e.py``.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tether.schedulers.slurm.render import SlurmConfigError
from tether.schedulers.slurm.rest_job import components, job_description, time_minutes
from tether.schedulers.slurm.scheduler import create_scheduler
from tether.schedulers.slurm.ssh import diagnose, remote_command
from tether.schedulers.slurm.transport import SlurmTransportConfigError, settings_from
from tether.specs import AppDef, Resource, Role

HOSTILE = [
    "$(touch /tmp/tether-x)", "`id`", "a'b", 'a"b', "a;b", "a|b&c", "$HOME", "\\", "-n",
    "a\nb", "* ?", "", "--comment=[tether:roles=x.1]",
]  # fmt: skip


def app(name: str = "t", n_roles: int = 1) -> AppDef:
    roles = [
        Role(f"r{i}", entrypoint="echo", args=["hi"], resource=Resource(cpu=1, gpu=0, memMB=256))
        for i in range(n_roles)
    ]
    return AppDef(name, roles=roles)


def test_every_word_crosses_the_remote_shell_unchanged() -> None:
    argv = ["printf", "%s\\0", *HOSTILE]
    env = {"SLURM_CONF": "/etc/slurm dir/$(x).conf"}
    cmd = remote_command(argv, env)
    out = subprocess.run(["sh", "-c", cmd], capture_output=True, check=True).stdout
    assert out.decode().split("\0")[:-1] == HOSTILE
    printed = subprocess.run(["sh", "-c", remote_command(["sh", "-c", 'printf %s "$SLURM_CONF"'],
                             env)], capture_output=True, check=True).stdout  # fmt: skip
    assert printed.decode() == env["SLURM_CONF"]


@pytest.mark.parametrize(
    ("params", "want"),
    [
        ({"transport": "shh"}, "transport='shh' is not allowed (did you mean 'ssh'?)"),
        ({"transport": "ssh"}, "transport='ssh' needs host"),
        ({"transport": "rest"}, "transport='rest' needs rest_url"),
        ({"transport": "rest", "rest_url": "slurm:6820"}, "must start with http:// or https://"),
        ({"transport": "ssh", "host": "-oProxyCommand=x"}, "is not a host name"),
        ({"transport": "ssh", "host": "h", "port": 70000}, "port=70000 must be between"),
    ],
)
def test_bad_settings_name_field_value_and_what_is_allowed(
    params: dict[str, object], want: str
) -> None:
    with pytest.raises(SlurmTransportConfigError, match="invalid slurm transport settings") as e:
        settings_from(params)
    assert want in str(e.value)


def test_bad_transport_run_option_is_refused_at_dryrun() -> None:
    sched = create_scheduler("t")
    with pytest.raises(SlurmConfigError, match=r"did you mean 'rest'\?"):
        sched.submit_dryrun(app(), {"transport": "rst", "job_dir": "/j"})


@pytest.mark.parametrize(
    ("stderr", "want"),
    [
        ("ssh: connect to host 127.0.0.1 port 1: Connection refused", "check host and port"),
        ("u@h: Permission denied (publickey).", "authorized_keys"),
        ("No ED25519 host key is known for [h]:22 and you have requested strict checking.\r\n"
         "Host key verification failed.", "ssh-keyscan"),
        ("ssh: Could not resolve hostname nope: Name or service not known", "check host"),
    ],
)  # fmt: skip
def test_ssh_failures_say_what_to_fix(stderr: str, want: str) -> None:
    problem, hint = diagnose(stderr)
    assert want in hint and problem


def test_dryrun_is_offline_for_every_transport(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no ssh, no Slurm client
    monkeypatch.setenv("SLURM_JWT", "eyJsecret.payload.sig")
    texts = {}
    for params in (
        {},
        {"transport": "ssh", "host": "login.invalid"},
        {"transport": "rest", "rest_url": "https://slurm.invalid:6820"},
    ):
        sched = create_scheduler("t", **params)
        info = sched.submit_dryrun(app(n_roles=2), {"job_dir": "/jobs", "time": "1:30:00"})
        texts[params.get("transport", "local")] = str(info)
    script = texts["local"]
    assert "#SBATCH hetjob" in script
    assert texts["ssh"] == script  # the render is the same
    assert texts["rest"].startswith(script)
    body = json.loads(texts["rest"].split("job/submit\n", 1)[1])
    assert [j["tasks"] for j in body["jobs"]] == [1, 1]
    assert body["jobs"][0]["time_limit"] == 90 and body["jobs"][1]["name"] == "t"
    assert "eyJsecret" not in texts["rest"]


def test_rest_job_description_maps_flags_and_refuses_unknown_ones() -> None:
    sched = create_scheduler("t", transport="rest", rest_url="http://x:1")
    req = sched.submit_dryrun(
        app(), {"job_dir": "/jobs", "partition": "p", "requeue": True, "exclusive": True}
    ).request
    job = job_description(req)["job"]
    assert job["partition"] == "p" and job["requeue"] is True and job["exclusive"] == "true"
    assert job["memory_per_node"] == 256 and job["current_working_directory"] == "/jobs"
    assert job["standard_output"] == "/jobs/%x-%j.out" and "[tether:" in job["comment"]
    # the default --no-requeue: slurmrestd 22.05 makes any "requeue" key requeueable (false
    # too), so the job carries "no_requeue" alone (tests/e2e/test_slurm_recovery_remote_e2e.py)
    plain = job_description(sched.submit_dryrun(app(), {"job_dir": "/jobs"}).request)["job"]
    assert plain["no_requeue"] is True and "requeue" not in plain
    assert components("#!/bin/bash\n#SBATCH -a\n#SBATCH hetjob\n#SBATCH -b\necho\n#SBATCH -c") == [
        ["-a"], ["-b"]
    ]  # fmt: skip
    with pytest.raises(SlurmConfigError, match=r"'--nodelist=n1' has no field .* transport=ssh"):
        sched.submit_dryrun(app(), {"job_dir": "/jobs", "nodelist": "n1"})


@pytest.mark.parametrize(
    ("value", "minutes"),
    [("30", 30), ("1:30", 2), ("2:00:00", 120), ("1-0", 1440), ("1-2:3", 1563),
     ("0-0:0:1", 1), ("UNLIMITED", None)],
)  # fmt: skip
def test_time_limits_in_minutes(value: str, minutes: int | None) -> None:
    assert time_minutes(value) == minutes


def test_transport_settings_from_the_environment_under_parameters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TETHER_SLURM_TRANSPORT", "ssh")
    monkeypatch.setenv("TETHER_SLURM_HOST", "login.env")
    monkeypatch.setenv("TETHER_SLURM_PORT", "2222")
    monkeypatch.setenv("TETHER_SLURM_VERIFY_HOST_KEY", "false")
    s = settings_from({"host": "login.param", "port": None})
    assert (s.transport, s.host, s.port, s.verify_host_key) == ("ssh", "login.param", 2222, False)
    monkeypatch.setenv("TETHER_SLURM_PORT", "twenty")
    with pytest.raises(SlurmTransportConfigError, match="TETHER_SLURM_PORT='twenty'"):
        settings_from({})
