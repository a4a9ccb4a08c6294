"""``?shared=1``: the index-free store for NFS/Lustre mounts, hammered by several processes that
share no index, no lock and no memory."""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compilecache import entry
from compilecache.cli import main
from compilecache.entry import EntryHeader
from compilecache.errors import CorruptEntry
from compilecache.stores import leasefile, sharedfs
from compilecache.stores.base import EntryMeta, Store
from compilecache.stores.local import LocalStore
from compilecache.stores.registry import open_url
from compilecache.stores.sharedfs import SharedFSStore
from tests.servers import run_race
from tests.stores.conformance import StoreConformance


class TestSharedFSStore(StoreConformance):
    CAPABILITIES = frozenset({"counters", "leases"})

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[Store]:
        s = SharedFSStore(tmp_path / "cache")
        yield s
        s.close()


def test_url_dispatch(tmp_path: Path) -> None:
    store = open_url(f"{tmp_path / 'c'}?shared=1&max_size=5MB&evict_interval=30s")
    assert isinstance(store, SharedFSStore)
    assert store.max_size == 5_000_000 and store.evict_interval == 30.0
    assert isinstance(open_url(f"file://{tmp_path / 'c'}?shared=1"), SharedFSStore)
    assert not (tmp_path / "c" / "index.sqlite").exists()  # no SQLite on a shared mount


def test_same_files_as_the_local_store(tmp_path: Path) -> None:
    """A directory written in shared mode opens as a plain local store, and back."""
    shared = SharedFSStore(tmp_path / "c")
    shared.put("jax/a", b"payload", EntryMeta("jax", "jit_a", 1.0))
    local = LocalStore(tmp_path / "c")
    assert local.get("jax/a") == b"payload"
    assert local.rebuild_index() == 1
    info = local.stat("jax/a")
    assert info is not None and info.name == "jit_a"
    local.put("jax/b", b"from local")
    local.close()
    assert shared.get("jax/b") == b"from local"


def test_processes_without_a_shared_index(tmp_path: Path) -> None:
    """Writers and readers in separate processes race on one large key: only whole values."""
    url = f"{tmp_path / 'c'}?shared=1&fsync=0"
    results = run_race(url, "jax/hot", writers=3, readers=2, seconds=2.0, size=2_000_000)
    writers, readers = results[:3], results[3:]
    assert all(w["writes"] > 0 and w["errors"] == 0 for w in writers)
    assert all(r["bad"] == 0 and r["errors"] == 0 for r in readers)
    assert sum(r["whole"] for r in readers) > 10
    assert list((tmp_path / "c" / "tmp").iterdir()) == []  # no temporary file left behind
    final = SharedFSStore(tmp_path / "c").stat("jax/hot")
    assert final is not None and final.size >= 2_000_000


def test_eviction_bounds_the_size_and_keeps_recent_entries(tmp_path: Path) -> None:
    store = SharedFSStore(tmp_path / "c", max_size=100_000, evict_interval=0, touch_interval=0)
    store.put("keep", b"k" * 10_000)
    for i in range(30):
        store.put(f"e{i}", bytes([i]) * 10_000)
        time.sleep(0.002)
        assert store.get("keep") is not None  # read often: most recently used
    assert store.total_size() <= 100_000 + 10_200
    assert store.get("keep") == b"k" * 10_000
    assert store.get("e0") is None
    assert store.get("e29") is not None


def test_evict_lock_is_exclusive_across_stores(tmp_path: Path) -> None:
    a = SharedFSStore(tmp_path / "c")
    b = SharedFSStore(tmp_path / "c")
    with a._evict_lock() as held_a, b._evict_lock() as held_b:
        assert held_a and not held_b
    with b._evict_lock() as held_b:
        assert held_b
    assert not (tmp_path / "c" / "evict.lock").exists()


def test_eviction_is_amortised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Between passes a put lists nothing: O(1) in the number of entries."""
    store = SharedFSStore(tmp_path / "c", max_size=10**9, evict_interval=3600)
    passes = 0
    real = store.evict

    def counting(target: int) -> int:
        nonlocal passes
        passes += 1
        return real(target)

    monkeypatch.setattr(store, "evict", counting)
    for i in range(50):
        store.put(f"k{i}", b"v" * 100)
    assert passes == 1  # the first put found no stamp; the next 49 saw a fresh one
    other = SharedFSStore(tmp_path / "c", max_size=10**9, evict_interval=3600)
    monkeypatch.setattr(other, "evict", counting)
    other.put("x", b"v")
    assert passes == 1  # another process (or host) sees the shared stamp too


def stale_once(monkeypatch: pytest.MonkeyPatch, module: Any, suffix: str) -> list[str]:
    """Make ``module``'s first ``open`` of a ``*suffix`` file fail with ESTALE, as NFS does after
    a file was replaced on the server; the returned list records each such open."""
    calls: list[str] = []
    real_open = open

    def flaky_open(path: Any, *args: Any, **kwargs: Any) -> Any:
        if str(path).endswith(suffix):
            calls.append(suffix)
            if len(calls) == 1:
                raise OSError(errno.ESTALE, "Stale file handle")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(module, "open", flaky_open, raising=False)
    return calls


def test_stale_handle_is_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SharedFSStore(tmp_path / "c")
    store.put("k", b"value")
    calls = stale_once(monkeypatch, sharedfs, ".cce")
    assert store.get("k") == b"value"
    assert calls == [".cce", ".cce"]


def test_truncated_file_is_corrupt_and_removed(tmp_path: Path) -> None:
    store = SharedFSStore(tmp_path / "c")
    store.put("k", b"x" * 5000)
    path = store.path_of("k")
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 100)
    with pytest.raises(CorruptEntry):
        store.get("k")
    assert not path.exists()


def test_stats_from_several_processes_add_up(tmp_path: Path) -> None:
    a = SharedFSStore(tmp_path / "c")
    b = SharedFSStore(tmp_path / "c")
    b._ident = "otherhost-123"
    a.counters.add({"hits": 2})
    a.counters.add({"hits": 1, "misses": 1})
    b.counters.add({"hits": 10})
    assert a.counters.read() == {"hits": 13.0, "misses": 1.0}
    b.counters.zero()
    assert a.counters.read() == {}


# -- leases (their shared behaviour is tested on every store in test_singleflight.py) ------------


def test_lease_files_are_invisible_to_scan_prune_verify_and_clear(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"{tmp_path / 'c'}?shared=1"
    store = SharedFSStore(tmp_path / "c")
    for i in range(3):
        header = EntryHeader(framework="jax", key=f"jax/e{i}", name=f"jit_e{i}")
        store.put(header.key, entry.encode(header, b"x" * 1000))
    token = store.leases.acquire("jax/compiling", 60)
    assert token
    assert {i.key for i in store.scan()} == {"jax/e0", "jax/e1", "jax/e2"}
    assert main(["verify", "--url", url]) == 0
    assert "3 entries checked, 0 corrupt" in capsys.readouterr().out
    assert main(["prune", "--url", url, "--max-size", "1"]) == 0
    assert main(["clear", "--url", url, "--yes"]) == 0
    assert list(store.scan()) == [] and store.total_size() == 0
    store.evict(0)  # the eviction pass, with its housekeeping of stale files
    # The lease of the compile in progress is untouched by all of it.
    assert store.leases.acquire("jax/compiling", 60) is None
    assert store.leases.renew("jax/compiling", token, 60)
    store.leases.release("jax/compiling", token)
    assert list((tmp_path / "c" / "leases").iterdir()) == []


def test_a_lease_file_being_created_is_held_for_a_grace_period(tmp_path: Path) -> None:
    """A creator between its O_EXCL create and its write leaves an empty file: held, unless
    its mtime is older than the grace period (the creator died there)."""
    store = SharedFSStore(tmp_path / "c")
    path = store._leases.path_of("jax/k")
    path.parent.mkdir()
    path.touch()
    assert store.leases.acquire("jax/k", 30) is None
    old = time.time() - leasefile.LEASE_CREATE_GRACE - 1
    os.utime(path, (old, old))
    token = store.leases.acquire("jax/k", 30)
    assert token and leasefile.read_lease(path)[0] == token


def test_a_creator_that_writes_late_keeps_its_lease(tmp_path: Path) -> None:
    """A breaker that set aside an empty file whose creator then wrote it puts it back."""
    store = SharedFSStore(tmp_path / "c")
    path = store._leases.path_of("jax/k")
    path.parent.mkdir()
    with open(path, "wb") as creator:  # created, not yet written, judged dead
        old = time.time() - leasefile.LEASE_CREATE_GRACE - 1
        os.utime(path, (old, old))
        real_rename = os.rename

        def rename_then_creator_writes(src: Any, dst: Any) -> None:
            real_rename(src, dst)
            creator.write(leasefile._lease_body("creator", 30))
            creator.flush()

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(os, "rename", rename_then_creator_writes)
            assert store.leases.acquire("jax/k", 30) is None
    assert leasefile.read_lease(path)[0] == "creator"


def test_clock_skew_between_hosts_only_shifts_expiry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Expiry is the holder's wall clock, judged by the reader's: a few seconds of skew are
    absorbed by the TTL; a skew larger than the TTL makes a reader break a live lease early,
    which costs a duplicate compile and nothing else."""
    holder = SharedFSStore(tmp_path / "c")
    reader = SharedFSStore(tmp_path / "c")
    now = time.time()
    monkeypatch.setattr(time, "time", lambda: now - 5)  # the holder's clock is behind
    token = holder.leases.acquire("jax/k", 30)
    assert token
    monkeypatch.setattr(time, "time", lambda: now + 5)  # the reader's is ahead
    assert reader.leases.acquire("jax/k", 30) is None
    monkeypatch.setattr(time, "time", lambda: now + 40)  # more than the TTL ahead
    assert reader.leases.acquire("jax/k", 30)
    monkeypatch.setattr(time, "time", lambda: now)
    assert not holder.leases.renew("jax/k", token, 30)  # the holder learns it lost the lease


def test_stale_lease_leftovers_are_cleaned_by_the_eviction_pass(tmp_path: Path) -> None:
    """A process killed between setting a lease aside and removing it, or while holding a lease
    nobody asked for again, leaves files that the eviction pass removes an hour later."""
    store = SharedFSStore(tmp_path / "c")
    leases = tmp_path / "c" / "leases"
    assert store.leases.acquire("jax/dead", 0.01)
    assert store.leases.acquire("jax/live", 60)
    aside = leases / "0123.lease.abc.stale"
    aside.write_bytes(b"{}")
    recent_aside = leases / "4567.lease.def.release"
    recent_aside.write_bytes(b"{}")
    old = time.time() - 2 * 3600
    os.utime(aside, (old, old))
    dead = store._leases.path_of("jax/dead")
    dead.write_bytes(leasefile._lease_body("dead", -2 * 3600))
    store.evict(10**9)
    assert sorted(p.name for p in leases.iterdir()) == sorted(
        [recent_aside.name, store._leases.path_of("jax/live").name]
    )


def test_a_stale_handle_on_a_lease_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SharedFSStore(tmp_path / "c")
    token = store.leases.acquire("jax/k", 30)
    assert token
    calls = stale_once(monkeypatch, leasefile, ".lease")
    assert store.leases.renew("jax/k", token, 30)
    assert calls == [".lease", ".lease"]
