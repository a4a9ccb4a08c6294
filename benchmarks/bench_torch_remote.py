"""A new machine warm from one remote store, with no local level in front, against a local one.

Every run is a fresh process of ``compilecache.workloads.torch_step`` (forward and backward of one
model) on empty torch directories (a new machine), except torch's own warm start. The remote store
is one Redis behind a delay line adding ``--delay-ms`` to each direction (a store a round trip of
twice that away), used alone: nothing is prefetched into a local level, so what a warm start
costs over the local store is its round trips. Per model, once: a cold run under compilecache on
each store (the local directory, the Redis). Then, interleaved over ``--rounds``:

- ``eager``: no torch.compile (the baseline a compile's overhead is measured from);
- ``torch_warm_local``: torch's own warm start on its directories (what the others are held
  against);
- ``cc_local``: ``compilecache run`` with a local directory as the store;
- ``cc_remote``: ``compilecache run`` with the Redis alone as the store.

The compile overhead of a run is its wall time minus the eager run's of the same round; ratios
are medians over rounds of the per-round ratios against ``torch_warm_local``. ``remote - local``
is the median per-round difference of the first steps of ``cc_remote`` and ``cc_local``: the
network's share, to hold against the round trip. Every compiled run must compute the same loss
and gradients (digest).

    python benchmarks/bench_torch_remote.py                         # gpt2 and qwen2, 3 rounds
    python benchmarks/bench_torch_remote.py --models mlp --rounds 5 --delay-ms 25

To measure another commit, run this file from a worktree of it with that tree's ``src`` first on
``PYTHONPATH`` (the children import compilecache from the tree this file is in).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import common
from compilecache import runner

NAME = "bench_torch_remote"
SRC = common.REPO_ROOT / "src"
MODELS = {
    "mlp": "MLP 256-1024-256",
    "gpt2": "transformers GPT2LMHeadModel, 2 layers, 4 heads, width 128, vocabulary 512",
    "qwen2": "transformers Qwen2ForCausalLM, Llama's shape, biases on the attention projections",
}
VARIANTS = {
    "eager": "eager (no torch.compile)",
    "torch_warm_local": "torch warm local disk (same dirs)",
    "cc_local": "compilecache, new machine, a local store",
    "cc_remote": "compilecache, new machine, one remote Redis alone",
}

sys.path.insert(0, str(common.REPO_ROOT))  # tests.servers starts Redis and the delay line


class Model:
    """The directories and stores of one model's runs."""

    def __init__(self, model: str, root: Path, redis_url: str) -> None:
        self.model = model
        self.root = root / model
        self.root.mkdir(parents=True)
        self.salt = f"bench-{uuid.uuid4().hex}"
        self.local = common.fresh_torch_dirs(self.root)
        self.stores = {"cc_local": str(self.root / "store"), "cc_remote": redis_url}

    def _args(self, extra: list[str]) -> list[str]:
        module = "compilecache.workloads.torch_step"
        return [sys.executable, "-m", module, "--model", self.model, "--salt", self.salt, *extra]

    def _run(self, dirs: dict[str, str], store: str | None, extra: list[str]) -> dict[str, Any]:
        env = common.clean_env(**dirs, PYTHONPATH=str(SRC))
        if store is not None:
            env = runner.child_environment(env, None, {"COMPILECACHE_URL": store})
        proc = common.run_json(self._args(extra), env, timeout=1800)
        return {"wall_s": proc.wall_s, **proc.record}

    def seed(self) -> dict[str, float]:
        """The cold runs that fill torch's local directories and each store."""
        walls = {"torch_cold": self._run(self.local, None, [])["wall_s"]}
        for variant, store in self.stores.items():
            fresh = common.fresh_torch_dirs(self.root)
            walls[f"{variant}_cold"] = self._run(fresh, store, [])["wall_s"]
        for name, wall in walls.items():
            common.progress(f"  {self.model:<5} {name:<18} wall {wall:7.2f} s")
        return walls

    def run(self, variant: str) -> dict[str, Any]:
        if variant == "torch_warm_local":
            record = self._run(self.local, None, [])
        else:
            fresh = common.fresh_torch_dirs(self.root)
            extra = ["--eager"] if variant == "eager" else []
            record = self._run(fresh, self.stores.get(variant), extra)
        common.progress(
            f"  {self.model:<5} {variant:<18} wall {record['wall_s']:7.2f} s  "
            f"first step {record['first_step_s']:6.2f} s"
        )
        return {"variant": variant, **record}


def summarize(model: str, runs: list[dict[str, Any]], rounds: int) -> dict[str, Any]:
    compiled = [v for v in VARIANTS if v != "eager"]
    overhead, ratios = common.overhead_against(runs, compiled, "torch_warm_local")
    _, step_ratios = common.overhead_against(runs, compiled, "torch_warm_local", "first_step_s")
    by_round: dict[int, dict[str, float]] = {}
    for r in runs:
        by_round.setdefault(r["round"], {})[r["variant"]] = r["first_step_s"]
    network = [
        steps["cc_remote"] - steps["cc_local"]
        for steps in by_round.values()
        if "cc_remote" in steps and "cc_local" in steps
    ]
    return {
        "model": model,
        "rounds": rounds,
        "first_step_s": {
            v: common.median([r["first_step_s"] for r in runs if r["variant"] == v])
            for v in VARIANTS
        },
        "overhead_s": {k: common.median(v) for k, v in overhead.items()},
        "ratio_to_torch_warm_local": {k: common.median(v) for k, v in ratios.items()},
        "first_step_ratio": {k: common.median(v) for k, v in step_ratios.items()},
        "remote_minus_local_first_step_s": common.median(network),
        "identical": len({r["digest"] for r in runs if r["variant"] != "eager"}) == 1,
    }


def markdown(info: dict[str, Any], summaries: list[dict[str, Any]], delay_ms: float) -> str:
    lines = [
        "# A new machine warm from one remote store alone, against a local one",
        "",
        common.machine_markdown(info),
        "",
        f"Reproduce: `{common.command_line()}`",
        "",
        f"The remote store is one Redis behind a delay line of {delay_ms:g} ms each way (a round "
        f"trip of {2 * delay_ms:g} ms), with no local level in front. Each round runs every "
        "variant once, each a fresh process, in rotating order; overheads are wall time minus the "
        "eager run's of the same round; ratios are medians of per-round ratios against torch's "
        "own warm local start.",
    ]
    for summary in summaries:
        lines += ["", f"## {MODELS[summary['model']]}", ""]
        rows = [
            [
                label,
                summary["first_step_s"][variant],
                summary["overhead_s"].get(variant, float("nan")),
                summary["ratio_to_torch_warm_local"].get(variant, float("nan")),
                summary["first_step_ratio"].get(variant, float("nan")),
            ]
            for variant, label in VARIANTS.items()
        ]
        headers = ["variant", "first_step_s", "overhead_s", "/ torch warm local"]
        lines.append(common.markdown_table([*headers, "first step / torch's"], rows))
        lines += [
            "",
            f"First step, remote minus local (median of rounds): "
            f"{summary['remote_minus_local_first_step_s']:.3f} s. Identical loss and gradients "
            f"in every compiled run: {'yes' if summary['identical'] else 'NO'}.",
        ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=["gpt2", "qwen2"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--delay-ms", type=float, default=25.0, help="each way")
    common.add_no_write(parser)
    args = parser.parse_args()
    from tests.servers import DelayProxy, RedisServer

    info = common.machine_info()
    with tempfile.TemporaryDirectory(prefix="bench-torch-remote-") as tmp:
        redis = RedisServer(Path(tmp) / "redis").start()
        proxy = DelayProxy(redis.port, args.delay_ms / 1000)

        def bench_of(model: str) -> Model:
            url = f"redis://127.0.0.1:{proxy.port}/0/{model}-{uuid.uuid4().hex[:8]}"
            return Model(model, Path(tmp), url)

        try:
            summaries, seeds, all_runs = common.measure_models(
                args.models, bench_of, list(VARIANTS), args.rounds, summarize
            )
        finally:
            proxy.close()
            redis.stop()
    text = markdown(info, summaries, args.delay_ms)
    data = common.results_record(
        NAME, info, False, summaries=summaries, seeds=seeds, runs=all_runs, delay_ms=args.delay_ms
    )
    name = NAME if args.models == ["gpt2", "qwen2"] else f"{NAME}-{'-'.join(args.models)}"
    common.publish(name, text, not args.no_write, data)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
