"""Single-flight compiles: leases in every store that has them, the waiting logic of the cache
layer, and real JAX processes starting the same cold workload at once (local store, shared
filesystem store and Redis), including a compiling process killed mid-compile."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from compilecache.entry import EntryHeader
from compilecache.errors import ConfigError
from compilecache.runtime import manifest
from compilecache.runtime.cache import Cache
from compilecache.runtime.singleflight import SingleFlight
from compilecache.signing import Signing
from compilecache.stats import Stats
from compilecache.stores.base import Store
from compilecache.stores.guarded import Guarded
from compilecache.stores.leasefile import LeaseFiles
from compilecache.stores.local import LocalStore
from compilecache.stores.objectstore import ObjectStore
from compilecache.stores.readonly import ReadOnly
from compilecache.stores.registry import open_url
from compilecache.stores.sharedfs import SharedFSStore
from compilecache.stores.tiers import Tiered
from tests import servers
from tests.conftest import clean_env, is_trace
from tests.polling import wait_until
from tests.servers import RedisServer, namespace

redis_server = servers.redis_server
moto_server = servers.moto_server
azurite_server = servers.azurite_server
# For lease_store (conftest): its Redis on both versions.
redis62_server = servers.redis_server
redis7_server = servers.redis7_server


# -- leases in each store --------------------------------------------------------------------------


def test_one_holder_at_a_time(lease_store: Store) -> None:
    first = lease_store.leases.acquire("jax/jit_f-1", 30)
    assert first
    assert lease_store.leases.acquire("jax/jit_f-1", 30) is None
    # Another key is independent.
    other = lease_store.leases.acquire("jax/jit_g-2", 30)
    assert other and other != first
    # Releasing with the wrong token leaves the holder's lease alone.
    lease_store.leases.release("jax/jit_f-1", "not-the-token")
    assert lease_store.leases.acquire("jax/jit_f-1", 30) is None
    lease_store.leases.release("jax/jit_f-1", first)
    again = lease_store.leases.acquire("jax/jit_f-1", 30)
    assert again and again != first
    # A lost lease cannot be renewed.
    assert not lease_store.leases.renew("jax/jit_f-1", first, 30)
    assert lease_store.leases.renew("jax/jit_f-1", again, 30)


def test_an_expired_lease_is_taken_over_and_renewal_keeps_it(lease_store: Store) -> None:
    # Object store requests are slow on a loaded machine: give them a longer lease.
    ttl = 4.0 if isinstance(lease_store, ObjectStore) else 1.5
    start = time.monotonic()
    dead = lease_store.leases.acquire("k", ttl)  # a holder that dies: it never renews
    kept = lease_store.leases.acquire("kept", ttl)
    assert dead and kept
    assert lease_store.leases.renew("kept", kept, 3 * ttl)
    still_held = lease_store.leases.acquire("k", 5)
    assert time.monotonic() - start < ttl, "too slow to test expiry"
    assert still_held is None
    time.sleep(max(0.0, start + ttl + 0.2 - time.monotonic()))
    taker = lease_store.leases.acquire("k", 5)
    assert taker and taker != dead
    assert lease_store.leases.acquire("kept", 5) is None  # renewed past its first expiry
    # The dead holder's late release does not remove the new holder's lease.
    lease_store.leases.release("k", dead)
    assert lease_store.leases.acquire("k", 5) is None


def test_racing_acquirers_get_one_lease(lease_store: Store) -> None:
    won: list[str] = []
    start = threading.Barrier(8)

    def race() -> None:
        start.wait()
        token = lease_store.leases.acquire("contended", 30)
        if token:
            won.append(token)

    threads = [threading.Thread(target=race) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1


@pytest.mark.parametrize("query", ["", "?shared=1"], ids=["local", "shared"])
def test_lease_files_are_not_entries(tmp_path: Path, query: str) -> None:
    store: Any = open_url(f"{tmp_path / 's'}{query}")
    assert store.leases.acquire("jax/x", 30)
    assert list(store.scan()) == [] and store.get("jax/x") is None
    assert store.total_size() == 0 and store.evict(0) == 0
    assert len(list((tmp_path / "s" / "leases").iterdir())) == 1
    store.close()


def test_wrappers_delegate_leases(tmp_path: Path, redis_server: RedisServer) -> None:
    local = LocalStore(tmp_path / "local")
    remote = open_url(f"{redis_server.url}/{namespace()}")
    assert remote.leases is not None
    tiered = Tiered([local, Guarded(remote)])
    token = tiered.leases.acquire("jax/k", 30)
    assert token
    # The lease lives on the shared (last written) level, so other hosts see it...
    assert remote.leases.acquire("jax/k", 30) is None
    # ... and not on this host's disk.
    assert local.leases.acquire("jax/k", 30)
    tiered.leases.release("jax/k", token)
    assert remote.leases.acquire("jax/k", 30)
    # With writes to the local level only, the local level coordinates.
    assert Tiered([local, Guarded(remote)], writes="local").lease_depth == 0
    # Read-only stores and stores without leases cannot lead anything.
    assert ReadOnly(local).leases is None
    assert open_url("memory://no-leases").leases is None
    assert Tiered([ReadOnly(local)]).leases is None
    local.close()
    remote.close()


def test_wrappers_delegate_leases_to_a_shared_mount(tmp_path: Path) -> None:
    local = LocalStore(tmp_path / "local")
    shared = open_url(f"{tmp_path / 'mount'}?shared=1")
    assert shared.leases is not None and Guarded(shared).leases is not None
    tiered = Tiered([local, Guarded(shared)])
    assert tiered.leases is not None and tiered.lease_depth == 1
    token = tiered.leases.acquire("jax/k", 30)
    assert token
    # On the mount, where every host sees it; not on this host's disk.
    assert shared.leases.acquire("jax/k", 30) is None
    assert local.leases.acquire("jax/k", 30)
    assert tiered.leases.renew("jax/k", token, 30)
    tiered.leases.release("jax/k", token)
    assert shared.leases.acquire("jax/k", 30)
    assert not ReadOnly(shared).leases is not None
    local.close()


# -- the waiting logic, with threads standing in for processes ------------------------------------


def header(key: str, seconds: float = 2.0) -> EntryHeader:
    return EntryHeader(framework="jax", key=key, name="jit_f", compile_time_s=seconds)


DiskStore = Callable[[Path], Any]


@pytest.fixture(params=["local", "shared"])
def disk_store(request: pytest.FixtureRequest) -> DiskStore:
    """Opens a directory as the local store or as the shared-filesystem store."""
    return LocalStore if request.param == "local" else SharedFSStore


def two_caches(
    root: Path, lease_ttl: float = 30.0, opener: DiskStore = LocalStore
) -> tuple[Cache, Cache]:
    """Two caches on one directory, as two processes would have."""
    return (
        Cache(opener(root), lease_ttl=lease_ttl),
        Cache(opener(root), lease_ttl=lease_ttl),
    )


def waiting(cache: Cache) -> threading.Event:
    """Set once ``cache`` sleeps between two polls of a key another process holds: it waits."""
    flight = cache._flight
    assert flight is not None
    event = threading.Event()
    real = flight._sleep

    def sleep(seconds: float) -> None:
        event.set()
        real(seconds)

    flight._sleep = sleep
    return event


def test_a_waiter_gets_the_leaders_entry_as_a_hit(tmp_path: Path, disk_store: DiskStore) -> None:
    leader, waiter = two_caches(tmp_path, opener=disk_store)
    assert leader.load_or_lead("jax", "jax/k") is None  # leads
    got: list[Any] = []
    is_waiting = waiting(waiter)
    t = threading.Thread(target=lambda: got.append(waiter.load_or_lead("jax", "jax/k")))
    t.start()
    assert is_waiting.wait(5)
    assert t.is_alive()  # waiting, not compiling
    assert leader.save(header("jax/k"), b"executable")
    leader.finish_lead("jax/k")
    t.join(10)
    assert got and got[0] is not None and got[0].payload == b"executable"
    stats = waiter.stats.snapshot()
    assert stats["hits"] == 1 and stats["misses"] == 0 and stats["waited"] == 1
    assert 0 < stats["wait_time_s"] < 5
    assert leader.stats.snapshot()["misses"] == 1


def test_a_leader_that_does_not_write_lets_the_waiters_compile_at_once(tmp_path: Path) -> None:
    """A compile that ends without an entry (host callbacks, a torch bypass) must not make the
    waiters compile one after another, each holding the lease: they all go ahead at once."""
    leader, waiter = two_caches(tmp_path)
    assert leader.load_or_lead("jax", "jax/k") is None
    got: list[Any] = []
    is_waiting = waiting(waiter)
    t = threading.Thread(target=lambda: got.append(waiter.load_or_lead("jax", "jax/k")))
    t.start()
    assert is_waiting.wait(5)
    leader.finish_thread_leads()  # its compile ended without a save (e.g. host callbacks)
    t.join(10)
    assert got == [None]  # the waiter compiles itself...
    stats = waiter.stats.snapshot()
    assert stats["misses"] == 1 and stats["unwritten_skips"] == 1
    assert stats.get("lease_takeovers", 0) == 0
    flight = waiter._flight
    assert flight is not None and flight.held() == []  # ...without a lease others would wait on
    # A later process does not lead either while the mark lasts...
    late = Cache(LocalStore(tmp_path))
    assert late.load_or_lead("jax", "jax/k") is None
    assert late._flight is not None and late._flight.held() == []
    # ...but a key whose leader wrote its entry leaves no mark.
    assert leader.load_or_lead("jax", "jax/w") is None
    leader.save(EntryHeader("jax", "jax/w", "w", compile_time_s=1.0), b"x")
    leader.finish_lead("jax/w")
    assert late.store.leases.acquire("jax/w#unwritten", 1)  # no mark


def test_a_deferred_lead_is_kept_until_its_write_or_its_grace(tmp_path: Path) -> None:
    """torch writes an AOTAutograd entry at the first backward, after its compile returned."""
    leader, _ = two_caches(tmp_path, lease_ttl=0.6)
    flight = leader._flight
    assert flight is not None
    assert leader.load_or_lead("torch", "torch/aot/a") is None
    assert leader.load_or_lead("torch", "torch/aot/b") is None
    assert leader.load_or_lead("torch", "torch/fx/f") is None
    leader.finish_thread_leads(lambda key: key.startswith("torch/aot/"), 0.5)
    assert flight.held() == ["torch/aot/a", "torch/aot/b"]  # the FX lead ended
    leader.save(EntryHeader("torch", "torch/aot/a", "a", compile_time_s=1.0), b"x")
    leader.finish_lead("torch/aot/a")  # its write came
    assert flight.held() == ["torch/aot/b"]
    assert wait_until(lambda: not flight.held())
    assert flight.held() == []  # the heartbeat ended it at its grace: no backward came
    other = LocalStore(tmp_path)
    assert other.leases.acquire("torch/aot/b#unwritten", 1) is None  # marked unwritten
    assert other.leases.acquire("torch/aot/a#unwritten", 1)  # written: not marked


def test_a_write_handed_to_the_background_keeps_the_lease_until_written(tmp_path: Path) -> None:
    """JAX's put hands the entry's write to the background thread (save_later): the end of the
    compile (finish_thread_leads) must not end the lease, or a waiter would find neither the
    lease nor the entry and compile again; the write's end releases it, and the waiter hits."""
    leader, waiter = two_caches(tmp_path)
    flight = leader._flight
    assert flight is not None
    assert leader.load_or_lead("jax", "jax/k") is None
    gate = threading.Event()

    def write() -> None:
        gate.wait()
        leader.save(EntryHeader("jax", "jax/k", "k", compile_time_s=1.0), b"executable")

    leader.save_later("jax/k", write)
    leader.finish_thread_leads()  # compile_or_get_cached returned: the write is still queued
    assert flight.held() == ["jax/k"]
    got: list[Any] = []
    is_waiting = waiting(waiter)
    t = threading.Thread(target=lambda: got.append(waiter.load_or_lead("jax", "jax/k")))
    t.start()
    assert is_waiting.wait(5)
    assert not got  # the waiter waits for the handed write...
    gate.set()
    t.join(10)
    assert got and got[0] is not None and got[0].payload == b"executable"  # ...and hits
    assert leader.wait_writes() and flight.held() == []
    assert waiter.stats.snapshot()["hits"] == 1
    assert not any((tmp_path / "leases").iterdir())


def test_an_awaited_write_is_waited_for_by_a_lookup_of_this_process(tmp_path: Path) -> None:
    """torch keeps nothing of what it handed (unlike JAX's adapter): a lookup of the key in
    the same process waits for the handed write and hits, where it would miss and compile
    again; a read inside the write itself (on the background thread) does not wait for itself."""
    leader, _ = two_caches(tmp_path)
    assert leader.load_or_lead("torch", "torch/fx/k") is None
    gate = threading.Event()
    inside: list[Any] = []

    def write() -> None:
        gate.wait()
        inside.append(leader.probe("torch", "torch/fx/k"))  # on the background thread
        leader.save(EntryHeader("torch", "torch/fx/k", "k", compile_time_s=1.0), b"graph")

    leader.save_later("torch/fx/k", write, awaited=True)
    threading.Timer(0.3, gate.set).start()
    start = time.monotonic()
    found = leader.load_or_lead("torch", "torch/fx/k")
    assert found is not None and found.payload == b"graph"
    assert time.monotonic() - start >= 0.25  # it waited for the write
    assert inside == [None]  # the write's own read went on: nothing stored yet
    assert leader.wait_writes() and leader._writing == {}
    assert leader.stats.snapshot()["hits"] == 1


def test_a_forked_child_does_not_wait_for_its_parents_writes(tmp_path: Path) -> None:
    """A child forked while a write is queued (a DataLoader's workers, a forking launcher) has
    no background thread to write it: its lookup of that key reads the store at once."""
    leader, _ = two_caches(tmp_path)
    gate = threading.Event()
    leader.save_later("torch/fx/k", lambda: gate.wait(10), awaited=True)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a lookup, timed, then out without the parent's exit hooks
        start = time.monotonic()
        found = leader.probe("torch", "torch/fx/k")
        os.write(write, f"{found is None} {time.monotonic() - start:.3f}".encode())
        os._exit(0)
    os.waitpid(pid, 0)
    gate.set()
    missed, seconds = os.read(read, 100).decode().split()
    assert missed == "True" and float(seconds) < 2


def test_a_handed_write_that_fails_marks_the_key_unwritten(tmp_path: Path) -> None:
    leader, _ = two_caches(tmp_path)
    assert leader.load_or_lead("jax", "jax/k") is None
    leader.save_later("jax/k", lambda: None)  # nothing saved (a write that failed)
    assert leader.wait_writes()
    assert leader._flight is not None and leader._flight.held() == []
    assert LocalStore(tmp_path).leases.acquire("jax/k#unwritten", 1) is None  # marked


def test_a_dead_leaders_lease_expires(
    tmp_path: Path, disk_store: DiskStore, caplog: pytest.LogCaptureFixture
) -> None:
    store = disk_store(tmp_path)
    assert store.leases.acquire("jax/k", 0.8)  # a process (here: alive) that stalled
    waiter = Cache(disk_store(tmp_path), lease_ttl=5)
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="compilecache"):
        assert waiter.load_or_lead("jax", "jax/k") is None
    assert 0.6 < time.monotonic() - start < 5
    stats = waiter.stats.snapshot()
    assert stats["lease_takeovers"] == 1 and 0.6 < stats["wait_time_s"] < 5
    # The wait is said: a slow start has its reason in the output.
    (said,) = [r.getMessage() for r in caplog.records if "waited" in r.getMessage()]
    assert "jax/k" in said and "without writing it" in said
    waiter.close()
    assert store.leases.acquire("jax/k", 1)  # close released it


def test_the_heartbeat_keeps_a_long_compile_leased(tmp_path: Path, disk_store: DiskStore) -> None:
    leader, _ = two_caches(tmp_path, lease_ttl=0.6, opener=disk_store)
    assert leader.load_or_lead("jax", "jax/k") is None
    time.sleep(1.5)  # more than twice the TTL: only renewals keep it
    other = disk_store(tmp_path)
    assert other.leases.acquire("jax/k", 1) is None
    leader.finish_lead("jax/k")
    assert other.leases.acquire("jax/k", 1)


def test_waiting_is_bounded(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = LocalStore(tmp_path)
    assert store.leases.acquire("jax/a", 60) and store.leases.acquire("jax/b", 60)
    waiter = Cache(LocalStore(tmp_path), wait_timeout=0.4)
    with caplog.at_level(logging.DEBUG, logger="compilecache"):
        start = time.monotonic()
        assert waiter.load_or_lead("jax", "jax/a") is None
        assert waiter.load_or_lead("jax", "jax/b") is None
        assert time.monotonic() - start < 3
    stats = waiter.stats.snapshot()
    assert stats["wait_timeouts"] == 2 and stats["misses"] == 2
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "COMPILECACHE_WAIT_TIMEOUT" in warnings[0].getMessage()


def test_a_process_that_will_not_write_never_holds_a_lease(tmp_path: Path) -> None:
    cache = Cache(LocalStore(tmp_path))
    assert cache.load_or_lead("jax", "jax/k", lead=False) is None
    assert cache._flight is not None and cache._flight.held() == []
    assert LocalStore(tmp_path).leases.acquire("jax/k", 1)
    assert cache.stats.snapshot()["misses"] == 1


def test_a_waiter_never_waits_on_nor_writes_over_an_entry_signed_with_another_key(
    tmp_path: Path,
) -> None:
    """A leader with another COMPILECACHE_SECRET publishes an entry the waiter cannot verify: the
    waiter stops waiting (a foreign miss), compiles without a lease, and writes nothing over it."""
    leader = Cache(LocalStore(tmp_path), signing=Signing(secret=b"S1"))
    waiter = Cache(LocalStore(tmp_path), signing=Signing(secret=b"S2"))
    assert leader.load_or_lead("jax", "jax/k") is None  # leads
    got: list[Any] = []
    is_waiting = waiting(waiter)
    t = threading.Thread(target=lambda: got.append(waiter.load_or_lead("jax", "jax/k")))
    t.start()
    assert is_waiting.wait(5)
    assert t.is_alive()  # waiting
    assert leader.save(header("jax/k"), b"S1's executable")
    leader.finish_lead("jax/k")
    t.join(10)
    assert not t.is_alive() and got == [None]
    stats = waiter.stats.snapshot()
    assert stats["foreign"] == 1 and stats["misses"] == 1 and stats["hits"] == 0
    flight = waiter._flight
    assert flight is not None and flight.held() == []  # no lease others would wait on
    other = LocalStore(tmp_path)
    assert other.leases.acquire("jax/k#unwritten", 1)  # and no unwritten mark
    raw = other.peek("jax/k")
    assert waiter.save(header("jax/k"), b"S2's executable") is False
    waiter.finish_thread_leads()
    assert other.peek("jax/k") == raw
    # Later lookups of the key are foreign misses at once, without a lease.
    start = time.monotonic()
    assert waiter.load_or_lead("jax", "jax/k") is None
    assert time.monotonic() - start < 1 and flight.held() == []
    assert waiter.stats.snapshot()["foreign"] == 2
    found = leader.load("jax", "jax/k")
    assert found is not None and found.payload == b"S1's executable"


def test_single_flight_takes_leases_counters_and_a_warning_not_a_cache(tmp_path: Path) -> None:
    """The narrow constructor: a store's leases, a Stats, a warn function."""
    store = LocalStore(tmp_path)
    stats = Stats()
    warned: list[tuple[str, str]] = []
    flight = SingleFlight(
        store.leases,
        stats=stats,
        warn=lambda category, message: warned.append((category, message)),
        lease_ttl=30,
        wait_timeout=0.3,
    )
    assert flight.after_miss("jax", "jax/a", lambda: (None, True)) is None
    assert flight.held() == ["jax/a"] and stats.snapshot()["misses"] == 1
    # Another process (another SingleFlight on the store) waits, times out, warns through warn.
    other = SingleFlight(
        LocalStore(tmp_path).leases,
        stats=stats,
        warn=lambda category, message: warned.append((category, message)),
        lease_ttl=30,
        wait_timeout=0.3,
    )
    assert other.after_miss("jax", "jax/a", lambda: (None, True)) is None
    assert stats.snapshot()["wait_timeouts"] == 1
    assert [c for c, _ in warned] == ["wait-timeout"]
    flight.wrote("jax/a")
    flight.finish("jax/a")
    assert store.leases.acquire("jax/a", 1)
    # writes(key) false: this process will not save the key, so it never holds its lease.
    quiet = SingleFlight(
        store.leases,
        stats=stats,
        warn=lambda c, m: None,
        lease_ttl=30,
        wait_timeout=5,
        writes=lambda key: False,
    )
    assert quiet.after_miss("jax", "jax/b", lambda: (None, True)) is None
    assert quiet.held() == [] and store.leases.acquire("jax/b", 1)


def quiet_flight(leases: Any, lease_ttl: float = 30, **kwargs: Any) -> SingleFlight:
    """A SingleFlight on ``leases`` with its own counters and no warnings."""
    return SingleFlight(
        leases, stats=Stats(), warn=lambda c, m: None, lease_ttl=lease_ttl, wait_timeout=5, **kwargs
    )


def test_a_release_handed_to_a_queue_that_never_ran_is_done_at_close(tmp_path: Path) -> None:
    """A written entry's release goes to the background queue; a queue cut short at exit (its
    deadline passed) must not leave the lease behind: release_all gives it up."""
    store = LocalStore(tmp_path)
    flight = quiet_flight(store.leases)
    queued: list[Any] = []
    for key in ("jax/a", "jax/b"):
        assert flight.after_miss("jax", key, lambda: (None, True)) is None
        flight.wrote(key)
        flight.finish(key, later=queued.append)
    assert len(queued) == 2 and flight.held() == []
    queued[0]()  # the queue ran one release, then was dropped
    assert store.leases.acquire("jax/b", 1) is None  # still held: its release never ran
    flight.release_all()
    assert not any((tmp_path / "leases").iterdir())
    queued[1]()  # a late run of the dropped item does nothing (no lease of anyone's removed)
    token = store.leases.acquire("jax/b", 30)
    assert token
    queued[1]()
    assert store.leases.acquire("jax/b", 1) is None


def test_release_all_at_exit_waits_for_a_release_the_queue_has_begun(tmp_path: Path) -> None:
    """A release runs in two steps (the lease is moved aside, then removed). When the queue is
    between them at exit, release_all returns only after the second: else the process ends and
    leaves the moved file behind."""
    store = LocalStore(tmp_path)
    leases = store.leases
    assert isinstance(leases, LeaseFiles)
    moved = threading.Event()
    go_on = threading.Event()
    real_release = leases.release

    def slow_release(key: str, token: str) -> None:
        moved.set()
        go_on.wait(5)
        real_release(key, token)

    leases.release = slow_release  # type: ignore[method-assign]
    flight = quiet_flight(leases)
    queued: list[Any] = []
    assert flight.after_miss("jax", "jax/a", lambda: (None, True)) is None
    flight.wrote("jax/a")
    flight.finish("jax/a", later=queued.append)
    background = threading.Thread(target=queued[0])
    background.start()
    assert moved.wait(5)  # the queue is inside the release
    ended = threading.Event()
    at_exit = threading.Thread(target=lambda: (flight.release_all(), ended.set()))
    at_exit.start()
    time.sleep(0.2)
    assert not ended.is_set(), "release_all returned while the queue's release was unfinished"
    go_on.set()
    at_exit.join(5)
    background.join(5)
    assert ended.is_set()
    assert not any((tmp_path / "leases").iterdir())


def test_what_a_killed_process_set_aside_is_swept_with_its_leases(tmp_path: Path) -> None:
    """A process killed between moving a lease aside and removing it leaves the moved file; the
    next process that takes over a dead holder's lease removes those too. What a running
    process set aside, and a lease whose holder runs, are left alone."""
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    )
    dead_pid = int(dead.stdout)
    store = LocalStore(tmp_path)
    leases = store.leases
    assert isinstance(leases, LeaseFiles)
    assert leases.acquire("jax/live", 30)
    assert leases.acquire("jax/dead", 30)
    directory = tmp_path / "leases"
    live_path = leases.path_of("jax/live")
    dead_path = leases.path_of("jax/dead")
    body = json.loads(dead_path.read_bytes())
    dead_path.write_text(json.dumps({**body, "pid": dead_pid}))
    cut_short = directory / f"{'e' * 32}.lease.{uuid.uuid4().hex}.release"
    cut_short.write_text(json.dumps({**body, "pid": dead_pid}))
    broken = directory / f"{'f' * 32}.lease.{uuid.uuid4().hex}.stale"
    broken.write_text(json.dumps({**body, "pid": dead_pid}))
    ours = directory / f"{'d' * 32}.lease.{uuid.uuid4().hex}.release"
    ours.write_bytes(live_path.read_bytes())  # a running process's, about to remove it
    other = LocalStore(tmp_path).leases
    assert other.acquire("jax/dead", 30)  # taken over at once: its holder is gone
    left = sorted(p.name for p in directory.iterdir())
    assert left == sorted([live_path.name, dead_path.name, ours.name])


def test_a_renewal_racing_the_release_does_not_write_the_lease_again(tmp_path: Path) -> None:
    """The heartbeat renews outside the flight's lock: a renewal that read the lease just before
    its release must not publish it again after (a lease file left behind until it expires)."""
    store = LocalStore(tmp_path)
    renewing = threading.Event()
    go_on = threading.Event()
    leases = store.leases
    assert isinstance(leases, LeaseFiles)
    real_publish = leases._publish

    def slow_publish(path: Path, data: bytes) -> None:  # renew has read the token: ours
        renewing.set()
        go_on.wait(5)
        real_publish(path, data)

    leases._publish = slow_publish
    flight = quiet_flight(leases, lease_ttl=0.15)
    assert flight.after_miss("jax", "jax/a", lambda: (None, True)) is None
    assert renewing.wait(5)  # the heartbeat is inside renew now
    flight.wrote("jax/a")
    ender = threading.Thread(target=flight.finish, args=("jax/a",))
    ender.start()
    time.sleep(0.1)
    go_on.set()
    ender.join(5)
    time.sleep(0.3)  # the heartbeat's next beat finds nothing to renew
    assert not any((tmp_path / "leases").iterdir())


def test_a_writer_is_claimed_without_waiting_and_only_by_one_that_writes(tmp_path: Path) -> None:
    """claim_writer (Dynamo's packages): the first process holds the key's lease and writes; a
    second is told no at once, not made to wait; one that would not save it never takes it."""

    def flight(writes: bool = True) -> SingleFlight:
        return SingleFlight(
            LocalStore(tmp_path).leases,
            stats=Stats(),
            warn=lambda c, m: None,
            lease_ttl=30,
            wait_timeout=60,
            writes=lambda key: writes,
        )

    quiet, first, second = flight(writes=False), flight(), flight()
    assert quiet.claim_writer("torch/dynamo/f") is False and quiet.held() == []
    started = time.monotonic()
    assert first.claim_writer("torch/dynamo/f") is True and first.held() == ["torch/dynamo/f"]
    assert second.claim_writer("torch/dynamo/f") is False and second.held() == []
    assert time.monotonic() - started < 5  # no wait for the holder
    first.wrote("torch/dynamo/f")
    first.finish("torch/dynamo/f")
    assert second.claim_writer("torch/dynamo/f") is True  # released: the next may write


def test_singleflight_does_not_import_the_cache() -> None:
    """No import loop cache <-> singleflight, not even one for type checking."""
    import ast

    import compilecache.runtime.singleflight as module

    tree = ast.parse(Path(module.__file__ or "").read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)} | {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert "compilecache.runtime.cache" not in imported, imported


def test_no_single_flight_where_it_cannot_work(tmp_path: Path) -> None:
    assert Cache(LocalStore(tmp_path), read_only=True)._flight is None
    assert Cache(LocalStore(tmp_path), wait_timeout=0)._flight is None
    assert Cache(open_url("memory://sf"))._flight is None
    plain = Cache(open_url("memory://sf"))
    assert plain.load_or_lead("jax", "jax/k") is None
    assert plain.stats.snapshot()["misses"] == 1


def test_config_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    from compilecache import config

    cfg = config.load({"COMPILECACHE_LEASE_TTL": "10s", "COMPILECACHE_WAIT_TIMEOUT": "5m"})
    assert (cfg.lease_ttl, cfg.wait_timeout) == (10.0, 300.0)
    default = config.load({})
    assert (default.lease_ttl, default.wait_timeout) == (30.0, 1800.0)
    with pytest.raises(ConfigError, match="COMPILECACHE_LEASE_TTL"):
        config.load({"COMPILECACHE_LEASE_TTL": "0"})


# -- real JAX processes ----------------------------------------------------------------------------

PROGRAM = r"""
import json, os, sys, time
import compilecache
session = compilecache.enable()
import jax
import jax.numpy as jnp
from jax._src import compiler
from jax._src.lib.mlir import ir

DELAY = float(os.environ.get("SF_DELAY", "0"))
compiles = {}
original = compiler.backend_compile_and_load

def counting(backend, module, *args, **kwargs):
    # Count every backend compile; make ours slow so that the processes overlap for sure.
    name = ir.StringAttr(module.operation.attributes["sym_name"]).value
    compiles[name] = compiles.get(name, 0) + 1
    if name.startswith("jit_sf_") and DELAY:
        print(json.dumps({"compiling": name}), flush=True)
        time.sleep(DELAY)
    return original(backend, module, *args, **kwargs)

compiler.backend_compile_and_load = counting

flight = session.cache._flight
if flight is not None:  # say when this process first waits on another's lease (observable)
    polled = flight._sleep
    said = []

    def sleep_on_lease(seconds):
        if not said:
            said.append(True)
            print(json.dumps({"waiting": os.getpid()}), flush=True)
        polled(seconds)

    flight._sleep = sleep_on_lease

@jax.jit
def sf_a(v):
    return jnp.tanh(v * 2.0).sum()

@jax.jit
def sf_b(v):
    return jnp.cumsum(v) - v.max()

x = jnp.linspace(-1.0, 1.0, 16, dtype=jnp.float32)
barrier = os.environ.get("SF_BARRIER")
if barrier:  # start the compiles together: imports take seconds on a loaded machine
    open(os.path.join(barrier, str(os.getpid())), "w").close()
    give_up = time.time() + 120
    while len(os.listdir(barrier)) < int(os.environ["SF_N"]) and time.time() < give_up:
        time.sleep(0.01)
print(json.dumps({"ready": os.getpid()}), flush=True)
a = float(sf_a(x))
b = [round(float(t), 6) for t in sf_b(x)[:4]]
if os.environ.get("SF_CALLBACK"):  # a function JAX never writes (it has a host callback)
    @jax.jit
    def sf_cb(v):
        jax.debug.callback(lambda s: None, v.sum())
        return v * 3.0
    sf_cb(x).block_until_ready()
print(json.dumps({"result": {"a": a, "b": b}, "compiles": compiles, "stats": session.stats()}))
"""


def start(script: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(script)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str], timeout: float = 180) -> dict[str, Any]:
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    result: dict[str, Any] = lines[-1]
    assert "result" in result, out
    return result


def wait_for_line(proc: subprocess.Popen[str], field: str, timeout: float = 120) -> None:
    """Read the process's output until a JSON line with ``field`` (it keeps running)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"exited before {field}: {proc.communicate()[1]}")
        if line.startswith("{") and field in json.loads(line):
            return
    raise AssertionError(f"no {field} line within {timeout}s")


def totals(results: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in results:
        for name, n in r["compiles"].items():
            out[name] = out.get(name, 0) + n
    return out


def cold_start(tmp_path: Path, url: str, n: int = 4, **extra: str) -> list[dict[str, Any]]:
    script = tmp_path / "sf_program.py"
    script.write_text(PROGRAM)
    barrier = tmp_path / f"barrier-{uuid.uuid4().hex[:6]}"
    barrier.mkdir()
    env = clean_env(
        {
            "COMPILECACHE_URL": url,
            "SF_DELAY": "1.5",
            "SF_BARRIER": str(barrier),
            "SF_N": str(n),
            **extra,
        }
    )
    procs = [start(script, env) for _ in range(n)]
    return [finish(p) for p in procs]


def check_compiled_once(results: list[dict[str, Any]], stored: set[str]) -> None:
    compiled = totals(results)
    # The two slow functions, and everything else that was stored: one compile in all.
    assert compiled["jit_sf_a"] == 1 and compiled["jit_sf_b"] == 1, compiled
    for name in stored:
        assert compiled.get(name) == 1, (name, compiled)
    assert len({json.dumps(r["result"]) for r in results}) == 1
    stats = [r["stats"] for r in results]
    # One process compiled each function; the other three received its entry: hits.
    assert sum(s["writes"] for s in stats) == sum(compiled[n] for n in stored)
    assert sum(s.get("waited", 0) for s in stats) >= 2 * (len(results) - 1)
    for s in stats:
        assert s["errors"] == 0 and s["corrupt"] == 0
        assert s["hits"] + s["misses"] == stats[0]["hits"] + stats[0]["misses"]


def stored_names(store: Store) -> set[str]:
    """The names of the compiles stored (not the job's manifest, nor the guarded traces that
    name the executables: records about compiles, named after the Python functions)."""
    return {
        i.name
        for i in store.scan()
        if not i.key.startswith(manifest.PREFIX) and not is_trace(i.key)
    }


@pytest.mark.slow
@pytest.mark.parametrize("query", ["", "?shared=1"], ids=["local", "shared"])
def test_four_cold_processes_compile_each_function_once_on_disk(tmp_path: Path, query: str) -> None:
    root = tmp_path / "store"
    results = cold_start(tmp_path, f"{root}{query}")
    store = open_url(f"{root}{query}")
    assert isinstance(store, SharedFSStore if query else LocalStore)
    check_compiled_once(results, stored_names(store))
    left = {p.name: p.read_text() for p in (root / "leases").iterdir()}
    assert not left, left  # every lease was released
    if query:
        return
    # The control: without waiting, the same start compiles the slow functions four times.
    control = cold_start(tmp_path, str(tmp_path / "control"), COMPILECACHE_WAIT_TIMEOUT="0")
    compiled = totals(control)
    assert compiled["jit_sf_a"] == 4 and compiled["jit_sf_b"] == 4, compiled


@pytest.mark.slow
def test_the_lease_of_a_killed_process_on_redis_is_taken_at_once(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """As on a disk: the lease in Redis names its holder, and the next run on the same host
    breaks it at once instead of waiting out its 30 s life."""
    script = tmp_path / "sf_program.py"
    script.write_text(PROGRAM)
    common = {"COMPILECACHE_URL": f"{redis_server.url}/{namespace()}"}
    stuck = start(script, clean_env({**common, "SF_DELAY": "600"}))
    try:
        wait_for_line(stuck, "compiling")  # it holds sf_a's lease now
    finally:
        stuck.kill()
        stuck.wait()
    began = time.monotonic()
    result = finish(start(script, clean_env({**common, "SF_DELAY": "0"})))
    elapsed = time.monotonic() - began
    assert result["compiles"]["jit_sf_a"] == 1 and result["compiles"]["jit_sf_b"] == 1
    assert result["stats"].get("wait_timeouts", 0) == 0
    assert result["stats"]["lease_takeovers"] >= 1  # counted, though nothing was waited for
    assert elapsed < 25, f"{elapsed:.1f}s: the dead process's lease was waited out"


@pytest.mark.slow
@pytest.mark.parametrize("query", ["", "?shared=1"], ids=["local", "shared"])
def test_the_leases_of_a_killed_process_are_taken_at_once_and_removed(
    tmp_path: Path, query: str
) -> None:
    """A program killed with SIGKILL releases nothing: the next run, with the default 30 s
    lease life, takes its leases at once (their holder is not running on this host) instead of
    waiting them out, and removes every lease the killed run left."""
    script = tmp_path / "sf_program.py"
    script.write_text(PROGRAM)
    root = tmp_path / "store"
    common = {"COMPILECACHE_URL": f"{root}{query}"}
    stuck = start(script, clean_env({**common, "SF_DELAY": "600"}))
    try:
        wait_for_line(stuck, "compiling")  # it holds sf_a's lease now
    finally:
        stuck.kill()
        stuck.wait()
    leases = root / "leases"
    held = next(p for p in leases.iterdir() if p.suffix == ".lease")  # sf_a's, at least
    # A killed run of many functions leaves several: copies of its lease under other keys.
    for i in range(5):
        shutil.copy(held, leases / f"{i:032x}.lease")
    began = time.monotonic()
    result = finish(start(script, clean_env({**common, "SF_DELAY": "0"})))
    elapsed = time.monotonic() - began
    assert result["compiles"]["jit_sf_a"] == 1 and result["compiles"]["jit_sf_b"] == 1
    assert result["stats"].get("wait_timeouts", 0) == 0
    assert result["stats"]["lease_takeovers"] >= 1  # counted, though nothing was waited for
    assert elapsed < 25, f"{elapsed:.1f}s: the dead process's lease was waited out"
    assert not list(leases.iterdir()), "the killed run's leases outlived the run that found them"


@pytest.mark.slow
def test_a_function_never_written_is_compiled_at_once_not_in_turn(tmp_path: Path) -> None:
    """Host callbacks keep JAX from writing a function: after the first process's compile, the
    three others must compile it at once, not take the lease one after another."""
    results = cold_start(tmp_path, str(tmp_path / "store"), SF_CALLBACK="1")
    compiled = totals(results)
    assert compiled["jit_sf_cb"] == 4, compiled  # never stored: every process compiles it
    assert compiled["jit_sf_a"] == 1 and compiled["jit_sf_b"] == 1, compiled
    stats = [r["stats"] for r in results]
    assert sum(s.get("unwritten_skips", 0) for s in stats) == 3, stats
    assert sum(s.get("lease_takeovers", 0) for s in stats) == 0, stats


@pytest.mark.slow
def test_four_cold_processes_compile_each_function_once_redis(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    url = f"{redis_server.url}/{namespace()}"
    results = cold_start(tmp_path, url)
    store = open_url(url)
    check_compiled_once(results, stored_names(store))
    store.close()


@pytest.mark.slow
@pytest.mark.parametrize("query", ["", "?shared=1"], ids=["local", "shared"])
def test_killing_the_compiling_process_hands_the_compile_over(tmp_path: Path, query: str) -> None:
    script = tmp_path / "sf_program.py"
    script.write_text(PROGRAM)
    root = tmp_path / "store"
    common = {"COMPILECACHE_URL": f"{root}{query}", "COMPILECACHE_LEASE_TTL": "2s"}
    # The first process takes sf_a's lease and "compiles" for ten minutes.
    stuck = start(script, clean_env({**common, "SF_DELAY": "600"}))
    try:
        wait_for_line(stuck, "compiling")
        others = [start(script, clean_env({**common, "SF_DELAY": "1.0"})) for _ in range(3)]
        for proc in others:
            wait_for_line(proc, "waiting")  # each polls the lease the stuck process holds
        killed_at = time.monotonic()
        os.kill(stuck.pid, signal.SIGKILL)
        results = [finish(p) for p in others]
        elapsed = time.monotonic() - killed_at
    finally:
        if stuck.poll() is None:
            stuck.kill()
        stuck.wait()
    compiled = totals(results)
    # One of the three took over once the lease expired; the other two got its entry.
    assert compiled["jit_sf_a"] == 1 and compiled["jit_sf_b"] == 1, compiled
    stats = [r["stats"] for r in results]
    assert sum(s.get("lease_takeovers", 0) for s in stats) == 1
    assert sum(s.get("waited", 0) for s in stats) >= 2
    assert len({json.dumps(r["result"]) for r in results}) == 1
    assert elapsed < 60
    names = stored_names(open_url(f"{root}{query}"))
    assert {"jit_sf_a", "jit_sf_b"} <= names
