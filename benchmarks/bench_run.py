"""What ``compilecache run`` adds to a whole process: the wrapper, and enabling compilecache.

    python benchmarks/bench_run.py [--rounds 20] [--quick] [--no-write]

Pairs, interleaved and rotated, each a fresh process timed whole from outside:

- ``python -c pass`` against ``compilecache run -- python -c pass``: the wrapper alone (a child
  that imports no framework loads the bootstrap and nothing of compilecache);
- ``python -c "import jax"`` against the same under ``compilecache run``: the wrapper and the
  cost of enabling compilecache when the program imports a framework (the cache's own imports;
  a store opened, JAX hooked), before any compile.

Prints the median wall time of each and the milliseconds added (the medians' difference) and
the ratio of the paired medians.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import (
    add_no_write,
    clean_env,
    machine_info,
    machine_markdown,
    markdown_table,
    median,
    progress,
    ratio,
    results_record,
    rotations,
    save_results,
)

COMPILECACHE = [sys.executable, "-m", "compilecache"]


def wall(args: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="5 rounds")
    add_no_write(parser)
    args = parser.parse_args()
    rounds = 5 if args.quick else args.rounds
    # The console script, as users run it (`python -m compilecache` adds runpy's imports).
    script = shutil.which("compilecache", path=str(Path(sys.executable).parent))
    wrapper = [script] if script else COMPILECACHE
    with tempfile.TemporaryDirectory(prefix="bench-run-") as tmp:
        env = clean_env(COMPILECACHE_URL=str(Path(tmp) / "store"))
        programs = ("pass", "import jax")
        variants: dict[str, list[str]] = {}
        for code in programs:
            variants[f"python -c {code!r}"] = [sys.executable, "-c", code]
            variants[f"compilecache run -- python -c {code!r}"] = [
                *wrapper,
                "run",
                "--",
                sys.executable,
                "-c",
                code,
            ]
        for args_ in variants.values():  # warm-up: bytecode, the store, the page cache
            wall(args_, env)
        times: dict[str, list[float]] = {name: [] for name in variants}
        for r, name in rotations(list(variants), rounds):
            times[name].append(wall(variants[name], env))
            if r and name == next(iter(variants)):
                progress(f"round {r + 1}/{rounds}")
    rows = []
    data = []
    for code in programs:
        plain = median(times[f"python -c {code!r}"])
        under = median(times[f"compilecache run -- python -c {code!r}"])
        rows.append([f"python -c {code!r}", plain * 1000, under * 1000, (under - plain) * 1000])
        rows[-1].append(ratio(under, plain))
        data.append(
            {
                "program": code,
                "plain_s": plain,
                "under_run_s": under,
                "added_ms": (under - plain) * 1000,
                "ratio": ratio(under, plain),
            }
        )
    machine = machine_info()
    table = markdown_table(
        ["program", "plain ms", "under compilecache run ms", "added ms", "ratio"], rows
    )
    markdown = (
        "# compilecache run: what it adds to a whole process\n\n"
        f"{machine_markdown(machine)}\n\nMedians of {rounds} interleaved rounds.\n\n{table}\n"
    )
    print(markdown)
    if not args.no_write:
        save_results(
            "bench_run",
            args.quick,
            results_record("bench_run", machine, args.quick, rows=data),
            markdown,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
