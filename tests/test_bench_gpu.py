"""``benchmarks/bench_gpu.py`` on a machine without a GPU (issue 20, section 4): it says that it
needs one; its machinery (machines, variants, tool wrappers, counts, the table) runs on the CPU
workloads, and the counts show what compilecache carries."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, clean_env

pytest.importorskip("torch")
pytest.importorskip("triton")

SCRIPT = str(ROOT / "benchmarks" / "bench_gpu.py")


def rows(markdown: str) -> dict[tuple[str, str], list[str]]:
    """(workload, variant) -> the table's other cells."""
    out: dict[tuple[str, str], list[str]] = {}
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 10 and cells[0] in ("triton-cross", "extension-cpp"):
            out[(cells[0], cells[1])] = cells[2:]
    return out


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has a GPU")
def test_without_a_gpu_it_says_it_needs_one() -> None:
    proc = subprocess.run(
        [sys.executable, SCRIPT], env=clean_env(), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    assert "needs an NVIDIA GPU" in proc.stderr


def test_the_cpu_workloads_run_and_a_fresh_compilecache_host_runs_nothing(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, SCRIPT, "--cpu", "--no-write"],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = rows(proc.stdout)
    # Columns after the times: Triton compiles, autotune benchmarks, compiler runs, ninja runs,
    # XLA fusions autotuned.
    assert table[("triton-cross", "cold")][3] == "3"
    assert table[("triton-cross", "cc cold")][3] == "3"
    assert table[("triton-cross", "cc fresh")][3:] == ["0", "0", "0", "0", "0"]
    assert int(table[("extension-cpp", "cold")][5]) >= 1  # the compiler built it
    assert table[("extension-cpp", "cc fresh")][3:] == ["0", "0", "0", "0", "0"]
    assert len(table) == 10
