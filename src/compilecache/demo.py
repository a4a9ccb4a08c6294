"""``compilecache demo``: a real JAX transformer train step, compiled cold and then started warm.

Both runs are fresh Python processes started the way ``compilecache run`` starts them, against the
configured store (or ``--url``). A random salt in JAX's ``custom_hook`` key component makes the
cold run really cold without touching what the store already holds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compilecache import config as config_mod
from compilecache import runner
from compilecache.config import format_size
from compilecache.session import open_store


@dataclass(frozen=True)
class RunResult:
    """One workload process: what it printed and what compilecache counted in it."""

    output: dict[str, Any]
    counters: dict[str, float]


def run_workload(module: str, args: list[str], url: str, timeout: float = 900) -> RunResult:
    """Run ``python -m module args`` in a fresh process with compilecache enabled on ``url``."""
    with tempfile.TemporaryDirectory(prefix="compilecache-demo-") as spool:
        env = runner.child_environment(os.environ, spool, {"COMPILECACHE_URL": url})
        env.pop("COMPILECACHE_DISABLE", None)
        proc = subprocess.run(
            [sys.executable, "-m", module, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"{module} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        return RunResult(json.loads(lines[-1]), runner.read_spool(Path(spool)))


def main(url: str | None = None, layers: int = 8, json_output: bool = False) -> int:
    url = url or config_mod.load().url
    salt = f"compilecache-demo-{uuid.uuid4().hex}"
    args = ["--layers", str(layers), "--salt", salt, "--json"]
    module = "compilecache.workloads.jax_step"
    print(
        f"compilecache demo: JAX transformer train step, {layers} layers, store {url}",
        file=sys.stderr,
    )
    print("  cold run (fresh process, empty cache for this program)...", file=sys.stderr)
    cold = run_workload(module, args, url)
    print("  warm run (fresh process, same store)...", file=sys.stderr)
    warm = run_workload(module, args, url)
    store = open_store(url)
    infos = list(store.scan())
    store.close()
    same = cold.output["checksum"] == warm.output["checksum"]
    report = {
        "framework": "jax",
        "workload": f"transformer train step, {layers} layers",
        "cold_s": cold.output["first_step_s"],
        "warm_s": warm.output["first_step_s"],
        "speedup": cold.output["first_step_s"] / max(warm.output["first_step_s"], 1e-9),
        "cold_writes": int(cold.counters.get("writes", 0)),
        "warm_hits": int(warm.counters.get("hits", 0)),
        "warm_misses": int(warm.counters.get("misses", 0)),
        "identical_results": same,
        "store_entries": len(infos),
        "store_bytes": sum(i.size for i in infos),
    }
    if json_output:
        print(json.dumps([report], indent=2))
    else:
        print()
        print(
            f"| {'workload':<36} | {'cold':>8} | {'warm':>8} | {'speed-up':>8} | {'hits':>5} | {'misses':>6} |"
        )
        print(f"|{'-' * 38}|{'-' * 10}|{'-' * 10}|{'-' * 10}|{'-' * 7}|{'-' * 8}|")
        print(
            f"| {'JAX ' + report['workload']:<36} | {report['cold_s']:>7.2f}s | {report['warm_s']:>7.2f}s "
            f"| {report['speedup']:>7.1f}x | {report['warm_hits']:>5} | {report['warm_misses']:>6} |"
        )
        print()
        print(f"results identical: {'yes' if same else 'NO'}")
        print(
            f"store: {url}: {report['store_entries']} entries, {format_size(report['store_bytes'])}"
        )
    return 0 if same else 1
