"""Put and get rates as the number of stored entries grows: compilecache vs JAX's bounded cache.

Both stores are filled to 1k, 10k and 100k entries of 1 KB (random bytes); at each level a fixed
number of puts (new keys, removed again untimed after each chunk, so the level stays exact) and
gets (random stored keys) are timed, in chunks that alternate between the two stores.

- compilecache: ``LocalStore`` filled through its own ``put`` (the fill rate is reported too);
- JAX: ``jax._src.lru_cache.LRUCache`` with ``max_size`` set (the bounded mode, the one that can
  be left on without filling the disk). Its ``put`` globs the whole directory and reads every
  entry's ``-atime`` file, so one put costs O(N) and filling it through ``put`` would cost O(N^2):
  it is filled by writing its two files per entry directly, exactly as its ``put`` lays them out,
  and its timed puts stop after a time budget per level (at least 3 puts are always measured).

    python benchmarks/bench_scale.py            # 1k, 10k, 100k entries; 1000 ops per level
    python benchmarks/bench_scale.py --quick    # 1k, 10k entries; 200 ops per level
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import common
from compilecache.stores.local import LocalStore

NAME = "bench_scale"
VALUE_SIZE = 1000
TARGET_RATE_100K_OVER_1K = 0.5  # our rate at 100k entries within 2x of our rate at 1k
CHUNK = 100


def jax_key() -> str:
    return f"jit_step-{uuid.uuid4().hex}{uuid.uuid4().hex}"


class Stores:
    def __init__(self, root: Path) -> None:
        from jax._src import lru_cache

        self.local = LocalStore(root / "compilecache")
        self.jax_dir = root / "jax"
        self.jax = lru_cache.LRUCache(str(self.jax_dir), max_size=100 * 1000**3)
        self.local_keys: list[str] = []
        self.jax_keys: list[str] = []
        self.fill_s = 0.0

    def fill(self, level: int, rng: random.Random) -> float:
        """Grow both stores to ``level`` entries; returns our put rate during the fill."""
        start = time.perf_counter()
        added = level - len(self.local_keys)
        for _ in range(added):
            key = "jax/" + jax_key()
            self.local.put(key, rng.randbytes(VALUE_SIZE))
            self.local_keys.append(key)
        fill_s = time.perf_counter() - start
        now = time.time_ns()
        while len(self.jax_keys) < level:
            # JAX's put layout: <key>-cache holds the value, <key>-atime 8 little-endian ns.
            key = jax_key()
            (self.jax_dir / f"{key}-cache").write_bytes(rng.randbytes(VALUE_SIZE))
            (self.jax_dir / f"{key}-atime").write_bytes(now.to_bytes(8, "little"))
            self.jax_keys.append(key)
        return added / fill_s if fill_s else float("nan")

    def close(self) -> None:
        self.local.close()


def _time_calls(fn: Callable[[str], object], keys: Sequence[str]) -> list[float]:
    """Seconds of ``fn(key)`` for each key."""
    times = []
    for key in keys:
        start = time.perf_counter()
        fn(key)
        times.append(time.perf_counter() - start)
    return times


def measure_level(
    stores: Stores, level: int, ops: int, jax_put_budget_s: float, rng: random.Random
) -> dict[str, Any]:
    fill_rate = stores.fill(level, rng)
    value = rng.randbytes(VALUE_SIZE)
    times: dict[str, list[float]] = {"local_put": [], "local_get": [], "jax_put": [], "jax_get": []}
    jax_put_spent = 0.0
    chunks = max(1, ops // CHUNK)
    for c in range(chunks):
        # Rotate which store goes first in each chunk.
        order = ["local", "jax"] if c % 2 == 0 else ["jax", "local"]
        for store in order:
            if store == "local":
                keys = ["jax/" + jax_key() for _ in range(CHUNK)]
                times["local_put"] += _time_calls(lambda k: stores.local.put(k, value), keys)
                for k in keys:
                    stores.local.delete(k)
                picks = rng.sample(stores.local_keys, CHUNK)
                times["local_get"] += _time_calls(stores.local.get, picks)
            else:
                if jax_put_spent < jax_put_budget_s or len(times["jax_put"]) < 3:
                    keys = []
                    for _ in range(CHUNK):
                        key = jax_key()
                        start = time.perf_counter()
                        stores.jax.put(key, value)
                        spent = time.perf_counter() - start
                        times["jax_put"].append(spent)
                        jax_put_spent += spent
                        keys.append(key)
                        if jax_put_spent >= jax_put_budget_s and len(times["jax_put"]) >= 3:
                            break
                    for key in keys:
                        (stores.jax_dir / f"{key}-cache").unlink()
                        (stores.jax_dir / f"{key}-atime").unlink()
                picks = rng.sample(stores.jax_keys, CHUNK)
                times["jax_get"] += _time_calls(stores.jax.get, picks)
        common.progress(
            f"  {level:>6} entries, chunk {c + 1}/{chunks}: jax puts so far "
            f"{len(times['jax_put'])} ({jax_put_spent:.1f} s)"
        )
    rates = {name: len(t) / sum(t) if t else float("nan") for name, t in times.items()}
    return {
        "entries": level,
        "ops": {name: len(t) for name, t in times.items()},
        "rate_ops_per_s": rates,
        "median_latency_s": {name: common.median(t) for name, t in times.items()},
        "local_fill_put_rate_ops_per_s": fill_rate,
    }


def _level_name(n: int) -> str:
    return f"{n // 1000}k" if n % 1000 == 0 else str(n)


def render(
    info: dict[str, Any], levels: list[dict[str, Any]], verdicts: list[list[Any]], command: str
) -> str:
    labels = {
        "local_put": "compilecache LocalStore.put",
        "local_get": "compilecache LocalStore.get",
        "jax_put": "JAX LRUCache.put, bounded",
        "jax_get": "JAX LRUCache.get, bounded",
    }
    names = [_level_name(b["entries"]) for b in levels]
    rows = [
        [label, *(b["rate_ops_per_s"][key] for b in levels), *(b["ops"][key] for b in levels)]
        for key, label in labels.items()
    ]
    rows.append(
        ["compilecache put while filling", *(b["local_fill_put_rate_ops_per_s"] for b in levels),
         *("" for _ in levels)]
    )  # fmt: skip
    latency_rows = [
        [label, *(b["median_latency_s"][key] * 1000.0 for b in levels)]
        for key, label in labels.items()
    ]
    return "\n".join(
        [
            "# Scale: put and get rates vs number of entries",
            "",
            common.machine_markdown(info),
            "",
            f"Reproduce: `{command}`",
            "",
            f"Values of {VALUE_SIZE} random bytes. Both stores hold exactly the stated number of "
            "entries while timed (new keys are removed after each chunk of "
            f"{CHUNK} puts, untimed). Chunks alternate between the stores. JAX's puts stop after a "
            "time budget per level (its put globs the directory: O(N)); `ops` says how many were "
            "timed. JAX's store is filled by writing its files directly (same layout as its put).",
            "",
            "## Rates (ops/s; higher is better)",
            "",
            common.markdown_table(
                ["operation", *(f"{n} ops/s" for n in names), *(f"{n} ops" for n in names)], rows
            ),
            "",
            "## Median latency (ms)",
            "",
            common.markdown_table(["operation", *(f"{n}" for n in names)], latency_rows),
            "",
            "## Target: our rate at the largest level within 2x of our rate at 1k",
            "",
            common.markdown_table(["operation", "rate ratio", "target >= 0.5"], verdicts),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="1k and 10k entries, 200 ops")
    parser.add_argument("--levels", type=int, nargs="+", help="entry counts (default 1k 10k 100k)")
    parser.add_argument("--ops", type=int, help="timed puts and gets per store and level")
    parser.add_argument(
        "--jax-put-budget", type=float, help="seconds of JAX puts per level (default 30; quick 5)"
    )
    parser.add_argument("--dir", help="where to create the stores (default: a temporary dir)")
    common.add_no_write(parser)
    args = parser.parse_args(argv)
    levels = sorted(args.levels or ([1000, 10000] if args.quick else [1000, 10000, 100000]))
    ops = args.ops or (200 if args.quick else 1000)
    budget = args.jax_put_budget or (5.0 if args.quick else 30.0)
    rng = random.Random(0)
    info = common.machine_info()
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-scale-", dir=args.dir) as tmp:
        stores = Stores(Path(tmp))
        try:
            for level in levels:
                common.progress(f"{level} entries: filling, then {ops} puts and gets per store")
                results.append(measure_level(stores, level, ops, budget, rng))
        finally:
            stores.close()
    base, top = results[0], results[-1]
    verdicts = []
    for key, label in (("local_put", "compilecache put"), ("local_get", "compilecache get")):
        r = common.ratio(top["rate_ops_per_s"][key], base["rate_ops_per_s"][key])
        name = f"{label}: {_level_name(top['entries'])} / {_level_name(base['entries'])}"
        verdicts.append([name, r, "met" if r >= TARGET_RATE_100K_OVER_1K else "MISSED"])
    command = common.command_line()
    markdown = render(info, results, verdicts, command)
    print(markdown)
    if not args.no_write:
        data = common.results_record(
            NAME,
            info,
            args.quick,
            value_size=VALUE_SIZE,
            target={"rate_largest_over_1k_min": TARGET_RATE_100K_OVER_1K},
            targets_met=all(v[2] == "met" for v in verdicts),
            levels=results,
        )
        common.save_results(NAME, args.quick, data, markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
