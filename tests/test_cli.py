"""The CLI against a local store filled through the Cache layer (no framework needed)."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest

from compilecache.cli import main
from compilecache.entry import EntryHeader
from compilecache.runtime.cache import Cache
from compilecache.stores.local import LocalStore


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    root = tmp_path / "store"
    store = LocalStore(root)
    cache = Cache(store)
    for i, (fw, name) in enumerate([("jax", "jit_a"), ("jax", "jit_b"), ("torch", "fx_c")]):
        header = EntryHeader(
            framework=fw, key=f"{fw}/{name}-{i:04x}", name=name, compile_time_s=1.0 + i
        )
        assert cache.save(header, random.Random(i).randbytes(1000 * (i + 1)))
    assert cache.load("jax", "jax/jit_a-0000") is not None
    store.counters.add(cache.stats.snapshot())
    store.close()
    return str(root)


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    status = main(list(args))
    return status, capsys.readouterr().out


def test_stats_json_has_the_contract_fields(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out = run_cli(capsys, "stats", "--json", "--url", store_url)
    report = json.loads(out)
    assert status == 0
    for field in (
        "hits",
        "misses",
        "writes",
        "errors",
        "entries",
        "size_bytes",
        "compile_time_saved_s",
    ):
        assert field in report
    assert report["entries"] == 3 and report["writes"] == 3 and report["hits"] == 1
    assert report["frameworks"]["jax"]["entries"] == 2
    assert report["compile_time_saved_s"] > 0.9


def test_stats_zero(store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    run_cli(capsys, "stats", "--zero", "--url", store_url)
    report = json.loads(run_cli(capsys, "stats", "--json", "--url", store_url)[1])
    assert report["hits"] == 0 and report["writes"] == 0 and report["entries"] == 3


def test_ls_filters_and_sorts(store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    rows = json.loads(run_cli(capsys, "ls", "--json", "--sort", "size", "--url", store_url)[1])
    assert [r["name"] for r in rows] == ["fx_c", "jit_b", "jit_a"]
    rows = json.loads(run_cli(capsys, "ls", "--json", "--framework", "jax", "--url", store_url)[1])
    assert {r["name"] for r in rows} == {"jit_a", "jit_b"}
    status, text = run_cli(capsys, "ls", "--url", store_url)
    assert status == 0 and "jit_a" in text and "3 entries" in text


def test_show_accepts_a_prefix(store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, out = run_cli(capsys, "show", "jit_b", "--json", "--url", store_url)
    shown = json.loads(out)
    assert status == 0
    assert shown["entry"]["name"] == "jit_b" and shown["entry"]["compile_time_s"] == 2.0
    assert run_cli(capsys, "show", "nothing-like-this", "--url", store_url)[0] == 1


def test_show_finds_a_key_without_its_framework_prefix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every framework's prefix is tried, Triton's too (a key copied from its cache directory
    has no ``triton/``): the exact key, not every key it begins."""
    root = tmp_path / "store"
    cache = Cache(LocalStore(root))
    keys = ("triton/kernel/ab12", "triton/kernel/ab12ef", "torch/fxgraph/cd34")
    for fw, key in zip(("triton", "triton", "torch"), keys, strict=True):
        assert cache.save(EntryHeader(framework=fw, key=key, name=key.rsplit("/")[-1]), b"v")
    for text, key in (
        ("kernel/ab12", "triton/kernel/ab12"),
        ("fxgraph/cd34", "torch/fxgraph/cd34"),
    ):
        status, out = run_cli(capsys, "show", text, "--json", "--url", str(root))
        assert status == 0 and json.loads(out)["entry"]["key"] == key


def test_prune_dry_run_then_real(store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, out = run_cli(
        capsys, "prune", "--max-size", "3500", "--dry-run", "--json", "--url", store_url
    )
    plan = json.loads(out[out.index("{") :])
    assert status == 0 and plan["planned"] >= 1 and plan["removed"] == 0
    assert len(list(LocalStore(store_url).scan())) == 3
    run_cli(capsys, "prune", "--max-size", "3500", "--url", store_url)
    left = LocalStore(store_url).scan()
    assert sum(i.size for i in left) <= 3500


def test_prune_older_than(store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Entries last used two hours ago go, the one used now stays (the rows are backdated:
    nothing waits for the clock)."""
    store = LocalStore(store_url)
    with store._transaction() as conn:
        conn.execute(
            "UPDATE entries SET accessed = ? WHERE key != 'jax/jit_a-0000'", (time.time() - 7200,)
        )
    store.close()
    assert run_cli(capsys, "prune", "--older-than", "1h", "--url", store_url)[0] == 0
    assert [i.key for i in LocalStore(store_url).scan()] == ["jax/jit_a-0000"]


def test_a_duration_without_its_unit_is_refused_and_nothing_is_removed(store_url: str) -> None:
    """``--older-than 7`` could mean seconds or days: a fresh process refuses it, naming the
    units, and the store keeps every entry; ``--since 7`` and ``doctor --timeout 7`` too."""
    from tests.conftest import run_cli as run_in_a_process

    time.sleep(0.1)
    for args in (
        ["prune", "--older-than", "7", "--url", store_url],
        ["export", "--since", "7", "--url", store_url, str(Path(store_url) / "b.ccb")],
        ["doctor", "--timeout", "7", "--", "true"],
    ):
        proc = run_in_a_process(*args)
        assert proc.returncode != 0, (args, proc.stdout, proc.stderr)
        said = proc.stdout + proc.stderr
        assert "'7'" in said and "d (days)" in said and "s (seconds)" in said, said
        assert "Traceback" not in said
    assert len(list(LocalStore(store_url).scan())) == 3


def test_clear_needs_yes(store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(capsys, "clear", "--url", store_url)[0] == 1
    assert len(list(LocalStore(store_url).scan())) == 3
    assert run_cli(capsys, "clear", "--yes", "--url", store_url)[0] == 0
    assert list(LocalStore(store_url).scan()) == []


def test_verify_finds_and_fixes_corruption(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    store = LocalStore(store_url)
    path = store.path_of("jax/jit_b-0001")
    data = bytearray(path.read_bytes())
    data[-20] ^= 0x01
    path.write_bytes(bytes(data))
    status, out = run_cli(capsys, "verify", "--json", "--url", store_url)
    assert status == 1 and json.loads(out[out.index("{") :])["corrupt"] == 1
    status, out = run_cli(capsys, "verify", "--fix", "--url", store_url)
    assert status == 0 and "removed: jax/jit_b-0001" in out
    assert run_cli(capsys, "verify", "--url", store_url)[0] == 0
    assert {i.key for i in store.scan()} == {"jax/jit_a-0000", "torch/fx_c-0002"}


def test_bad_url_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stats", "--url", "nosuchscheme://x"]) == 2
    assert "unknown store URL scheme 'nosuchscheme'" in capsys.readouterr().err
