"""Shared helpers of the benchmarks: machine info, timing, subprocesses, tables, results files.

Every benchmark compares variants measured in the same run, interleaved (A B C, B C A, ...), and
reports medians and ratios: the machines these run on are shared and noisy, so absolute numbers
drift between runs while ratios of interleaved medians hold.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent


def compile_package() -> None:
    """Byte-compile compilecache's modules, as pip does when it installs a wheel. A checkout run
    with PYTHONDONTWRITEBYTECODE=1 (as on this machine) otherwise compiles compilecache from
    source in every child process: 40 ms of import and enable() that an installed compilecache
    does not pay, where JAX and torch, installed by pip, have their bytecode."""
    import compileall

    compileall.compile_dir(str(REPO_ROOT / "src" / "compilecache"), quiet=1)


compile_package()
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"

# Variables that would route a child process through some persistent cache behind our back.
_CACHE_ENV_PREFIXES = ("COMPILECACHE_", "JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE")


# -- machine -------------------------------------------------------------------------------------


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git_state() -> str:
    """The commit measured, marked ``+dirty`` when ``src/`` has uncommitted changes."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--", "src")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return commit + ("+dirty" if dirty else "")


def machine_info() -> dict[str, Any]:
    """What the numbers were measured on (no package is imported to find versions)."""
    try:
        load = list(os.getloadavg())
    except OSError:
        load = []
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "cores": os.cpu_count(),
        "cpu": _cpu_model(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "jax": _version("jax"),
        "jaxlib": _version("jaxlib"),
        "compilecache": _version("compilecache"),
        "git": _git_state(),
        "load_average_at_start": [round(x, 2) for x in load],
    }


def machine_markdown(info: Mapping[str, Any]) -> str:
    load = ", ".join(str(x) for x in info.get("load_average_at_start", []))
    return (
        f"Measured {info['date']} on {info['cores']} cores ({info['cpu']}), {info['platform']}, "
        f"Python {info['python']}, jax {info['jax']} / jaxlib {info['jaxlib']}, "
        f"compilecache {info['compilecache']} (git {info.get('git', 'unknown')}); "
        f"load average at start: {load}."
    )


# -- statistics and timing -----------------------------------------------------------------------


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else float("nan")


def time_once(fn: Callable[[], object]) -> float:
    """Seconds one call of ``fn`` takes."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def rotations(names: Sequence[str], rounds: int) -> Iterator[tuple[int, str]]:
    """``(round, name)`` pairs, each round starting one variant later: A B C, B C A, C A B, ...

    Interleaving spreads slow phases of a shared machine over all variants; rotating the order
    cancels "the first in a round is always cold" effects.
    """
    n = len(names)
    for r in range(rounds):
        for i in range(n):
            yield r, names[(r + i) % n]


# -- subprocesses --------------------------------------------------------------------------------


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without any persistent-cache settings or bootstrap, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_CACHE_ENV_PREFIXES)}
    # A `compilecache run` bootstrap directory on PYTHONPATH would enable us in every child.
    env.pop("PYTHONPATH", None)
    env.update(extra)
    return env


def fresh_torch_dirs(root: Path) -> dict[str, str]:
    """Empty ``TORCHINDUCTOR_CACHE_DIR`` and ``TMPDIR`` under ``root``: a new machine's."""
    base = root / f"dirs-{uuid.uuid4().hex[:8]}"
    (base / "inductor").mkdir(parents=True)
    (base / "tmp").mkdir()
    return {"TORCHINDUCTOR_CACHE_DIR": str(base / "inductor"), "TMPDIR": str(base / "tmp")}


@dataclass(frozen=True)
class ProcessResult:
    """The last JSON object a child printed, its wall and CPU time seen from the parent (CPU:
    user + system of the child and its threads), its stderr."""

    record: dict[str, Any]
    wall_s: float
    cpu_s: float
    stderr: str


def run_json(
    args: Sequence[str], env: Mapping[str, str], *, timeout: float = 900.0
) -> ProcessResult:
    """Run ``args`` in a fresh process; parse the last stdout line that is a JSON object."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(
        list(args),
        env=dict(env),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(args)} exited with {proc.returncode}:\n{proc.stderr[-4000:]}"
        )
    for line in reversed(proc.stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            record: dict[str, Any] = json.loads(line)
            return ProcessResult(record, wall, cpu, proc.stderr)
    raise RuntimeError(f"{' '.join(args)} printed no JSON line:\n{proc.stdout[-2000:]}")


# -- output --------------------------------------------------------------------------------------


def fmt(value: object, digits: int = 3) -> str:
    if isinstance(value, float):
        if value != value:  # NaN
            return "n/a"
        if value == 0.0:
            return "0"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.{digits}g}" if abs(value) < 0.01 else f"{value:.{digits}f}"
    return str(value)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers], *[[fmt(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"

    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(cells[0]), sep, *(line(r) for r in cells[1:])])


def add_no_write(parser: argparse.ArgumentParser) -> None:
    """The ``--no-write`` option of the benchmarks whose quick runs write ``<name>-quick``."""
    parser.add_argument(
        "--no-write",
        action="store_true",
        help="do not write results/ (a --quick run writes <name>-quick.*)",
    )


def results_record(
    name: str, machine: Mapping[str, Any], quick: bool, **fields: Any
) -> dict[str, Any]:
    """A results file's JSON: which benchmark, how it was invoked, on what machine, then
    ``fields``."""
    return {
        "benchmark": name,
        "command": command_line(),
        "machine": machine,
        "quick": quick,
        **fields,
    }


def save_results(name: str, quick: bool, data: dict[str, Any], markdown: str) -> None:
    """Write ``results/<name>.{json,md}``; a quick run writes ``<name>-quick`` and so never
    replaces the full results."""
    paths = write_results(f"{name}-quick" if quick else name, data, markdown)
    progress(f"wrote {paths[0]} and {paths[1]}")


def interleaved(
    run: Callable[[str], dict[str, Any] | None], variants: Sequence[str], rounds: int
) -> list[dict[str, Any]]:
    """``rounds`` rounds of every variant (rotating order), each record marked with its round;
    a variant whose ``run`` gives ``None`` (it could not run) is left out of that round."""
    records = []
    for number, variant in rotations(variants, rounds):
        record = run(variant)
        if record is not None:
            record["round"] = number
            records.append(record)
    return records


def measure_models(
    models: Sequence[str],
    bench_of: Callable[[str], Any],
    variants: Sequence[str],
    rounds: int,
    summarize: Callable[[str, list[dict[str, Any]], int], dict[str, Any]],
) -> tuple[list[dict[str, Any]], dict[str, Any], list[dict[str, Any]]]:
    """Per model, ``bench_of(model)``'s cold seeding runs (its ``seed()``), then ``rounds``
    interleaved rounds of ``variants`` (its ``run(variant)``): the summaries, the seeds by model
    and every run, marked with its model."""
    summaries, seeds, all_runs = [], {}, []
    for model in models:
        bench = bench_of(model)
        progress(f"{model}: seeding")
        seeds[model] = bench.seed()
        runs = interleaved(bench.run, variants, rounds)
        summaries.append(summarize(model, runs, rounds))
        all_runs += [{"model": model, **r} for r in runs]
    return summaries, seeds, all_runs


def overhead_against(
    runs: Sequence[Mapping[str, Any]], variants: Sequence[str], base: str, field: str = "wall_s"
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Per round, each variant's compile overhead (its ``field``, the whole process's wall time
    unless told, minus the ``eager`` run's of the round) and its ratio to ``base``'s overhead:
    two lists per variant."""
    by_round: dict[int, dict[str, Mapping[str, Any]]] = {}
    for run in runs:
        by_round.setdefault(run["round"], {})[run["variant"]] = run
    overhead: dict[str, list[float]] = {v: [] for v in variants}
    ratios: dict[str, list[float]] = {v: [] for v in variants}
    for of_round in by_round.values():
        eager = of_round["eager"][field]
        reference = of_round[base][field] - eager
        for name in variants:
            if name in of_round:
                extra = of_round[name][field] - eager
                overhead[name].append(extra)
                ratios[name].append(ratio(extra, reference))
    return overhead, ratios


def publish(name: str, text: str, write: bool, data: Mapping[str, Any]) -> None:
    """Print the results' markdown; unless told not to, write it and ``data`` to results/."""
    print(text)
    if write:
        paths = write_results(name, data, text)
        progress(f"wrote {paths[0]} and {paths[1]}")


def write_results(name: str, data: Mapping[str, Any], markdown: str) -> tuple[Path, Path]:
    """Write ``results/<name>.json`` and ``results/<name>.md``; return both paths."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    json_path = RESULTS_DIR / f"{name}.json"
    md_path = RESULTS_DIR / f"{name}.md"
    json_path.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
    md_path.write_text(markdown.rstrip() + "\n")
    return json_path, md_path


def command_line() -> str:
    """How this benchmark was invoked, for the results file."""
    script = Path(sys.argv[0])
    with contextlib.suppress(ValueError):
        script = script.resolve().relative_to(REPO_ROOT)
    return " ".join(["python", str(script), *sys.argv[1:]])


def progress(message: str) -> None:
    """Progress goes to stderr so that stdout holds only the tables."""
    print(message, file=sys.stderr, flush=True)
