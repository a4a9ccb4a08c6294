"""Triton's own cache through the store (issue 20, section 1), with real Triton processes.

Each process compiles a kernel for a CUDA target on this CPU-only machine: Triton cross-compiles
with its bundled ``ptxas``, which the tests replace with a wrapper that logs each assembly it
runs (``--version`` queries aside), so a test sees whether a compiler ran. Every process has its
own empty ``TRITON_CACHE_DIR`` unless it plays the same machine again.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from compilecache.config import Config
from compilecache.entry import EntryHeader
from compilecache.runtime import fileset, history
from compilecache.stores.local import LocalStore
from tests.conftest import ROOT, clean_env, last_json, run_python

triton = pytest.importorskip("triton")

PROGRAM = str(ROOT / "tests" / "triton_program.py")
WRAPPER = (
    '#!/bin/sh\nif [ "$1" != "--version" ]; then echo run >> "{log}"; fi\nexec "{real}" "$@"\n'
)


class Machine:
    """One host: its own Triton cache directory and a logging ptxas."""

    def __init__(self, root: Path, name: str) -> None:
        self.root = root / name
        self.root.mkdir(parents=True)
        self.log = self.root / "ptxas.log"
        real = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
        self.ptxas = self.root / "ptxas"
        self.ptxas.write_text(WRAPPER.format(log=self.log, real=real))
        self.ptxas.chmod(self.ptxas.stat().st_mode | stat.S_IXUSR)

    def env(self, **extra: str) -> dict[str, str]:
        return clean_env(
            {
                "TRITON_CACHE_DIR": str(self.root / "triton-cache"),
                "TRITON_PTXAS_PATH": str(self.ptxas),
                "TRITON_DEFAULT_FP_FUSION": "1",
                "COMPILECACHE_MIN_COMPILE_TIME": "0",
                "PYTHONPATH": str(ROOT),
                **extra,
            }
        )

    def assemblies(self) -> int:
        return len(self.log.read_text().splitlines()) if self.log.exists() else 0

    def run(self, url: str, *args: str, under_run: bool = False, **env: str) -> dict[str, Any]:
        # One checkout path for every machine: the cubin's line info names the kernel's file.
        program = [PROGRAM, "--work", str(self.root.parent / "checkout"), *args]
        if under_run:  # no code change: `compilecache run -- python program.py`
            command = ["-m", "compilecache", "run", "--url", url, "--", sys.executable, *program]
        else:
            command = [*program, "--url", url]
        return dict(last_json(run_python(command, self.env(**env)).stdout))


def misses(store: str) -> list[dict[str, Any]]:
    return [r for r in history.read(LocalStore(store), history.MISS) if r["framework"] == "triton"]


def test_a_fresh_machine_gets_the_identical_cubin_and_runs_no_assembler(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    first = Machine(tmp_path, "first").run(store)
    assert first["stats"]["triton.misses"] == 1 and first["stats"]["triton.writes"] == 1
    fresh = Machine(tmp_path, "fresh")
    second = fresh.run(store, under_run=True)
    assert second["cubin"] == first["cubin"]
    assert second["stats"]["triton.hits"] == 1
    assert second["stats"].get("triton.misses", 0) == 0
    assert fresh.assemblies() == 0, "ptxas ran on a machine whose store held the kernel"
    # The machine's own directory now holds it: Triton's own hit, the store is not asked.
    again = fresh.run(store)
    assert again["stats"]["triton.local_hits"] == 1 and again["stats"]["hits"] == 0
    [stored] = [i for i in LocalStore(store).scan("triton/")]
    assert stored.name == "scaled_add" and stored.framework == "triton"


def test_the_first_machine_ran_the_assembler_and_the_entry_holds_the_group(
    tmp_path: Path,
) -> None:
    store = str(tmp_path / "store")
    machine = Machine(tmp_path, "first")
    machine.run(store)
    assert machine.assemblies() == 1
    [info] = LocalStore(store).scan("triton/kernel/")
    raw = LocalStore(store).get(info.key)
    assert raw is not None
    from compilecache import entry

    found = entry.decode(raw, expect_key=info.key)
    files = fileset.unpack(found.payload)
    assert {"scaled_add.cubin", "scaled_add.json", "scaled_add.ptx"} <= set(files)
    assert found.header.extra["readable"]["backend"].startswith("cuda 80")
    assert set(found.header.components) == {"triton", "source", "backend", "options", "env"}


@pytest.mark.parametrize(
    ("change", "args", "words"),
    [
        ("target", ["--arch", "86"], "triton: target changed"),
        ("source", ["--variant", " * 2.0"], "the kernel's source changed"),
        ("version", ["--fake-version", "9.9.9"], f"Triton {triton.__version__} -> 9.9.9"),
    ],
)
def test_another_target_source_or_triton_misses_and_says_why(
    tmp_path: Path, change: str, args: list[str], words: str
) -> None:
    store = str(tmp_path / "store")
    first = Machine(tmp_path, "first").run(store)
    other = Machine(tmp_path, "other")
    result = other.run(store, *args)
    assert result["stats"]["triton.misses"] == 1 and result["stats"].get("triton.hits", 0) == 0
    assert other.assemblies() == 1
    if change != "version":  # another Triton would build the same code here
        assert result["ptx"] != first["ptx"]
    [explained] = [r for r in misses(store) if r.get("nearest")]
    assert words in explained["summary"], explained["summary"]
    # Both entries stay: the first machine still hits its own.
    assert len(list(LocalStore(store).scan("triton/kernel/"))) == 2


def test_a_manager_the_user_set_is_chained_not_replaced(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    Machine(tmp_path, "first").run(store)
    puts = tmp_path / "puts.log"
    fresh = Machine(tmp_path, "fresh")
    result = fresh.run(
        store,
        TRITON_CACHE_MANAGER="tests.triton_program:Counting",
        COUNT_PUTS=str(puts),
    )
    assert result["stats"]["triton.hits"] == 1 and fresh.assemblies() == 0
    # The hit reached Triton through the user's manager: it wrote every file of the group.
    written = puts.read_text().splitlines()
    assert "scaled_add.cubin" in written and "__grp__scaled_add.json" in written


def test_autotune_timings_travel_as_single_files(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    first = Machine(tmp_path, "first").run(store, "--autotune", "shape-1024")
    assert first["autotune"] == "benchmarked"
    second = Machine(tmp_path, "second").run(store, "--autotune", "shape-1024")
    assert second["autotune"] == [[{"BLOCK": 128}, [0.5]]]
    third = Machine(tmp_path, "third").run(store, "--autotune", "shape-4096")
    assert third["autotune"] == "benchmarked"
    names = sorted(i.key.split("/")[1] for i in LocalStore(store).scan("triton/"))
    assert names == ["autotune", "autotune", "kernel"]


def test_dump_and_override_managers_are_left_to_triton(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    dump = tmp_path / "dump"
    Machine(tmp_path, "first").run(store, TRITON_KERNEL_DUMP="1", TRITON_DUMP_DIR=str(dump))
    assert any(p.name.endswith(".ptx") for p in dump.rglob("*")), "the dump went elsewhere"
    assert len(list(LocalStore(store).scan("triton/"))) == 1


def test_a_group_naming_another_key_or_damaged_is_a_miss(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    first = Machine(tmp_path, "first").run(store)
    local = LocalStore(store)
    [info] = local.scan("triton/kernel/")
    raw = local.get(info.key)
    assert raw is not None
    from compilecache import entry

    found = entry.decode(raw, expect_key=info.key)
    files = fileset.unpack(found.payload)
    metadata = json.loads(files["scaled_add.json"].data)
    metadata["hash"] = "00" * 32  # written under another key
    files["scaled_add.json"] = fileset.File(json.dumps(metadata).encode())
    header = EntryHeader(**{**found.header.__dict__})
    local.put(info.key, entry.encode(header, fileset.pack(files)))
    fresh = Machine(tmp_path, "fresh")
    result = fresh.run(store)
    assert result["ptx"] == first["ptx"] and fresh.assemblies() == 1
    assert result["stats"].get("triton.hits", 0) == 1  # the entry read, then refused
    # A flipped byte: the entry's checksum fails, a corrupt miss, and the kernel compiles.
    data = bytearray(local.get(info.key) or b"")
    data[len(data) // 2] ^= 0xFF
    local.put(info.key, bytes(data))
    third = Machine(tmp_path, "third")
    result = third.run(store)
    assert result["stats"]["corrupt"] == 1 and third.assemblies() == 1


def test_bundles_carry_triton_entries(tmp_path: Path) -> None:
    store, other = str(tmp_path / "store"), str(tmp_path / "other")
    Machine(tmp_path, "first").run(store)
    bundle = str(tmp_path / "kernels.ccb")
    env = clean_env()
    run_python(["-m", "compilecache", "export", bundle, "--url", store], env)
    imported = run_python(["-m", "compilecache", "import", bundle, "--url", other], env)
    assert "1" in imported.stdout
    listed = run_python(["-m", "compilecache", "ls", "--url", other], env).stdout
    assert "triton" in listed and "scaled_add" in listed
    [key] = [i.key for i in LocalStore(other).scan("triton/")]
    shown = run_python(["-m", "compilecache", "show", key, "--url", other], env).stdout
    assert "name: scaled_add" in shown and "scaled_add.cubin" in shown
    fresh = Machine(tmp_path, "fresh")
    assert fresh.run(other)["stats"]["triton.hits"] == 1 and fresh.assemblies() == 0


def test_file_sets_round_trip_and_refuse_paths_outside_their_root() -> None:
    files = {"a.cubin": fileset.File(b"\x00\x01"), "sub/b.so": fileset.File(b"elf", 0o755)}
    assert fileset.unpack(fileset.pack(files)) == files
    for bad in ("../x", "/abs", "a//b", "a/./b", ""):
        with pytest.raises(fileset.BadFileSet):
            fileset.pack({bad: fileset.File(b"")})
    payload = fileset.pack(files)
    for damaged in (
        payload[:-1],
        payload + b"x",
        b"nonsense",
        payload.replace(b"a.cubin", b"../cub"),
    ):
        with pytest.raises(fileset.BadFileSet):
            fileset.unpack(damaged)


def test_not_enabled_triton_keeps_its_own_manager(tmp_path: Path) -> None:
    machine = Machine(tmp_path, "plain")
    env = machine.env()
    out = run_python(
        [
            "-c",
            "import os, triton; from triton import knobs; print(knobs.cache.manager_class)",
        ],
        env,
    ).stdout
    assert "None" in out
    assert os.environ.get("TRITON_CACHE_MANAGER") is None


def test_an_unreachable_store_costs_a_warning_and_triton_compiles(tmp_path: Path) -> None:
    """Fail-open: the store is down, the kernel compiles as without compilecache."""
    from tests.servers import free_port

    machine = Machine(tmp_path, "offline")
    url = f"redis://127.0.0.1:{free_port()}/0?timeout=0.5s"
    result = machine.run(url)
    assert len(result["ptx"]) == 64 and machine.assemblies() == 1
    assert result["stats"]["errors"] >= 1 and result["stats"].get("triton.hits", 0) == 0


@pytest.mark.parametrize("configured", [None, "triton.runtime.cache:FileCacheManager"])
def test_uninstall_gives_triton_back_its_manager_and_key_function(
    configured: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The manager knob and get_cache_key are patched through one record and undone from it:
    a knob set in code comes back, one that was unset is unset again."""
    from triton import knobs
    from triton.compiler import compiler

    from compilecache.frameworks.triton import integration
    from compilecache.runtime.cache import Cache
    from compilecache.stores.memory import MemoryStore

    if configured is not None:
        monkeypatch.setattr(knobs.cache, "manager_class", configured)
    before_knob = vars(knobs.cache).get("manager_class", "unset")
    before_key = compiler.get_cache_key
    undo = "memory://triton-undo"
    assert integration.install(Cache(MemoryStore(undo)), Config(url=undo))
    try:
        assert knobs.cache.manager_class is integration.StoreCacheManager
        assert compiler.get_cache_key is not before_key
        assert integration.hook_status() == {
            "triton.knobs.cache.manager_class": True,
            "triton.compiler.compiler.get_cache_key": True,
        }
    finally:
        integration.uninstall()
    assert vars(knobs.cache).get("manager_class", "unset") == before_knob
    assert compiler.get_cache_key is before_key
    assert integration.hook_status() == {}
