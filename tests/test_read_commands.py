"""Commands that read a store never create one (issue 11, item 7): a mistyped path is a one-line
error naming it, not an empty store that reports "0 entries" (or "copied 0 of 0")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import clean_env

READERS = [
    ("stats",),
    ("stats", "--json"),
    ("ls",),
    ("show", "jit_step"),
    ("verify",),
    ("explain",),
    ("report", "--html", "{tmp}/report.html"),
    ("export", "{tmp}/bundle.ccb"),
    ("prune", "--max-size", "1GB"),
]


@pytest.mark.parametrize(
    "args", READERS, ids=[" ".join(a[:1]) + str(i) for i, a in enumerate(READERS)]
)
def test_a_reading_command_on_a_mistyped_path_is_an_error_and_creates_nothing(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    typo = tmp_path / "cahce"
    argv = [a.format(tmp=tmp_path) for a in args]
    proc = subprocess.run(
        [sys.executable, "-m", "compilecache", *argv, "--url", str(typo)],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert str(typo) in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not typo.exists()


def test_warm_from_a_mistyped_source_is_an_error_and_creates_nothing(tmp_path: Path) -> None:
    typo = tmp_path / "typo"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "compilecache",
            "warm",
            "--from",
            str(typo),
            "--url",
            str(tmp_path / "t"),
        ],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and str(typo) in proc.stderr, proc.stdout + proc.stderr
    assert "copied 0 of 0" not in proc.stdout
    assert not typo.exists()
