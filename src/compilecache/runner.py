"""``compilecache run -- CMD``: enable the cache in CMD and its Python children, no code change.

The child environment gets our ``_bootstrap`` directory first on PYTHONPATH (its
``sitecustomize`` calls :func:`compilecache.enable`) and a spool directory where every Python
process writes its counters at exit. After CMD ends, the counters are summed into the one-line
summary printed on stderr, and CMD's exit status is returned.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from compilecache.stats import Summary, merge

BOOTSTRAP_DIR = Path(__file__).resolve().parent / "_bootstrap"


def child_environment(
    base: Mapping[str, str], spool: str | None = None, overrides: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment that makes Python processes enable compilecache at start-up."""
    env = dict(base)
    env.update(overrides or {})
    parts = [str(BOOTSTRAP_DIR)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env["COMPILECACHE_BOOTSTRAP_PATH"] = str(Path(__file__).resolve().parent.parent)
    if spool:
        env["COMPILECACHE_RUN_SPOOL"] = spool
    return env


def read_spool(spool: Path) -> dict[str, float]:
    """Sum the counters every process under ``run`` left in the spool directory."""
    totals: list[dict[str, float]] = []
    for path in spool.glob("*.json"):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            totals.append({str(k): float(v) for k, v in data.items()})
    return merge(*totals)


def run(command: Sequence[str], overrides: Mapping[str, str] | None = None) -> int:
    """Run ``command`` under compilecache; print the summary line; return its exit status."""
    if not command:
        print(
            "compilecache run: no command given (usage: compilecache run -- CMD ...)",
            file=sys.stderr,
        )
        return 2
    with tempfile.TemporaryDirectory(prefix="compilecache-run-") as spool:
        env = child_environment(os.environ, spool, overrides)
        try:
            proc = subprocess.Popen(list(command), env=env)
        except OSError as exc:
            print(f"compilecache run: cannot start {command[0]!r}: {exc}", file=sys.stderr)
            return 127
        # Let Ctrl-C reach the child (same process group) and wait for it to finish.
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            status = proc.wait()
        finally:
            signal.signal(signal.SIGINT, previous)
        counters = read_spool(Path(spool))
    if env.get("COMPILECACHE_DISABLE", "").strip() not in ("1", "true", "yes", "on"):
        print(Summary.of(counters).line(), file=sys.stderr)
    return status if status >= 0 else 128 - status
