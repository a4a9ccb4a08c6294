"""``compilecache demo``: a real JAX transformer train step and a torch.compile MLP, each compiled
cold and then started warm.

Both runs are fresh Python processes started the way ``compilecache run`` starts them. By default
they use a scratch store in a temporary directory, removed at the end: the demo leaves nothing in
your cache. With ``--url`` they use that store (the demo says so, and what it wrote); a random salt
in the key then makes the cold run really cold without touching what the store already holds.
"""

from __future__ import annotations

import importlib.util
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
from compilecache.errors import ConfigError
from compilecache.runtime.transfer import count_words, split_keys
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


@dataclass(frozen=True)
class Workload:
    """One demo program: how to run it and how to name it."""

    label: str
    module: str
    args: tuple[str, ...]


def _workloads(layers: int, salt: str, frameworks: tuple[str, ...]) -> list[Workload]:
    workloads = [
        Workload(
            f"JAX transformer train step, {layers} layers",
            "compilecache.workloads.jax_step",
            ("--layers", str(layers), "--salt", salt, "--json"),
        )
    ]
    if "torch" in frameworks and importlib.util.find_spec("torch") is not None:
        # Fresh TORCHINDUCTOR_CACHE_DIR and TMPDIR in both runs: the warm run is a new machine
        # that shares only the store.
        workloads.append(
            Workload(
                "torch.compile MLP fwd+bwd, new machine",
                "compilecache.workloads.torch_step",
                ("--model", "mlp", "--salt", salt, "--fresh-dirs"),
            )
        )
    return workloads


def _measure(workload: Workload, url: str) -> dict[str, Any]:
    print(f"  {workload.label}: cold run (fresh process, new keys)...", file=sys.stderr)
    cold = run_workload(workload.module, list(workload.args), url)
    print(f"  {workload.label}: warm run (fresh process, same store)...", file=sys.stderr)
    warm = run_workload(workload.module, list(workload.args), url)
    return {
        "workload": workload.label,
        "cold_s": cold.output["first_step_s"],
        "warm_s": warm.output["first_step_s"],
        "speedup": cold.output["first_step_s"] / max(warm.output["first_step_s"], 1e-9),
        "cold_writes": int(cold.counters.get("writes", 0)),
        "warm_hits": int(warm.counters.get("hits", 0)),
        "warm_misses": int(warm.counters.get("misses", 0)),
        "identical_results": cold.output["digest"] == warm.output["digest"],
    }


def main(url: str | None = None, layers: int = 8, json_output: bool = False) -> int:
    """Run the demo; 0 when the warm runs computed what the cold ones did.

    Without ``url``, on a scratch store removed at the end. A ``layers`` below 1 is a
    :class:`ConfigError` (one line from the CLI), raised before anything runs or any store is
    created.
    """
    if layers < 1:
        raise ConfigError(f"demo --layers must be at least 1, got {layers}")
    if url is None:
        with tempfile.TemporaryDirectory(prefix="compilecache-demo-store-") as scratch:
            return _demo(str(Path(scratch) / "store"), layers, json_output, scratch=True)
    return _demo(url, layers, json_output, scratch=False)


def _demo(url: str, layers: int, json_output: bool, *, scratch: bool) -> int:
    cfg = config_mod.load(url=url)
    url = cfg.url
    salt = f"compilecache-demo-{uuid.uuid4().hex}"
    where = "a scratch store, removed at the end" if scratch else "your store (--url)"
    print(f"compilecache demo: {where}: {url}", file=sys.stderr)
    try:
        rows = [_measure(workload, url) for workload in _workloads(layers, salt, cfg.frameworks)]
    except (RuntimeError, subprocess.TimeoutExpired) as exc:  # a workload failed: say how
        print(f"compilecache demo: {exc}", file=sys.stderr)
        return 1
    store = open_store(url)
    infos = list(store.scan())
    store.close()
    held = split_keys(i.key for i in infos)
    same = all(row["identical_results"] for row in rows)
    if json_output:
        print(
            json.dumps(
                {
                    "workloads": rows,
                    "store": url,
                    "scratch_store": scratch,
                    "store_entries": held[0],
                    "store_job_lookup_lists": held[1],
                    "store_bytes": sum(i.size for i in infos),
                },
                indent=2,
            )
        )
        return 0 if same else 1
    print()
    print(
        f"| {'workload':<42} | {'cold':>8} | {'warm':>8} | {'speed-up':>8} "
        f"| {'warm hits':>9} | {'warm misses':>11} | {'same results':>12} |"
    )
    print(f"|{'-' * 44}|{'-' * 10}|{'-' * 10}|{'-' * 10}|{'-' * 11}|{'-' * 13}|{'-' * 14}|")
    for row in rows:
        print(
            f"| {row['workload']:<42} | {row['cold_s']:>7.2f}s | {row['warm_s']:>7.2f}s "
            f"| {row['speedup']:>7.1f}x | {row['warm_hits']:>9} | {row['warm_misses']:>11} "
            f"| {'yes' if row['identical_results'] else 'NO':>12} |"
        )
    print()
    print(
        "cold: first call with keys no earlier run wrote; warm: a fresh process, same store; "
        "warm hits and warm misses: the warm run's lookups (the cold run's are all misses)"
    )
    size = format_size(sum(i.size for i in infos))
    if scratch:
        print(f"store: a scratch store ({count_words(*held)}, {size}), removed now")
    else:
        print(
            f"store: {url}: {count_words(*held)}, {size} (the demo's entries have keys of their "
            "own, salted: `compilecache prune` removes them when unused)"
        )
    return 0 if same else 1
