"""One client started with the wrong COMPILECACHE_SECRET must not empty a fleet's cache (issue 11,
item 3). Real JAX in fresh processes: client A (key S1) fills a store; client B (key S2) runs the
same program against it: every lookup is a ``foreign`` miss, one warning names the likely cause,
the entries' bytes are unchanged and B writes nothing over them; A then still hits everything.
On a local store and on Redis."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from compilecache import entry
from compilecache.entry import EntryHeader
from compilecache.errors import ForeignEntry
from compilecache.runtime.cache import Cache
from compilecache.signing import Signing
from compilecache.stores.local import LocalStore
from tests import servers
from tests.conftest import compiles, run_jax_program, same_jax_results, stored_entries
from tests.servers import RedisServer, namespace

redis_server = servers.redis_server

S1 = "fleet-key-1"
S2 = "a-mistyped-key"


def run(url: str, secret: str) -> tuple[dict[str, Any], list[str]]:
    """The JAX program in a fresh process: its result and its compilecache warnings."""
    return run_jax_program({"COMPILECACHE_URL": url, "COMPILECACHE_SECRET": secret})


def check_foreign_client_leaves_the_store_alone(
    url: str, files: Callable[[], dict[str, tuple[int, int]]] | None = None
) -> None:
    cold, _ = run(url, S1)
    before = stored_entries(url)
    n = len(compiles(before))  # the executables (the guarded traces beside them are no compiles)
    assert cold["stats"]["writes"] == n >= 3
    on_disk = files() if files is not None else None

    stranger, warnings = run(url, S2)
    stats = stranger["stats"]
    # Every entry it read is foreign, traces too; only the executables' lookups are misses.
    assert stats["foreign"] == len(before) and stats["misses"] == n, stats
    assert stats["hits"] == 0 and stats["writes"] == 0, stats
    assert stats["corrupt"] == 0 and stats["errors"] == 0, stats
    assert len(warnings) == 1, warnings
    assert "COMPILECACHE_SECRET" in warnings[0] and "left in place" in warnings[0], warnings
    assert same_jax_results(stranger, cold)
    # Nothing deleted, nothing written over: the same entries, byte for byte, signed by S1.
    assert stored_entries(url) == before
    if files is not None:
        assert files() == on_disk  # the same files: not even rewritten with the same bytes
    for data in before.values():
        assert entry.decode(data, signing=Signing(secret=S1.encode())).signed
        with pytest.raises(ForeignEntry):
            entry.decode(data, signing=Signing(secret=S2.encode()))

    warm, warnings = run(url, S1)
    stats = warm["stats"]
    assert stats["hits"] == n and stats["misses"] == 0 and stats["foreign"] == 0, stats
    assert warnings == []
    assert same_jax_results(warm, cold)


@pytest.mark.slow
def test_a_client_with_another_secret_leaves_a_local_store_alone(tmp_path: Path) -> None:
    root = tmp_path / "store"

    def files() -> dict[str, tuple[int, int]]:
        """(inode, mtime) of every entry file: a rewrite, even of the same bytes, changes them."""
        store = LocalStore(root)
        try:
            paths = {info.key: store.path_of(info.key) for info in store.scan()}
        finally:
            store.close()
        return {key: (os.stat(p).st_ino, os.stat(p).st_mtime_ns) for key, p in paths.items()}

    check_foreign_client_leaves_the_store_alone(str(root), files)


@pytest.mark.slow
def test_a_client_with_another_secret_leaves_redis_alone(redis_server: RedisServer) -> None:
    check_foreign_client_leaves_the_store_alone(f"{redis_server.url}/{namespace()}")


# -- the tools leave foreign entries alone too ---------------------------------------------------


def _signed_store(root: Path, secret: bytes, keys: list[str]) -> LocalStore:
    store = LocalStore(root)
    cache = Cache(store, signing=Signing(secret=secret))
    for key in keys:
        header = EntryHeader(framework="jax", key=key, name=key, compile_time_s=2.0)
        assert cache.save(header, key.encode() * 200, compress=False)
    return store


def test_verify_fix_reports_foreign_entries_and_keeps_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from compilecache.cli import main

    store = _signed_store(tmp_path / "s", S1.encode(), ["jax/a", "jax/b"])
    before = {i.key: store.peek(i.key) for i in store.scan()}
    monkeypatch.setenv("COMPILECACHE_SECRET", S2)
    status = main(["verify", "--fix", "--url", str(tmp_path / "s")])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "foreign: jax/a:" in out and "foreign: jax/b:" in out, out
    assert {i.key: store.peek(i.key) for i in store.scan()} == before


def test_import_does_not_write_over_a_foreign_entry(tmp_path: Path) -> None:
    from compilecache.tools import bundle

    theirs = _signed_store(tmp_path / "theirs", S2.encode(), ["jax/a", "jax/new"])
    path = tmp_path / "b.ccb"
    assert (
        len(bundle.export_bundle(theirs, path, signing=Signing(secret=S2.encode())).transferred)
        == 2
    )
    ours = _signed_store(tmp_path / "ours", S1.encode(), ["jax/a"])
    kept = ours.peek("jax/a")
    report = bundle.import_bundle(path, ours, signing=Signing(secret=S2.encode()), check=False)
    assert report.transferred == ["jax/new"]
    assert [key for key, _ in report.skipped] == ["jax/a"]
    assert ours.peek("jax/a") == kept  # S1's entry, still there


def test_the_run_summary_says_how_many_entries_were_signed_with_another_key() -> None:
    from compilecache.stats import Summary

    line = Summary.of({"hits": 1, "misses": 3, "foreign": 3}).line()
    assert "3 misses, 3 signed with another key," in line
    assert "signed" not in Summary.of({"hits": 1, "misses": 3}).line()
