"""``compilecache demo`` end to end (JAX only, one layer, to keep it short)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import clean_env

pytestmark = pytest.mark.slow


def test_demo_runs_cold_then_warm_and_reports(tmp_path: Path) -> None:
    store = tmp_path / "store"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "compilecache",
            "demo",
            "--layers",
            "1",
            "--json",
            "--url",
            str(store),
        ],
        env=clean_env({"COMPILECACHE_FRAMEWORKS": "jax"}),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    (row,) = report["workloads"]
    assert row["cold_writes"] >= 1
    assert row["warm_hits"] == row["cold_writes"] and row["warm_misses"] == 0
    assert row["identical_results"] is True
    assert report["store_entries"] >= 1 and report["store_bytes"] > 0
