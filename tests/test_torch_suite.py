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
# Tests whose outcome differs under compilecache by design: test id -> why. torch's TestCase
# runs each test inside fresh_cache(), where compilecache serves and writes nothing; but Dynamo's
# package mode (torch's caching_precompile) stays on there, and in it torch keeps AOTAutograd
# entries bundled with their FX graphs, as its own bundled_autograd_cache=True does.
BUNDLED = (
    "it counts FX graph cache lookups (or hits after FxGraphCache.clear()) that torch makes only "
    "when AOTAutograd entries are not bundled; under compilecache's Dynamo package mode they are, "
    "and the test's own bundled variant (or torch with bundled_autograd_cache=True) counts the same"
)
EXPECTED: dict[str, str] = {
    "inductor.test_codecache.TestPyCodeCache::test_editable_cached_wrapper": (
        "its second process counts FX graph cache hits: under compilecache that process is served "
        "a Dynamo package or a bundled AOTAutograd entry, which replace the FX graph lookup, so it "
        "counts none (its third process runs the edited wrapper, as in plain torch)"
    ),
    "dynamo.test_aot_autograd_cache.AOTAutogradCacheTests::test_clear_fx_graph_cache": BUNDLED,
    "inductor.test_codecache.TestFxGraphCache::test_cache_hot_load_repeat": BUNDLED,
    "inductor.test_codecache.TestFxGraphCacheHashing::"
    "test_provenance_tracking_level_causes_cache_miss": BUNDLED,
    "inductor.test_codecache.TestCompilationEventLogging::test_log_event_autograd_local": BUNDLED,
    "inductor.test_codecache.TestCompilationEventLogging::test_log_event_autograd_remote": BUNDLED,
    "inductor.test_codecache.TestCompilationEventLogging::test_log_event_all_caches": BUNDLED,
}


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
