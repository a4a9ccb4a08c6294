"""Real JAX compiles in fresh processes through a local disk level in front of a real Redis:
a second host starts warm, and killing Redis in the middle of a run costs one failure."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from compilecache.stores.local import LocalStore
from tests import servers
from tests.conftest import clean_env, is_trace, last_json, run_python
from tests.servers import RedisServer, namespace

pytestmark = pytest.mark.slow

N = 6

# Compiles N small, distinct jitted functions; optionally SIGKILLs a process (the Redis server)
# before function number KILL_AT. Prints the results, the counters and the per-level counters.
PROGRAM = r"""
import json, os, signal, sys, time
import compilecache

url, kill_pid, kill_at, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
start = time.monotonic()
session = compilecache.enable(url, frameworks="jax")
import jax
import jax.numpy as jnp
import numpy as np

results = []
for i in range(n):
    if kill_pid and i == kill_at:
        os.kill(kill_pid, signal.SIGKILL)
        killed_at = time.monotonic()
    f = jax.jit(lambda x, i=i: jnp.sin(x) * (i + 1) + jnp.cos(x * i) ** 2)
    # numpy in and out: the jitted function is the only compile of each step
    results.append(round(float(np.asarray(f(np.linspace(0.0, 1.0, 8 + i))).sum()), 5))
stats = session.stats()  # first: it waits for the entry writes still on the background thread
store = session.store
levels = store.level_stats() if hasattr(store, "level_stats") else {}
after_kill = time.monotonic() - killed_at if kill_pid else 0.0
print(json.dumps({"results": results, "stats": stats, "levels": levels,
                  "after_kill_s": after_kill, "wall_s": time.monotonic() - start}))
"""

# The real servers this module uses (pytest fixtures from tests/servers.py).
fresh_redis = servers.fresh_redis


def run(url: str, kill_pid: int = 0, kill_at: int = 0) -> dict[str, Any]:
    proc = run_python(["-c", PROGRAM, url, str(kill_pid), str(kill_at), str(N)], clean_env(), 180)
    result: dict[str, Any] = last_json(proc.stdout)
    return result


def levels(result: dict[str, Any]) -> tuple[dict[str, float], dict[str, float]]:
    local, remote = result["levels"].values()
    return local, remote


def test_second_host_warm_and_redis_killed_mid_run(
    tmp_path: Path, fresh_redis: RedisServer
) -> None:
    shared = f"{fresh_redis.url}/{namespace()}?timeout=1s&backoff=60s"

    # Host A: cold. Every function compiles once and is written to both levels.
    cold = run(f"{tmp_path / 'host-a'},{shared}")
    assert cold["stats"]["misses"] == N and cold["stats"]["writes"] == N
    assert cold["stats"].get("hits", 0) == 0

    # Host B, a fresh local directory sharing the Redis level: starts warm.
    warm = run(f"{tmp_path / 'host-b'},{shared}")
    assert warm["results"] == cold["results"]
    assert warm["stats"]["hits"] == N and warm["stats"].get("misses", 0) == 0
    local, remote = levels(warm)
    assert local["misses"] == N and local["backfills"] == N and remote["hits"] == N

    # ... and its local disk now serves those entries without any network.
    alone = run(str(tmp_path / "host-b"))
    assert alone["stats"]["hits"] == N and alone["results"] == cold["results"]

    # Host C: Redis is SIGKILLed before the third compile. The run completes, with the same
    # results: two hits from Redis, then one failure, and the level is skipped afterwards.
    start = time.monotonic()
    broken = run(f"{tmp_path / 'host-c'},{shared}", kill_pid=fresh_redis.pid, kill_at=2)
    assert time.monotonic() - start < 60
    assert broken["results"] == cold["results"]
    assert broken["stats"]["hits"] == 2 and broken["stats"]["misses"] == N - 2
    assert broken["stats"]["errors"] >= 1
    local, remote = levels(broken)
    assert remote["errors"] == 1 and remote["down"] == 1
    assert remote["skipped"] >= N - 3  # every later lookup and write skipped the dead server
    assert local["writes"] == N - 2  # the local level kept working
    assert broken["after_kill_s"] < 30
    # 2 backfilled + 4 written (beside them, the job's manifest, XLA's index for this host and
    # the guarded traces that name the executables)
    compiled = [
        i
        for i in LocalStore(tmp_path / "host-c").scan()
        if i.key.startswith("jax/") and not is_trace(i.key)
    ]
    assert len(compiled) == N
