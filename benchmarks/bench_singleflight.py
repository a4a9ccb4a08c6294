"""A herd on a cold cache: N processes start the same workload at once.

Every variant starts N fresh processes at the same moment on an empty cache (a fresh cache-key
salt each time) and waits for all of them; it measures the wall time until the last one ends, the
CPU time of all of them together (their C++ compiler children included), and how many entries
they wrote (one per stored compile, duplicates included).

JAX (``jax_step --layers 8``):

- ``JAX's own cache``: ``JAX_COMPILATION_CACHE_DIR`` shared by the N processes (minimum compile
  time 0): JAX does not coordinate concurrent compiles;
- ``compilecache, no single-flight``: a local store, ``COMPILECACHE_WAIT_TIMEOUT=0``;
- ``compilecache, single-flight``: the same store, single-flight on (the default).

torch (``torch_step --model mlp``, forward and backward), in two settings:

- one host: the N processes share one ``TORCHINDUCTOR_CACHE_DIR``. torch's own caches already
  avoid most duplicate work there (a lock file per C++ kernel build in that directory);
- N hosts: each process has its own empty ``TORCHINDUCTOR_CACHE_DIR`` and ``TMPDIR``
  (``--fresh-dirs``), so all they share is the compilecache store; torch's own local caches
  share nothing (and its remote caches do not coordinate: every process compiles).

Variants run interleaved in rotating order; medians of the rounds; ratios are against the
framework's own caches in the same setting. Every process must compute the same result.

    python benchmarks/bench_singleflight.py                # N=4, 2 rounds
    python benchmarks/bench_singleflight.py --quick        # 1 round
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import common

NAME = "bench_singleflight"
SRC = common.REPO_ROOT / "src"
# variant -> (label, baseline variant). Variant names: own/off/on = the framework alone,
# compilecache without single-flight, compilecache; "-host" = torch processes share one
# TORCHINDUCTOR_CACHE_DIR (one host), otherwise each has its own (N hosts).
VARIANTS = {
    "jax": {
        "own": ("JAX's own cache (one shared directory)", "own"),
        "off": ("compilecache, no single-flight", "own"),
        "on": ("compilecache, single-flight", "own"),
    },
    "torch": {
        "own-host": ("one host: torch's own caches (one shared directory)", "own-host"),
        "on-host": ("one host: compilecache, single-flight", "own-host"),
        "own": ("N hosts: torch's own caches (a directory each)", "own"),
        "off": ("N hosts: compilecache, no single-flight", "own"),
        "on": ("N hosts: compilecache, single-flight", "own"),
    },
}

# compilecache on (variants off/on) or not (own), then the workload's main().
CHILD = r"""
import os, runpy, sys
if os.environ.get("BENCH_COMPILECACHE"):
    import compilecache
    compilecache.enable()
sys.argv = [sys.argv[1], *sys.argv[2:]]
runpy.run_module(sys.argv[0], run_name="__main__")
"""


def herd(framework: str, variant: str, n: int, root: Path) -> dict[str, Any]:
    """Start ``n`` processes at once; wait for all; wall, CPU, compiles and results."""
    salt = uuid.uuid4().hex
    env = common.clean_env(PYTHONPATH=str(SRC), JAX_PLATFORMS="cpu")
    if framework == "jax":
        args = ["compilecache.workloads.jax_step", "--layers", "8", "--salt", salt]
    else:
        args = ["compilecache.workloads.torch_step", "--model", "mlp", "--salt", salt]
    framework_only = variant.startswith("own")
    if framework == "jax" and framework_only:
        env["JAX_COMPILATION_CACHE_DIR"] = str(root / "jax-own")
        env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
        env["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"
    if framework == "torch":
        if variant.endswith("-host"):
            env["TORCHINDUCTOR_CACHE_DIR"] = str(root / "torch-host")
        else:
            args.append("--fresh-dirs")
    if not framework_only:
        env["BENCH_COMPILECACHE"] = "1"
        env["COMPILECACHE_URL"] = str(root / "store")
        if variant == "off":
            env["COMPILECACHE_WAIT_TIMEOUT"] = "0"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, *args],
            env=env,
            cwd=common.REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(n)
    ]
    outputs = [p.communicate(timeout=1800) for p in procs]
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    records = []
    for proc, (out, err) in zip(procs, outputs, strict=True):
        if proc.returncode != 0:
            raise RuntimeError(f"{framework}/{variant} exited {proc.returncode}:\n{err[-3000:]}")
        line = [x for x in out.splitlines() if x.startswith("{")][-1]
        records.append(json.loads(line))
    digests = {r.get("digest") for r in records}
    if len(digests) != 1:
        raise RuntimeError(f"{framework}/{variant}: the processes computed different results")
    return {
        "wall_s": wall,
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "writes": None if framework_only else _writes(root / "store"),
    }


def _writes(store: Path) -> int:
    """Entries the processes wrote (their stats, merged into the store at exit): one per
    compile that was stored, duplicates included."""
    sys.path.insert(0, str(SRC))
    from compilecache.stores.local import LocalStore

    s = LocalStore(store)
    try:
        return int(s.counters.read().get("writes", 0))
    finally:
        s.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--frameworks", default="jax,torch")
    parser.add_argument("--quick", action="store_true", help="one round")
    args = parser.parse_args()
    rounds = 1 if args.quick else args.rounds
    frameworks = [f for f in args.frameworks.split(",") if f]
    info = common.machine_info()
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        f: {v: [] for v in VARIANTS[f]} for f in frameworks
    }
    for framework in frameworks:
        for r, variant in common.rotations(list(VARIANTS[framework]), rounds):
            with tempfile.TemporaryDirectory(prefix="bench-sf-") as tmp:
                common.progress(f"{framework} round {r + 1}: {variant} x{args.processes}")
                result = herd(framework, variant, args.processes, Path(tmp))
                common.progress(f"  wall {result['wall_s']:.1f}s cpu {result['cpu_s']:.1f}s")
                runs[framework][variant].append(result)

    rows = []
    summary: dict[str, Any] = {}
    for framework in frameworks:
        for variant, (label, baseline) in VARIANTS[framework].items():
            results = runs[framework][variant]
            base = runs[framework][baseline]
            wall = common.median([x["wall_s"] for x in results])
            cpu = common.median([x["cpu_s"] for x in results])
            writes = results[0]["writes"]
            rows.append(
                [
                    framework,
                    label,
                    wall,
                    cpu,
                    common.ratio(wall, common.median([x["wall_s"] for x in base])),
                    common.ratio(cpu, common.median([x["cpu_s"] for x in base])),
                    "" if writes is None else writes,
                ]
            )
            summary[f"{framework}.{variant}"] = {"wall_s": wall, "cpu_s": cpu, "writes": writes}
    table = common.markdown_table(
        [
            "framework",
            "variant",
            "wall s (all done)",
            "CPU s (all processes)",
            "wall / own cache",
            "CPU / own cache",
            "entries written",
        ],
        rows,
    )
    markdown = "\n\n".join(
        [
            f"# {NAME}: {args.processes} processes start the same cold workload at once",
            f"`{common.command_line()}`, {rounds} round(s), medians.",
            "JAX: `jax_step --layers 8`; torch: `torch_step --model mlp` (forward + backward). "
            "Ratios: against the framework's own caches in the same setting (one host: one "
            "shared torch cache directory; N hosts: a directory per process).",
            table,
            common.machine_markdown(info),
        ]
    )
    print(table)
    data = common.results_record(NAME, info, args.quick, summary=summary, runs=runs)
    common.save_results(NAME, args.quick, data, markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
