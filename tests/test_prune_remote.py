"""``compilecache prune`` on Redis and on S3 (real servers): ``--older-than``, ``--max-size`` and
``--dry-run`` through the CLI, and deletes that never leave an index without its value or
chunks without their index."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

from compilecache.cli import main
from compilecache.stores.base import EntryMeta, Store
from compilecache.stores.frame import encode_frame
from compilecache.stores.guarded import Guarded
from compilecache.stores.objectstore import ObjectStore
from compilecache.stores.redis import RedisStore
from compilecache.stores.registry import open_url
from tests import servers
from tests.servers import MotoServer, RedisServer, namespace

redis_server = servers.redis_server
moto_server = servers.moto_server

DAY = 86400.0
CHUNK = 64 * 1024
# key -> (size, days since last use). Two of the values are chunked in Redis.
ENTRIES = {
    "jax/jit_old_small-1": (2_000, 30),
    "jax/jit_old_big-2": (200_000, 20),
    "torch/fx/old-3": (3_000, 10),
    "jax/jit_recent_big-4": (150_000, 3),
    "jax/jit_recent-5": (4_000, 2),
    "jax/jit_fresh-6": (5_000, 0),
}
OLD = {k for k, (_, days) in ENTRIES.items() if days > 7}


def value(key: str, size: int) -> bytes:
    return (key.encode() * (size // len(key) + 1))[:size]


def prune(capsys: pytest.CaptureFixture[str], url: str, *flags: str) -> dict[str, Any]:
    assert main(["prune", "--url", url, "--json", *flags]) == 0
    out = capsys.readouterr().out
    summary: dict[str, Any] = json.loads(out)  # the whole of stdout: one JSON document
    return summary


def keys_of(store: Store) -> set[str]:
    return {i.key for i in store.scan()}


# -- Redis -----------------------------------------------------------------------------------------


def raw_redis(server: RedisServer) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=server.port)


@pytest.fixture
def redis_filled(redis_server: RedisServer) -> tuple[str, RedisStore]:
    url = f"{redis_server.url}/{namespace()}?chunk_size={CHUNK}"
    store = open_url(url)
    inner = store.inner if isinstance(store, Guarded) else store
    assert isinstance(inner, RedisStore)
    client = raw_redis(redis_server)
    now = time.time()
    for key, (size, days) in ENTRIES.items():
        inner.put(key, value(key, size), EntryMeta(key.split("/")[0], key))
        client.hset(inner._base(key) + ":m", "accessed", repr(now - days * DAY))
    return url, inner


def check_redis_consistent(store: RedisStore, server: RedisServer, expected: set[str]) -> None:
    """Every hash has its value or all its chunks, and every chunk belongs to a live hash."""
    client = raw_redis(server)
    names = {n.decode() for n in client.scan_iter(match=f"{store.namespace}:*")}
    hashes = {n for n in names if n.endswith(":m")}
    assert {store._base(k) + ":m" for k in expected} == hashes
    wanted_chunks = set()
    for key in expected:
        base = store._base(key)
        ver, n = client.hmget(base + ":m", "ver", "n")
        assert isinstance(ver, bytes)
        wanted_chunks |= {f"{base}:c:{ver.decode()}:{i}" for i in range(int(n or 0))}
        assert store.get(key) == value(key, ENTRIES[key][0])
    assert names - hashes == wanted_chunks


def test_redis_prune_older_than_with_dry_run(
    redis_filled: tuple[str, RedisStore],
    redis_server: RedisServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, store = redis_filled
    before = {n for n in raw_redis(redis_server).scan_iter(match=f"{store.namespace}:*")}
    dry = prune(capsys, url, "--older-than", "7d", "--dry-run")
    assert dry["dry_run"] and dry["planned"] == len(OLD) and dry["removed"] == 0
    assert dry["bytes_freed"] == sum(ENTRIES[k][0] for k in OLD)
    assert {v["key"] for v in dry["victims"]} == set(OLD)
    assert {n for n in raw_redis(redis_server).scan_iter(match=f"{store.namespace}:*")} == before

    done = prune(capsys, url, "--older-than", "7d")
    assert done["removed"] == len(OLD)
    assert keys_of(store) == set(ENTRIES) - OLD
    check_redis_consistent(store, redis_server, set(ENTRIES) - OLD)


def test_redis_prune_max_size_removes_least_recently_used(
    redis_filled: tuple[str, RedisStore],
    redis_server: RedisServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, store = redis_filled
    total = sum(size for size, _ in ENTRIES.values())
    dry = prune(capsys, url, "--max-size", "100KB", "--dry-run")
    assert dry["bytes_before"] == total and dry["bytes_after"] <= 100_000
    assert keys_of(store) == set(ENTRIES)
    done = prune(capsys, url, "--max-size", "100KB")
    # Oldest use first, until the rest fits: both old values, then the 150 KB recent one.
    assert done["removed"] == 4 and done["bytes_after"] == 9_000
    assert keys_of(store) == {"jax/jit_recent-5", "jax/jit_fresh-6"}
    check_redis_consistent(store, redis_server, {"jax/jit_recent-5", "jax/jit_fresh-6"})


# -- S3 --------------------------------------------------------------------------------------------


@pytest.fixture
def s3_filled(moto_server: MotoServer) -> tuple[str, ObjectStore]:
    bucket = moto_server.create_bucket()
    url = moto_server.url(bucket, f"p{uuid.uuid4().hex[:8]}")
    store = open_url(url)
    inner = store.inner if isinstance(store, Guarded) else store
    assert isinstance(inner, ObjectStore)
    now = time.time()
    for key, (size, days) in ENTRIES.items():
        # Object stores keep no access times: an entry's age is its creation time, written in
        # its frame; write frames from the past directly.
        body = value(key, size)
        frame = encode_frame(key, EntryMeta("jax", key), now - days * DAY, len(body))
        inner.fs.pipe_file(inner.path_of(key), frame + body)
    return url, inner


def objects(store: ObjectStore) -> set[str]:
    store.fs.invalidate_cache(store.root)
    return set(store.fs.find(store.root))


def test_s3_prune_older_than_with_dry_run(
    s3_filled: tuple[str, ObjectStore], capsys: pytest.CaptureFixture[str]
) -> None:
    url, store = s3_filled
    before = objects(store)
    assert len(before) == len(ENTRIES)
    dry = prune(capsys, url, "--older-than", "7d", "--dry-run")
    assert dry["planned"] == len(OLD) and dry["removed"] == 0 and objects(store) == before
    done = prune(capsys, url, "--older-than", "7d")
    assert done["removed"] == len(OLD)
    assert keys_of(store) == set(ENTRIES) - OLD
    assert objects(store) == {store.path_of(k) for k in set(ENTRIES) - OLD}
    for key in set(ENTRIES) - OLD:
        assert store.get(key) == value(key, ENTRIES[key][0])


def test_s3_prune_max_size(
    s3_filled: tuple[str, ObjectStore], capsys: pytest.CaptureFixture[str]
) -> None:
    url, store = s3_filled
    done = prune(capsys, url, "--max-size", "6KB")
    assert done["bytes_after"] == 5_000 and done["removed"] == 5
    assert keys_of(store) == {"jax/jit_fresh-6"}
    assert objects(store) == {store.path_of("jax/jit_fresh-6")}


def test_prune_leaves_lease_and_tmp_objects_alone(
    s3_filled: tuple[str, ObjectStore], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url, store = s3_filled
    token = store.leases.acquire("jax/jit_fresh-6", 60)
    assert token
    prune(capsys, url, "--max-size", "1")
    assert keys_of(store) == set()
    # The lease of a compile in progress is not an entry: prune neither counts nor removes it.
    assert store.leases.acquire("jax/jit_fresh-6", 60) is None
    store.leases.release("jax/jit_fresh-6", token)
