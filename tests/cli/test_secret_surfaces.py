"""One secret policy: secrets planted in env, args, Role.secrets and stderr never reach an output.

A real ``local_cwd`` job gets each kind of secret (secret-looking env names, a DSN with a
password, ``--password``-style args, a URL with userinfo, a ``SecretRef`` resolved from
``$TETHER_SECRETS_DIR``), prints them all to stderr and fails. Every surface of the CLI
(``run --dryrun``, ``run``'s failure report, ``status``, ``status --json``, ``describe``,
``log``) and the app's state file are searched for the values.
"""

from __future__ import annotations

import os
import stat
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli.conftest import Result
from tether.specs import is_secret_name, mask_args, mask_env, mask_text

ENV = {
    "DB_PASS": "SEKRIT_dbpass",
    "MYSQL_PWD": "SEKRIT_mysqlpwd",
    "GITHUB_PAT": "SEKRIT_githubpat",
    "HF_TOKEN": "SEKRIT_hftoken",
    "MY_SECRET_THING": "SEKRIT_mysecret",
    "OPENAI_API_KEY": "SEKRIT_apikey",
    "DATABASE_URL": "postgresql://app:SEKRIT_dsnpass@db.example:5432/app",
    "PLAIN": "visible-value",
}
ARGS = [
    "--db-password=SEKRIT_argpass",
    "--token",
    "SEKRIT_argtoken",
    "https://bob:SEKRIT_urlpass@git.example/repo.git",
]
COMPONENT = textwrap.dedent(
    """
    import sys
    from tether.specs import AppDef, Role, SecretRef

    SCRIPT = (
        "import os, sys\\n"
        "for k in sorted(os.environ):\\n"
        "    if k in sys.argv[1].split(','):\\n"
        "        print(k + '=' + os.environ[k], file=sys.stderr)\\n"
        "print('args', *sys.argv[2:], file=sys.stderr)\\n"
        "sys.exit(3)\\n"
    )

    def leaky() -> AppDef:
        env = ENV
        return AppDef("leaky", roles=[Role(
            "r", entrypoint=sys.executable,
            args=["-c", SCRIPT, ",".join([*env, "SVC_CRED"]), *ARGS],
            env=env, secrets={"SVC_CRED": SecretRef("svc", "token")},
        )])
    """
)


@pytest.fixture
def leaky(project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    secrets = tmp_path / "secrets"
    (secrets / "svc").mkdir(parents=True)
    (secrets / "svc" / "token").write_text("SEKRIT_secretref\n")
    monkeypatch.setenv("TETHER_SECRETS_DIR", str(secrets))
    (project / "comp.py").write_text(f"ENV = {ENV!r}\nARGS = {ARGS!r}\n" + COMPONENT)
    return "comp.py:leaky"


def test_no_secret_reaches_any_output(
    tether: Callable[..., Result], leaky: str, tether_state_dir: Path
) -> None:
    surfaces: dict[str, str] = {}
    dry = tether("run", "-s", "local_cwd", "--dryrun", leaky)
    assert dry.code == 0, dry.err
    surfaces["run --dryrun"] = dry.out + dry.err
    assert "=== APPLICATION ===" in dry.out and "visible-value" in dry.out
    run = tether("run", "-s", "local_cwd", leaky)
    assert run.code != 0
    surfaces["run (failure report)"] = run.out + run.err
    handle = run.out.strip().splitlines()[0]
    for argv in (("status", handle), ("status", "--json", handle), ("describe", handle)):
        res = tether(*argv)
        surfaces[" ".join(argv[:-1])] = res.out + res.err
    log = tether("log", handle)
    surfaces["log"] = log.out + log.err
    assert "SVC_CRED=****" in surfaces["log"]  # a SecretRef's value the job printed
    app_dir = next((tether_state_dir / "local_cwd" / "apps").iterdir())
    # the record keeps the env the user wrote (to restart replicas; the file is 0600), but
    # never the value of a SecretRef
    assert "SEKRIT_secretref" not in (app_dir / "state.json").read_text()
    assert "exited with code 3" in surfaces["status"]
    assert "last lines of stderr" in surfaces["status"]
    # the job really saw (and printed) every secret: the raw stderr log has them
    raw = next(app_dir.rglob("stderr.log")).read_text()
    assert "SEKRIT_secretref" in raw and "SEKRIT_dsnpass" in raw and "SEKRIT_argtoken" in raw
    leaks = {name: text.count("SEKRIT") for name, text in surfaces.items() if "SEKRIT" in text}
    print(f"\n[secrets] surfaces checked: {sorted(surfaces)}; leaks: {leaks}")
    assert not leaks, {n: [ln for ln in surfaces[n].splitlines() if "SEKRIT" in ln] for n in leaks}
    # files private to the user
    for path in [app_dir, *app_dir.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        want = 0o700 if path.is_dir() else 0o600
        assert mode & 0o077 == 0, f"{path} has mode {oct(mode)}, want {oct(want)}"


@pytest.mark.parametrize(
    "name",
    ["DB_PASS", "MYSQL_PWD", "GITHUB_PAT", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "API_KEY",
     "DB_PASSWORD", "MY_DSN", "PGPASSWORD", "SLACK_WEBHOOK_TOKEN"],
)
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["PATH", "HOME", "PWD", "TETHER_JOB_KEY", "PATTERN", "USER"])
def test_not_secret_names(name: str) -> None:
    assert not is_secret_name(name)


def test_masking_functions() -> None:
    assert mask_env({"DATABASE_URL": "mysql://u:pw@h/db"}) == {"DATABASE_URL": "mysql://u:****@h/db"}
    assert mask_args(["--password", "x", "--api-key=y", "keep"]) == [
        "--password", "****", "--api-key=****", "keep",
    ]
    assert mask_text("host=h password=pw user=u", ["zzz"]) == "host=h password=**** user=u"
    assert mask_text("no secrets here: a=b") == "no secrets here: a=b"
    assert os.sep  # keep import used on every platform
