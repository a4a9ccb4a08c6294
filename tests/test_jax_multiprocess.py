"""Multi-process JAX jobs (``jax.distributed`` on loopback, gloo collectives, a sharded jit):
every process writes its own entries, so on a restart every process starts warm, against a local
store and against Redis; ``COMPILECACHE_WRITERS=first`` restores JAX's process-0-only rule; and
a miss against another process's entry is explained by the process index, not a device count."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from compilecache import config
from compilecache.entry import EntryHeader
from compilecache.errors import ConfigError
from compilecache.frameworks.jax import words as jax_words
from compilecache.runtime import explain, history
from compilecache.stores.registry import open_url
from compilecache.tools import bundle
from tests import servers
from tests.conftest import clean_env, is_trace, last_json
from tests.servers import RedisServer, namespace

redis_server = servers.redis_server

# One process of an N-process job: tiny arrays, one sharded jit (plus JAX's own helper compiles).
PROGRAM = r"""
import json, sys
url, port, n, i = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
import compilecache
session = compilecache.enable(url, frameworks="jax")
import jax
import numpy as np
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=n,
                           process_id=i, initialization_timeout=60)
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
mesh = Mesh(np.array(jax.devices()), ("x",))
local = np.arange(2.0, dtype=np.float32) + 2 * i
x = jax.make_array_from_process_local_data(NamedSharding(mesh, P("x")), local)
f = jax.jit(lambda x: jnp.sin(x) * 2 + 1, out_shardings=NamedSharding(mesh, P()))
result = np.asarray(f(x)).round(5).tolist()
print(json.dumps({"process": i, "result": result, "stats": session.stats()}))
jax.distributed.shutdown()
"""


def run_job(url: str, n: int, **env: str) -> list[dict[str, Any]]:
    """Run PROGRAM as an ``n``-process job on a fresh coordinator port; each process's output."""
    port = servers.free_port()
    # One CPU device per process: a 4-process job on 2 cores stays small.
    environ = clean_env({"XLA_FLAGS": "--xla_force_host_platform_device_count=1", **env})
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PROGRAM, url, str(port), str(n), str(i)],
            env=environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(n)
    ]
    outputs: list[dict[str, Any]] = []
    try:
        for i, proc in enumerate(procs):
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, f"process {i}: exit {proc.returncode}\n{out}\n{err}"
            outputs.append(last_json(out))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return outputs


def count(process: dict[str, Any], name: str) -> int:
    return int(process["stats"].get(name, 0))


@pytest.fixture(params=["local", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "local":
        return str(tmp_path / "store")
    server: RedisServer = request.getfixturevalue("redis_server")
    return f"{server.url}/{namespace()}"


@pytest.mark.slow
@pytest.mark.parametrize("n", [2, 4])
def test_every_process_warm_on_restart(store_url: str, n: int) -> None:
    cold = run_job(store_url, n)
    # Every process compiled and wrote its own entries (their keys differ per process).
    for p in cold:
        assert count(p, "misses") >= 1 and count(p, "writes") == count(p, "misses"), p
        assert count(p, "hits") == 0, p

    warm = run_job(store_url, n)
    for before, after in zip(cold, warm, strict=True):
        assert count(after, "misses") == 0, after
        assert count(after, "hits") == count(before, "misses"), after
    results = [p["result"] for p in cold + warm]
    assert all(r == results[0] for r in results)

    # What it costs: each process's entries, once (N processes x their entries).
    store = open_url(store_url)
    try:
        keys = {info.key for info in store.scan("jax/")}
    finally:
        store.close()
    assert len(keys) == sum(count(p, "writes") for p in cold)
    # No guarded trace: a multi-process job's executables are each process's own, so each
    # process traces as before (a trace would name one process's executable).
    assert not [k for k in keys if is_trace(k)], keys
    assert not any(count(p, "jax.trace.served") or count(p, "jax.trace.stale") for p in warm)


@pytest.mark.slow
def test_writers_first_restores_process_zero_only(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    for _ in range(2):
        first, second = run_job(url, 2, COMPILECACHE_WRITERS="first")
        assert count(second, "writes") == 0 and count(second, "hits") == 0, second
        assert count(second, "misses") >= 1
    assert count(first, "hits") >= 1 and count(first, "misses") == 0, first

    store = open_url(url)
    try:
        stored = len(list(store.scan("jax/")))
        records = history.read(store, history.MISS, 50)
    finally:
        store.close()
    assert stored == count(first, "hits")
    # Process 1's misses are explained by what differs: the process, not "2 -> 2 devices".
    texts = [str(r.get("summary", "")) for r in records if "process 1" in str(r.get("reason"))]
    assert any("process index changed: 0 -> 1 of 2" in t for t in texts), texts
    assert not any("2 -> 2" in t for t in texts), texts


def test_writers_setting() -> None:
    assert config.load({}).writers == "all"
    assert config.load({"COMPILECACHE_WRITERS": "first"}).writers == "first"
    assert config.load({"COMPILECACHE_WRITERS": " ALL "}).writers == "all"
    with pytest.raises(ConfigError, match="COMPILECACHE_WRITERS"):
        config.load({"COMPILECACHE_WRITERS": "rank0"})


def _devices_text(before: str, after: str) -> str:
    (difference,) = explain.diff(
        {"accelerator_config": "a"},
        {"accelerator_config": "b"},
        {"accelerator_config": before},
        {"accelerator_config": after},
        jax_words.JAX,
    )
    return difference.text


def test_devices_wording() -> None:
    p0 = "process 0 of 2, local device ids [0]: 2 x cpu"
    p1 = "process 1 of 2, local device ids [1]: 2 x cpu"
    assert _devices_text(p0, p1) == (
        "process index changed: 0 -> 1 of 2 (local device ids [0] -> [1]; the same 2 CPU devices)"
    )
    moved = "process 1 of 2, local device ids [2-3]: 4 x cpu (2 used)"
    assert _devices_text("process 1 of 2, local device ids [0-1]: 4 x cpu (2 used)", moved) == (
        "local device ids changed: [0-1] -> [2-3] (process 1 of 2; the same 4 CPU devices)"
    )
    assert _devices_text("2 x cpu", p1) == (
        "processes changed: 1 -> 2 (this is process 1, local device ids [1]; "
        "the same 2 CPU devices)"
    )
    assert _devices_text(p1, p1) == "device topology fingerprint changed (the same 2 CPU devices)"
    # Unchanged wording where the devices themselves differ.
    assert _devices_text("1 x cpu", "4 x cpu") == "device topology changed: 1 -> 4 CPU devices"
    assert _devices_text(p0, "process 0 of 2, local device ids [0-1]: 4 x cpu") == (
        "device topology changed: 2 -> 4 CPU devices"
    )


def test_bundle_reads_the_device_kind_of_a_multi_process_entry() -> None:
    header = EntryHeader(
        framework="jax",
        key="jax/jit_f-0",
        extra={
            "readable": {
                "backend version": "cpu 0.10.2",
                "accelerator_config": "process 1 of 4, local device ids [1]: 4 x cpu",
            }
        },
    )
    assert bundle._backend(header) == ("cpu", {"cpu"})
