"""Single-flight torch.compile: processes that miss the same graphs at once compile them once.

Real compiles of the tiny MLP (forward and backward) in fresh processes, each on its own
"machine" (empty Inductor cache directory and TMPDIR), sharing only the compilecache store. Each
process imports torch and waits at a barrier, so that their lookups meet; the one that takes a
graph's lease compiles it and the others wait for its entry.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from compilecache.stores import open_url
from tests import servers
from tests.conftest import clean_env, last_json
from tests.polling import wait_until
from tests.servers import RedisServer

pytest.importorskip("torch")

redis_server = servers.redis_server

PROGRAM = r"""
import json, os, signal, sys, time
url, salt = sys.argv[1], sys.argv[2]
from compilecache.workloads import torch_step
torch_step.make_fresh_dirs()  # a new machine: torch's own local cache cannot answer
import compilecache
session = compilecache.enable(url)
import torch, torch._dynamo, torch._inductor.compile_fx  # the slow imports, before the barrier
if os.environ.get("SF_DIE"):
    # Die with the leases held: once the AOTAutograd lookup has missed and its compile starts.
    from torch._inductor import compile_fx
    def die(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)
    compile_fx._compile_fx_inner = die
barrier = os.environ["SF_BARRIER"]
open(os.path.join(barrier, str(os.getpid())), "w").close()
give_up = time.time() + 300
go = os.environ.get("SF_GO")
while time.time() < give_up:
    if go and os.path.exists(go) or not go and len(os.listdir(barrier)) >= int(os.environ["SF_N"]):
        break
    time.sleep(0.01)
result = torch_step.run("tiny", salt=salt)
result["stats"] = session.stats()
result["held"] = session.cache._flight.held() if session.cache._flight else None
print(json.dumps(result), flush=True)
"""


def start(
    script: Path, url: str, salt: str, barrier: Path, n: int, **env: str
) -> subprocess.Popen[str]:
    full_env = clean_env({"SF_BARRIER": str(barrier), "SF_N": str(n), **env})
    for name in list(full_env):
        if name.startswith("TORCHINDUCTOR_"):
            del full_env[name]
    return subprocess.Popen(
        [sys.executable, str(script), url, salt],
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{out}\n{err}"
    result: dict[str, Any] = last_json(out)
    result["stderr"] = err
    return result


def cold_start(tmp_path: Path, url: str, n: int = 4) -> list[dict[str, Any]]:
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    barrier = tmp_path / f"barrier-{uuid.uuid4().hex[:6]}"
    barrier.mkdir()
    salt = uuid.uuid4().hex  # cold keys, whatever the store held before
    procs = [start(script, url, salt, barrier, n) for _ in range(n)]
    return [finish(p) for p in procs]


def stored_names(url: str) -> Counter[str]:
    """Stored entries per name: the FX and AOTAutograd graphs, and the C++ kernels."""
    store = open_url(url)
    try:
        return Counter(
            info.name
            for info in store.scan()
            # Probe answers (torch_probes) are not compiles: every process may write them.
            if info.key.startswith("torch/") and not info.key.startswith("torch/probe/")
        )
    finally:
        store.close()


def graph_entries(url: str) -> Counter[str]:
    """Stored FX and AOTAutograd entries per graph name."""
    store = open_url(url)
    try:
        return Counter(
            info.name
            for info in store.scan()
            if info.key.startswith(("torch/fx/", "torch/aot/")) and info.name
        )
    finally:
        store.close()


def function_writes(results: list[dict[str, Any]]) -> Counter[str]:
    """How many times each graph was written, summed over the processes."""
    writes: Counter[str] = Counter()
    for result in results:
        for counter, value in result["stats"].items():
            if counter.startswith("fn.torch.") and counter.endswith(".writes"):
                writes[counter[len("fn.torch.") : -len(".writes")]] += int(value)
    return writes


def packages(url: str) -> Counter[str]:
    """Stored Dynamo packages per function name."""
    store = open_url(url)
    try:
        return Counter(info.name for info in store.scan() if info.key.startswith("torch/dynamo/"))
    finally:
        store.close()


def check_compiled_once(results: list[dict[str, Any]], url: str) -> None:
    assert len({r["digest"] for r in results}) == 1, "every process computes the same result"
    entries = graph_entries(url)
    # The forward and backward FX graphs and the AOTAutograd entry, one entry each.
    assert len(entries) >= 3 and set(entries.values()) == {1}, entries
    # Dynamo's package of the model (on by default): every process missed it and traced, and
    # the one that took its lease wrote it.
    stats = [r["stats"] for r in results]
    assert packages(url) == Counter({"MLP.forward": 1}), packages(url)
    assert sum(s.get("torch.dynamo.writes", 0) for s in stats) == 1, stats
    # Every graph was compiled (and written) by one process only...
    assert function_writes(results) == graph_entries(url) + packages(url)
    # ...and so was every kernel: the writes of all processes are the entries stored (probe
    # answers, which every process may write, are not counted as writes).
    writes = sum(r["stats"].get("torch.writes", 0) for r in results)
    assert writes == sum(stored_names(url).values()), (writes, stored_names(url))
    assert sum(s.get("torch.waited", 0) for s in stats) >= 1, stats
    # A waiter that received the entry counted a hit, never a miss for that graph (each
    # process's one miss is the package's).
    leaders = [s for s in stats if s.get("torch.writes", 0) > s.get("torch.dynamo.writes", 0)]
    assert len(leaders) == 1, stats
    for s in stats:
        assert s.get("torch.dynamo.misses", 0) == 1, s
        if s is not leaders[0]:
            assert s.get("torch.misses", 0) == 1, s
    assert all(r["held"] == [] for r in results), "every lease was released"


def test_four_cold_processes_compile_each_graph_once_on_disk(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    check_compiled_once(cold_start(tmp_path, url), url)


@pytest.mark.slow
def test_four_cold_processes_compile_each_graph_once_on_redis(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    url = f"{redis_server.url}/{uuid.uuid4().hex[:8]}"
    check_compiled_once(cold_start(tmp_path, url), url)


def test_a_killed_compiler_is_taken_over_once_its_lease_expires(tmp_path: Path) -> None:
    """The first process takes the AOTAutograd lease and dies with SIGKILL as its compile
    starts; the second, already waiting at the door, takes it over (at once: its holder, on
    this host, no longer runs), and counts it."""
    url = str(tmp_path / "store")
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    salt = uuid.uuid4().hex
    ttl = {"COMPILECACHE_LEASE_TTL": "4s"}
    doomed_barrier, taker_barrier = tmp_path / "b1", tmp_path / "b2"
    doomed_barrier.mkdir()
    taker_barrier.mkdir()
    go = tmp_path / "go"
    taker = start(script, url, salt, taker_barrier, 1, SF_GO=str(go), **ttl)
    doomed = start(script, url, salt, doomed_barrier, 1, SF_DIE="1", **ttl)
    doomed.communicate(timeout=600)
    assert doomed.returncode == -9, "the first process must die holding its lease"
    leases = list((tmp_path / "store" / "leases").iterdir())
    assert leases, "the dead process left its lease behind"
    # The taker must be ready (imports done) before it is let go, so that it meets the lease.
    wait_until(lambda: any(taker_barrier.iterdir()), 300, interval=0.05)
    go.touch()
    started = time.monotonic()
    result = finish(taker)
    stats = result["stats"]
    assert stats.get("torch.lease_takeovers", 0) >= 1, stats
    assert stats.get("torch.writes", 0) >= 3, stats
    assert time.monotonic() - started < 300
    assert graph_entries(url), "the taker stored the graphs"
    assert result["held"] == []
