"""Every way of calling ``torch.compile`` in ``torch_corpus_program.py`` behaves the same plainly
and under ``compilecache run``: the same outcome (values, or the exception plain torch raises)
cold, and warm on a new machine (a fresh torch cache directory, the store kept).

Dynamo packages are on by default; a compile package mode cannot hold (a class, a builtin or
torch op, a ``functools.partial``, a callable object) must run as plain torch runs it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TESTS, clean_env

pytest.importorskip("torch")

PROGRAM = str(TESTS / "torch_corpus_program.py")


def _run(
    tmp_path: Path, name: str, *, store: Path | None, torch_dir: Path
) -> tuple[dict[str, Any], str]:
    env = clean_env({"TORCHINDUCTOR_CACHE_DIR": str(torch_dir), "TMPDIR": str(torch_dir.parent)})
    command = [sys.executable, PROGRAM]
    if store is not None:
        env["COMPILECACHE_URL"] = str(store)
        command = [sys.executable, "-m", "compilecache", "run", "--", *command]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"{name}: exit {proc.returncode}\n{proc.stderr[-4000:]}"
    outcomes: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return outcomes, proc.stderr


def _cli(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "compilecache", *args],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _differences(expected: dict[str, Any], got: dict[str, Any]) -> dict[str, Any]:
    return {
        case: (expected.get(case), got.get(case))
        for case in sorted(set(expected) | set(got))
        if expected.get(case) != got.get(case)
    }


def test_every_way_of_calling_torch_compile_runs_as_plain_torch_runs_it(tmp_path: Path) -> None:
    plain, _ = _run(tmp_path, "plain cold", store=None, torch_dir=tmp_path / "plain")
    assert len(plain) >= 25
    # The corpus holds successes and one error plain torch raises (a graph break under
    # fullgraph=True): both must be reproduced.
    assert not plain["fullgraph_break"]["ok"] and plain["class_decorator"]["ok"]
    warm_plain, _ = _run(tmp_path, "plain warm", store=None, torch_dir=tmp_path / "plain")
    assert _differences(plain, warm_plain) == {}

    store = tmp_path / "store"
    cold, cold_err = _run(tmp_path, "cold", store=store, torch_dir=tmp_path / "cold")
    assert _differences(plain, cold) == {}
    # Nothing of package mode reaches the program's output: torch's warnings about the guards
    # it drops are the mode's, not the program's.
    assert "caching_precompile" not in cold_err
    new_machine, warm_err = _run(tmp_path, "new machine", store=store, torch_dir=tmp_path / "new")
    assert _differences(plain, new_machine) == {}
    assert "caching_precompile" not in warm_err
    summary = [line for line in warm_err.splitlines() if line.startswith("compilecache: ")][-1]
    found = re.search(r"(\d+) hits?\b", summary)
    hits = int(found[1]) if found else 0
    assert hits > 0, summary
    assert "-0.0s" not in summary and float(summary.rsplit(", ", 1)[1].split("s ")[0]) > 0

    # What the store holds says what a hit saves, and shows in words.
    listed = json.loads(_cli("ls", "--json", "--url", str(store)))
    packages = [e for e in listed if e["key"].startswith("torch/dynamo/")]
    assert packages and all(e["compile_time_s"] > 0 for e in packages), packages
    names = sorted(
        {e["name"] for e in listed if e["key"].startswith(("torch/aot/", "torch/dynamo/"))}
    )
    for name in names[:3]:
        shown = _cli("show", name, "--url", str(store))
        assert all(c.isprintable() or c in "\n\t" for c in shown), name


# A small model's first step; prints whether any C++ compiler ran (torch's own timing of it).
STEP = r"""
import json, torch
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
y = torch.compile(m)(torch.randn(8, 16)).sum()
y.backward()
from torch._dynamo.utils import compilation_time_metrics as metrics
print(json.dumps({"y": float(y), "compiled_cpp": len(metrics.get("compile_file", []))}))
"""


def test_a_warm_torch_directory_fills_the_store(tmp_path: Path) -> None:
    """A program that ran under plain torch before: its first run under compilecache is served
    by torch's own directory, and what that served also reaches the store, so that a new
    machine compiles nothing."""
    warm_dir, store = tmp_path / "torch-dir", tmp_path / "store"

    def step(torch_dir: Path, *, cached: bool) -> tuple[dict[str, Any], str]:
        env = clean_env({"TORCHINDUCTOR_CACHE_DIR": str(torch_dir), "COMPILECACHE_URL": str(store)})
        command = [sys.executable, "-c", STEP]
        if cached:
            command = [sys.executable, "-m", "compilecache", "run", "--", *command]
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr

    plain, _ = step(warm_dir, cached=False)
    again, _ = step(warm_dir, cached=False)  # torch's own directory is warm
    assert again["y"] == plain["y"]
    first, _ = step(warm_dir, cached=True)
    assert first["y"] == plain["y"]
    listed = [e["key"] for e in json.loads(_cli("ls", "--json", "--url", str(store)))]
    for layer in ("torch/fx/", "torch/aot/", "torch/kernel/"):
        assert any(k.startswith(layer) for k in listed), (layer, listed)
    new, err = step(tmp_path / "new-machine", cached=True)
    assert new["y"] == plain["y"] and new["compiled_cpp"] == 0, err[-2000:]
    assert re.search(r", 0 misses,", err), err[-500:]
