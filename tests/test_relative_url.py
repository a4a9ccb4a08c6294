"""A relative store path is resolved once, when the cache is enabled (issue 11, item 6).

A real JAX program enables compilecache with a relative ``COMPILECACHE_URL``, then ``chdir``s
elsewhere before its first compile: its writes must land in the store next to where it started,
and a second run (started in the same directory) must hit them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from compilecache.stores.local import LocalStore
from tests.conftest import clean_env, is_trace, last_json

pytestmark = pytest.mark.slow

# Enables at start (as ``compilecache run``'s sitecustomize does), then moves away.
PROGRAM = r"""
import json, os, sys
import compilecache
if sys.argv[1] == "enable":
    compilecache.enable()
os.chdir(sys.argv[2])
import jax, jax.numpy as jnp

@jax.jit
def f(x):
    return jnp.sin(x) * 2.0 + x.sum()

f(jnp.arange(16.0)).block_until_ready()
print(json.dumps(compilecache.active().stats()))
"""


def run_in(cwd: Path, elsewhere: Path, url: str, *, under_run: bool) -> dict[str, Any]:
    env = clean_env({"COMPILECACHE_URL": url, "COMPILECACHE_FRAMEWORKS": "jax"})
    if under_run:  # enabled by ``compilecache run``'s bootstrap, no code change
        command = [sys.executable, "-m", "compilecache", "run", "--"]
        mode = "bootstrap"
    else:
        command, mode = [], "enable"
    proc = subprocess.run(
        [*command, sys.executable, "-c", PROGRAM, mode, str(elsewhere)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    stats: dict[str, Any] = last_json(proc.stdout)
    return stats


def entry_count(store: Path) -> int:
    """The program's compiles stored in ``store`` (not what the exit adds for a tiered store:
    the job's manifest and XLA's autotune index, written after the program printed its stats;
    nor the guarded traces beside the executables, which are no compiles)."""
    s = LocalStore(store)
    try:
        return len([i for i in s.scan("jax/") if not is_trace(i.key)])
    finally:
        s.close()


@pytest.mark.parametrize(
    ("url", "store", "under_run"),
    [
        ("rel/cache", "rel/cache", False),
        # a relative first level of a tiered list, with an option kept; under ``run``
        ("./cache?max_size=1GB,memory://second", "cache", True),
    ],
)
def test_program_that_chdirs_still_hits_and_writes(
    tmp_path: Path, url: str, store: str, under_run: bool
) -> None:
    start, elsewhere = tmp_path / "start", tmp_path / "elsewhere"
    start.mkdir()
    elsewhere.mkdir()
    cold = run_in(start, elsewhere, url, under_run=under_run)
    assert cold["errors"] == 0, cold
    assert cold["writes"] > 0, cold
    assert entry_count(start / store) == cold["writes"]
    assert not any(elsewhere.iterdir())  # nothing was written relative to the new directory

    warm = run_in(start, elsewhere, url, under_run=under_run)
    assert warm["errors"] == 0 and warm["misses"] == 0, warm
    assert warm["hits"] == cold["writes"]
