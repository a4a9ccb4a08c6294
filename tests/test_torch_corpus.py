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
