"""The Cache layer over real stores: counters, integrity, read-only, and the never-raise policy."""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compilecache import entry
from compilecache.entry import EntryHeader
from compilecache.errors import StoreUnavailable
from compilecache.runtime.cache import Cache
from compilecache.signing import Signing
from compilecache.stores.base import EntryInfo, EntryMeta, Store
from compilecache.stores.local import LocalStore
from compilecache.stores.memory import MemoryStore
from compilecache.stores.registry import Adapted


@pytest.fixture(params=["memory", "local"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    s: Store
    if request.param == "memory":
        s = MemoryStore(f"memory://{uuid.uuid4().hex}")
    else:
        s = LocalStore(tmp_path / "cache")
    yield s
    s.close()


@pytest.fixture
def warnings(caplog: pytest.LogCaptureFixture) -> Any:
    caplog.set_level(logging.DEBUG, logger="compilecache")

    def collect() -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if r.name == "compilecache" and r.levelno >= logging.WARNING
        ]

    return collect


def _header(key: str, compile_time: float = 5.0, framework: str = "jax") -> EntryHeader:
    return EntryHeader(framework=framework, key=key, name=f"jit_{key}", compile_time_s=compile_time)


def _damage(store: Store, key: str, offset: int) -> None:
    """Flip one byte of the stored value, on disk for the local store."""
    if isinstance(store, LocalStore):
        path = store.path_of(key)
        raw = bytearray(path.read_bytes())
        raw[offset] ^= 0x55
        path.write_bytes(bytes(raw))
    else:
        value = store.get(key)
        assert value is not None
        damaged = bytearray(value)
        damaged[offset] ^= 0x55
        store.put(key, bytes(damaged))


# -- counters --------------------------------------------------------------------------------


def test_miss_write_hit_counters(store: Store) -> None:
    cache = Cache(store)
    payload = os.urandom(3000)
    assert cache.load("jax", "k1") is None
    assert cache.save(_header("k1", 5.0), payload) is True
    found = cache.load("jax", "k1")
    assert found is not None
    assert found.payload == payload
    assert found.header.key == "k1"
    assert cache.load("jax", "k1") is not None
    stats = cache.stats.snapshot()
    assert stats["misses"] == 1
    assert stats["writes"] == 1
    assert stats["hits"] == 2
    assert stats["errors"] == 0 and stats["corrupt"] == 0 and stats["skipped"] == 0
    assert stats["jax.hits"] == 2 and stats["jax.misses"] == 1 and stats["jax.writes"] == 1
    assert stats["compile_time_s"] == 5.0
    stored = store.get("k1")
    assert stored is not None
    assert stats["bytes_written"] == len(stored)
    assert stats["bytes_read"] == 2 * len(stored)
    info = store.stat("k1")
    assert info is not None
    assert info.framework == "jax" and info.name == "jit_k1" and info.compile_time_s == 5.0


def test_compile_time_saved_accounting(store: Store) -> None:
    cache = Cache(store)
    assert cache.save(_header("slow", 7.5), b"x" * 10_000)
    assert cache.save(_header("fast", 0.25), b"y" * 100)
    for _ in range(3):
        assert cache.load("jax", "slow") is not None
    assert cache.load("jax", "fast") is not None
    assert cache.load("jax", "absent") is None  # a miss saves nothing
    stats = cache.stats.snapshot()
    assert stats["load_time_s"] > 0
    # Each hit saves its recorded compile time, minus the time the load itself took.
    assert stats["compile_time_saved_s"] + stats["load_time_s"] == pytest.approx(3 * 7.5 + 0.25)
    assert stats["compile_time_saved_s"] < 3 * 7.5 + 0.25


def test_frameworks_are_counted_apart(store: Store) -> None:
    cache = Cache(store)
    assert cache.save(_header("j", framework="jax"), b"j")
    assert cache.save(_header("t", framework="torch"), b"t")
    assert cache.load("torch", "t") is not None
    assert cache.load("torch", "missing") is None
    stats = cache.stats.snapshot()
    assert stats["torch.hits"] == 1 and stats["torch.misses"] == 1 and stats["torch.writes"] == 1
    assert stats["jax.writes"] == 1 and stats.get("jax.hits", 0) == 0


# -- integrity -------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["payload", "checksum", "header"])
def test_corrupt_entry_is_a_counted_miss_and_removed(
    store: Store, warnings: Any, where: str
) -> None:
    cache = Cache(store)
    payload = os.urandom(5000)
    assert cache.save(_header("victim"), payload, compress=False)
    assert cache.save(_header("bystander"), b"b" * 100)
    stored = store.get("victim")
    assert stored is not None
    frame = (
        len(store.path_of("victim").read_bytes()) - len(stored)
        if isinstance(store, LocalStore)
        else 0
    )
    offset = {"payload": len(stored) - 100, "checksum": len(stored) - 1, "header": 40}[where]
    _damage(store, "victim", frame + offset)
    assert cache.load("jax", "victim") is None
    stats = cache.stats.snapshot()
    assert stats["corrupt"] == 1
    assert stats["misses"] == 1
    assert stats["hits"] == 0
    # Removed from the store: from the index and, for the local store, from the disk.
    assert store.get("victim") is None
    assert store.stat("victim") is None
    if isinstance(store, LocalStore):
        assert not store.path_of("victim").exists()
    assert len(warnings()) == 1
    assert "victim" in warnings()[0]
    # More corrupt entries: counted, not warned again; other entries are untouched.
    assert cache.save(_header("second"), b"s" * 2000, compress=False)
    _damage(store, "second", frame + 30 if isinstance(store, LocalStore) else 30)
    assert cache.load("jax", "second") is None
    assert cache.stats.snapshot()["corrupt"] == 2
    assert len(warnings()) == 1
    found = cache.load("jax", "bystander")
    assert found is not None and found.payload == b"b" * 100
    # The key can be written again afterwards.
    assert cache.save(_header("victim"), payload)
    loaded = cache.load("jax", "victim")
    assert loaded is not None and loaded.payload == payload


def test_truncated_file_on_disk_is_corrupt(tmp_path: Path, warnings: Any) -> None:
    store = LocalStore(tmp_path / "c")
    cache = Cache(store)
    assert cache.save(_header("k"), os.urandom(4000))
    path = store.path_of("k")
    for cut in (len(path.read_bytes()) // 2, 10, 0):
        assert cache.save(_header("k"), os.urandom(4000)) is True
        path.write_bytes(path.read_bytes()[:cut])
        assert cache.load("jax", "k") is None
        assert not path.exists()
        assert store.stat("k") is None
    stats = cache.stats.snapshot()
    assert stats["corrupt"] == 3 and stats["misses"] == 3 and stats["hits"] == 0
    assert len(warnings()) == 1


def test_wrong_key_entry_is_a_miss(store: Store) -> None:
    cache = Cache(store)
    assert cache.save(_header("A"), b"payload of A" * 100)
    raw = store.get("A")
    assert raw is not None
    store.put("B", raw)  # entry A's bytes under key B
    assert cache.load("jax", "B") is None
    assert cache.stats.snapshot()["hits"] == 0
    assert cache.stats.snapshot()["misses"] == 1
    assert store.get("B") is None  # never served again
    found = cache.load("jax", "A")
    assert found is not None and found.payload == b"payload of A" * 100


def test_entry_of_another_framework_is_a_miss(store: Store) -> None:
    cache = Cache(store)
    assert cache.save(_header("k", framework="jax"), b"jax executable")
    assert cache.load("torch", "k") is None
    assert cache.stats.snapshot()["hits"] == 0


def test_signed_entries(store: Store) -> None:
    signer = Cache(store, signing=Signing(secret=b"team key"))
    assert signer.save(_header("signed"), b"s" * 1000)
    assert Cache(store).save(_header("unsigned"), b"u" * 1000)
    raw = store.get("signed")
    assert raw is not None
    assert entry.decode(raw).signed is True
    found = Cache(store, signing=Signing(secret=b"team key")).load("jax", "signed")
    assert found is not None and found.payload == b"s" * 1000
    # With a key, unsigned entries are refused; with another key, so are signed ones.
    strict = Cache(store, signing=Signing(secret=b"team key"))
    assert strict.load("jax", "unsigned") is None
    other = Cache(store, signing=Signing(secret=b"other key"))
    assert other.load("jax", "signed") is None
    # Counted as foreign, not corrupt, and left in place (issue 11; they were corrupt before).
    assert strict.stats.snapshot()["foreign"] == 1
    assert other.stats.snapshot()["foreign"] == 1
    assert strict.stats.snapshot()["corrupt"] == 0 == other.stats.snapshot()["corrupt"]
    assert store.get("signed") == raw and store.get("unsigned") is not None


# -- entries signed with another key ----------------------------------------------------------


def _raw(store: Store, key: str) -> bytes | None:
    """The stored bytes, read without going through the cache."""
    return store.peek(key)


def test_a_foreign_entry_is_a_counted_miss_left_in_place_and_not_replaced(
    store: Store, warnings: Any
) -> None:
    owner = Cache(store, signing=Signing(secret=b"S1"))
    for key in ("a", "b"):
        assert owner.save(_header(key), key.encode() * 1000)
    before = {key: _raw(store, key) for key in ("a", "b")}
    stranger = Cache(store, signing=Signing(secret=b"S2"))
    assert stranger.load("jax", "a") is None
    assert stranger.load("jax", "b") is None
    assert stranger.load("jax", "a") is None  # every lookup is counted
    stats = stranger.stats.snapshot()
    assert stats["foreign"] == 3 and stats["jax.foreign"] == 3 and stats["misses"] == 3
    assert stats["hits"] == 0 and stats["corrupt"] == 0 and stats["errors"] == 0
    # One warning, naming the likely cause; later ones are not repeated.
    assert len(warnings()) == 1, warnings()
    assert "COMPILECACHE_SECRET" in warnings()[0] and "left in place" in warnings()[0]
    # The stranger's compile is not written over the owner's entry.
    assert stranger.save(_header("a"), b"stranger's executable") is False
    assert "another key" in stranger.skip_reason(5.0, "a")
    assert stranger.stats.snapshot()["writes"] == 0
    assert {key: _raw(store, key) for key in ("a", "b")} == before
    # Other keys are written as usual, and the owner still hits its entries.
    assert stranger.save(_header("c"), b"c" * 100)
    for key in ("a", "b"):
        found = owner.load("jax", key)
        assert found is not None and found.payload == key.encode() * 1000
    assert owner.stats.snapshot()["foreign"] == 0


def test_an_uncounted_read_counts_no_miss_whatever_it_finds(store: Store) -> None:
    """``load_uncounted`` (a framework's record about a compile, such as a JAX trace) is neither
    a hit nor a miss: nothing there, an entry signed with another key and a damaged entry are
    counted as foreign and corrupt, never as misses."""
    owner = Cache(store, signing=Signing(secret=b"S1"))
    assert owner.save(_header("jax/trace/a"), b"a" * 1000, counted=False)
    assert owner.save(_header("jax/trace/b"), b"b" * 1000, counted=False, compress=False)
    assert owner.stats.snapshot()["writes"] == 0
    stranger = Cache(store, signing=Signing(secret=b"S2"))
    assert stranger.load_uncounted("jax", "jax/trace/none") is None
    assert stranger.load_uncounted("jax", "jax/trace/a") is None
    stored = store.get("jax/trace/b")
    assert stored is not None
    frame = (
        len(store.path_of("jax/trace/b").read_bytes()) - len(stored)
        if isinstance(store, LocalStore)
        else 0
    )
    _damage(store, "jax/trace/b", frame + len(stored) - 100)
    assert owner.load_uncounted("jax", "jax/trace/b") is None
    strange, own = stranger.stats.snapshot(), owner.stats.snapshot()
    assert strange["foreign"] == 1 and own["corrupt"] == 1, (strange, own)
    assert strange["misses"] == own["misses"] == 0 and strange["hits"] == own["hits"] == 0


def test_an_unsigned_entry_is_foreign_to_a_client_with_a_secret(store: Store) -> None:
    assert Cache(store).save(_header("k"), b"u" * 1000)
    raw = _raw(store, "k")
    strict = Cache(store, signing=Signing(secret=b"key"))
    assert strict.load("jax", "k") is None
    assert strict.stats.snapshot()["foreign"] == 1
    assert strict.save(_header("k"), b"v" * 1000) is False
    assert _raw(store, "k") == raw
    found = Cache(store).load("jax", "k")  # still served to the clients without a secret
    assert found is not None and found.payload == b"u" * 1000


def test_a_damaged_foreign_entry_is_corrupt_and_removed(store: Store, warnings: Any) -> None:
    """Damage the checksum catches is corruption, whoever signed the entry."""
    assert Cache(store, signing=Signing(secret=b"S1")).save(
        _header("k"), os.urandom(3000), compress=False
    )
    stored = store.get("k")
    assert stored is not None
    frame = (
        len(store.path_of("k").read_bytes()) - len(stored) if isinstance(store, LocalStore) else 0
    )
    _damage(store, "k", frame + len(stored) - 100)
    stranger = Cache(store, signing=Signing(secret=b"S2"))
    assert stranger.load("jax", "k") is None
    stats = stranger.stats.snapshot()
    assert stats["corrupt"] == 1 and stats["foreign"] == 0
    assert store.stat("k") is None
    assert stranger.save(_header("k"), b"x" * 100)  # and it may be replaced


# -- skipped writes --------------------------------------------------------------------------


def test_read_only_writes_nothing(store: Store) -> None:
    assert Cache(store).save(_header("before"), b"b" * 100)
    cache = Cache(store, read_only=True)
    assert cache.save(_header("k"), b"v" * 1000) is False
    assert cache.save(_header("k2", 100.0), b"v" * 1000) is False
    stats = cache.stats.snapshot()
    assert stats["skipped"] == 2 and stats["writes"] == 0 and stats["errors"] == 0
    assert [info.key for info in store.scan()] == ["before"]
    assert store.get("k") is None
    found = cache.load("jax", "before")  # reading still works
    assert found is not None and found.payload == b"b" * 100


def test_read_only_leaves_corrupt_entries_in_place(store: Store) -> None:
    assert Cache(store).save(_header("bad"), os.urandom(2000), compress=False)
    stored = store.get("bad")
    assert stored is not None
    frame = (
        len(store.path_of("bad").read_bytes()) - len(stored) if isinstance(store, LocalStore) else 0
    )
    _damage(store, "bad", frame + len(stored) - 50)
    cache = Cache(store, read_only=True)
    assert cache.load("jax", "bad") is None
    assert cache.stats.snapshot()["corrupt"] == 1
    assert store.stat("bad") is not None  # a read-only cache never deletes


def test_min_compile_time_skips_fast_compiles(store: Store) -> None:
    cache = Cache(store, min_compile_time=1.0)
    assert cache.save(_header("fast", 0.5), b"f" * 100) is False
    assert cache.save(_header("slow", 2.0), b"s" * 100) is True
    assert cache.save(_header("edge", 1.0), b"e" * 100) is True
    stats = cache.stats.snapshot()
    assert stats["skipped"] == 1 and stats["writes"] == 2
    assert store.get("fast") is None
    assert store.get("slow") is not None


# -- a broken store --------------------------------------------------------------------------


class ExplodingStore:
    """Every method raises, with a different error type each time."""

    url = "exploding://"

    def __init__(self) -> None:
        self.calls = 0
        self.errors: list[type[Exception]] = [StoreUnavailable, OSError, RuntimeError]

    def _boom(self) -> None:
        self.calls += 1
        raise self.errors[self.calls % len(self.errors)](f"boom {self.calls}")

    def get(self, key: str) -> bytes | None:
        self._boom()
        return None

    def put(self, key: str, value: bytes, meta: EntryMeta | None = None) -> None:
        self._boom()

    def delete(self, key: str) -> bool:
        self._boom()
        return False

    def stat(self, key: str) -> EntryInfo | None:
        self._boom()
        return None

    def scan(self, prefix: str = "") -> Iterator[EntryInfo]:
        self._boom()
        return iter([])

    def close(self) -> None:
        self._boom()


def test_a_store_that_always_raises_never_breaks_the_program(warnings: Any) -> None:
    store = ExplodingStore()
    cache = Cache(Adapted(store))  # a store of the plain protocol, as the registry opens it
    for i in range(6):
        assert cache.load("jax", f"k{i}") is None
        assert cache.save(_header(f"k{i}"), b"v" * 100) is False
    stats = cache.stats.snapshot()
    assert stats["errors"] == 12
    assert stats["misses"] == 6
    assert stats["writes"] == 0 and stats["hits"] == 0
    assert store.calls == 12
    # One warning per kind of failure, not one per call.
    assert len(warnings()) == 6, warnings()  # 3 error types x (get, put)
    cache.close()  # closing a broken store is not an error either
    cache.close()


class JunkStore(MemoryStore):
    """A store that hands back something that is not bytes."""

    def get(self, key: str) -> Any:
        return 12345


def test_a_store_returning_junk_is_a_miss() -> None:
    cache = Cache(JunkStore(f"memory://{uuid.uuid4().hex}"))
    assert cache.load("jax", "k") is None
    stats = cache.stats.snapshot()
    assert stats["misses"] == 1 and stats["hits"] == 0


def test_a_corrupt_entry_that_cannot_be_removed(warnings: Any) -> None:
    class Undeletable(MemoryStore):
        def delete(self, key: str) -> bool:
            raise StoreUnavailable("cannot delete")

    store = Undeletable(f"memory://{uuid.uuid4().hex}")
    store.put("k", b"not an entry at all")
    cache = Cache(store)
    assert cache.load("jax", "k") is None
    assert cache.stats.snapshot()["corrupt"] == 1
    assert len(warnings()) == 1


# -- the memory store's bound ----------------------------------------------------------------


def test_memory_store_lru_bound() -> None:
    store = MemoryStore(f"memory://{uuid.uuid4().hex}", max_size=5000)
    for i in range(5):
        store.put(f"k{i}", bytes([i]) * 1000)
    assert store.get("k0") is not None  # most recently used now
    store.put("k5", b"5" * 1000)
    assert store.get("k1") is None
    assert all(store.get(f"k{i}") is not None for i in (0, 2, 3, 4, 5))
    assert store.total_size() == 5000
    store.put("k2", b"2" * 10)  # overwrite: the total follows the new size
    assert store.total_size() == 4010
    assert store.delete("k2") is True
    assert store.total_size() == 4000
    assert sum(info.size for info in store.scan()) == 4000


def test_memory_store_put_does_not_slow_down_with_entries() -> None:
    store = MemoryStore(f"memory://{uuid.uuid4().hex}", max_size=30_000 * 10)
    for i in range(30_000):
        store.put(f"k{i}", b"0123456789")
    start = time.perf_counter()
    for i in range(1000):  # each put evicts one entry
        store.put(f"new{i}", b"0123456789")
    elapsed = time.perf_counter() - start
    # Sorting 30 000 entries per put took seconds; constant-time eviction takes milliseconds.
    assert elapsed < 2.0, elapsed
    assert store.total_size() == 30_000 * 10
    assert store.get("k999") is None and store.get("k1000") is not None
