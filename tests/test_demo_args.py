"""``compilecache demo`` with a layer count it cannot run: one line, no traceback, nothing made."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import clean_env


@pytest.mark.parametrize("layers", ["0", "-3"])
def test_demo_rejects_fewer_than_one_layer(tmp_path: Path, layers: str) -> None:
    store = tmp_path / "store"
    proc = subprocess.run(
        [sys.executable, "-m", "compilecache", "demo", "--layers", layers, "--url", str(store)],
        env=clean_env({"COMPILECACHE_FRAMEWORKS": "jax"}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"compilecache: error: demo --layers must be at least 1, got {layers}"
    ]
    assert not store.exists()  # refused before opening (creating) the store
