"""Tiers: ``COMPILECACHE_URL=local,redis://...``: order, backfill, write policies, read-only
levels, per-level stats, and a second host that starts warm from the shared level."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import compilecache
from compilecache import config as config_mod
from compilecache.errors import ReadOnlyStore
from compilecache.session import open_store, plan_writes
from compilecache.stores.base import EntryMeta, Store
from compilecache.stores.guarded import Guarded
from compilecache.stores.local import LocalStore
from compilecache.stores.memory import MemoryStore
from compilecache.stores.readonly import ReadOnly
from compilecache.stores.redis import RedisStore
from compilecache.stores.registry import from_urls
from compilecache.stores.tiers import Tiered
from tests import servers
from tests.servers import RedisServer, namespace
from tests.stores.conformance import StoreConformance

# The real servers this module uses (pytest fixtures from tests/servers.py).
redis_server = servers.redis_server


def mem() -> MemoryStore:
    return MemoryStore(f"memory://{uuid.uuid4().hex}")


class TestTieredMemory(StoreConformance):
    REOPENS_FROM_URL = False

    CAPABILITIES = frozenset({"counters", "history"})

    @pytest.fixture
    def store(self) -> Store:
        return Tiered([mem(), mem()])


class TestTieredLocalRedis(StoreConformance):
    REOPENS_FROM_URL = False

    @pytest.fixture
    def store(self, tmp_path: Path, redis_server: RedisServer) -> Iterator[Store]:
        s = from_urls([str(tmp_path / "local"), f"{redis_server.url}/{namespace()}"])
        yield s
        s.close()


def test_urls_open_guarded_remote_levels(tmp_path: Path, redis_server: RedisServer) -> None:
    store = compilecache.open_store(f"{tmp_path / 'l'},{redis_server.url}/{namespace()}")
    assert isinstance(store, Tiered)
    local, remote = store.levels
    assert isinstance(local, LocalStore)  # the local disk is not wrapped: nothing to guard
    assert isinstance(remote, Guarded) and isinstance(remote.inner, RedisStore)
    store.close()


def test_a_remote_level_alone_reads_ahead_in_one_batch(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """One Redis level reads what is about to be looked up in one batch and counts each entry
    at its lookup; a local directory alone, or tiers, read nothing into memory."""
    store = compilecache.open_store(f"{redis_server.url}/{namespace()}")
    assert store.holds
    for i in range(3):
        store.put(f"torch/fx/k{i}", bytes([i]) * 2000, EntryMeta("torch", f"g{i}", 1.0))
    assert store.hold([f"torch/fx/k{i}" for i in range(3)] + ["torch/fx/absent"]) == 3
    for i in range(3):  # evicted from the server since: what is held is what was read
        assert store.levels[0].delete(f"torch/fx/k{i}")
    assert [store.get(f"torch/fx/k{i}") for i in range(3)] == [bytes([i]) * 2000 for i in range(3)]
    assert store.get("torch/fx/k0") is None  # handed out once; then read as usual
    (stats,) = store.level_stats().values()
    assert (stats["hits"], stats["prefetched"], stats["misses"]) == (3, 3, 1)
    store.close()
    assert not compilecache.open_store(str(tmp_path / "local")).holds
    assert not compilecache.open_store(f"{tmp_path / 'l'},{redis_server.url}/{namespace()}").holds


def test_backfill_copies_hits_into_faster_levels() -> None:
    fast, slow = mem(), mem()
    tiers = Tiered([fast, slow])
    slow.put("k", b"value", EntryMeta("jax", "jit_k", 4.0))
    assert tiers.get("k") == b"value"
    assert fast.get("k") == b"value"
    info = fast.stat("k")
    assert info is not None and info.name == "jit_k" and info.compile_time_s == 4.0
    assert tiers.get("k") == b"value"
    stats = tiers.level_stats()
    assert stats[fast.url]["hits"] == 1 and stats[fast.url]["misses"] == 1
    assert stats[fast.url]["backfills"] == 1
    assert stats[slow.url]["hits"] == 1 and stats[slow.url]["misses"] == 0


def test_records_about_compiles_are_moved_but_not_counted_by_the_levels() -> None:
    """A JAX trace (a record that names an executable) is written, read and backfilled like any
    entry, but a level counts it among neither its hits, misses, writes, prefetches nor
    backfills: a
    level's counts, and the fleet's on a shared level, are of compiles, as the host's are."""
    fast, slow = mem(), mem()
    tiers = Tiered([fast, slow])
    record = "jax/trace/abc"
    assert tiers.get(record) is None  # a cold lookup of it: no miss at either level
    tiers.put(record, b"trace", EntryMeta("jax", "f", 0.0))
    tiers.put("jax/jit_f-1", b"executable", EntryMeta("jax", "jit_f", 2.0))
    assert slow.get(record) == b"trace"
    for depth, level in enumerate((fast, slow)):
        counts = tiers.level_stats()[level.url]
        assert counts["writes"] == 1 and counts["misses"] == 0, (depth, counts)
    fresh = mem()
    warm = Tiered([fresh, slow])
    assert warm.get(record) == b"trace" and fresh.get(record) == b"trace"  # backfilled
    warm.fetched(1, [("jax/jit_f-1", b"executable", EntryMeta("jax", "jit_f", 2.0))], 0.0)
    warm.fetched(1, [(record, b"trace", EntryMeta("jax", "f", 0.0))], 0.0)
    shared = warm.level_stats()[slow.url]
    assert shared["hits"] == 1 and shared["prefetched"] == 1, shared
    assert warm.level_stats()[fresh.url]["backfills"] == 1


def test_writes_go_everywhere_or_local_only() -> None:
    a, b, c = mem(), mem(), mem()
    Tiered([a, b, c]).put("k", b"v")
    assert a.get("k") == b.get("k") == c.get("k") == b"v"
    a, b = mem(), mem()
    local_only = Tiered([a, b], writes="local")
    local_only.put("k", b"v")
    assert a.get("k") == b"v" and b.get("k") is None
    assert local_only.level_stats()[a.url]["writes"] == 1


def test_read_only_level_is_read_and_backfilled_from_but_never_written() -> None:
    fast, shared = mem(), mem()
    shared.put("team", b"compiled by CI")
    tiers = Tiered([fast, ReadOnly(shared)])
    tiers.put("mine", b"compiled here")
    assert shared.get("mine") is None
    assert tiers.get("team") == b"compiled by CI" and fast.get("team") == b"compiled by CI"
    assert tiers.delete("team") is True  # the local copy; the shared one stays
    assert shared.get("team") == b"compiled by CI"


def test_readonly_option_on_one_level(tmp_path: Path, redis_server: RedisServer) -> None:
    ns = namespace()
    writer = from_urls([f"{redis_server.url}/{ns}"])
    writer.put("team", b"shared")
    laptop = from_urls([str(tmp_path / "laptop"), f"{redis_server.url}/{ns}?readonly=1"])
    assert laptop.get("team") == b"shared"
    laptop.put("mine", b"local only")
    assert writer.get("mine") is None
    assert laptop.level_stats()[laptop.levels[1].url]["writable"] == 0
    writer.close()
    laptop.close()


def test_read_only_session_never_writes_nor_backfills(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    ns = namespace()
    from_urls([f"{redis_server.url}/{ns}"]).put("k", b"v")
    cfg = config_mod.load({}, url=f"{tmp_path / 'l'},{redis_server.url}/{ns}", read_only=True)
    store = open_store(cfg=cfg, plan=plan_writes(cfg))
    assert store.get("k") == b"v"
    with pytest.raises(ReadOnlyStore):
        store.put("k2", b"v")
    store.close()
    assert LocalStore(tmp_path / "l").get("k") is None  # no backfill either


def test_a_failing_level_does_not_hide_the_others() -> None:
    class Broken(MemoryStore):
        def get(self, key: str) -> bytes | None:
            raise OSError("disk on fire")

        def put(self, key: str, value: bytes, meta: EntryMeta | None = None) -> None:
            raise OSError("disk on fire")

    broken, good = Broken(f"memory://{uuid.uuid4().hex}"), mem()
    tiers = Tiered([broken, good])
    tiers.put("k", b"v")  # one level took it: a success
    assert good.get("k") == b"v"
    assert tiers.get("k") == b"v"
    with pytest.raises(OSError):
        tiers.get("absent")  # nothing found and a level failed: the error is reported
    stats = tiers.level_stats()
    # put, get of "k", its backfill, get of "absent"
    assert stats[broken.url]["errors"] == 4 and stats[broken.url]["write_errors"] == 1
    assert stats[good.url]["hits"] == 1 and stats[good.url]["misses"] == 1


def test_second_host_starts_warm_from_the_shared_level(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """Host A compiles and writes through; host B (a fresh local disk) hits the shared level,
    backfills its disk, and later needs no network at all. In a multi-process JAX job this is
    how the hosts other than process 0 (which alone writes) fill their local levels."""
    shared = f"{redis_server.url}/{namespace()}"
    host_a = from_urls([str(tmp_path / "a"), shared])
    for i in range(5):
        host_a.put(f"jax/f{i}", f"executable {i}".encode() * 1000, EntryMeta("jax", f"f{i}", 2.0))
    host_a.close()

    host_b = from_urls([str(tmp_path / "b"), shared])
    assert all(host_b.get(f"jax/f{i}") is not None for i in range(5))
    stats = host_b.level_stats()
    local_url, shared_url = (level.url for level in host_b.levels)
    assert stats[local_url]["misses"] == 5 and stats[local_url]["backfills"] == 5
    assert stats[shared_url]["hits"] == 5
    host_b.close()

    alone = LocalStore(tmp_path / "b")
    assert all(alone.get(f"jax/f{i}") == f"executable {i}".encode() * 1000 for i in range(5))
    info = alone.stat("jax/f3")
    assert info is not None and info.name == "f3"


def test_persistent_stats_go_to_the_local_level(tmp_path: Path) -> None:
    local = LocalStore(tmp_path / "l")
    tiers = Tiered([local, mem()])
    tiers.counters.add({"hits": 3})
    assert local.counters.read() == {"hits": 3.0} == tiers.counters.read()
    tiers.counters.zero()
    assert tiers.counters.read() == {}
