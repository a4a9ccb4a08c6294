"""Remote levels as fast as local disk (issue 13, part 1): lookup manifests and prefetch, and
write-behind for remote levels. The end-to-end tests run real JAX processes against a real Redis
behind a proxy that adds 25 ms per direction."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from compilecache import entry
from compilecache.config import Config
from compilecache.entry import EntryHeader
from compilecache.errors import StoreUnavailable
from compilecache.runtime import manifest
from compilecache.runtime.prefetch import Prefetcher
from compilecache.runtime.reader import Reader
from compilecache.signing import Signing
from compilecache.stats import level_counter
from compilecache.stores.base import EntryMeta, Store, StoreWrapper
from compilecache.stores.capabilities import Leases
from compilecache.stores.local import LocalStore
from compilecache.stores.memory import MemoryStore
from compilecache.stores.objectstore import ObjectStore
from compilecache.stores.obstorefs import ObstoreFS
from compilecache.stores.registry import open_url
from compilecache.stores.tiers import Tiered
from compilecache.stores.tiers.held import Held
from compilecache.stores.tiers.writebehind import WriteBehind
from tests import servers
from tests.conftest import TESTS, clean_env, cli_json, last_json, run_python
from tests.polling import wait_until
from tests.servers import MotoServer, RedisServer, delayed, namespace

redis_server = servers.redis_server
fresh_redis = servers.fresh_redis
moto_server = servers.moto_server
PROGRAM = str(TESTS / "jax_program.py")


class Lookups:
    """The tiers as a session's cache reads them: each lookup told to the prefetcher first."""

    def __init__(self, tiers: Tiered) -> None:
        self.tiers = tiers
        self.prefetcher = Prefetcher(tiers)

    def get(self, key: str) -> bytes | None:
        self.prefetcher.before_read(key)
        return self.tiers.get(key)


class Slow(StoreWrapper):
    """A remote level stand-in: every call takes ``delay`` seconds, and calls are recorded."""

    def __init__(self, inner: Store, delay: float = 0.2) -> None:
        super().__init__(inner)
        self.delay = delay
        self.calls: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.in_flight: dict[str, int] = {}  # calls under way, per key
        self.peak = 0  # the most calls under way at once
        self.overlapped: list[str] = []  # keys that had two calls under way at once
        self.leases = SlowLeases(self)

    def _note(self, what: str, key: str) -> None:
        with self.lock:
            self.calls.append((what, key))
            if self.in_flight.get(key):
                self.overlapped.append(key)
            self.in_flight[key] = self.in_flight.get(key, 0) + 1
            self.peak = max(self.peak, sum(self.in_flight.values()))
        time.sleep(self.delay)
        with self.lock:
            self.in_flight[key] -= 1

    def get(self, key: str) -> bytes | None:
        self._note("get", key)
        return self.inner.get(key)

    def get_with_meta(self, key: str) -> tuple[bytes, EntryMeta | None] | None:
        self._note("get", key)
        return self.inner.get_with_meta(key)

    def get_many(self, keys: Sequence[str]) -> dict[str, tuple[bytes, EntryMeta | None]]:
        self._note("get_many", ",".join(keys))
        return self.inner.get_many(keys)

    def put(self, key: str, value: bytes, meta: EntryMeta | None = None) -> None:
        self._note("put", key)
        self.inner.put(key, value, meta)


class SlowLeases(Leases):
    """Leases whose release is recorded by a :class:`Slow` store (and does nothing else)."""

    def __init__(self, slow: Slow) -> None:
        self.slow = slow

    def acquire(self, key: str, ttl_s: float) -> str | None:
        return None

    def renew(self, key: str, token: str, ttl_s: float) -> bool:
        return False

    def release(self, key: str, token: str) -> None:
        self.slow._note("release", key)


def mem() -> MemoryStore:
    return MemoryStore(f"memory://{uuid.uuid4().hex}")


# -- write-behind ----------------------------------------------------------------------------------


def test_a_remote_write_does_not_hold_up_the_compile() -> None:
    local, remote = mem(), Slow(mem(), delay=0.3)
    tiers = Tiered([local, remote], write_behind=[False, True])
    start = time.monotonic()
    tiers.put("k", b"value")
    assert time.monotonic() - start < 0.15  # the local write only
    assert local.get("k") == b"value"
    tiers.flush(5.0)
    assert remote.inner.get("k") == b"value"
    assert tiers.level_stats()[remote.url]["writes"] == 1


def test_a_release_follows_the_write_it_belongs_to() -> None:
    remote = Slow(mem(), delay=0.1)
    behind = WriteBehind(remote)
    behind.put("k", b"v", None)
    assert behind.release_lease("k", "token") is True  # queued behind the write
    assert behind.release_lease("other", "token") is False  # nothing pending: release now
    behind.drain(5.0)
    assert remote.calls == [("put", "k"), ("release", "k")]


def test_writes_run_side_by_side_but_one_at_a_time_per_key() -> None:
    remote = Slow(mem(), delay=0.1)
    behind = WriteBehind(remote, workers=4)
    for round_ in range(3):
        for i in range(6):
            behind.put(f"k{i}", f"{round_}".encode(), None)
            behind.release_lease(f"k{i}", f"t{round_}")
    assert behind.drain(20.0) == 0
    assert remote.peak > 1 and remote.overlapped == []  # in parallel, never twice on one key
    for i in range(6):  # and per key in the order queued: the last write stands
        assert remote.inner.get(f"k{i}") == b"2"
        ops = [what for what, key in remote.calls if key == f"k{i}"]
        assert ops == ["put", "release"] * 3


def test_a_full_queue_drops_and_counts_and_exit_drops_what_is_left() -> None:
    remote = Slow(mem(), delay=0.5)
    behind = WriteBehind(remote, max_items=2, workers=1)
    accepted = [behind.put(f"k{i}", b"v", None) for i in range(5)]
    assert accepted.count(False) >= 2 and behind.counters["dropped"] >= 2
    left = behind.drain(0.1)
    assert left >= 1 and behind.counters["dropped"] >= 2 + left


def test_a_write_found_by_a_claim_writes_a_new_entry_only() -> None:
    """A queued claim that finds the key's write queued makes it a write of a new entry only:
    an entry another process wrote meanwhile stands, is reported, and is not counted as ours."""
    remote = Slow(mem(), delay=0.05)
    remote.inner.put("theirs", b"their entry")
    done: list[str] = []
    behind = WriteBehind(remote, on_done=lambda key, error: done.append(key))
    found: dict[str, bool] = {}
    present: list[str] = []
    for key in ("theirs", "new"):

        def claim(level: Store, key: str = key) -> None:
            found[key] = behind.wait_for_put(key, 5.0, if_present=lambda: present.append(key))

        behind.call(key, claim)
        behind.put(key, f"mine: {key}".encode(), None)
    assert behind.drain(10.0) == 0
    assert found == {"theirs": True, "new": True}
    assert present == ["theirs"] and done == ["new"]
    assert remote.inner.get("theirs") == b"their entry"
    assert remote.inner.get("new") == b"mine: new"


def test_a_delete_is_not_undone_by_a_queued_write() -> None:
    local, remote = mem(), Slow(mem(), delay=0.2)
    tiers = Tiered([local, remote], write_behind=[False, True])
    tiers.put("a", b"first")  # runs now on the background thread
    tiers.put("k", b"value")  # queued behind it
    assert tiers.delete("k") is True
    tiers.flush(5.0)
    assert tiers.get("k") is None and remote.inner.get("k") is None


# -- prefetch --------------------------------------------------------------------------------------


def test_prefetch_fetches_in_batches_and_lookups_wait_instead_of_fetching_twice() -> None:
    local, remote = mem(), Slow(mem(), delay=0.3)
    for i in range(10):
        remote.inner.put(f"jax/k{i}", bytes([i]) * 100, EntryMeta("jax", f"f{i}", 2.0))
    local.put("jax/k0", bytes([0]) * 100)  # already local: not fetched
    tiers = Tiered([local, remote])
    reader = Lookups(tiers)
    reader.prefetcher.start([f"jax/k{i}" for i in range(10)] + ["jax/absent"])
    start = time.monotonic()
    assert reader.get("jax/k5") == bytes([5]) * 100  # arrives with its batch
    assert time.monotonic() - start < 1.0
    for i in range(10):
        assert reader.get(f"jax/k{i}") == bytes([i]) * 100
    assert reader.get("jax/absent") is None
    fetched = [c for c in remote.calls if c[0] == "get_many"]
    assert len(fetched) == 1 and "jax/k0" not in fetched[0][1]
    # Nothing was asked twice: the only single read is the absent key's lookup.
    assert [c for c in remote.calls if c[0] == "get"] == [("get", "jax/absent")]
    stats = tiers.level_stats()
    assert stats[remote.url]["prefetched"] == 9
    assert stats[local.url]["hits"] == 11 and stats[local.url]["backfills"] == 9


def _session_counters(tiers: Tiered, **totals: float) -> dict[str, float]:
    """What a session flushes: its totals and every level's counters by name."""
    return {
        **totals,
        **{
            level_counter(name, counter): value
            for name, counts in tiers.level_stats().items()
            for counter, value in counts.items()
        },
    }


def test_what_a_prefetch_served_reaches_the_shared_level_when_it_ends_and_only_once() -> None:
    local, remote = mem(), Slow(mem(), delay=0.05)
    for i in range(5):
        remote.inner.put(f"jax/k{i}", b"x" * 10, EntryMeta("jax", f"f{i}", 2.0))
    tiers = Tiered([local, remote])
    Prefetcher(tiers).start([f"jax/k{i}" for i in range(5)])
    wait_until(remote.inner.counters.read, interval=0.01)
    early = remote.inner.counters.read()  # sent by the batch's end, before any flush
    assert early["hits"] == 5 and early["compile_time_saved_s"] > 0
    for i in range(5):
        assert tiers.get(f"jax/k{i}") is not None  # local hits: nothing for the shared level
    assert tiers.get("jax/new") is None  # a miss the exit reports
    first = _session_counters(tiers, hits=5.0, misses=1.0)
    tiers.counters.add(first)  # the exit's flush
    after = remote.inner.counters.read()
    assert after["hits"] == 5 and after["misses"] == 1  # the hits once, the miss added
    assert after["compile_time_saved_s"] == early["compile_time_saved_s"]
    # A later flush of what changed since sends what is new, and only that.
    remote.inner.put("jax/late", b"y", EntryMeta("jax", "late", 1.0))
    assert tiers.get("jax/late") == b"y"  # served by the shared level after the prefetch
    second = _session_counters(tiers, hits=6.0, misses=1.0)
    tiers.counters.add({k: v - first.get(k, 0.0) for k, v in second.items()})
    assert remote.inner.counters.read()["hits"] == 6 and remote.inner.counters.read()["misses"] == 1
    assert local.counters.read()["hits"] == 6  # the host's own counters, as flushed


def test_a_failing_remote_makes_prefetch_a_no_op() -> None:
    class Down(StoreWrapper):
        def get_many(self, keys: Sequence[str]) -> dict[str, tuple[bytes, EntryMeta | None]]:
            raise StoreUnavailable("down")

    local = mem()
    reader = Lookups(Tiered([local, Down(mem())]))
    reader.prefetcher.start(["jax/a", "jax/b"])
    start = time.monotonic()
    assert reader.get("jax/a") is None
    assert time.monotonic() - start < 1.0


# -- read together: what a framework is about to look up, in one read ------------------------------


def test_a_remote_level_alone_reads_a_batch_once_and_counts_each_entry_at_its_lookup() -> None:
    remote = Slow(mem(), delay=0.05)
    for i in range(5):
        remote.inner.put(f"torch/fx/k{i}", bytes([i]) * 100, EntryMeta("torch", f"g{i}", 2.0))
    tiers = Tiered([remote], remote=[True])
    reader = Lookups(tiers)
    reader.prefetcher.read_together([f"torch/fx/k{i}" for i in range(5)] + ["torch/fx/absent"])
    assert [c[0] for c in remote.calls] == ["get_many"]
    assert tiers.level_stats()[remote.url]["hits"] == 0  # nothing looked up yet
    assert tiers.stat("torch/fx/k0") is not None  # answered from the batch
    for i in range(4):
        assert reader.get(f"torch/fx/k{i}") == bytes([i]) * 100
    assert [c[0] for c in remote.calls] == ["get_many"]  # no read of its own
    assert reader.get("torch/fx/absent") is None  # not held: read (and missed) as usual
    assert reader.get("torch/fx/k0") == bytes([0]) * 100  # served once: read again as usual
    stats = tiers.level_stats()[remote.url]
    # Four lookups answered from the batch, two reads of their own; k4 was never looked up.
    assert (stats["hits"], stats["prefetched"], stats["misses"]) == (5, 4, 1)
    assert stats["saved_s"] > 0
    assert [c for c in remote.calls if c[0] == "get"] == [
        ("get", "torch/fx/absent"),
        ("get", "torch/fx/k0"),
    ]


def test_a_held_entry_gives_way_to_a_write_and_to_time() -> None:
    remote = Slow(mem(), delay=0.0)
    remote.inner.put("torch/fx/a", b"old")
    remote.inner.put("torch/fx/b", b"old")
    tiers = Tiered([remote], remote=[True])
    tiers.hold(["torch/fx/a", "torch/fx/b"])
    tiers.put("torch/fx/a", b"new")  # this process wrote it since: the held copy is dropped
    assert tiers.get("torch/fx/a") == b"new"
    tiers.delete("torch/fx/b")
    assert tiers.get("torch/fx/b") is None and tiers.stat("torch/fx/b") is None
    held = Held(hold_s=0.05, max_bytes=10)
    assert held.add({"a": (b"12345", None), "b": (b"123456", None)}, 0.01) == 1  # room for a
    assert "a" in held and "b" not in held
    time.sleep(0.1)
    assert held.take("a") is None  # not looked up in time: dropped


def test_a_local_level_alone_reads_nothing_ahead_and_a_failing_remote_reads_as_usual() -> None:
    local = mem()
    local.put("torch/fx/a", b"x")
    tiers = Tiered([local])
    assert not tiers.holds and tiers.hold(["torch/fx/a"]) == 0

    class Down(StoreWrapper):
        def get_many(self, keys: Sequence[str]) -> dict[str, tuple[bytes, EntryMeta | None]]:
            raise StoreUnavailable("down")

    down = Down(mem())
    down.inner.put("torch/fx/a", b"x")
    tiers = Tiered([down], remote=[True])
    Prefetcher(tiers).read_together(["torch/fx/a"])
    assert tiers.get("torch/fx/a") == b"x"
    assert tiers.level_stats()[down.url]["prefetched"] == 0


def test_tiers_with_a_local_level_copy_what_is_read_together_into_it() -> None:
    local, remote = mem(), Slow(mem(), delay=0.05)
    for i in range(3):
        remote.inner.put(f"torch/fx/k{i}", b"v" * 10, EntryMeta("torch", f"g{i}", 1.0))
    tiers = Tiered([local, remote])
    reader = Lookups(tiers)
    reader.prefetcher.read_together([f"torch/fx/k{i}" for i in range(3)])
    for i in range(3):
        assert reader.get(f"torch/fx/k{i}") == b"v" * 10
    assert [c[0] for c in remote.calls] == ["get_many"]
    assert tiers.level_stats()[local.url]["backfills"] == 3


def test_the_manifest_lists_the_run_and_skips_rewriting_an_unchanged_one() -> None:
    store = Tiered([mem(), mem()])
    cfg = Config(url="x", job="train-llm")
    recorder = manifest.JobManifest(store, cfg, Reader())
    for key in ("jax/a", "jax/b", "jax/a", "jax/c"):
        recorder.prefetcher.before_read(key)  # what the session's cache does at each lookup
    recorder.known = []
    assert recorder.record()
    assert manifest.load(store, manifest.key_of("train-llm"), Reader()) == [
        "jax/a",
        "jax/b",
        "jax/c",
    ]
    again = manifest.JobManifest(store, cfg, Reader())
    for key in ("jax/a", "jax/c"):
        again.prefetcher.before_read(key)
    again.known = manifest.load(store, again.key, Reader())
    assert not again.record()  # nothing new
    other = Config(url="x", job="another-job")
    assert manifest.key_of(manifest.job_name(other)) != again.key


def test_a_list_read_from_the_remote_is_kept_on_this_host() -> None:
    remote = mem()
    seed = Tiered([mem(), remote])
    seed.put("jax/a", b"a", EntryMeta("jax"))
    name = manifest.key_of("job")
    assert manifest.save(seed, name, "job", ["jax/a"], None)
    fresh = Tiered([mem(), remote])
    cfg = Config(url="x", job="job")
    first = manifest.JobManifest(fresh, cfg, Reader())
    first.start()
    Lookups(fresh).get("jax/a")
    first.prefetcher.before_read("jax/a")
    assert not first.record()  # nothing new for the fleet...
    # ...but this host now holds the list with every entry it names: the next start is local.
    assert manifest.local_copy(fresh, name, Reader()) == ["jax/a"]


# -- packs: a job's entries in one object ---------------------------------------------------------


def _entry(key: str, name: str, payload: bytes, secret: bytes | None = None) -> bytes:
    return entry.encode(
        EntryHeader("jax", key, name, compile_time_s=2.0), payload, signing=Signing(secret=secret)
    )


def _seeded(keys: Sequence[str], secret: bytes | None = None) -> tuple[Tiered, str]:
    """A host that ran the job: its entries local and remote, the manifest and pack written."""
    remote = mem()
    seed = Tiered([mem(), remote])
    for key in keys:
        seed.put(key, _entry(key, f"name-{key}", key.encode() * 50, secret), EntryMeta("jax"))
    name = manifest.key_of("job")
    assert manifest.save(seed, name, "job", list(keys), Signing(secret=secret))
    return Tiered([mem(), Slow(remote, delay=0.05)]), name


def test_a_fresh_host_reads_the_pack_instead_of_each_entry() -> None:
    keys = [f"jax/k{i}" for i in range(12)]
    fresh, name = _seeded(keys)
    remote = fresh.levels[1]
    assert isinstance(remote, Slow)
    pack = (name + manifest.PACK_SUFFIX, manifest.unpacker(name + manifest.PACK_SUFFIX, Reader()))
    Prefetcher(fresh).start(keys, pack=pack)
    local = fresh.levels[0]
    for key in keys:
        found = local.get(key)
        assert (
            found is not None and entry.decode(found, expect_key=key).payload == key.encode() * 50
        )
        info = local.stat(key)
        assert info is not None and info.name == f"name-{key}"  # labelled from its own header
    assert [c for c in remote.calls if c[0] in ("get", "get_many")] == []  # one peek, no reads
    assert fresh.level_stats()[remote.url]["prefetched"] == 12


def test_a_damaged_or_foreign_pack_falls_back_to_reading_each_entry() -> None:
    keys = [f"jax/k{i}" for i in range(6)]
    fresh, name = _seeded(keys, secret=b"s1")
    pack_name = name + manifest.PACK_SUFFIX
    # Another key cannot verify the pack: every entry is read from the remote instead.
    reader = Lookups(fresh)
    reader.prefetcher.start(
        keys, pack=(pack_name, manifest.unpacker(pack_name, Reader(Signing(secret=b"other"))))
    )
    remote = fresh.levels[1]
    assert isinstance(remote, Slow)
    assert all(reader.get(k) for k in keys)  # each waits for its batch
    assert [c[0] for c in remote.calls] == ["get_many"]
    assert all(fresh.levels[0].get(k) for k in keys)


def test_a_pack_entry_under_another_key_is_left_out() -> None:
    keys = ["jax/a", "jax/b", "jax/c", "jax/d"]
    fresh, name = _seeded(keys)
    remote = fresh.levels[1]
    assert isinstance(remote, Slow)
    # A pack whose jax/b slot holds jax/a's entry (written wrongly, or tampered with unsigned).
    seed = Tiered([mem(), remote.inner])
    for key in keys:
        seed.levels[0].put(key, remote.inner.get("jax/a" if key == "jax/b" else key) or b"")
    assert manifest.save(seed, name, "job", keys, None)
    unpack = manifest.unpacker(name + manifest.PACK_SUFFIX, Reader())
    packed = unpack(remote.inner.get(name + manifest.PACK_SUFFIX) or b"")
    assert sorted(packed) == ["jax/a", "jax/c", "jax/d"]


def test_from_s3_a_fresh_host_sends_one_request_for_the_pack(
    tmp_path: Path, moto_server: MotoServer
) -> None:
    url = moto_server.url(moto_server.create_bucket(), "packs")
    keys = [f"jax/k{i}" for i in range(20)]
    seed = Tiered([LocalStore(tmp_path / "seed"), open_url(url)])
    for key in keys:
        seed.put(key, _entry(key, "f", key.encode() * 1000), EntryMeta("jax", "f", 2.0))
    name = manifest.key_of("job")
    assert manifest.save(seed, name, "job", keys, None)
    remote = open_url(url)
    assert isinstance(remote, ObjectStore) and isinstance(remote.fs, ObstoreFS)
    sent: list[tuple[str, str]] = []
    remote.fs.requests = sent
    fresh = Tiered([LocalStore(tmp_path / "fresh"), remote])
    pack_name = name + manifest.PACK_SUFFIX
    Prefetcher(fresh).start(keys, pack=(pack_name, manifest.unpacker(pack_name, Reader())))
    entries = [method for method, key in sent if "/stats/" not in key]
    assert entries == ["GET"]  # twenty entries, one request
    assert all(fresh.levels[0].get(k) for k in keys)
    # What the bucket served is added to its counters when the prefetch ends, not at exit.
    assert [method for method, key in sent if "/stats/" in key][:2] == ["GET", "PUT"]
    assert remote.counters.read()["hits"] == 20
    # The exit's flush (the session's counters, these hits among them) has nothing left to send.
    flushed = {
        level_counter(name, counter): value
        for name, counts in fresh.level_stats().items()
        for counter, value in counts.items()
    }
    assert flushed[level_counter(remote.url, "hits")] == 20
    fresh.counters.add({**flushed, "hits": 20.0})
    assert remote.counters.read()["hits"] == 20


# -- end to end: real JAX processes, real Redis 25 ms away -----------------------------------------


def _level_counters(local: Path, cwd: Path) -> dict[str, dict[str, float]]:
    levels: dict[str, dict[str, float]] = cli_json("stats", "--json", url=str(local), cwd=cwd)[
        "levels"
    ]
    return levels


def _run(local: Path, remote: str, **extra: str) -> tuple[dict[str, Any], float]:
    env = clean_env({"COMPILECACHE_URL": f"{local},{remote}", "COMPILECACHE_JOB": "t", **extra})
    start = time.monotonic()
    result: dict[str, Any] = last_json(run_python([PROGRAM, "before"], env).stdout)
    return result, time.monotonic() - start


@pytest.mark.slow
def test_a_fresh_host_finds_its_entries_local(tmp_path: Path, redis_server: RedisServer) -> None:
    ns = namespace()
    with delayed(redis_server.port, 0.025) as proxy:
        remote = f"redis://127.0.0.1:{proxy.port}/0/{ns}"
        cold, _ = _run(tmp_path / "a", remote)
        entries = cold["stats"]["writes"]
        assert entries >= 3

        warm, warm_s = _run(tmp_path / "b", remote)
        assert warm["stats"]["hits"] == entries and warm["stats"]["misses"] == 0
        assert warm["step"] == cold["step"] and warm["grad_sum"] == cold["grad_sum"]
        levels = _level_counters(tmp_path / "b", tmp_path)
        local, shared = levels[str(tmp_path / "b")], levels[remote.replace("/0/", "/0/", 1)]
        # Every entry came in the background; the lookups themselves found them local.
        assert shared["prefetched"] == entries and local["hits"] == entries
        assert shared.get("hits", 0) == entries and local.get("misses", 0) == 0

        plain, plain_s = _run(tmp_path / "c", remote, COMPILECACHE_PREFETCH="0")
        assert plain["stats"]["hits"] == entries
        levels = _level_counters(tmp_path / "c", tmp_path)
        # Without prefetch each lookup missed locally and asked the remote: a round trip each.
        assert levels[str(tmp_path / "c")]["misses"] == entries
        assert not levels[remote].get("prefetched")
        print(f"fresh host warm: prefetch {warm_s:.2f}s, no prefetch {plain_s:.2f}s")


@pytest.mark.slow
def test_after_a_fresh_host_start_the_next_starts_never_ask_the_remote(
    tmp_path: Path, fresh_redis: RedisServer
) -> None:
    remote = f"{fresh_redis.url}/{namespace()}?timeout=1s"
    cold, _ = _run(tmp_path / "seed", remote)
    entries = cold["stats"]["writes"]
    assert entries >= 3
    fresh, _ = _run(tmp_path / "host", remote)  # a fresh host: the list comes from Redis
    assert fresh["stats"]["hits"] == entries
    fresh_redis.kill()
    env = clean_env({"COMPILECACHE_URL": f"{tmp_path / 'host'},{remote}", "COMPILECACHE_JOB": "t"})
    again = run_python([PROGRAM, "before"], env)
    stats = last_json(again.stdout)["stats"]
    assert stats["hits"] == entries and stats["misses"] == 0
    assert stats["errors"] == 0, again.stderr
    assert "failed" not in again.stderr and "skipping" not in again.stderr, again.stderr


def test_a_write_the_full_queue_refuses_is_counted_on_the_level() -> None:
    local, remote = mem(), Slow(mem(), delay=0.3)
    tiers = Tiered([local, remote], write_behind=[False, True])
    behind = tiers._behind[1]
    assert behind is not None
    # One worker and room for one: with more workers each write may leave the queue at once.
    behind.max_items, behind.workers = 1, 1
    for i in range(3):
        tiers.put(f"k{i}", b"value")  # the first runs, the second waits, the third is refused
    assert all(local.get(f"k{i}") == b"value" for i in range(3))
    assert tiers.level_stats()[remote.url]["dropped"] >= 1
    tiers.flush(5.0)


def test_a_lookup_while_the_list_is_read_waits_for_the_prefetch() -> None:
    local, remote = mem(), Slow(mem(), delay=0.1)
    remote.inner.put("jax/k", b"value", EntryMeta("jax", "f", 1.0))
    reader = Lookups(Tiered([local, remote]))
    reader.prefetcher.expect()  # the session does this before starting to read the manifest
    threading.Timer(0.2, reader.prefetcher.start, args=(["jax/k"],)).start()
    assert reader.get("jax/k") == b"value"
    assert ("get", "jax/k") not in remote.calls  # fetched once, by the prefetch
    reader = Lookups(reader.tiers)
    reader.prefetcher.expect()
    reader.prefetcher.start([])  # an empty or unreadable list releases the waiting lookups
    start = time.monotonic()
    assert reader.get("jax/other") is None
    assert time.monotonic() - start < 1.0


def test_a_store_of_one_level_reads_its_manifest_only_when_a_framework_asks(
    tmp_path: Path,
) -> None:
    """One level: nothing to fetch, so nothing is read at start; the job's list is read (on the
    asking thread) and kept only for a framework that prepares its entries ahead."""
    cfg = Config(url="x", job="one-level")
    store = Tiered([LocalStore(tmp_path / "store")])
    try:
        quiet = manifest.JobManifest(store, cfg, Reader())
        quiet.start()
        assert quiet._thread is None  # no thread, no read, at start
        quiet.prefetcher.before_read("jax/a")
        assert quiet.record() is False  # nobody asked for the list: none is written
        assert manifest.load(store, manifest.key_of("one-level"), Reader()) == []

        asking = manifest.JobManifest(store, cfg, Reader())
        asking.start()
        assert asking.prefetcher.job_keys(0.1) == []
        for key in ("jax/a", "jax/b"):
            asking.prefetcher.before_read(key)
        assert asking.record() is True
        assert not store.levels[0].peek(manifest.key_of("one-level") + manifest.PACK_SUFFIX)

        again = manifest.JobManifest(store, cfg, Reader())
        again.start()
        assert again.prefetcher.job_keys(0.1) == ["jax/a", "jax/b"]
        again.prefetcher.before_read("jax/b")
        assert again.record() is False  # nothing new: the manifest stands
    finally:
        store.close()
