"""The ssh transport's long-lived remote shell and its framing, with a real ``sh``.

:class:`~tether.schedulers.slurm.ssh_shell.RemoteShell` is started here on ``sh`` itself (what
sshd's ``exec sh`` runs on the login node), so the frames, the quoting of
:func:`~tether.schedulers.slurm.ssh.shell_line` and the exported environment are checked
without a network; the same code over a real sshd is in ``tests/e2e/test_slurm_ssh_e2e.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.schedulers.test_slurm_transport import HOSTILE
from tether.schedulers.slurm.ssh import shell_line
from tether.schedulers.slurm.ssh_shell import RemoteShell

CONF = "/etc/slurm dir/$(touch x)'.conf"


@pytest.fixture
def shell(tmp_path: Path) -> Iterator[RemoteShell]:
    sh = RemoteShell(["sh"], str(tmp_path / "shell.log"), {"SLURM_CONF": CONF})
    yield sh
    sh.close()


def run(shell: RemoteShell, argv: list[str], input: str | None = None) -> tuple[int, str, str]:
    return shell.run(shell_line(argv), input, timeout=30)


def test_stdout_stderr_and_status_come_back_exactly(shell: RemoteShell) -> None:
    fake = "\nTETHER-0123456789abcdef0123456789abcdef 0\n"  # looks like a frame, is output
    assert run(shell, ["printf", "%s", f"no newline{fake}"]) == (0, f"no newline{fake}", "")
    rc, out, err = run(shell, ["sh", "-c", 'printf "a\\n\\n"; printf "oops\\n" >&2; exit 7'])
    assert (rc, out, err) == (7, "a\n\n", "oops\n")
    assert run(shell, ["cat"], input="line 1\n\0binary\xff") == (0, "line 1\n\0binary\xff", "")
    assert run(shell, ["true"]) == (0, "", "")  # the shell answers again after each


def test_tethers_programs_run_in_a_subshell_with_every_argument_quoted(
    shell: RemoteShell, tmp_path: Path
) -> None:
    rc, out, _ = run(shell, ["sh", "-c", 'd=elsewhere; printf "%s\\0" "$@"; exit 3', "tether",
                             *HOSTILE])  # fmt: skip
    assert rc == 3 and out.split("\0")[:-1] == HOSTILE
    assert not (tmp_path / "x").exists() and not Path("x").exists()
    # exit and variables stayed in the subshell: the shell and its files still work
    assert run(shell, ["sh", "-c", 'printf %s "$#"', "tether"]) == (0, "0", "")
    assert run(shell, ["cat"], input="still here") == (0, "still here", "")


def test_the_environment_is_exported_once_for_every_command(shell: RemoteShell) -> None:
    assert run(shell, ["sh", "-c", 'printf %s "$SLURM_CONF"', "tether"])[1] == CONF
    assert run(shell, ["printenv", "SLURM_CONF"])[1] == CONF + "\n"
