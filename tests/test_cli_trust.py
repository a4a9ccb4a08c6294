"""The command line never loses data by looking at it, and never answers a user error with a
traceback (issue 11, items 1, 2, 10 and 11; issue 10: the configuration is loaded once).

Real local stores filled through compilecache's own Cache, damaged the ways disks and users
damage them (a truncated file, a zero-length file, a file holding another key's data), and real
``python -m compilecache`` processes for the pipe, missing-directory and full-disk cases.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from compilecache import config as config_mod
from compilecache.cli import main
from compilecache.entry import EntryHeader
from compilecache.runtime.cache import Cache
from compilecache.signing import Signing
from compilecache.stores.local import LocalStore
from tests.conftest import clean_env

GOOD = ["jit_step-0", "jit_step-1", "jit_step-2", "jit_other-3"]
TRUNCATED, EMPTY, SWAPPED = "jit_trunc-4", "jit_zero-5", "jit_swap-6"


def _key(stem: str) -> str:
    return f"jax/{stem}-{uuid.uuid5(uuid.NAMESPACE_OID, stem).hex}"


def _name(stem: str) -> str:
    return stem.rsplit("-", 1)[0]


def _fill(root: Path, stems: list[str], *, size: int = 3000, secret: bytes | None = None) -> None:
    store = LocalStore(root)
    cache = Cache(store, signing=Signing(secret=secret))
    rng = random.Random(0)
    for stem in stems:
        header = EntryHeader(
            framework="jax", key=_key(stem), name=_name(stem), compile_time_s=1.0
        )  # jit_step three times: one function compiled at three shapes
        assert cache.save(header, rng.randbytes(size), compress=False)
    store.close()


@pytest.fixture
def damaged(tmp_path: Path) -> Path:
    """A store of four good entries and three damaged ones."""
    root = tmp_path / "store"
    _fill(root, [*GOOD, TRUNCATED, EMPTY, SWAPPED])
    store = LocalStore(root)
    path = store.path_of(_key(TRUNCATED))
    path.write_bytes(path.read_bytes()[:-500])
    store.path_of(_key(EMPTY)).write_bytes(b"")
    # Another key's data under this key's name (a copy gone wrong): never a hit, never silent.
    shutil.copyfile(store.path_of(_key(GOOD[3])), store.path_of(_key(SWAPPED)))
    store.close()
    return root


def _files(root: Path) -> dict[str, bytes]:
    """Every file of the store directory except its index (what must not change)."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "index" not in p.name and not p.name.endswith((".db", "-wal", "-shm"))
    }


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(list(args))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _python(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "compilecache", *args],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=120,
        check=False,
    )


# -- item 1: verify looks; only --fix removes ------------------------------------------------------


def test_verify_reports_every_damaged_entry_and_deletes_nothing(
    damaged: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _files(damaged)
    status, out, err = _cli(capsys, "verify", "--url", str(damaged))
    assert status == 1, (out, err)
    for stem, why in ((TRUNCATED, "truncated"), (EMPTY, "truncated"), (SWAPPED, "another key")):
        line = next(ln for ln in out.splitlines() if _key(stem) in ln)
        assert line.startswith("corrupt: ") and why in line and _name(stem) in line, out
    assert "7 entries checked, 3 corrupt" in out, out
    assert _files(damaged) == before  # not one byte removed or changed

    status, out, _ = _cli(capsys, "verify", "--json", "--url", str(damaged))
    report = json.loads(out[out.index("{") :])
    assert status == 1 and report["checked"] == 7 and report["corrupt"] == 3
    assert {d["key"] for d in report["damaged"]} == {_key(s) for s in (TRUNCATED, EMPTY, SWAPPED)}
    assert _files(damaged) == before

    status, out, _ = _cli(capsys, "verify", "--fix", "--url", str(damaged))
    assert status == 0 and out.count("removed: ") == 3, out
    assert {i.key for i in LocalStore(damaged).scan()} == {_key(s) for s in GOOD}
    assert _cli(capsys, "verify", "--url", str(damaged))[:2] == (
        0,
        "compilecache: 4 entries checked, 0 corrupt\n",
    )


def test_verify_keeps_entries_signed_with_another_key_even_with_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "signed"
    _fill(root, GOOD[:2], secret=b"the fleet's key")
    before = _files(root)
    monkeypatch.setenv("COMPILECACHE_SECRET", "a mistyped key")
    status, out, _ = _cli(capsys, "verify", "--fix", "--url", str(root))
    assert status == 0 and out.count("signed with another key") == 3, out  # 2 lines + total
    assert _files(root) == before


# -- item 2: show, export and warm --from never delete from the store they read -----------------


def test_show_export_and_warm_report_damage_and_leave_the_source_alone(
    damaged: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _files(damaged)
    hits_before = LocalStore(damaged).counters.read().get("hits", 0)
    for stem in (TRUNCATED, EMPTY, SWAPPED):
        status, out, _ = _cli(capsys, "show", _key(stem), "--url", str(damaged))
        assert status == 1 and "corrupt" in out, out
    assert _files(damaged) == before

    bundle_file = tmp_path / "b.ccb"
    status, out, _ = _cli(capsys, "export", str(bundle_file), "--json", "--url", str(damaged))
    report = json.loads(out)
    assert status == 0 and report["transferred"] == 4
    assert {s["key"] for s in report["skipped"]} == {_key(s) for s in (TRUNCATED, EMPTY, SWAPPED)}
    assert all("left in the source" in s["reason"] for s in report["skipped"])
    assert _files(damaged) == before

    target = tmp_path / "target"
    status, out, _ = _cli(
        capsys, "warm", "--from", str(damaged), "--json", "--no-check", "--url", str(target)
    )
    report = json.loads(out)
    assert status == 0 and report["transferred"] == 4 and len(report["skipped"]) == 3, report
    assert _files(damaged) == before
    assert {i.key for i in LocalStore(damaged).scan()} == {
        _key(s) for s in [*GOOD, TRUNCATED, EMPTY, SWAPPED]
    }
    assert LocalStore(damaged).counters.read().get("hits", 0) == hits_before  # looked, not used


# -- item 11: show NAME lists every entry of a function --------------------------------------------


def test_show_name_lists_every_entry_of_the_function(
    damaged: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = _cli(capsys, "show", "jit_step", "--json", "--url", str(damaged))
    assert status == 0, err
    shown = json.loads(out)
    assert sorted(r["entry"]["key"] for r in shown) == sorted(_key(s) for s in GOOD[:3])
    status, out, _ = _cli(capsys, "show", "jit_step", "--url", str(damaged))
    assert status == 0 and "3 entries match 'jit_step'" in out
    assert all(_key(s) in out for s in GOOD[:3])
    # A key prefix that several keys share lists them too.
    status, out, _ = _cli(capsys, "show", "jax/jit_step-", "--json", "--url", str(damaged))
    assert status == 0 and len(json.loads(out)) == 3
    # One entry: the single record, as before.
    status, out, _ = _cli(capsys, "show", "jit_other", "--json", "--url", str(damaged))
    assert status == 0 and json.loads(out)["entry"]["key"] == _key(GOOD[3])


# -- item 10: no traceback, no partial file, no good file replaced by a worse one ----------------


def test_export_that_matches_nothing_keeps_the_existing_bundle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "store"
    _fill(root, GOOD)
    bundle_file = tmp_path / "b.ccb"
    assert _cli(capsys, "export", str(bundle_file), "--url", str(root))[0] == 0
    good = bundle_file.read_bytes()
    status, _, err = _cli(
        capsys, "export", str(bundle_file), "--name", "nothing*", "--url", str(root)
    )
    assert status == 2 and "matches (--name 'nothing*'): nothing written" in err, err
    assert bundle_file.read_bytes() == good


def test_export_to_a_missing_directory_or_a_directory_is_one_line(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _fill(root, GOOD)
    for where in (tmp_path / "no" / "such" / "dir" / "b.ccb", tmp_path):
        proc = _python("export", str(where), "--url", str(root))
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr
        assert str(where) in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]  # no temporary left behind


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs: a disk that fills up (needs root and mount)."""
    where = tmp_path / "tiny"
    where.mkdir()
    try:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError as exc:
        pytest.skip(f"cannot run mount: {exc}")
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)


def test_export_to_a_full_disk_keeps_the_old_file_and_leaves_no_partial(
    tmp_path: Path, tiny_disk: Path
) -> None:
    root = tmp_path / "store"
    _fill(root, GOOD, size=40_000)  # 160 kB of random bytes: does not fit in 64 KiB
    old = tiny_disk / "b.ccb"
    old.write_bytes(b"the previous bundle")
    proc = _python("export", str(old), "--url", str(root))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert "No space left" in proc.stderr and "left as it was" in proc.stderr
    assert old.read_bytes() == b"the previous bundle"
    assert [p.name for p in tiny_disk.iterdir()] == ["b.ccb"]  # no partial temporary file


@pytest.fixture(scope="module")
def many_entries(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Enough entries that ``ls --json`` is larger than a pipe's buffer (64 KiB)."""
    root = tmp_path_factory.mktemp("many") / "store"
    store = LocalStore(root)
    cache = Cache(store)
    for i in range(500):
        header = EntryHeader(framework="jax", key=f"jax/jit_f{i}-{i:064x}", name=f"jit_f{i}")
        assert cache.save(header, b"x" * 10, compress=False)
    store.close()
    return root


def test_ls_into_a_closed_pipe_ends_quietly(many_entries: Path) -> None:
    shell = subprocess.run(
        [
            "sh",
            "-c",
            f'"{sys.executable}" -m compilecache ls --json --url "{many_entries}" | head -1',
        ],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=120,
        check=False,
    )
    assert shell.stdout == "[\n"
    assert "Traceback" not in shell.stderr and "BrokenPipe" not in shell.stderr, shell.stderr
    assert shell.stderr == ""
    # The status the command itself returns: 141 (128 + SIGPIPE), as `ls` or `cat` would.
    proc = subprocess.Popen(
        [sys.executable, "-m", "compilecache", "ls", "--url", str(many_entries)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=clean_env(),
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith(b"FRAMEWORK")
    proc.stdout.close()
    assert proc.wait(timeout=120) == 141
    assert proc.stderr.read() == b""


# -- issue 10: the configuration is loaded once per command ----------------------------------------


def test_the_configuration_is_loaded_once_per_command(
    damaged: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    calls: list[object] = []
    real_load = config_mod.load

    def counting_load(*args: object, **kwargs: object) -> config_mod.Config:
        calls.append(kwargs.get("url"))
        return real_load(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(config_mod, "load", counting_load)
    url = str(damaged)
    for command in (
        ["verify"],
        ["show", "jit_step"],
        ["ls"],
        ["stats"],
        ["prune", "--dry-run"],
        ["export", str(tmp_path / "b.ccb")],
        ["warm", "--from", url, "--no-check"],
    ):
        calls.clear()
        target = str(tmp_path / "t") if command[0] == "warm" else url
        main([*command, "--url", target])
        capsys.readouterr()
        assert calls == [target], (command, calls)


def test_torch_blob_export_keeps_an_existing_file_and_names_a_missing_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "store"
    _fill(root, GOOD)  # no torch entries: a torch blob of this store holds nothing
    blob = tmp_path / "blob.bin"
    blob.write_bytes(b"a blob saved earlier")
    status, _, err = _cli(capsys, "export", str(blob), "--format", "torch", "--url", str(root))
    assert status == 2 and "nothing written" in err, err
    assert blob.read_bytes() == b"a blob saved earlier"
    missing = tmp_path / "no" / "dir" / "blob.bin"
    proc = _python("export", str(missing), "--format", "torch", "--url", str(root))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and str(missing) in proc.stderr
