"""``compilecache run -- CMD``: zero code change, Python children included, summary at exit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from compilecache.stores.local import LocalStore
from tests.conftest import TESTS, clean_env, compiles, is_trace, last_json

PROGRAM = str(TESTS / "jax_program.py")
pytestmark = pytest.mark.slow


def cc_run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "compilecache", "run", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def summary_line(stderr: str) -> str:
    lines = [
        line for line in stderr.splitlines() if line.startswith("compilecache: ") and "hits" in line
    ]
    assert len(lines) == 1, stderr
    return lines[0]


def test_run_covers_children_and_prints_one_summary(tmp_path: Path) -> None:
    store = tmp_path / "store"
    env = clean_env({"COMPILECACHE_URL": str(store)})
    cold = cc_run(["--", sys.executable, PROGRAM, "child"], env)
    assert cold.returncode == 0, cold.stderr
    result = last_json(cold.stdout)
    # The parent and its Python child were both enabled without any code change.
    assert result["stats"]["writes"] >= 3
    assert result["child"]["stats"]["hits"] >= 3  # the child found what the parent wrote
    line = summary_line(cold.stderr)
    total_writes = result["stats"]["writes"] + result["child"]["stats"]["writes"]
    total_hits = result["stats"]["hits"] + result["child"]["stats"]["hits"]
    assert f"{int(total_hits)} hits" in line and f"{int(total_writes)} writes" in line

    warm = cc_run(["--", sys.executable, PROGRAM, "plain"], env)
    assert warm.returncode == 0, warm.stderr
    assert last_json(warm.stdout)["stats"]["misses"] == 0
    assert ", 0 misses" in summary_line(warm.stderr)


def test_run_url_flag_and_exit_status(tmp_path: Path) -> None:
    store = tmp_path / "elsewhere"
    proc = cc_run(
        [
            "--url",
            str(store),
            "--",
            sys.executable,
            "-c",
            "import compilecache, sys;s = compilecache.active(); print(s.store.url); sys.exit(3)",
        ],
        clean_env(),
    )
    assert proc.returncode == 3
    assert proc.stdout.strip() == str(store)


def test_run_chains_to_existing_sitecustomize(tmp_path: Path) -> None:
    user_site = tmp_path / "user-site"
    user_site.mkdir()
    (user_site / "sitecustomize.py").write_text("import os\nos.environ['USER_SITE_RAN'] = 'yes'\n")
    env = clean_env({"PYTHONPATH": str(user_site), "COMPILECACHE_URL": str(tmp_path / "s")})
    proc = cc_run(
        [
            "--",
            sys.executable,
            "-c",
            "import os, compilecache; print(os.environ.get('USER_SITE_RAN'), compilecache.active() is not None)",
        ],
        env,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["yes", "True"]


def test_run_with_disable_does_nothing(tmp_path: Path) -> None:
    store = tmp_path / "store"
    env = clean_env({"COMPILECACHE_URL": str(store), "COMPILECACHE_DISABLE": "1"})
    proc = cc_run(["--", sys.executable, PROGRAM, "plain"], env)
    assert proc.returncode == 0, proc.stderr
    assert last_json(proc.stdout)["stats"] is None
    assert "hits" not in proc.stderr
    assert not store.exists()


def test_run_persists_stats_for_the_stats_command(tmp_path: Path) -> None:
    store = tmp_path / "store"
    env = clean_env({"COMPILECACHE_URL": str(store)})
    for _ in range(2):
        assert cc_run(["--", sys.executable, PROGRAM, "plain"], env).returncode == 0
    s = LocalStore(store)
    persisted = s.counters.read()
    stored = [i.key for i in s.scan() if not i.key.startswith("manifest/")]
    s.close()
    entries = len(compiles(dict.fromkeys(stored)))  # the guarded traces beside them: not counted
    traces = len(stored) - entries
    assert persisted["writes"] == entries and persisted["hits"] == entries
    stats = subprocess.run(
        [sys.executable, "-m", "compilecache", "stats", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    report = json.loads(stats.stdout)
    # Every entry is in the total; the traces are the internal ones, not listed per function.
    assert report["hits"] == entries and report["entries"] == entries + traces
    assert report.get("internal", {}).get("jax", {}).get("entries", 0) == traces
    assert report["compile_time_saved_s"] > 0


def test_run_gives_children_an_absolute_store_url(tmp_path: Path) -> None:
    """A relative ``--url`` (or COMPILECACHE_URL) names the store next to where ``run`` started,
    for every process under it, whichever directory that process starts in."""
    (tmp_path / "elsewhere").mkdir()
    show = "import os; print(os.environ['COMPILECACHE_URL'])"
    grandchild = (
        "import os, subprocess, sys; os.chdir('elsewhere'); "
        f"subprocess.run([sys.executable, '-c', {show!r}], check=True)"
    )
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "compilecache", "run", "--url", "rel/cache?max_size=1GB"),
            *("--", sys.executable, "-c", grandchild),
        ],
        env=clean_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{tmp_path / 'rel' / 'cache'}?max_size=1GB"


KILLED = r"""
import os, signal, sys, time
import jax, jax.numpy as jnp
x = jnp.linspace(-1.0, 1.0, 64, dtype=jnp.float32)
for i in range(4):
    jax.jit(lambda v, i=i: jnp.tanh(v * (i + 2.0)).sum())(x).block_until_ready()
time.sleep(1.0)  # the entries' writes, handed to a thread, reach the store
os.kill(os.getpid(), signal.SIGKILL)  # no exit hook runs: no report at exit
"""


def test_the_summary_counts_a_process_killed_before_its_report(tmp_path: Path) -> None:
    store = tmp_path / "store"
    env = clean_env({"COMPILECACHE_URL": str(store)})
    proc = cc_run(["--", sys.executable, "-c", KILLED], env)
    assert proc.returncode == 128 + 9, proc.stderr
    entries = [
        info
        for info in LocalStore(store).scan()
        if info.framework == "jax" and info.name and not is_trace(info.key)
    ]
    assert len(entries) >= 4
    line = summary_line(proc.stderr)
    # What reached the store is counted, and the summary says why the rest may be missing.
    assert f"{len(entries)} writes" in line, (line, [e.key for e in entries])
    assert f"{len(entries)} misses" in line, line
    assert "1 process of the command ended without reporting at exit (killed?)" in proc.stderr
