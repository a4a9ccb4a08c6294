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

from compilecache.errors import CorruptEntry
from compilecache.stores import sharedfs
from compilecache.stores.base import EntryMeta, Store, open_url
from compilecache.stores.local import LocalStore
from compilecache.stores.sharedfs import SharedFSStore
from tests.servers import run_race
from tests.stores.conformance import StoreConformance


class TestSharedFSStore(StoreConformance):
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


def test_stale_handle_is_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SharedFSStore(tmp_path / "c")
    store.put("k", b"value")
    calls = 0
    real_open = open

    def flaky_open(path: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        if str(path).endswith(".cce"):
            calls += 1
            if calls == 1:
                raise OSError(errno.ESTALE, "Stale file handle")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(sharedfs, "open", flaky_open, raising=False)
    assert store.get("k") == b"value"
    assert calls == 2


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
    a.add_stats({"hits": 2})
    a.add_stats({"hits": 1, "misses": 1})
    b.add_stats({"hits": 10})
    assert a.read_stats() == {"hits": 13.0, "misses": 1.0}
    b.zero_stats()
    assert a.read_stats() == {}
