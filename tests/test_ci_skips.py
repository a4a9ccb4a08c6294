"""A CI run cannot pass by skipping: a server the suite needs and cannot find fails the tests
that need it, with the reason (``COMPILECACHE_TEST_REQUIRE``, all servers under ``CI=true``), a
skip that ``ALLOWED_SKIPS`` does not accept fails the run, and every run prints how many tests
skipped and why.

The runs below are small pytest sessions in fresh processes, with this suite's hooks
(``tests/conftest.py``) and three made-up tests.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, clean_env, required_servers, skip_allowed

TESTS = """
import pytest
from tests.conftest import missing_server

def test_needs_redis7():
    missing_server("redis7", "no Redis 7 here (made up)")

def test_runs_as_root():
    pytest.skip("root ignores directory permissions")

def test_unlisted():
    pytest.skip("something nobody listed")

def test_passes():
    pass
"""


def session(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import pytest_sessionfinish, pytest_terminal_summary  # noqa: F401\n"
    )
    (tmp_path / "test_made_up.py").write_text(TESTS)
    settings = {"PYTHONPATH": str(ROOT), "CI": "", **env}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q", *args],
        cwd=tmp_path,
        env={k: v for k, v in clean_env(settings).items() if v},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_off_ci_a_missing_server_skips_and_the_skips_are_counted(tmp_path: Path) -> None:
    run = session(tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed, 3 skipped" in run.stdout
    assert "3 skipped, 1 of them not accepted on CI" in run.stdout
    assert "missing server redis7: no Redis 7 here (made up)" in run.stdout
    assert "allowed             root ignores directory permissions" in run.stdout


def test_on_ci_a_missing_server_fails_with_its_reason_and_an_unlisted_skip_fails_the_run(
    tmp_path: Path,
) -> None:
    run = session(tmp_path, CI="true")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "FAILED test_made_up.py::test_needs_redis7" in run.stdout
    assert "is required (COMPILECACHE_TEST_REQUIRE, or CI=true) and missing" in run.stdout
    assert "no Redis 7 here (made up)" in run.stdout
    assert "NOT ACCEPTED ON CI  something nobody listed" in run.stdout
    # Without the failing test, the unlisted skip alone still fails the run.
    alone = session(tmp_path, "-k", "not redis7", CI="true")
    assert alone.returncode == 1 and "1 of them not accepted on CI" in alone.stdout, alone.stdout


def test_on_ci_allowed_skips_and_servers_not_required_pass(tmp_path: Path) -> None:
    run = session(tmp_path, "-k", "not unlisted", CI="true", COMPILECACHE_TEST_REQUIRE="none")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 skipped, 0 of them not accepted on CI" in run.stdout


def test_the_switch_names_servers() -> None:
    assert required_servers({}) == frozenset()
    assert required_servers({"CI": "true"}) == {"redis7", "azurite", "chromium", "moto"}
    assert required_servers({"CI": "true", "COMPILECACHE_TEST_REQUIRE": "none"}) == frozenset()
    assert required_servers({"COMPILECACHE_TEST_REQUIRE": "redis7, chromium"}) == {
        "redis7",
        "chromium",
    }
    with pytest.raises(pytest.UsageError, match="unknown"):
        required_servers({"COMPILECACHE_TEST_REQUIRE": "redis8"})
    assert skip_allowed("missing server azurite: x", frozenset()) is True
    assert skip_allowed("missing server azurite: x", frozenset({"azurite"})) is False
    assert skip_allowed("could not import 'torch': No module named 'torch'") is False
