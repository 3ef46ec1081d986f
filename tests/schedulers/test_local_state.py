"""Durable records of local_cwd: atomic writes, round trips, the job index, log indexes."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from tether.errors import SpecTypeError
from tether.schedulers.local.logindex import INDEX_RESOLUTION_S, LogIndexWriter, read_index
from tether.schedulers.local.records import AppRecord, ReplicaRecord, app_from_json, app_to_json
from tether.schedulers.local.scheduler import LocalScheduler
from tether.schedulers.local.state import (
    CorruptRecordError,
    StateStore,
    atomic_write_json,
    default_state_dir,
)
from tether.specs import (
    AppDef,
    AppState,
    BindMount,
    DeviceMount,
    Resource,
    RetryPolicy,
    Role,
    VolumeMount,
)
from tether.workspace import Workspace


def record(app_id: str = "demo-abc12345", job_key: str | None = None) -> AppRecord:
    rep = ReplicaRecord("r", 0, ["prog", "--x"], {"A": "1"}, "/w", "/l/o", "/l/e", "/l/c")
    return AppRecord(
        app_id=app_id,
        name="demo",
        session="s",
        created=123.5,
        job_key=job_key,
        app={"name": "demo", "roles": []},
        cfg={"grace_period": 1.0},
        log_dir="",
        grace_period=1.0,
        replicas=[rep],
    )


def test_state_dir_follows_the_environment(tether_state_dir: Path) -> None:
    assert default_state_dir() == tether_state_dir
    assert StateStore().root == tether_state_dir / "local_cwd"


def test_app_json_round_trip() -> None:
    role = Role(
        "trainer",
        image="img",
        entrypoint="python",
        args=["-m", "train", "${app_id}"],
        env={"A": "1"},
        num_replicas=2,
        min_replicas=1,
        max_retries=3,
        retry_policy=RetryPolicy.ROLE,
        resource=Resource(cpu=2, gpu=1, memMB=1024, capabilities={"x": "y"}, devices={"d": 1}),
        port_map={"http": 8080},
        mounts=[BindMount("/a", "/b", True), VolumeMount("vol", "/v"), DeviceMount("/dev/x", "/x")],
        workspace=Workspace({"./proj": ""}),
        metadata={"k": "v", "obj": object()},
    )
    app = AppDef("demo", [role], metadata={"tether.job_key": "k"})
    doc = json.loads(json.dumps(app_to_json(app)))
    back = app_from_json(doc)
    assert back.roles[0].metadata["obj"].startswith("<object object")
    back.roles[0].metadata["obj"] = role.metadata["obj"]
    assert back == app


def test_an_app_read_back_reports_a_wrong_type_as_its_constructor_does() -> None:
    good = app_to_json(AppDef("demo", [Role("r", entrypoint="true", env={"A": "1"})]))
    bad_env = json.loads(json.dumps(good))
    bad_env["roles"][0]["env"]["A"] = 1
    with pytest.raises(SpecTypeError) as built:
        Role("r", entrypoint="true", env={"A": 1})  # type: ignore[dict-item]
    with pytest.raises(SpecTypeError) as read:
        app_from_json(bad_env)
    assert str(read.value) == str(built.value)
    assert "env['A']" in str(read.value)
    bad_name = dict(good, name=7)
    with pytest.raises(SpecTypeError, match=r"invalid AppDef: app name must be a str"):
        app_from_json(bad_name)
    assert app_from_json(good, check=False) == app_from_json(good)


def _write_app(store: StateStore, rec: AppRecord, app: AppDef) -> None:
    rec.app = app_to_json(app)
    store.save(rec)


def test_a_record_rewritten_with_another_app_is_read_afresh(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    sched = LocalScheduler("s", state_dir=tmp_path)
    rec = record()
    store.create(rec)
    _write_app(store, rec, AppDef("demo", [Role("first", entrypoint="true")]))
    for _ in range(2):  # read again: the same answer
        d = sched.describe(rec.app_id)
        assert d is not None and [r.name for r in d.roles] == ["first"]
    _write_app(store, rec, AppDef("demo", [Role("second", entrypoint="true", env={"B": "2"})]))
    d = sched.describe(rec.app_id)
    assert d is not None and [(r.name, r.env) for r in d.roles] == [("second", {"B": "2"})]


def test_a_record_whose_app_turned_corrupt_is_reported_though_read_fine_before(
    tmp_path: Path,
) -> None:
    store = StateStore(tmp_path)
    rec = record()
    store.create(rec)
    _write_app(store, rec, AppDef("demo", [Role("r", entrypoint="true", env={"A": "1"})]))
    assert store.load(rec.app_id) is not None
    path = store.state_path(rec.app_id)
    doc = json.loads(path.read_bytes())
    doc["app"]["roles"][0]["env"]["A"] = 1  # the same app but for one value's type
    path.write_bytes(json.dumps(doc).encode())
    for _ in range(2):
        with pytest.raises(CorruptRecordError, match=r"env\['A'\] must be a str") as ei:
            store.load(rec.app_id)
        assert str(path) in str(ei.value)
    doc["app"]["roles"][0]["env"]["A"] = "1"
    path.write_bytes(json.dumps(doc).encode())
    loaded = store.load(rec.app_id)
    assert loaded is not None and loaded.app["roles"][0]["env"] == {"A": "1"}


def test_record_round_trip_and_atomic_save(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    rec = record(job_key="job")
    store.create(rec)
    with pytest.raises(FileExistsError):
        store.create(rec)
    rec.state = AppState.RUNNING.name
    rec.replicas[0].pid = 42
    store.save(rec)
    loaded = store.load(rec.app_id)
    assert loaded == rec
    assert loaded is not None and loaded.app_state == AppState.RUNNING
    # no temp file is left next to the record
    assert sorted(p.name for p in store.app_dir(rec.app_id).iterdir()) == ["lock", "state.json"]
    assert store.app_ids() == [rec.app_id]
    assert store.job_app_ids("job") == [rec.app_id]
    store.delete(rec)
    assert store.load(rec.app_id) is None and store.job_app_ids("job") == []


def test_sync_flushes_the_record_as_it_stands_and_names_a_missing_one(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    rec = record()
    store.create(rec)
    rec.state = AppState.RUNNING.name
    store.save(rec)  # visible from the rename on; sync makes it durable without rewriting it
    before = store.state_path(rec.app_id).stat()
    store.sync(rec.app_id)
    after = store.state_path(rec.app_id).stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert store.load(rec.app_id) == rec
    with pytest.raises(FileNotFoundError):
        store.sync("gone-abc12345")


def test_readers_never_see_a_torn_record(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    atomic_write_json(path, {"n": 0, "pad": "x" * 100_000})
    stop = threading.Event()

    def writer() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            atomic_write_json(path, {"n": n, "pad": "x" * 100_000})

    t = threading.Thread(target=writer)
    t.start()
    try:
        for _ in range(300):
            assert len(json.loads(path.read_bytes())["pad"]) == 100_000
    finally:
        stop.set()
        t.join()


def test_atomic_writes_are_private_and_leave_other_writers_temp_files_alone(
    tmp_path: Path,
) -> None:
    import os
    import stat

    path = tmp_path / "state.json"
    # another writer's temp file, mid-write (named the way the writers name theirs)
    other = tmp_path / f".state.json.{os.getpid()}-0.tmp"
    other.write_bytes(b"half a record")
    other.chmod(0o600)
    for n in range(3):
        atomic_write_json(path, {"n": n})
    assert json.loads(path.read_bytes()) == {"n": 2}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert other.read_bytes() == b"half a record"  # not taken over, not removed
    assert sorted(p.name for p in tmp_path.iterdir()) == [other.name, "state.json"]


def test_private_dirs_makes_missing_parents_private_and_leaves_existing_ones(
    tmp_path: Path,
) -> None:
    import stat

    from tether.schedulers.local.state import private_dirs

    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    private_dirs(shared / "app" / "r" / "0")
    private_dirs(shared / "app" / "r" / "1")
    private_dirs(str(shared / "app" / "r" / "1"))  # again, and as a str: nothing changes
    for d in ("app", "app/r", "app/r/0", "app/r/1"):
        assert stat.S_IMODE((shared / d).stat().st_mode) == 0o700, d
    assert stat.S_IMODE(shared.stat().st_mode) == 0o755  # not ours to change
    (shared / "file").write_text("x")
    with pytest.raises(NotADirectoryError):
        private_dirs(shared / "file" / "r")


def test_bad_ids_and_unknown_versions(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    assert store.load("../../etc") is None and store.load("UPPER") is None
    with pytest.raises(ValueError, match="not a local_cwd app id"):
        store.app_dir("../x")
    doc = record().to_json()
    doc["version"] = 99
    with pytest.raises(ValueError, match="has version 99; this tether reads version 1"):
        AppRecord.from_json(doc)


def test_log_index_entries_are_coalesced(tmp_path: Path) -> None:
    idx = str(tmp_path / "out.log.idx")
    w = LogIndexWriter(idx, offset=100)
    w.wrote(10, 1000.0)
    w.wrote(5, 1000.0 + INDEX_RESOLUTION_S / 2)  # same entry
    w.wrote(7, 1001.0)
    w.wrote(0, 1002.0)  # nothing written: no entry
    w.close()
    entries, pos = read_index(idx)
    assert entries == [(100, 1000.0), (115, 1001.0)]
    more, _ = read_index(idx, pos)
    assert more == []
