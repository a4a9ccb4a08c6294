"""PyTorch's own cache tests, plain and under compilecache: the outcomes must agree.

PyTorch's tests are not part of this repository. Point ``COMPILECACHE_TORCH_TESTS`` at the
``test`` directory of a PyTorch checkout of the installed torch version (``git checkout
v2.13.0``); the files run are :data:`FILES`: the FX graph cache and AOTAutograd cache suites, the
two whose behaviour compilecache takes part in. Each file runs twice in fresh processes: plain,
and with every process under ``compilecache run`` on a fresh store. Every test must have the same
outcome in both runs (passed, failed, skipped or errored alike: a test that fails in this torch
version fails in both), except those listed in :data:`EXPECTED` with the reason (docs/frameworks.md
lists them too). Without the variable the test is skipped, saying so. PyTorch's test helpers
need ``expecttest`` and ``hypothesis`` installed.

Where no whole checkout can be had, a copy of each file holding only some of its tests runs the
same way: ``tests/torch_suite_selection.md`` names the tests run here, from which PyTorch commit,
and why those.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from tests.conftest import clean_env

pytest.importorskip("torch")

FILES = ("inductor/test_codecache.py", "dynamo/test_aot_autograd_cache.py")
# Read when the module is collected: the suite's autouse fixture removes every COMPILECACHE_*
# variable from the environment before a test runs.
TORCH_TESTS = os.environ.get("COMPILECACHE_TORCH_TESTS", "")
# Tests whose outcome differs under compilecache by design: test id -> why (docs/frameworks.md
# lists them too). Empty: on torch 2.13.0 and 2.15.0 every test run agrees.
EXPECTED: dict[str, str] = {}


def outcomes(report: Path) -> dict[str, str]:
    """``{classname::name: passed|failed|error|skipped}`` from a JUnit XML report."""
    found: dict[str, str] = {}
    for case in ElementTree.parse(report).iter("testcase"):
        test = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag for child in case}
        outcome = "passed"
        for kind in ("failure", "error", "skipped"):
            if kind in kinds:
                outcome = {"failure": "failed", "error": "error"}.get(kind, kind)
        found[test] = outcome
    return found


def run_suite(test_dir: Path, file: str, report: Path, under: Path | None) -> dict[str, str]:
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
    command += [str(test_dir / file), f"--junitxml={report}"]
    env = clean_env()
    if under is not None:
        env["COMPILECACHE_URL"] = str(under)
        command = [sys.executable, "-m", "compilecache", "run", "--", *command]
    subprocess.run(command, env=env, cwd=test_dir, capture_output=True, timeout=3600)
    return outcomes(report)


@pytest.mark.slow
@pytest.mark.timeout(2 * 3600)  # two runs of a whole file of real compiles
@pytest.mark.parametrize("file", FILES)
def test_pytorch_cache_tests_agree_plain_and_under_compilecache(file: str, tmp_path: Path) -> None:
    where = TORCH_TESTS
    if not where or not (Path(where) / file).is_file():
        pytest.skip(
            "COMPILECACHE_TORCH_TESTS does not name a PyTorch checkout's test directory "
            f"holding {file} (PyTorch's tests are not part of this repository)"
        )
    test_dir = Path(where)
    plain = run_suite(test_dir, file, tmp_path / "plain.xml", None)
    cached = run_suite(test_dir, file, tmp_path / "cached.xml", tmp_path / "store")
    assert plain, "no test ran: is this the test directory of the installed torch?"
    differing = {
        test: (plain.get(test), cached.get(test))
        for test in sorted(set(plain) | set(cached))
        if plain.get(test) != cached.get(test) and test not in EXPECTED
    }
    assert not differing, differing
