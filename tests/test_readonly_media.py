"""A store on read-only media (a read-only bind mount, an image layer, a shared read-only volume)
serves every reader: runs hit, and the commands that look at a store work, with or without
``?readonly=1``. Real mounts: the test needs root (CI runs as root) and skips, saying so, without.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from compilecache.stores.local import LocalStore
from tests.conftest import TESTS, clean_env, last_json, run_python

PROGRAM = str(TESTS / "jax_program.py")
pytestmark = pytest.mark.slow


@pytest.fixture
def read_only_store(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A store filled by a real JAX run, and the same directory bind-mounted read-only."""
    source = tmp_path / "store"
    run_python([PROGRAM, "before"], clean_env({"COMPILECACHE_URL": str(source)}))
    # What a shipped cache looks like: the writer has exited and its index is checkpointed.
    LocalStore(source).close()
    mount = tmp_path / "ro"
    mount.mkdir()
    bind = subprocess.run(["mount", "--bind", str(source), str(mount)], capture_output=True)
    if bind.returncode != 0:
        pytest.skip(f"cannot bind-mount here (needs root): {bind.stderr.decode().strip()}")
    try:
        subprocess.run(
            ["mount", "-o", "remount,bind,ro", str(mount)], check=True, capture_output=True
        )
        assert subprocess.run(["touch", str(mount / "probe")], capture_output=True).returncode
        yield source, mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def _cli(*args: str, url: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "compilecache", *args, "--url", url],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )


@pytest.mark.parametrize("query", ["", "?readonly=1"])
def test_runs_hit_and_commands_work_on_read_only_media(
    read_only_store: tuple[Path, Path], tmp_path: Path, query: str
) -> None:
    source, mount = read_only_store
    url = f"{mount}{query}"
    before = sorted(p.name for p in source.rglob("*"))

    hit = last_json(run_python([PROGRAM, "before"], clean_env({"COMPILECACHE_URL": url})).stdout)
    stats = hit["stats"]
    assert stats["hits"] >= 3 and stats["misses"] == 0 and stats["errors"] == 0

    # A program the store has not seen: misses, none of them an error, nothing written.
    code = "import jax, jax.numpy as jnp; print(float(jax.jit(lambda x: x * 7 + 2)(jnp.ones(3)).sum()))"
    env = clean_env({"COMPILECACHE_URL": url, "COMPILECACHE_READ_ONLY": "1"})
    wrapped = subprocess.run(
        [sys.executable, "-m", "compilecache", "run", "--", sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert wrapped.returncode == 0, wrapped.stderr
    assert " 0 errors" in wrapped.stderr or "errors" not in wrapped.stderr, wrapped.stderr

    key = next(i.key for i in LocalStore(source).scan())
    outputs = {
        "stats": ("stats", "--json"),
        "ls": ("ls",),
        "show": ("show", key),
        "verify": ("verify",),
        "explain": ("explain",),
        "report": ("report", "--html", str(tmp_path / "report.html")),
        "export": ("export", str(tmp_path / "bundle.ccb")),
    }
    for name, args in outputs.items():
        proc = _cli(*args, url=url, cwd=tmp_path)
        assert proc.returncode == 0, f"{name}: rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        assert "Traceback" not in proc.stderr, f"{name}: {proc.stderr}"
        assert "unable to open database file" not in proc.stdout + proc.stderr, name
    report = json.loads(_cli("stats", "--json", url=url, cwd=tmp_path).stdout)
    assert report["entries"] >= 3
    assert (tmp_path / "report.html").stat().st_size > 0
    assert (tmp_path / "bundle.ccb").stat().st_size > 0
    # Nothing on the medium changed (it could not have, but nothing failed trying either).
    assert sorted(p.name for p in source.rglob("*")) == before


def test_a_store_without_an_index_on_read_only_media_is_indexed_in_memory(
    read_only_store: tuple[Path, Path], tmp_path: Path
) -> None:
    source, mount = read_only_store
    expected = sorted(i.key for i in LocalStore(source).scan())
    subprocess.run(["umount", "-l", str(mount)], check=True)
    for index in source.glob("index.sqlite*"):
        index.unlink()
    shutil.rmtree(source / "tmp", ignore_errors=True)
    subprocess.run(["mount", "--bind", str(source), str(mount)], check=True)
    subprocess.run(["mount", "-o", "remount,bind,ro", str(mount)], check=True)
    store = LocalStore(mount)
    assert store.read_only
    assert sorted(i.key for i in store.scan()) == expected
    assert store.get(expected[0]) is not None
    store.close()
    assert not list(source.glob("index.sqlite*"))
