"""The golden-file check every render test uses (``tests/golden.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.golden import ENV_REGEN, GoldenDir


def test_a_matching_file_passes_and_a_changed_one_fails(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_REGEN, raising=False)
    (tmp_path / "job.json").write_text('{"a": 1}\n')
    golden = GoldenDir(tmp_path, suffix=".json", end="\n")
    golden.check("job", '{"a": 1}')
    with pytest.raises(AssertionError, match=r"job\.json differs"):
        golden.check("job", '{"a": 2}')
    with pytest.raises(AssertionError, match="differs"):  # the final newline counts too
        GoldenDir(tmp_path, suffix=".json").check("job", '{"a": 1}')


def test_a_missing_file_fails_and_names_the_switch(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_REGEN, raising=False)
    with pytest.raises(AssertionError, match=f"missing: run with {ENV_REGEN}=1"):
        GoldenDir(tmp_path).check("absent.yaml", "x")


@pytest.mark.parametrize("value", ["1", "true", "YES"])
def test_the_switch_writes_the_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     value: str) -> None:
    monkeypatch.setenv(ENV_REGEN, value)
    golden = GoldenDir(tmp_path / "new", suffix=".sh")
    golden.check("run", "echo hi\n")
    assert (tmp_path / "new" / "run.sh").read_bytes() == b"echo hi\n"
    monkeypatch.setenv(ENV_REGEN, "0")
    golden.check("run", "echo hi\n")
    with pytest.raises(AssertionError):
        golden.check("run", "echo bye\n")
