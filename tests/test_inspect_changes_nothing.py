"""Looking at a store never changes it (issue 10): ``ls``, ``show``, ``verify``, ``export``,
``warm --from``'s source and ``explain`` read through ``peek``. Run against a tiered
``local,redis`` store and against a ``?readonly=1`` level, each command in a fresh process: the
hits, access times and persistent counters of every level, and the local level's contents, are
the same afterwards.
"""

from __future__ import annotations

import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from compilecache.entry import EntryHeader
from compilecache.runtime.cache import Cache
from compilecache.stores.base import Store
from compilecache.stores.local import LocalStore
from compilecache.stores.registry import open_url
from tests import servers
from tests.conftest import clean_env
from tests.servers import RedisServer, namespace

redis_server = servers.redis_server
JAXLIB = metadata.version("jaxlib")


def _fill(store: Store, names: list[str]) -> list[str]:
    cache = Cache(store)
    keys = []
    for i, name in enumerate(names):
        key = f"jax/jit_{name}-{i:064x}"
        header = EntryHeader(
            framework="jax",
            key=key,
            name=f"jit_{name}",
            compile_time_s=1.5,
            versions={"jax": JAXLIB, "jaxlib": JAXLIB},
            components={"computation": f"c{i}", "xla_flags": "f"},
        )
        assert cache.save(header, bytes([i]) * 2000, compress=False)
        keys.append(key)
    return keys


def _state(store: Store) -> dict[str, Any]:
    """What looking must not change: every entry's hits and access time, and the counters."""
    return {
        "entries": {i.key: (i.hits, i.accessed, i.size) for i in store.scan()},
        "stats": store.counters.read(),
    }


def _run(*args: str, url: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "compilecache", *args],
        env=clean_env({"COMPILECACHE_URL": url}),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )
    assert "Traceback" not in proc.stderr, f"{args}: {proc.stderr}"
    return proc


def _look_at_everything(url: str, key: str, name: str, tmp_path: Path) -> None:
    """Every command that only looks, against ``url`` (``warm --from url`` into a scratch store)."""
    for args in (
        ("ls",),
        ("ls", "--json"),
        ("show", key),
        ("show", name),
        ("verify",),
        ("export", str(tmp_path / f"bundle-{time.monotonic_ns()}.ccb")),
        ("explain",),
        ("explain", key),
    ):
        proc = _run(*args, "--url", url, url=url, cwd=tmp_path)
        assert proc.returncode in (0, 1), f"{args}: rc {proc.returncode}\n{proc.stderr}"
    scratch = tmp_path / f"scratch-{time.monotonic_ns()}"
    proc = _run("warm", "--from", url, "--url", str(scratch), url=str(scratch), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.slow
def test_looking_at_a_tiered_store_changes_no_level(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    local_dir = tmp_path / "local"
    remote_url = f"{redis_server.url}/{namespace()}"
    local, remote = LocalStore(local_dir), open_url(remote_url)
    both = _fill(local, ["a", "b"])
    _fill(remote, ["a", "b"])
    only_remote = _fill(remote, ["c", "d", "e"])[2:]  # distinct keys, held by the remote alone
    local.counters.add({"hits": 5.0})
    time.sleep(0.05)
    before = (_state(local), _state(remote))
    local.close()

    url = f"{local_dir},{remote_url}"
    _look_at_everything(url, only_remote[0], "jit_e", tmp_path)
    _look_at_everything(url, both[0], "jit_a", tmp_path)

    local = LocalStore(local_dir)
    after = (_state(local), _state(remote))
    assert after == before
    assert not set(only_remote) & {i.key for i in local.scan()}  # nothing backfilled
    local.close()


@pytest.mark.slow
def test_looking_through_a_read_only_level_changes_nothing(tmp_path: Path) -> None:
    local_dir = tmp_path / "local"
    local = LocalStore(local_dir)
    keys = _fill(local, ["a", "b", "c"])
    local.counters.add({"hits": 2.0})
    time.sleep(0.05)
    before = _state(local)
    local.close()

    _look_at_everything(f"{local_dir}?readonly=1", keys[1], "jit_b", tmp_path)

    local = LocalStore(local_dir)
    assert _state(local) == before
    local.close()
