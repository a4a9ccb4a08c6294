"""torch's portable artifacts (``save_cache_artifacts``/``load_cache_artifacts``) in one process,
as PyTorch's own ``test_cache_hot_load`` uses them: the same counts plain and under compilecache.

``tests/torch_hot_load_program.py`` runs the test's steps for each CPU parametrization (float32
and bfloat16, static and dynamic shapes). Plain torch and ``compilecache run`` (Dynamo's packages
on, the default) run it side by side in fresh processes; every count and every result must be
the same. With packages on, torch's precompile mode would bundle the AOTAutograd entry under
another key, so that the hot load's AOTAutograd lookup missed: compilecache keeps the entries in
plain torch's form.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import clean_env

pytest.importorskip("torch")

PROGRAM = Path(__file__).with_name("torch_hot_load_program.py")
CASES = ("float32:static", "float32:dynamic", "bfloat16:static", "bfloat16:dynamic")

# PyTorch's expectations for the unbundled AOTAutograd cache (its test asserts these); torch
# 2.13 on CPU meets them with static shapes (with dynamic shapes its hot load misses, plainly).
EXPECTED_STATIC = {
    "cold": {
        "fxgraph_cache_miss": 2,
        "fxgraph_cache_hit": 0,
        "fxgraph_lookup_write_file": 0,
        "autograd_cache_miss": 1,
        "autograd_cache_hit": 0,
        "autograd_cache_saved": 1,
    },
    "saved": {"inductor": 2, "aot_autograd": 1, "autotune": 0, "pgo": 0},
    "again": {
        "fxgraph_cache_miss": 4,
        "fxgraph_cache_hit": 0,
        "fxgraph_lookup_write_file": 0,
        "autograd_cache_miss": 2,
        "autograd_cache_hit": 0,
        "autograd_cache_saved": 2,
    },
    "loaded": {"inductor": 2, "aot_autograd": 1, "autotune": 0, "pgo": 0},
    "hot": {
        "fxgraph_cache_miss": 4,
        "fxgraph_cache_hit": 2,
        "fxgraph_lookup_write_file": 2,
        "autograd_cache_miss": 2,
        "autograd_cache_hit": 1,
        "autograd_cache_saved": 2,
    },
}


def start(root: Path, under_compilecache: bool, *program: str) -> subprocess.Popen[str]:
    """``python PROGRAM...`` on a new machine under ``root`` (its own torch directory and
    ``TMPDIR``), plain or under ``compilecache run`` with a store there."""
    (root / "tmp").mkdir(parents=True)
    env = clean_env(
        {"TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"), "TMPDIR": str(root / "tmp")}
    )
    argv = [sys.executable, *program]
    if under_compilecache:
        url = str(root / "store")
        argv = [sys.executable, "-m", "compilecache", "run", "--url", url, "--", *argv]
    return subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def reports(proc: subprocess.Popen[str]) -> list[dict[str, Any]]:
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-4000:]
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


@pytest.mark.slow
def test_hot_load_counts_are_plain_torchs_under_compilecache(tmp_path: Path) -> None:
    plain_proc = start(tmp_path / "plain", False, str(PROGRAM), *CASES)
    ours_proc = start(tmp_path / "compilecache", True, str(PROGRAM), *CASES)
    plain, ours = reports(plain_proc), reports(ours_proc)

    assert len(plain) == len(ours) == len(CASES)
    for expected, got in zip(plain, ours, strict=True):
        assert got == expected, (expected["dtype"], expected["dynamic"])
        assert got["cold_same"] and got["again_same"] and got["hot_same"]
        if not got["dynamic"]:
            assert {step: got[step] for step in EXPECTED_STATIC} == EXPECTED_STATIC


# test_cache_hot_load_caching_precompile (test/inductor/test_codecache.py): what it asserts, for
# each of its CPU parametrizations, of a program that turns caching_precompile on itself.
PRECOMPILE_EXPECTED = {
    "cold": {
        "autograd_cache_miss": 1,
        "autograd_cache_hit": 0,
        "dynamo_cache_miss": 1,
        "dynamo_cache_hit": 0,
    },
    "again": {
        "autograd_cache_miss": 2,
        "autograd_cache_hit": 0,
        "dynamo_cache_miss": 2,
        "dynamo_cache_hit": 0,
    },
    "hot": {
        "autograd_cache_miss": 2,
        "autograd_cache_hit": 0,
        "dynamo_cache_miss": 2,
        "dynamo_cache_hit": 1,
    },
}
PRECOMPILE_ARTIFACTS = {"inductor": 2, "aot_autograd": 1, "autotune": 0, "pgo": 0, "precompile": 1}


@pytest.mark.slow
def test_a_program_that_turns_caching_precompile_on_keeps_torchs_own_dynamo_cache(
    tmp_path: Path,
) -> None:
    """A program that sets ``caching_precompile`` itself after importing torch
    (``torch._dynamo.config.patch``) and hot-loads its portable artifacts gets torch's own
    Dynamo cache under compilecache: the hot load's package is served (``dynamo_cache_hit`` 1),
    with every count plain torch's. One process per case: a hot-loaded package stays on its
    function's code after ``torch._dynamo.reset()`` (plain torch too), and would serve the next
    case's first compile."""
    for case in CASES:
        spec = f"{case}:precompile"
        plain_proc = start(tmp_path / case.replace(":", "-") / "plain", False, str(PROGRAM), spec)
        ours_proc = start(
            tmp_path / case.replace(":", "-") / "compilecache", True, str(PROGRAM), spec
        )
        (expected,), (got,) = reports(plain_proc), reports(ours_proc)
        which = (expected["dtype"], expected["dynamic"])
        assert got == expected, which
        assert got["cold_same"] and got["again_same"] and got["hot_same"], which
        assert got["saved"] == got["loaded"] == PRECOMPILE_ARTIFACTS, which
        for step, counts in PRECOMPILE_EXPECTED.items():
            assert {name: got[step][name] for name in counts} == counts, (which, step)


AOT_COMPILE = r"""
import json, sys
import torch

def fn(x, w):
    return torch.relu(x @ w).sin() + 1

torch.manual_seed(int(sys.argv[2]))
x, w = torch.randn(8, 16), torch.randn(16, 4)
if sys.argv[1] == "save":
    compiled = torch.compile(fn, fullgraph=True).aot_compile(((x, w), {}))
    out = compiled(x, w)
    compiled.save_compiled_function(sys.argv[3])
else:
    with open(sys.argv[3], "rb") as f:
        out = torch.compiler.load_compiled_function(f)(x, w)
print(json.dumps({"same": bool(torch.allclose(out, fn(x, w), atol=1e-5))}))
"""


@pytest.mark.slow
def test_aot_compile_artifacts_cross_between_plain_torch_and_compilecache(tmp_path: Path) -> None:
    """``torch.compile(fn).aot_compile(...).save_compiled_function()`` under compilecache is
    loaded by plain torch, and plain torch's file under compilecache; each computes what eager
    torch computes (on other inputs than the saved ones)."""
    script = tmp_path / "aot_compile.py"
    script.write_text(AOT_COMPILE)

    def run(name: str, ours: bool, *args: str) -> dict[str, Any]:
        (result,) = reports(start(tmp_path / name, ours, str(script), *args))
        return result

    for producer_ours in (True, False):
        saved = tmp_path / f"fn-{producer_ours}.pt"
        assert run(f"save-{producer_ours}", producer_ours, "save", "0", str(saved))["same"]
        loaded = run(f"load-{producer_ours}", not producer_ours, "load", "1", str(saved))
        assert loaded["same"], producer_ours
