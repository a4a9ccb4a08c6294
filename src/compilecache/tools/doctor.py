"""``compilecache doctor -- CMD``: run CMD twice against a scratch store and say what will not hit.

The two runs use a fresh local store in a temporary directory and the ``compilecache run``
bootstrap, so every Python process of CMD records its compiles (key, function name, key
components, stored or not and why) and a few facts (framework versions and settings) in the run
spool (see :meth:`compilecache.session.Session.flush_stats`). Then:

(a) **Unstable keys.** The second run is identical to the first, so every function it compiles
    should hit what the first stored. A function that misses under a key the first run never
    used has nondeterminism in its key; the component that moved is named by comparing the key
    components of the two runs (host callback or custom-partitioning pointers in the
    computation, a temporary path in compile options, a custom_hook that returns a pid, ...).
(b) **Never stored.** Compiles that were not written, with the reason the integration saw: host
    callbacks or JAX's own minimum compile time (from ``compiler._cache_write``), the store's
    read-only mode or ``COMPILECACHE_MIN_COMPILE_TIME`` (from the cache layer), a failed write.
(c) **Pitfalls.** Settings that defeat sharing or caching, or trust every writer of a shared
    store (nothing signed), from the processes' facts and the environment: a program-set JAX
    minimum compile time, a framework setting that changed what compilecache does (a cache
    switched off, a directory served from the store), torch precompiled headers turned off, OMP
    thread counts left to each host's core count.

Every finding carries a concrete fix.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from compilecache import config as config_mod
from compilecache import frameworks, unsigned_warning
from compilecache.entry import is_record
from compilecache.frameworks.facts import ProcessFacts
from compilecache.runtime import explain
from compilecache.stores import registry

# Output of a failed run kept for the report.
_TAIL_CHARS = 2000


# Keys of torch's kernel binaries, precompiled headers and autotune records: parts of a graph,
# not functions.
_GRAPH_PARTS = ("torch/kernel/", "torch/pch/", "torch/autotune/")


# -- results -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """One problem: what, why, and the fix."""

    kind: str  # "unstable", "not_stored", "pitfall", "failed", "advice"
    title: str
    detail: str
    fix: str
    framework: str = ""
    name: str = ""
    components: tuple[str, ...] = ()

    @property
    def advisory(self) -> bool:
        """Advice (a setting worth knowing about) does not make the exit status 1."""
        return self.kind == "advice"


@dataclass
class RunResult:
    """What one run of the command left in its spool."""

    returncode: int
    output_tail: str = ""
    events: list[dict[str, Any]] = field(default_factory=list)
    facts: list[ProcessFacts] = field(default_factory=list)

    def count(self, event: str, *, stored: bool | None = None) -> int:
        return sum(
            1
            for e in self.events
            if e.get("event") == event and (stored is None or e.get("stored") is stored)
        )


@dataclass
class DoctorReport:
    command: list[str]
    runs: list[RunResult]
    findings: list[Finding]
    stable: list[str]

    @property
    def ok(self) -> bool:
        """No problem found (advice alone is no problem)."""
        return not any(not f.advisory for f in self.findings)

    def to_json(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "ok": self.ok,
            "runs": [
                {
                    "returncode": r.returncode,
                    "hits": r.count("hit"),
                    "misses": r.count("miss"),
                    "stored": r.count("miss", stored=True),
                    "not_stored": r.count("miss", stored=False),
                    "processes": len(r.facts),
                }
                for r in self.runs
            ],
            "stable": self.stable,
            "findings": [asdict(f) for f in self.findings],
        }

    def text(self) -> str:
        lines = [f"compilecache doctor: ran {' '.join(self.command)!s} twice on a scratch store"]
        for i, run in enumerate(self.runs, 1):
            lines.append(
                f"  run {i}: exit {run.returncode}, {run.count('miss')} compiles "
                f"({run.count('miss', stored=True)} stored), {run.count('hit')} hits"
            )
        if self.stable:
            lines.append(f"  {len(self.stable)} functions hit in the second run: OK")
        sections = (
            ("failed", "The command failed"),
            ("unstable", "Keys that differ between two identical runs (they will never hit)"),
            ("not_stored", "Compiles that were never stored"),
            ("pitfall", "Configuration pitfalls"),
            ("advice", "Advice"),
        )
        for kind, heading in sections:
            found = [f for f in self.findings if f.kind == kind]
            if not found:
                continue
            lines += ["", f"{heading}:"]
            for f in found:
                lines.append(f"  - {f.title}")
                lines += [f"      {line}" for line in f.detail.splitlines() if line]
                lines.append(f"      fix: {f.fix}")
        if self.ok and len(self.runs) > 1:
            lines += ["", "No problems found: every compile of the second run hit the cache."]
        return "\n".join(lines)


# -- running -----------------------------------------------------------------------------------


def read_spool(spool: Path) -> tuple[list[dict[str, Any]], list[ProcessFacts]]:
    """(events, facts) left by every process of one run. Not the explanations of records about
    compiles (a JAX trace traced again, or not kept): no compile, so no miss of one, and its
    executable's own lookup is an event of its own."""
    events: list[dict[str, Any]] = []
    facts: list[ProcessFacts] = []
    for path in sorted(spool.glob("*.events.jsonl")):
        try:
            lines = path.read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                item = json.loads(line)
            except ValueError:
                continue
            if not isinstance(item, dict):
                continue
            if "facts" in item and isinstance(item["facts"], dict):
                facts.append(ProcessFacts.from_json(item["facts"]))
            elif not is_record(str(item.get("key", ""))):
                events.append(item)
    return events, facts


def run_twice(
    command: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    workdir: str | None = None,
) -> list[RunResult]:
    """Run ``command`` twice under the bootstrap, both times against one fresh scratch store."""
    from compilecache import runner

    base = dict(os.environ if env is None else env)
    # The scratch store holds only what these two runs write: they need trust nobody (a reader
    # of a fleet's store would otherwise write nothing there, and nothing could be compared).
    base.pop("COMPILECACHE_TRUSTED_KEYS", None)
    results: list[RunResult] = []
    with tempfile.TemporaryDirectory(prefix="compilecache-doctor-", dir=workdir) as tmp:
        store = Path(tmp) / "store"
        for i in (1, 2):
            spool = Path(tmp) / f"run{i}"
            spool.mkdir()
            # Each run on a "new machine" for the frameworks' own directories: torch's and
            # Triton's local caches would otherwise answer the second run themselves, and the
            # keys of the two runs would never be compared.
            fresh = {
                "COMPILECACHE_URL": str(store),
                "TORCHINDUCTOR_CACHE_DIR": str(spool / "torchinductor"),
                "TRITON_CACHE_DIR": str(spool / "triton"),
            }
            child_env = runner.child_environment(base, str(spool), fresh)
            try:
                proc = subprocess.run(
                    list(command),
                    env=child_env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    errors="replace",
                    timeout=timeout,
                )
                code, output = proc.returncode, proc.stdout or ""
            except subprocess.TimeoutExpired as exc:
                out = exc.output
                text = out.decode(errors="replace") if isinstance(out, bytes) else (out or "")
                code, output = 124, text + f"\n(timed out after {timeout}s)"
            except OSError as exc:
                code, output = 127, f"cannot start {command[0]!r}: {exc}"
            events, facts = read_spool(spool)
            results.append(RunResult(code, output[-_TAIL_CHARS:], events, facts))
            if code != 0:
                break  # the command failed: it is reported, and not run again
    return results


def doctor(
    command: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> DoctorReport:
    """Run ``command`` twice and analyse what it left."""
    base = dict(os.environ if env is None else env)
    runs = run_twice(command, env=base, timeout=timeout)
    return analyze(list(command), runs, base)


# -- analysis ----------------------------------------------------------------------------------

_UNSTABLE_FIX = {
    "computation": (
        "Make the lowered program identical in every run: host callbacks and custom "
        "partitioning embed Python object addresses (for custom_partitioning set "
        "jax.config.update('jax_remove_custom_partitioning_ptr_from_cache_key', True)); values "
        "captured as constants (time, random seeds, pid, rank, paths) must become arguments."
    ),
    "compile_options": (
        "Pass the same compile options in every run: replace per-run values in "
        "jit(..., compiler_options=...) (a tempfile.mkdtemp() path, a rank, a timestamp) by "
        "constants."
    ),
    "custom_hook": (
        "Make jax._src.cache_key.custom_hook() return the same value in every run (only what "
        "must select a different executable; no pid, time or path)."
    ),
    "XLA flags": (
        "Set XLA_FLAGS identically in every run; per-run paths belong in flags JAX excludes "
        "from the key (--xla_dump_to)."
    ),
    "accelerator_config": "Run with the same devices (count and kind) every time.",
    "cpp_runtime_thread_count": (
        "Pin the thread count: export OMP_NUM_THREADS=<n> (the same n everywhere)."
    ),
}
_UNSTABLE_DEFAULT = (
    "Find what differs per run in the component named above and make it constant "
    "(`compilecache show KEY` lists an entry's components)."
)


def _key_sets(run: RunResult) -> dict[tuple[str, str], set[str]]:
    keys: dict[tuple[str, str], set[str]] = {}
    for e in run.events:
        if e.get("event") in ("hit", "miss"):
            keys.setdefault((str(e.get("framework")), str(e.get("name"))), set()).add(
                str(e.get("key"))
            )
    return keys


def _misses(run: RunResult) -> list[dict[str, Any]]:
    return [e for e in run.events if e.get("event") == "miss"]


def _str_map(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, Mapping) else {}


def _unstable(first: RunResult, second: RunResult) -> list[Finding]:
    seen_first = _key_sets(first)
    first_misses = _misses(first)
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for e in _misses(second):
        ident = (str(e.get("framework")), str(e.get("name")))
        if str(e.get("key")) not in seen_first.get(ident, set()):
            grouped.setdefault(ident, []).append(e)
    findings: list[Finding] = []
    for (framework, name), events in sorted(grouped.items()):
        if (framework, name) not in seen_first:
            findings.append(
                Finding(
                    "unstable",
                    f"{name}: compiled in the second run only",
                    "The first run never compiled this function: the program takes "
                    "different paths in identical runs.",
                    "Make the compiled functions and their shapes independent of time, "
                    "randomness and the environment.",
                    framework,
                    name,
                )
            )
            continue
        frameworks.load_vocabularies()
        vocab = explain.vocabulary(framework)
        moved: dict[str, explain.Difference] = {}
        for e in events:
            comps = _str_map(e.get("components"))
            candidates = [
                m
                for m in first_misses
                if (str(m.get("framework")), str(m.get("name"))) == (framework, name)
            ]
            if not comps or not candidates:
                continue
            nearest = min(
                candidates,
                key=lambda m: explain.distance(
                    _str_map(m.get("components")), comps, vocab.identity
                ),
            )
            for d in explain.diff(
                _str_map(nearest.get("components")),
                comps,
                _str_map(nearest.get("readable")),
                _str_map(e.get("readable")),
                vocab,
            ):
                moved.setdefault(d.component, d)
        if moved:
            detail = "\n".join(f"{d.text}" for d in moved.values())
            primary = next(iter(moved))
            fix = _UNSTABLE_FIX.get(primary, _UNSTABLE_DEFAULT)
        else:
            detail = "The key differs, but no recorded key component moved."
            fix = _UNSTABLE_DEFAULT
        findings.append(
            Finding(
                "unstable",
                f"{name}: the key differs between two identical runs "
                f"({', '.join(vocab.labels.get(c, c) for c in moved) or 'unknown component'} "
                "moved)",
                detail,
                fix,
                framework,
                name,
                tuple(moved),
            )
        )
    # Stored by the first run under the same key, and still missed: the entry went missing.
    stored_first = {str(m.get("key")) for m in first_misses if m.get("stored")}
    for e in _misses(second):
        if str(e.get("key")) in stored_first:
            name = str(e.get("name"))
            findings.append(
                Finding(
                    "unstable",
                    f"{name}: stored by the first run, missed by the second under the same key",
                    "The entry was lost between the runs (evicted from a store that is too "
                    "small, or removed as corrupt).",
                    "Raise COMPILECACHE_MAX_SIZE; run `compilecache verify`.",
                    str(e.get("framework")),
                    name,
                )
            )
    return findings


def _not_stored_fix(reason: str, cfg: config_mod.Config) -> str:
    if "host callbacks" in reason:
        return (
            "Keep host callbacks (jax.debug.print, pure_callback, io_callback) out of "
            "expensive jitted functions, or behind a debug switch; JAX never caches them."
        )
    if "jax_persistent_cache_min_compile_time_secs" in reason:
        return (
            "Remove jax.config.update('jax_persistent_cache_min_compile_time_secs', ...) from "
            "the program (or set it to 0): compilecache applies COMPILECACHE_MIN_COMPILE_TIME "
            "itself, with the exact compile time."
        )
    if "COMPILECACHE_MIN_COMPILE_TIME" in reason:
        return (
            f"Lower COMPILECACHE_MIN_COMPILE_TIME (now {cfg.min_compile_time:g}s) if these "
            "compiles matter at start-up."
        )
    if "read-only" in reason:
        return "Unset COMPILECACHE_READ_ONLY in the job that should fill the cache."
    if "process 0" in reason:
        return (
            "Expected in multi-process jobs: process 0 writes for everyone. Give every host "
            "a shared level (COMPILECACHE_URL=~/.cache/compilecache,redis://...) so the other "
            "ranks read and backfill from it."
        )
    return "Look at the warnings compilecache printed: the store could not be written."


def _not_stored(runs: Sequence[RunResult], cfg: config_mod.Config) -> list[Finding]:
    grouped: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for run in runs:
        for e in _misses(run):
            if e.get("stored") is False:
                ident = (str(e.get("framework")), str(e.get("name")), str(e.get("reason") or ""))
                grouped.setdefault(ident, []).append(e)
    findings = []
    for (framework, name, reason), events in sorted(grouped.items()):
        seconds = sum(float(e.get("compile_time_s") or 0.0) for e in events)
        findings.append(
            Finding(
                "not_stored",
                f"{name}: never stored: {reason or 'unknown reason'}",
                f"{len(events)} compiles in the two runs, {seconds:.2f}s of compile time, "
                "repeated by every process.",
                _not_stored_fix(reason, cfg),
                framework,
                name,
            )
        )
    return findings


def _pitfalls(
    runs: Sequence[RunResult], env: Mapping[str, str], cfg: config_mod.Config
) -> list[Finding]:
    found: dict[str, Finding] = {}
    facts = [f for run in runs for f in run.facts]
    if not cfg.shared_writer:
        private = registry.has_private_level(cfg.url)
        found["reader"] = Finding(
            "pitfall",
            "this configuration writes nothing to the shared store",
            config_mod.READER_REASON
            + (
                "; its own compiles stay in its local level, signed with this host's key."
                if private
                else ", and with a single level nothing at all (the runs above used a scratch "
                "store, without COMPILECACHE_TRUSTED_KEYS)."
            ),
            "Expected for a reader of a fleet's cache: its trusted writer fills it. To make "
            "this process a writer, give it COMPILECACHE_SIGNING_KEY_FILE (`compilecache "
            "keygen`)"
            + ("." if private else "; to keep its own compiles, put a local level first."),
        )
    shared = unsigned_warning.shared_unsigned(cfg)
    if shared:
        found["unsigned"] = Finding(
            "pitfall",
            "a shared store without signatures",
            unsigned_warning.message(shared),
            "Set up trusted writers: COMPILECACHE_SIGNING_KEY_FILE where the cache is filled, "
            "COMPILECACHE_TRUSTED_KEYS everywhere it is read (`compilecache keygen`).",
        )
    kinds = _host_kinds(cfg)
    if kinds is not None:
        found["host_kinds"] = kinds
    if cfg.disabled:
        found["disabled"] = Finding(
            "pitfall",
            "compilecache is disabled (COMPILECACHE_DISABLE=1)",
            "Nothing is cached, so nothing was checked.",
            "Unset COMPILECACHE_DISABLE.",
        )
    for fact in facts:
        jax = fact.jax
        if jax is not None and jax.version:
            if not jax.hooked:
                found.setdefault(
                    "jax_unhooked",
                    Finding(
                        "pitfall",
                        f"JAX {jax.version} ran without compilecache",
                        "The process imported JAX but compilecache's hook was not installed.",
                        "Check COMPILECACHE_FRAMEWORKS (it must include jax) and the warning "
                        "compilecache printed about this JAX version.",
                        "jax",
                    ),
                )
                continue
            minimum = jax.min_compile_time_secs
            if minimum > 0:
                found.setdefault(
                    "jax_min_time",
                    Finding(
                        "pitfall",
                        f"the program sets jax_persistent_cache_min_compile_time_secs={minimum:g}",
                        "JAX then never writes compiles faster than that (most small "
                        "functions: together they often cost more than the main step); "
                        "compilecache keeps the program's setting.",
                        "Remove the setting: left at JAX's default, compilecache writes every "
                        "compile of at least COMPILECACHE_MIN_COMPILE_TIME (0 by default).",
                        "jax",
                    ),
                )
        torch = fact.torch
        if torch is not None and torch.version:
            if env.get("TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS", "").strip() in (
                "0",
                "false",
                "False",
            ):
                found.setdefault(
                    "torch_pch",
                    Finding(
                        "pitfall",
                        "TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS=0 is set",
                        "Inductor's precompiled headers are on by default, and compilecache "
                        "carries the header through the store; with them off every cold compile "
                        "parses the headers for every kernel (about 1.2-1.35x slower), and "
                        "hosts that differ in this setting compute other FX graph keys and "
                        "share no entries.",
                        "unset TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS on every host.",
                        "torch",
                    ),
                )
            if not env.get("OMP_NUM_THREADS", "").strip():
                count = torch.num_threads
                found.setdefault(
                    "torch_threads",
                    Finding(
                        "advice",
                        "OMP_NUM_THREADS is not set",
                        f"torch.compile keys include the thread count ({count} here, from "
                        "this host's cores): hosts with other core counts never share entries.",
                        f"export OMP_NUM_THREADS={count} (the same value on every host).",
                        "torch",
                    ),
                )
    for run in runs:
        for event in run.events:
            if event.get("event") != "setting":
                continue
            reason = str(event.get("setting", ""))
            framework = str(event.get("framework", ""))
            found.setdefault(
                f"setting:{reason}",
                Finding(
                    "advice",
                    f"a {framework} setting of the program changes what compilecache does",
                    reason,
                    "compilecache keeps the framework's own settings: this is the program's (or "
                    "its environment's) choice. To cache that part, remove the setting named "
                    "above.",
                    framework,
                ),
            )
    threads = {f.torch.num_threads for f in facts if f.torch is not None and f.torch.num_threads}
    if len(threads) > 1:
        found["torch_threads_vary"] = Finding(
            "pitfall",
            f"torch thread counts differ between processes: {sorted(threads)}",
            "The thread count is part of the torch.compile key.",
            "export OMP_NUM_THREADS=<n> with one n for every process and host.",
            "torch",
        )
    return list(found.values())


# How many of the store's entries doctor reads the CPU target of (the most recently used).
_HOST_SAMPLE = 500


def _host_kinds(cfg: config_mod.Config) -> Finding | None:
    """Advice when the configured store holds entries compiled on several kinds of host (CPU
    features, architecture): each host is served only what it can run, and compiles the rest.
    Reads the headers of up to ``_HOST_SAMPLE`` entries; a store that does not open says
    nothing here (``check`` is for that)."""
    from compilecache.host import cpu_label
    from compilecache.runtime.reader import cpu_targets

    try:
        store = registry.open_store(cfg.url, cfg.max_size, create=False)
    except Exception:
        return None
    try:
        infos = sorted(
            (i for i in store.scan() if i.framework in ("jax", "torch")),
            key=lambda i: -i.accessed,
        )[:_HOST_SAMPLE]
        targets = cpu_targets(store, [i.key for i in infos])
    except Exception:
        return None
    finally:
        store.close()
    counts: dict[str, int] = {}
    for target in targets.values():
        label = cpu_label(target)
        counts[label] = counts.get(label, 0) + 1
    if len(counts) < 2:
        return None
    listed = ", ".join(f"{label} ({n})" for label, n in sorted(counts.items(), key=lambda c: -c[1]))
    return Finding(
        "advice",
        f"the store holds entries compiled on {len(counts)} kinds of host",
        f"Entries by the CPU they were compiled for: {listed}. Each host is served only what "
        "its CPU can run (JAX: an entry whose CPU features it all has; torch: the same vector "
        "features); the others miss, compile, and keep their own entry beside the first.",
        "Nothing to fix: a mixed fleet is safe. To share more, fill the store from the host "
        "kind with the fewest features for JAX, and from each kind for torch "
        '(the README, section "Stores").',
    )


def analyze(
    command: Sequence[str],
    runs: Sequence[RunResult],
    env: Mapping[str, str],
) -> DoctorReport:
    """Findings from two runs of ``command`` (pure: the tests feed it recorded runs)."""
    cfg = config_mod.load(env)
    findings: list[Finding] = []
    for i, run in enumerate(runs, 1):
        if run.returncode != 0:
            findings.append(
                Finding(
                    "failed",
                    f"run {i} exited with status {run.returncode}",
                    run.output_tail.strip()[-_TAIL_CHARS:],
                    "Fix the command first: doctor needs two complete runs.",
                )
            )
    if len(runs) >= 2:
        findings += _unstable(runs[0], runs[1])
    findings += _not_stored(runs, cfg)
    findings += _pitfalls(runs, env, cfg)
    second_hits = {
        str(e.get("name"))
        for e in (runs[1].events if len(runs) > 1 else ())
        # torch's kernel binaries and autotune records are parts of a graph, not functions.
        if e.get("event") == "hit" and not str(e.get("key", "")).startswith(_GRAPH_PARTS)
    }
    unstable = {f.name for f in findings if f.kind == "unstable"}
    return DoctorReport(list(command), list(runs), findings, sorted(second_hits - unstable))
