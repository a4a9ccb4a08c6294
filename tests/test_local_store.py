"""The local disk store beyond the conformance suite: a model check, LRU bounds, repair,
several processes at once, writers killed mid-put, and full or broken disks."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import multiprocessing
import os
import random
import re
import shutil
import signal
import sqlite3
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import xxhash
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from compilecache.entry import EntryHeader
from compilecache.errors import EntryTooLarge, StoreUnavailable
from compilecache.runtime.cache import Cache
from compilecache.stores.base import EntryMeta
from compilecache.stores.local import CACHEDIR_TAG, LocalStore

REPO = Path(__file__).resolve().parents[1]
KB = 1000
MB = 1000 * 1000


def _remove_index(root: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            (root / f"index.sqlite{suffix}").unlink()


# -- a model check against a dict ------------------------------------------------------------

_KEYS = st.sampled_from(["a", "ab", "abc", "jax/f-1", "jax/f-2", "torch/g", "Ä/ü", "b"]) | st.text(
    max_size=12
)
_VALUES = st.binary(max_size=300) | st.builds(lambda n: b"v" * n, st.integers(0, 70_000))


class LocalStoreMachine(RuleBasedStateMachine):
    """Every operation agrees with a plain dict, across reopenings and index loss."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="cc-machine-"))
        self.root = self.dir / "cache"
        self.store = LocalStore(self.root)
        self.model: dict[str, bytes] = {}
        self.meta: dict[str, EntryMeta] = {}

    @rule(key=_KEYS, value=_VALUES, framework=st.sampled_from(["", "jax", "torch"]))
    def put(self, key: str, value: bytes, framework: str) -> None:
        meta = EntryMeta(framework, f"name-{len(value)}", 0.25)
        self.store.put(key, value, meta)
        self.model[key] = value
        self.meta[key] = meta

    @rule(key=_KEYS)
    def get(self, key: str) -> None:
        assert self.store.get(key) == self.model.get(key)

    @rule(key=_KEYS)
    def delete(self, key: str) -> None:
        assert self.store.delete(key) is (key in self.model)
        self.model.pop(key, None)
        assert self.store.get(key) is None

    @rule(key=_KEYS)
    def stat(self, key: str) -> None:
        info = self.store.stat(key)
        if key not in self.model:
            assert info is None
            return
        assert info is not None
        assert info.key == key
        assert info.size == len(self.model[key])
        assert info.framework == self.meta[key].framework
        assert info.name == self.meta[key].name

    @rule(prefix=st.sampled_from(["", "a", "ab", "jax/", "x", "Ä"]) | st.text(max_size=3))
    def scan(self, prefix: str) -> None:
        found = {info.key: info.size for info in self.store.scan(prefix)}
        assert found == {k: len(v) for k, v in self.model.items() if k.startswith(prefix)}

    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = LocalStore(self.root)

    @rule()
    def lose_the_index(self) -> None:
        self.store.close()
        _remove_index(self.root)
        self.store = LocalStore(self.root)
        # Metadata comes back from the files' frames.
        for key, meta in self.meta.items():
            if key in self.model:
                info = self.store.stat(key)
                assert info is not None and info.meta == meta

    @invariant()
    def total_is_the_sum_of_sizes(self) -> None:
        assert self.store.total_size() == sum(len(v) for v in self.model.values())

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)


LocalStoreMachine.TestCase.settings = settings(
    max_examples=25, stateful_step_count=30, deadline=None
)
TestLocalStoreMachine = LocalStoreMachine.TestCase


# -- layout ----------------------------------------------------------------------------------


def test_cachedir_tag(tmp_path: Path) -> None:
    LocalStore(tmp_path / "c").close()
    tag = (tmp_path / "c" / "CACHEDIR.TAG").read_bytes()
    # The spec: the file must begin with exactly these 43 bytes.
    assert tag.startswith(b"Signature: 8a477f597d28d172789f06886806bc55")
    assert tag.decode() == CACHEDIR_TAG
    assert list((tmp_path / "c" / "tmp").iterdir()) == []


def test_path_of_is_sharded_and_safe(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "c")
    for key in ("../../etc/passwd", "a/b/c", "\x00", "x" * 5000):
        path = store.path_of(key)
        assert path.parent.parent == store.entries_dir
        assert re.fullmatch(r"[0-9a-f]{32}\.cce", path.name)
        store.put(key, key.encode())
        assert store.get(key) == key.encode()


# -- LRU eviction ----------------------------------------------------------------------------


def test_lru_evicts_least_recently_used_first(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "c", max_size=5 * KB)
    for i in range(5):
        store.put(f"k{i}", bytes([i]) * KB)
    assert store.total_size() == 5 * KB
    assert store.get("k0") == b"\x00" * KB  # k0 becomes the most recently used
    store.put("k5", b"\x05" * KB)
    # Only the least recently used entry (k1) goes, one entry is enough.
    assert store.get("k1") is None
    for i in (0, 2, 3, 4, 5):
        assert store.get(f"k{i}") == bytes([i]) * KB, f"k{i} was evicted"
    assert store.total_size() == 5 * KB
    assert sorted(i.key for i in store.scan()) == ["k0", "k2", "k3", "k4", "k5"]


def test_lru_keeps_read_entries_and_bounds_the_total(tmp_path: Path) -> None:
    limit = 20 * KB
    store = LocalStore(tmp_path / "c", max_size=limit)
    store.put("hot", b"h" * KB)
    for i in range(200):
        store.put(f"cold{i}", os.urandom(random.randint(1, 3 * KB)))
        assert store.get("hot") == b"h" * KB, f"the hot entry was evicted at step {i}"
        total = store.total_size()
        assert total <= limit
        assert total == sum(info.size for info in store.scan())
        if i >= 20:
            # Nothing is evicted beyond what the bound requires (entries are at most 3 KB).
            assert total > limit - 3 * KB, (i, total)
    # No file outlives its row: evicted entries leave the disk too.
    assert sum(p.stat().st_size for p in store.entries_dir.glob("*/*.cce")) >= total
    files = {p.name for p in store.entries_dir.glob("*/*.cce")}
    assert files == {store.path_of(info.key).name for info in store.scan()}


def test_value_bigger_than_the_bound_does_not_stay(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "c", max_size=10 * KB)
    store.put("small", b"s" * KB)
    with pytest.raises(EntryTooLarge):  # not written: it would evict everything, then itself
        store.put("huge", b"h" * 20 * KB)
    assert store.total_size() <= 10 * KB
    assert store.get("huge") is None
    assert store.get("small") == b"s" * KB


def _statements_of_one_put(store: LocalStore, key: str) -> list[str]:
    conn = store._db()
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    try:
        store.put(key, b"n" * 100)
    finally:
        conn.set_trace_callback(None)
    return statements


def _fill(store: LocalStore, count: int) -> None:
    with store._transaction() as conn:  # fast bulk setup: rows as a put would write them
        now = time.time()
        for i in range(count):
            path = store.path_of(f"old{i}")
            path.parent.mkdir(exist_ok=True)
            path.write_bytes(b"")  # sizes in the index only matter for eviction here
            conn.execute(
                "INSERT INTO entries VALUES (?, 100, ?, ?, 0, '', '', 0)",
                (f"old{i}", now - count + i, now - count + i),
            )


def test_eviction_is_amortised_not_a_scan(tmp_path: Path) -> None:
    """A put that evicts runs the same few indexed statements whatever the entry count."""
    counts = []
    for n in (50, 2000):
        store = LocalStore(tmp_path / f"c{n}", max_size=100 * n)
        _fill(store, n)
        statements = _statements_of_one_put(store, "new")
        assert store.stat("old0") is None  # the oldest entry was evicted
        assert store.stat("old1") is not None  # and only that one
        assert store.stat("new") is not None
        assert store.total_size() == 100 * n
        conn = store._db()
        for sql in statements:
            verb = sql.split()[0].upper()
            assert "SUM(" not in sql.upper(), sql
            if verb in ("SELECT", "UPDATE", "DELETE"):
                plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql)]
                for step in plan:
                    # A bare "SCAN entries" (no index) or a sort would grow with the entry count.
                    assert not re.fullmatch(r"SCAN entries", step), (sql, plan)
                    assert "TEMP B-TREE" not in step, (sql, plan)
        counts.append(len(statements))
        store.close()
    assert counts[0] == counts[1], counts
    assert counts[0] < 30


# -- repair ----------------------------------------------------------------------------------


def _populate(store: LocalStore) -> dict[str, bytes]:
    values = {f"jax/f-{i}": os.urandom(100 + i) for i in range(20)}
    for key, value in values.items():
        store.put(key, value, EntryMeta("jax", key.split("/")[1], 1.0 + len(value)))
    return values


def _assert_rebuilt(root: Path, values: dict[str, bytes]) -> None:
    store = LocalStore(root)
    infos = {info.key: info for info in store.scan()}
    assert set(infos) == set(values)
    for key, value in values.items():
        info = infos[key]
        assert info.size == len(value)
        assert info.framework == "jax"
        assert info.name == key.split("/")[1]
        assert info.compile_time_s == pytest.approx(1.0 + len(value))
    assert store.total_size() == sum(len(v) for v in values.values())
    for key, value in values.items():
        assert store.get(key) == value
    assert sorted(i.key for i in store.scan("jax/f-1")) == sorted(
        k for k in values if k.startswith("jax/f-1")
    )
    store.put("after", b"x")
    assert store.get("after") == b"x"
    store.close()


def test_index_deleted_is_rebuilt(tmp_path: Path) -> None:
    root = tmp_path / "c"
    store = LocalStore(root)
    values = _populate(store)
    store.close()
    _remove_index(root)
    _assert_rebuilt(root, values)


@pytest.mark.parametrize("garbage", ["random", "empty", "truncated"])
def test_index_garbage_is_rebuilt(tmp_path: Path, garbage: str) -> None:
    root = tmp_path / "c"
    store = LocalStore(root)
    values = _populate(store)
    store.close()
    _remove_index(root)
    index = root / "index.sqlite"
    if garbage == "random":
        index.write_bytes(os.urandom(8192))
    elif garbage == "empty":
        index.write_bytes(b"")
    else:
        index.write_bytes(b"SQLite format 3\x00" + os.urandom(50))
    _assert_rebuilt(root, values)


def test_a_busy_index_is_not_taken_for_a_corrupt_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ "database is locked" while opening the index (other processes busy with it) must not set
    the index aside: that would pull it from under every other process sharing the store."""
    root = tmp_path / "c"
    store = LocalStore(root)
    values = _populate(store)
    store.close()
    busy = LocalStore(root)
    real_connect = busy._connect

    def locked() -> Any:
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(busy, "_connect", locked)
    with pytest.raises(StoreUnavailable):
        busy.put("jax/new", b"x")
    assert not list(root.glob("index.sqlite.corrupt-*")), "a busy index was set aside"
    monkeypatch.setattr(busy, "_connect", real_connect)
    busy.put("jax/new", b"x")
    assert {i.key for i in busy.scan()} == {*values, "jax/new"}
    busy.close()


class _FlakyPragma:
    """A connection whose first ``n`` journal-mode statements fail with ``error``."""

    def __init__(self, n: int, error: sqlite3.OperationalError) -> None:
        self.n, self.error, self.statements = n, error, []

    def execute(self, sql: str) -> Any:
        self.statements.append(sql)
        if self.n > 0:
            self.n -= 1
            raise self.error
        return self

    def fetchone(self) -> tuple[str]:
        return ("delete",)


def test_switching_to_wal_waits_out_a_busy_moment() -> None:
    """``PRAGMA journal_mode`` can answer "database is locked" at once, without the busy
    timeout, while another process closes its last connection (seen in the 8-process stress
    test): opening the index retries instead of failing (or, before, of taking the index for a
    corrupt one and setting it aside from under every other process)."""
    from compilecache.stores import local

    conn = _FlakyPragma(3, sqlite3.OperationalError("database is locked"))
    local._use_wal(conn, patience_s=5)  # type: ignore[arg-type]
    assert conn.statements[-1] == "PRAGMA journal_mode=WAL" and len(conn.statements) == 5
    # Not busy (a read-only or unreadable file): no retry.
    io_error = _FlakyPragma(1, sqlite3.OperationalError("attempt to write a readonly database"))
    with pytest.raises(sqlite3.OperationalError):
        local._use_wal(io_error, patience_s=5)  # type: ignore[arg-type]
    assert len(io_error.statements) == 1
    # Busy for longer than the patience: the error, not a hang.
    stuck = _FlakyPragma(10**6, sqlite3.OperationalError("database is locked"))
    with pytest.raises(sqlite3.OperationalError):
        local._use_wal(stuck, patience_s=0.2)  # type: ignore[arg-type]


def test_index_deleted_under_an_open_store(tmp_path: Path) -> None:
    """Another process deletes the index while this one holds it open: reopening repairs."""
    root = tmp_path / "c"
    store = LocalStore(root)
    values = _populate(store)
    _remove_index(root)
    assert store.get("jax/f-3") == values["jax/f-3"]  # reads never needed the index
    store.close()
    _assert_rebuilt(root, values)


def test_orphan_file_is_adopted_on_read(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "c")
    store.put("other", b"x")
    store.delete("other")  # the index now exists: no rebuild will hide the orphan
    other = LocalStore(tmp_path / "other")
    other.put("jax/orphan", b"o" * 1234, EntryMeta("jax", "orphan", 3.0))
    # A file published without its row, as a writer killed between the two steps leaves it.
    target = store.path_of("jax/orphan")
    target.parent.mkdir(exist_ok=True)
    shutil.copyfile(other.path_of("jax/orphan"), target)
    assert store.stat("jax/orphan") is None
    assert store.total_size() == 0
    assert store.get("jax/orphan") == b"o" * 1234
    info = store.stat("jax/orphan")
    assert info is not None
    assert info.size == 1234
    assert info.framework == "jax" and info.name == "orphan"
    assert store.total_size() == 1234
    assert [i.key for i in store.scan()] == ["jax/orphan"]


def test_row_without_file_becomes_a_miss(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "c")
    store.put("gone", b"g" * 500)
    store.put("kept", b"k" * 300)
    store.path_of("gone").unlink()
    assert store.stat("gone") is not None
    assert store.get("gone") is None
    assert store.stat("gone") is None
    assert store.total_size() == 300
    assert [i.key for i in store.scan()] == ["kept"]
    assert store.delete("gone") is False


def test_a_miss_queries_no_index_and_a_file_written_since_keeps_its_row(tmp_path: Path) -> None:
    """A cold lookup is one failed open: rows of missing files are dropped in the batched
    flush, which leaves the row of an entry put between the miss and the flush."""
    store = LocalStore(tmp_path / "c")
    store.put("back", b"b" * 100)
    store.path_of("back").unlink()
    statements: list[str] = []
    store._db().set_trace_callback(statements.append)
    assert store.get("back") is None and store.get("never") is None
    assert statements == []
    store.put("back", b"B" * 200)  # written again before the flush
    statements.clear()
    info = store.stat("back")
    assert info is not None and info.size == 200
    # The put itself said the row has its file: the flush checks only "never" again.
    (checked,) = [s for s in statements if "WHERE key IN" in s]
    assert "'never'" in checked and "'back'" not in checked
    assert store.get("back") == b"B" * 200
    assert store.total_size() == 200


def test_scan_prefixes_with_odd_characters(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "c")
    keys = ["a", "a\x00", "a\x00b", "a\x01", "ab", "b", "Ä", "Äb", "\U0001f600x", "", "\x00"]
    for key in keys:
        store.put(key, key.encode() + b"!")
    for prefix in ["", "a", "a\x00", "a\x00b", "\x00", "Ä", "\U0001f600", "z", "ab"]:
        found = [info.key for info in store.scan(prefix)]
        assert found == sorted(
            (k for k in keys if k.startswith(prefix)), key=lambda k: k.encode()
        ), prefix
    for key in keys:
        assert store.get(key) == key.encode() + b"!"


def test_file_of_another_key_is_a_miss(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "c")
    store.put("a", b"value of a")
    store.put("b", b"value of b")
    shutil.copyfile(store.path_of("a"), store.path_of("b"))
    assert store.get("b") is None  # never a wrong hit
    assert store.get("a") == b"value of a"


# -- several processes at once ---------------------------------------------------------------

_STRESS_KEYS = [f"stress/{i}" for i in range(6)]
_VALUE_HEAD = struct.Struct(">HQQ16s")  # key length, seed, body size, XXH3-128 digest


def _seed_block(seed: int, size: int) -> bytes:
    return random.Random(seed).randbytes(min(size, 65536) or 1)


def _digest(key_raw: bytes, seed: int, size: int, body: bytes | memoryview) -> bytes:
    hasher = xxhash.xxh3_128(key_raw + struct.pack(">QQ", seed, size))
    hasher.update(body)
    return hasher.digest()


def _make_value(key: str, seed: int, size: int) -> bytes:
    """A value that proves on its own which key and which write it came from."""
    block = _seed_block(seed, size)
    body = (block * (size // len(block) + 1))[:size]
    key_raw = key.encode()
    digest = _digest(key_raw, seed, size, body)
    return _VALUE_HEAD.pack(len(key_raw), seed, size, digest) + key_raw + body


def _check_value(key: str, value: bytes) -> str | None:
    """``None`` when ``value`` is a whole value written for ``key``, else what is wrong."""
    if len(value) < _VALUE_HEAD.size:
        return f"{key}: short value ({len(value)} bytes)"
    key_len, seed, size, digest = _VALUE_HEAD.unpack_from(value)
    key_raw = value[_VALUE_HEAD.size : _VALUE_HEAD.size + key_len]
    body = memoryview(value)[_VALUE_HEAD.size + key_len :]
    if key_raw != key.encode():
        return f"{key}: value of another key {key_raw!r}"
    if len(body) != size:
        return f"{key}: torn value, {len(body)} bytes of {size}"
    if _digest(key_raw, seed, size, body) != digest:
        return f"{key}: torn or mixed value (digest mismatch), seed {seed}"
    if bytes(body[:64]) != _seed_block(seed, size)[: min(size, 64)]:
        return f"{key}: body does not derive from its seed"
    return None


def _stress_worker(
    root: str, worker: int, duration: float, max_size: int, ready: Any, go: Any, results: Any
) -> None:
    counts: dict[str, Any] = {
        "reads": 0,
        "verified": 0,
        "misses": 0,
        "puts": 0,
        "big_puts": 0,
        "deletes": 0,
        "bytes_read": 0,
        "problems": [],
    }
    try:
        rng = random.Random(worker * 7919 + os.getpid())
        store = LocalStore(root, max_size=max_size)
        ready.release()
        go.wait(60)
        deadline = time.monotonic() + duration
        big_budget = 2  # 50 MB values: a few per process keep memory and disk traffic moderate
        while time.monotonic() < deadline:
            key = rng.choice(_STRESS_KEYS)
            op = rng.random()
            if op < 0.40:
                roll = rng.random()
                if roll < 0.03 and big_budget > 0:
                    size, big_budget = 50 * MB, big_budget - 1
                    counts["big_puts"] += 1
                elif roll < 0.20:
                    size = 1 * MB
                else:
                    size = 10 * KB
                store.put(key, _make_value(key, rng.getrandbits(63), size))
                counts["puts"] += 1
            elif op < 0.90:
                value = store.get(key)
                counts["reads"] += 1
                if value is None:
                    counts["misses"] += 1
                    continue
                problem = _check_value(key, value)
                if problem:
                    counts["problems"].append(problem)
                else:
                    counts["verified"] += 1
                    counts["bytes_read"] += len(value)
            else:
                store.delete(key)
                counts["deletes"] += 1
        store.close()
    except BaseException as exc:
        counts["problems"].append(f"worker {worker} failed: {exc!r}")
    results.put(counts)


def test_many_processes_share_one_store(tmp_path: Path) -> None:
    root = tmp_path / "c"
    max_size = 120 * MB  # small enough that 50 MB values make processes evict each other
    LocalStore(root, max_size=max_size).close()
    processes, duration = 8, 8.0
    ctx = multiprocessing.get_context("spawn")
    ready, go, results = ctx.Semaphore(0), ctx.Event(), ctx.Queue()
    workers = [
        ctx.Process(
            target=_stress_worker, args=(str(root), n, duration, max_size, ready, go, results)
        )
        for n in range(processes)
    ]
    for w in workers:
        w.start()
    try:
        for _ in workers:  # every process is up before any starts: they really overlap
            assert ready.acquire(timeout=120), "a stress process did not start"
        start = time.monotonic()
        go.set()
        counts = [results.get(timeout=120) for _ in workers]
        elapsed = time.monotonic() - start
    finally:
        go.set()
        for w in workers:
            w.join(timeout=30)
            if w.is_alive():
                w.kill()
    problems = [p for r in counts for p in r["problems"]]
    total = {name: sum(r[name] for r in counts) for name in counts[0] if name != "problems"}
    print(
        f"\nstress: {processes} processes for {elapsed:.1f}s: {total['verified']} reads verified "
        f"({total['bytes_read'] / MB:.0f} MB), {total['misses']} misses, {total['puts']} puts "
        f"({total['big_puts']} of 50 MB), {total['deletes']} deletes"
    )
    assert problems == []
    assert total["big_puts"] >= 1
    assert total["verified"] >= 50
    assert all(r["puts"] > 0 and r["reads"] > 0 for r in counts)
    # Afterwards the store is consistent: every value whole, the index agrees with the files.
    store = LocalStore(root, max_size=max_size)
    for key in _STRESS_KEYS:
        value = store.get(key)
        if value is not None:
            assert _check_value(key, value) is None
            info = store.stat(key)
            assert info is not None and info.size == len(value), (info, len(value))
    assert store.total_size() == sum(info.size for info in store.scan())
    assert store.total_size() <= max_size
    assert list(store.tmp_dir.iterdir()) == []


# -- writers killed mid-put ------------------------------------------------------------------

_KILLED_WRITER = """
import random, sys
sys.path.insert(0, {repo!r})
from compilecache.stores.local import LocalStore
from tests.test_local_store import _make_value
store = LocalStore({root!r})
print("ready", flush=True)
rng = random.Random()
while True:
    store.put("victim", _make_value("victim", rng.getrandbits(63), {size}))
"""


def test_writer_killed_mid_put_leaves_no_partial_entry(tmp_path: Path) -> None:
    root = tmp_path / "c"
    store = LocalStore(root)
    size = 20 * MB
    code = _KILLED_WRITER.format(repo=str(REPO), root=str(root), size=size)
    rng = random.Random(1234)
    mid_write = 0
    for round_ in range(6):
        child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "ready"
            if round_ % 2 == 0:
                # Kill while a temporary file is being written.
                limit = time.time() + 10
                while time.time() < limit and not any(
                    p.stat().st_size > 0 for p in store.tmp_dir.iterdir()
                ):
                    time.sleep(0.001)
            else:
                time.sleep(rng.uniform(0.01, 0.4))
            mid_write += bool(list(store.tmp_dir.iterdir()))
            os.kill(child.pid, signal.SIGKILL)
        finally:
            child.wait(timeout=30)
        assert child.returncode == -signal.SIGKILL
        value = store.get("victim")
        assert value is None or _check_value("victim", value) is None
        info = store.stat("victim")
        if value is not None and info is not None:
            assert info.size == len(value)
        # Leftovers stay out of sight, and the key is usable at once.
        fresh = _make_value("victim", round_, 1 * MB)
        store.put("victim", fresh)
        assert store.get("victim") == fresh
        assert store.stat("victim") is not None
        assert [i.key for i in store.scan()] == ["victim"]
        assert store.total_size() == len(fresh)
    print(f"\nkilled writer: 6 SIGKILLs, {mid_write} with a temporary file being written")
    assert mid_write >= 1, "no kill landed during a write"
    store.close()


# -- full disks and broken directories -------------------------------------------------------


def _header(key: str, compile_time: float = 2.0) -> EntryHeader:
    return EntryHeader(framework="jax", key=key, name=key, compile_time_s=compile_time)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "compilecache" and r.levelno >= logging.WARNING
    ]


_FILE_SIZE_LIMITED = """
import json, logging, os, resource, signal, sys
sys.path.insert(0, {repo!r})
from compilecache.runtime.cache import Cache
from compilecache.entry import EntryHeader
from compilecache.stores.local import LocalStore

warnings = []
class Collect(logging.Handler):
    def emit(self, record):
        if record.levelno >= logging.WARNING:
            warnings.append(record.getMessage())
logging.getLogger("compilecache").addHandler(Collect())

def header(key):
    return EntryHeader(framework="jax", key=key, name=key, compile_time_s=2.0)

cache = Cache(LocalStore({root!r}))
before = cache.save(header("small-before"), b"s" * 1000)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG instead of being killed
resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
errors = []
try:
    with open({probe!r}, "wb") as f:
        f.write(b"x" * ({limit} + 1))
except OSError as exc:
    errors.append(exc.errno)
big = [cache.save(header(f"big{{i}}"), os.urandom({big}), compress=False) for i in range(5)]
after = cache.save(header("small-after"), b"t" * 1000)
loads = [cache.load("jax", f"big{{i}}") is None for i in range(5)]
hit = cache.load("jax", "small-before")
# So small that the index's write-ahead log cannot grow: puts fail in SQLite, after the file.
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (48_000, hard))
index_phase = [cache.save(header(f"i{{i}}"), os.urandom(1000), compress=False) for i in range(30)]
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, hard))
recovered = [cache.save(header(f"r{{i}}"), os.urandom(1000), compress=False) for i in range(3)]
recovered_load = cache.load("jax", "r0") is not None
# The program goes on with its real work.
work = sum(i * i for i in range(200_000))
print(json.dumps(dict(
    before=before, big=big, after=after, loads=loads, hit=hit is not None and hit.payload == b"s" * 1000,
    stats=cache.stats.snapshot(), warnings=warnings, probe_errno=errors, work=work,
    index_phase=index_phase, recovered=recovered, recovered_load=recovered_load,
)))
"""


def test_file_size_limit_efbig_through_the_cache(tmp_path: Path) -> None:
    root = tmp_path / "c"
    limit = 4 * MB
    code = _FILE_SIZE_LIMITED.format(
        repo=str(REPO), root=str(root), limit=limit, big=8 * MB, probe=str(tmp_path / "probe")
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["probe_errno"] == [errno.EFBIG]  # the limit really produces EFBIG
    assert result["before"] is True
    assert result["big"] == [False] * 5
    assert result["after"] is True  # small writes still fit
    assert result["loads"] == [True] * 5  # failed writes are misses
    assert result["hit"] is True
    index_failures = result["index_phase"].count(False)
    assert index_failures > 0, result["index_phase"]  # SQLite itself hit the limit
    assert result["recovered"] == [True] * 3  # and the same store works once it is lifted
    assert result["recovered_load"] is True
    stats = result["stats"]
    assert stats["errors"] == 5 + index_failures
    assert stats["writes"] == 2 + result["index_phase"].count(True) + 3
    assert stats["misses"] == 5
    assert stats["hits"] == 2
    assert stats["corrupt"] == 0
    # Many failures of two kinds (EFBIG on the value, I/O errors in the index): one warning.
    assert len(result["warnings"]) == 1, result["warnings"]
    assert "File too large" in result["warnings"][0]
    assert result["work"] == sum(i * i for i in range(200_000))
    # Nothing partial is left behind, and the store is fine for a process without the limit.
    store = LocalStore(root)
    assert list(store.tmp_dir.iterdir()) == []
    keys = {i.key for i in store.scan()}
    assert {"small-after", "small-before", "r0", "r1", "r2"} <= keys
    assert not any(key.startswith("big") for key in keys)
    assert store.get("big0") is None


def test_entries_blocked_by_a_file_enotdir(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="compilecache")
    root = tmp_path / "c"
    cache = Cache(LocalStore(root))
    assert cache.save(_header("ok"), b"o" * 2000) is True
    (root / "entries").rename(root / "entries.moved")
    (root / "entries").write_bytes(b"not a directory")
    with pytest.raises(StoreUnavailable, match="Not a directory"):
        cache.store.put("direct", b"x")
    results = [cache.save(_header(f"k{i}"), os.urandom(3000)) for i in range(5)]
    assert results == [False] * 5
    stats = cache.stats.snapshot()
    assert stats["errors"] == 5 and stats["writes"] == 1
    assert len(_warnings(caplog)) == 1, _warnings(caplog)
    assert "Not a directory" in _warnings(caplog)[0]
    # Loads never raise: misses (reads fail too, so they are counted errors, warned once).
    assert all(cache.load("jax", key) is None for key in ("ok", "k0", "k1", "k2"))
    stats = cache.stats.snapshot()
    assert stats["misses"] == 4 and stats["hits"] == 0
    assert len(_warnings(caplog)) == 2, _warnings(caplog)
    # Once repaired, the same cache object works again.
    (root / "entries").unlink()
    (root / "entries.moved").rename(root / "entries")
    loaded = cache.load("jax", "ok")
    assert loaded is not None and loaded.payload == b"o" * 2000
    assert cache.save(_header("k0"), b"z" * 10) is True
    assert len(_warnings(caplog)) == 2


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_unwritable_directory(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="compilecache")
    root = tmp_path / "c"
    cache = Cache(LocalStore(root))
    assert cache.save(_header("ok"), b"o" * 100) is True
    modes = {p: p.stat().st_mode for p in (root / "tmp", root / "entries")}
    try:
        for p in modes:
            p.chmod(0o555)
        assert [cache.save(_header(f"k{i}"), b"v" * 100) for i in range(4)] == [False] * 4
        assert cache.stats.snapshot()["errors"] == 4
        assert len(_warnings(caplog)) == 1
        loaded = cache.load("jax", "ok")
        assert loaded is not None and loaded.payload == b"o" * 100
        assert cache.load("jax", "k0") is None
    finally:
        for p, mode in modes.items():
            p.chmod(mode)


@pytest.fixture
def tiny_tmpfs(tmp_path: Path) -> Any:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
            check=True,
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"cannot mount a tmpfs here: {exc}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False, capture_output=True, timeout=30)


def test_full_disk_tmpfs(tiny_tmpfs: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="compilecache")
    root = tiny_tmpfs / "c"
    cache = Cache(LocalStore(root))
    saved = []
    results = []
    for i in range(8):
        ok = cache.save(_header(f"k{i}"), os.urandom(250 * KB))
        results.append(ok)
        if ok:
            saved.append(f"k{i}")
    assert True in results and False in results, results
    failures = results.count(False)
    stats = cache.stats.snapshot()
    assert stats["errors"] == failures
    assert stats["writes"] == len(saved)
    assert len(_warnings(caplog)) == 1, _warnings(caplog)
    assert "No space left" in _warnings(caplog)[0] or "full" in _warnings(caplog)[0]
    # A failed write leaves nothing behind that would keep the disk full.
    assert list((root / "tmp").iterdir()) == []
    # Loads: the saved entries are hits, the failed ones clean misses.
    for i in range(8):
        found = cache.load("jax", f"k{i}")
        assert (found is not None) == (f"k{i}" in saved), f"k{i}"
    assert cache.stats.snapshot()["corrupt"] == 0
    # Freeing space lets the program go on caching.
    assert cache.store.delete(saved[0]) is True
    assert cache.save(_header("later"), os.urandom(100 * KB)) is True
    loaded = cache.load("jax", "later")
    assert loaded is not None
    assert len(_warnings(caplog)) == 1


def test_put_many_on_a_full_disk_indexes_what_it_published(tiny_tmpfs: Path) -> None:
    store = LocalStore(tiny_tmpfs / "c")
    assert store.total_size() == 0  # the index exists before the disk fills
    items = [(f"jax/k{i}", os.urandom(250 * KB), EntryMeta("jax", f"f{i}", 1.0)) for i in range(8)]
    with pytest.raises(StoreUnavailable, match=r"No space left|full"):
        store.put_many(items)
    written = [key for key, _, _ in items if store.stat(key) is not None]
    assert written and len(written) < len(items)
    assert written == [key for key, _, _ in items[: len(written)]]  # in order, then it stopped
    for key, value, _ in items:
        assert store.get(key) == (value if key in written else None)
    assert store.total_size() == len(written) * 250 * KB
    assert list((tiny_tmpfs / "c" / "tmp").iterdir()) == []  # nothing half-written left


def test_put_many_keeps_the_bound(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "c", max_size=10 * KB)
    store.put_many([(f"jax/k{i}", bytes(4 * KB), None) for i in range(5)])
    assert store.total_size() <= 10 * KB
    assert store.get("jax/k4") == bytes(4 * KB)  # the newest stay


def test_the_total_size_is_kept_by_the_index_itself(tmp_path: Path) -> None:
    """Any statement that changes a row keeps the total, and an index written by an earlier
    version (a hand-kept 'total_size', no triggers) gets its total counted once on open."""
    root = tmp_path / "c"
    store = LocalStore(root)
    store.put("a", b"a" * 100)
    store.put("b", b"b" * 50)
    store.put("a", b"a" * 70)  # a replaced value: the row is updated, not added
    assert store.total_size() == 120
    with store._transaction() as conn:  # statements no store method runs
        conn.execute("UPDATE entries SET size = size + 5 WHERE key = 'b'")
        conn.execute("DELETE FROM entries WHERE key = 'a'")
    assert store.total_size() == 55
    store.close()

    with sqlite3.connect(root / "index.sqlite") as conn:  # back to an earlier version's index
        for trigger in ("insert", "delete", "update"):
            conn.execute(f"DROP TRIGGER entries_total_{trigger}")
        conn.execute("DELETE FROM meta WHERE name = 'total_bytes'")
        conn.execute("INSERT INTO entries VALUES ('c', 1000, 0, 0, 0, '', '', 0)")
    reopened = LocalStore(root)
    assert reopened.total_size() == 1055
    reopened.put("d", b"d" * 5)
    assert reopened.total_size() == 1060


def test_history_rows_are_written_in_one_transaction_and_seen_after_the_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's miss records are buffered like access times: one write transaction for many,
    written by the flush (here: close); the process's own reads see them at once."""
    from compilecache.stores import local

    monkeypatch.setattr(local, "_TOUCH_INTERVAL", 3600.0)  # no timer flush during the test
    store = LocalStore(tmp_path / "s")
    other = LocalStore(tmp_path / "s")  # another process's view of the same directory
    for i in range(5):
        store.history.add("miss", {"i": i})
    store.history.add("run", {"r": 1})
    assert other.history.read("miss") == []  # not written yet: buffered in ``store``
    transactions: list[str] = []
    conn = store._db()
    conn.set_trace_callback(
        lambda sql: transactions.append(sql) if sql.startswith("BEGIN") else None
    )
    store.close()
    assert transactions == ["BEGIN IMMEDIATE"]
    assert [r["i"] for r in other.history.read("miss")] == [4, 3, 2, 1, 0]
    assert other.history.read("run") == [{"r": 1}]
    # The writer's own read flushes first.
    mine = LocalStore(tmp_path / "s")
    mine.history.add("miss", {"i": 5})
    assert [r["i"] for r in mine.history.read("miss", 2)] == [5, 4]
    mine.close()


# A process buffers a row, forks; the child adds its own and ends. A process of its own: the
# test process may have imported JAX, whose threads make a fork unsafe.
FORKING = r"""
import os, sys
from compilecache.stores.local import LocalStore
store = LocalStore(sys.argv[1])
store.history.add("miss", {"i": "parent"})
pid = os.fork()
if pid == 0:
    store.history.add("miss", {"i": "child"})
    store.close()
    os._exit(0)
assert os.waitpid(pid, 0)[1] == 0
store.close()
"""


def test_a_forked_child_does_not_write_the_history_its_parent_buffered(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", FORKING, str(tmp_path / "s")], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    records = LocalStore(tmp_path / "s").history.read("miss")
    assert [r["i"] for r in records] == ["parent", "child"]  # newest first: each once
