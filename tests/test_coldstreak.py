"""A cold run with a remote level (issue 13, part 1): after a streak of new, quick compiles the
tier stops waiting for the remote's "nothing here" and claims behind its write-behind. Against a
real Redis and a real S3 server, behind a proxy that adds 25 ms per direction so that a quick
compile is quick next to a round trip."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compilecache.config import load
from compilecache.entry import EntryHeader
from compilecache.errors import ConfigError
from compilecache.runtime.cache import Cache
from compilecache.stores.base import EntryMeta, Store, StoreWrapper
from compilecache.stores.capabilities import Claim, Leases
from compilecache.stores.guarded import Guarded
from compilecache.stores.local import LocalStore
from compilecache.stores.registry import open_url
from compilecache.stores.tiers import Tiered
from compilecache.stores.tiers.coldstreak import ColdStreak
from tests import servers
from tests.conftest import clean_env, cli_json, last_json, run_python
from tests.servers import MotoServer, RedisServer, delayed, namespace

redis_server = servers.redis_server
moto_server = servers.moto_server

QUICK = 0.001  # seconds: a compile far shorter than ten 50 ms round trips
DELAY = 0.025


# -- the streak on its own -------------------------------------------------------------------------


def test_a_streak_of_quick_new_compiles_stops_the_waiting() -> None:
    streak = ColdStreak(3)
    for i in range(3):
        assert streak.waits()
        streak.missed(f"k{i}", rtt=0.05)
        streak.compiled(f"k{i}", QUICK)
    assert not streak.waits()


def test_only_waited_misses_count_and_anything_else_waits_again() -> None:
    streak = ColdStreak(2)
    streak.compiled("never-looked-up", QUICK)  # a write without a waited miss: not a new key
    streak.missed("a", rtt=0.05)
    streak.compiled("a", 0.6)  # twelve round trips: waiting cost it little
    streak.missed("b", rtt=0.05)
    streak.compiled("b", QUICK)
    assert streak.waits()  # the slow compile broke the streak
    streak.missed("c", rtt=0.05)
    streak.compiled("c", QUICK)
    assert not streak.waits()
    streak.compiled("d", QUICK)  # an unwaited quick compile: still not waiting
    assert not streak.waits()
    streak.compiled("e", 1.0)  # an unwaited slow one: wait again
    assert streak.waits()
    for key in ("f", "g"):
        streak.missed(key, rtt=0.05)
        streak.compiled(key, QUICK)
    assert not streak.waits()
    streak.late()
    assert streak.waits()


def test_a_streak_of_zero_always_waits() -> None:
    streak = ColdStreak(0)
    for i in range(20):
        streak.missed(f"k{i}", rtt=1.0)
        streak.compiled(f"k{i}", QUICK)
    assert streak.waits()


def test_the_streak_is_configured_by_a_variable() -> None:
    assert load({}).cold_streak == 5
    assert load({"COMPILECACHE_COLD_STREAK": "0"}).cold_streak == 0
    assert load({"COMPILECACHE_COLD_STREAK": "12"}).cold_streak == 12
    for bad in ("-1", "many", "1.5"):
        with pytest.raises(ConfigError, match="COMPILECACHE_COLD_STREAK"):
            load({"COMPILECACHE_COLD_STREAK": bad})


# -- tiers against real servers ----------------------------------------------------------------


class Calls(StoreWrapper):
    """Records which thread made each remote call: the compiling thread, or a background one."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.calls: list[tuple[str, str, str]] = []  # (call, key, thread name)
        self._lock = threading.Lock()
        assert inner.leases is not None
        self.leases = CallsLeases(self, inner.leases)

    def _note(self, call: str, key: str) -> None:
        with self._lock:
            self.calls.append((call, key, threading.current_thread().name))

    def on_main(self, key: str) -> list[str]:
        return [c for c, k, t in self.calls if k == key and t == "MainThread"]

    def get_with_meta(self, key: str) -> tuple[bytes, EntryMeta | None] | None:
        self._note("get", key)
        return self.inner.get_with_meta(key)

    def stat(self, key: str) -> Any:
        self._note("stat", key)
        return self.inner.stat(key)

    def put(self, key: str, value: bytes, meta: EntryMeta | None = None) -> None:
        self._note("put", key)
        self.inner.put(key, value, meta)

    def put_new(self, key: str, value: bytes, meta: EntryMeta | None = None) -> bool:
        self._note("put_new", key)
        return self.inner.put_new(key, value, meta)


class CallsLeases(Leases):
    """The leases of a :class:`Calls` store, recorded the same way."""

    def __init__(self, calls: Calls, inner: Leases) -> None:
        self.calls = calls
        self.inner = inner

    def acquire(self, key: str, ttl_s: float) -> str | None:
        return self.inner.acquire(key, ttl_s)

    def renew(self, key: str, token: str, ttl_s: float) -> bool:
        return self.inner.renew(key, token, ttl_s)

    def release(self, key: str, token: str) -> None:
        self.calls._note("release", key)
        self.inner.release(key, token)

    def get_or_claim(self, key: str, ttl_s: float) -> Any:
        self.calls._note("get_or_claim", key)
        return self.inner.get_or_claim(key, ttl_s)

    def claim(self, key: str, ttl_s: float) -> Claim:
        self.calls._note("claim", key)
        return self.inner.claim(key, ttl_s)


@pytest.fixture(params=["redis", "s3"])
def remote_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace of a real Redis or S3 server, 25 ms away per direction."""
    if request.param == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        with delayed(server.port, DELAY) as proxy:
            yield f"redis://127.0.0.1:{proxy.port}/0/{namespace()}"
    else:
        moto: MotoServer = request.getfixturevalue("moto_server")
        bucket = moto.create_bucket()
        with delayed(moto.port, DELAY) as proxy:
            yield (
                f"s3://{bucket}/{namespace()}?endpoint_url=http://127.0.0.1:{proxy.port}"
                "&key=testing&secret=testing"
            )


def host(path: Path, remote: Store, streak: int = 3) -> Cache:
    """One host: a local disk in front of ``remote``, written behind, as the registry builds it."""
    tiers = Tiered(
        [LocalStore(path), Guarded(remote)], write_behind=[False, True], cold_streak=streak
    )
    return Cache(tiers)


def compile_(cache: Cache, key: str) -> Any:
    """What an integration does for one function: look up, and on a miss compile and save."""
    found = cache.load_or_lead("jax", key)
    if found is None:
        cache.save(EntryHeader("jax", key, "f", compile_time_s=QUICK), f"exe {key}".encode())
        cache.finish_lead(key)
    return found


def levels(cache: Cache) -> dict[str, float]:
    assert isinstance(cache.store, Tiered)
    return list(cache.store.level_stats().values())[1]


def test_after_the_streak_lookups_claim_behind_and_every_entry_lands(
    tmp_path: Path, remote_url: str
) -> None:
    remote = Calls(open_url(remote_url))
    cache = host(tmp_path / "a", remote)
    keys = [f"jax/k{i}" for i in range(8)]
    for key in keys:
        assert compile_(cache, key) is None
    # The first three lookups asked the remote before compiling; the other five did not.
    assert all(remote.on_main(k) == ["get_or_claim"] for k in keys[:3])
    assert all(remote.on_main(k) == [] for k in keys[3:])
    cache.store.flush(30.0)
    for key in keys[3:]:
        # In the background: claimed, written and released, in that order; or, where the write
        # was already queued when the claim's turn came, written as a new entry only (a write
        # that also tells whether another process wrote the key meanwhile).
        calls = [c for c, k, _ in remote.calls if k == key]
        assert calls in (["claim", "put", "release"], ["put_new"]), calls
    counted = levels(cache)
    assert counted["unwaited"] == 5 and counted["late"] == 0 and counted["writes"] == 8
    # Another host finds every entry, and every lease is free again.
    other = host(tmp_path / "b", open_url(remote_url))
    assert all(compile_(other, key) is not None for key in keys)
    bare = open_url(remote_url)
    for key in keys:
        token = bare.leases.acquire(key, 30)
        assert token, f"the lease on {key} is still held"
        bare.leases.release(key, token)


def test_a_compile_still_running_holds_the_lease_others_wait_on(
    tmp_path: Path, remote_url: str
) -> None:
    cache = host(tmp_path / "a", open_url(remote_url))
    for i in range(3):
        compile_(cache, f"jax/new{i}")
    assert cache.load_or_lead("jax", "jax/long") is None  # not waited for: compiling
    cache.store.flush(30.0)  # the queued claim has run: the lease is this host's
    other = host(tmp_path / "b", open_url(remote_url))
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append(other.load_or_lead("jax", "jax/long")))
    waiter.start()
    waiter.join(0.5)
    assert waiter.is_alive()  # another host waits for this compile instead of repeating it
    cache.save(EntryHeader("jax", "jax/long", "f", compile_time_s=QUICK), b"exe long")
    cache.finish_lead("jax/long")
    waiter.join(30)
    assert got and got[0] is not None and got[0].payload == b"exe long"


@pytest.mark.parametrize("other_side", ["entry", "lease"])
def test_an_entry_or_a_lease_found_late_makes_lookups_wait_again(
    tmp_path: Path, remote_url: str, other_side: str
) -> None:
    bare = open_url(remote_url)
    if other_side == "entry":  # another host compiled it before
        bare.put("jax/theirs", b"x", EntryMeta("jax", "f", 1.0))
    else:  # another host is compiling it now
        assert bare.leases.acquire("jax/theirs", 60)
    seeded = host(tmp_path / "seed", open_url(remote_url), streak=0)
    assert compile_(seeded, "jax/later") is None  # an entry the remote holds, written now
    seeded.store.flush(30.0)

    cache = host(tmp_path / "a", open_url(remote_url))
    for i in range(3):
        compile_(cache, f"jax/new{i}")
    assert cache.load_or_lead("jax", "jax/theirs") is None  # not waited for: compiling here
    if other_side == "lease":
        # Still compiling when the queued claim runs (a compile over by then claims nothing:
        # it only looks for the entry, and a held lease is no news to it).
        cache.store.flush(30.0)
    cache.save(EntryHeader("jax", "jax/theirs", "f", compile_time_s=QUICK), b"exe theirs")
    cache.finish_lead("jax/theirs")
    cache.store.flush(30.0)
    assert levels(cache)["late"] == 1
    # Waiting again: the next lookup asks the remote first, and finds its entry.
    found = compile_(cache, "jax/later")
    assert found is not None and found.payload == b"exe jax/later"


def test_a_remote_that_fails_behind_costs_nothing_more(tmp_path: Path) -> None:
    """The queued claims of a dead remote fail in the background; the program compiles on and
    its entries stay in the local level."""
    remote = open_url("redis://127.0.0.1:9/0/x?timeout=0.2s")
    cache = host(tmp_path / "a", remote, streak=0)
    assert isinstance(cache.store, Tiered)
    cache.store._streak._waits = False  # as if a streak had ended
    for i in range(4):
        assert compile_(cache, f"jax/k{i}") is None
    cache.store.flush(10.0)
    assert all(LocalStore(tmp_path / "a").get(f"jax/k{i}") for i in range(4))
    assert cache.store._streak.waits()  # the failure makes lookups wait (and back off) again


@pytest.mark.slow
def test_a_cold_jax_run_stops_waiting_and_a_fresh_host_finds_it_all(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    with delayed(redis_server.port, DELAY) as proxy:
        remote = f"redis://127.0.0.1:{proxy.port}/0/{namespace()}"

        def run(local: str, **extra: str) -> tuple[dict[str, Any], dict[str, float]]:
            url = f"{tmp_path / local},{remote}"
            env = clean_env({"COMPILECACHE_URL": url, "COMPILECACHE_JOB": "t"} | extra)
            program = ["-m", "compilecache.workloads.jax_many", "--count", "12", "--json"]
            command = ["-m", "compilecache", "run", "--", sys.executable, *program]
            result: dict[str, Any] = last_json(run_python(command, env).stdout)
            counters = cli_json("stats", "--json", url=str(tmp_path / local), cwd=tmp_path)
            shared: dict[str, float] = counters["levels"][remote]
            return result, shared

        cold, cold_remote = run("a", COMPILECACHE_COLD_STREAK="3")
        warm, warm_remote = run("b", COMPILECACHE_PREFETCH="0")
    assert cold_remote["unwaited"] >= 1 and cold_remote["writes"] == 12
    assert warm_remote["hits"] == 12  # every entry was written, claims and all
    assert warm["digest"] == cold["digest"]
