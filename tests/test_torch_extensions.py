"""torch's JIT-built C++ extensions through the store (issue 20, section 3).

Real ``load``/``load_inline`` builds in fresh processes. Each machine has its own
``TORCH_EXTENSIONS_DIR`` and a ``PATH`` whose ``ninja`` and ``c++`` log every run (version
queries and ninja's dependency listing aside), so a test sees whether anything was built.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest

from compilecache.frameworks.torch import extensions as torch_extensions
from compilecache.runtime import fileset, history
from compilecache.stores.local import LocalStore
from tests.conftest import ROOT, clean_env, last_json, run_python

torch = pytest.importorskip("torch")
if shutil.which("ninja") is None or shutil.which("c++") is None:
    pytest.skip("torch's extension builds need ninja and c++ on PATH", allow_module_level=True)

PROGRAM = str(ROOT / "tests" / "extension_program.py")
# Builds only: a compiler run that writes something (-o), any ninja run but its --version and
# its dependency listing (-t deps). Identity and ABI queries (-v, -dumpversion) are not builds.
LOGGING = (
    '#!/bin/sh\nbuild=no\nfor a in "$@"; do [ "$a" = -o ] && build=yes; done\n'
    'case "{tool} $1" in "ninja --version"|"ninja -t") ;; ninja*) build=yes;; esac\n'
    '[ $build = yes ] && echo "{tool} $*" >> "{log}"\nexec "{real}" "$@"\n'
)
OTHER_BUILD = (
    '#!/bin/sh\nif [ "$1" = "-v" ]; then "{real}" -v; echo "another build" >&2; exit 0; fi\n'
    'echo "c++ $*" >> "{log}"\nexec "{real}" "$@"\n'
)
PLAIN = 'extern "C" int cc_plain_value() {{ return VALUE + {extra}; }}\n'


class Machine:
    def __init__(self, root: Path, name: str, *, other_compiler: bool = False) -> None:
        self.root = root / name
        self.bin = self.root / "bin"
        self.bin.mkdir(parents=True)
        self.log = self.root / "tools.log"
        for tool in ("ninja", "c++"):
            real = shutil.which(tool)
            assert real, f"{tool} is not installed"
            text = OTHER_BUILD if (tool == "c++" and other_compiler) else LOGGING
            script = self.bin / tool
            script.write_text(text.format(tool=tool, log=self.log, real=real))
            script.chmod(script.stat().st_mode | stat.S_IXUSR)

    def runs(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def run(self, store: str, work: Path, *args: str) -> dict[str, Any]:
        env = clean_env(
            {
                "PATH": f"{self.bin}{os.pathsep}{os.environ['PATH']}",
                "TORCH_EXTENSIONS_DIR": str(self.root / "extensions"),
                "COMPILECACHE_MIN_COMPILE_TIME": "0",
                "PYTHONPATH": str(ROOT),
            }
        )
        command = [PROGRAM, "--url", store, "--work", str(work), *args]
        return dict(last_json(run_python(command, env, timeout=600).stdout))


def checkout(root: Path, *, extra: int = 0, value: int = 7) -> Path:
    """The plain extension's sources, at one path shared by every machine."""
    work = root / "checkout"
    (work / "include").mkdir(parents=True, exist_ok=True)
    (work / "plain.cpp").write_text('#include "value.h"\n' + PLAIN.format(extra=extra))
    (work / "include" / "value.h").write_text(f"#define VALUE {value}\n")
    return work


def test_load_inline_on_a_fresh_machine_runs_no_compiler_and_no_ninja(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    work = checkout(tmp_path)
    first = Machine(tmp_path, "first")
    built = first.run(store, work, "--kind", "inline")
    assert built["value"] == [2.0, 2.0, 2.0]
    assert any(r.startswith("ninja") for r in first.runs())
    assert built["stats"]["torch.extension.misses"] == 1 and built["stats"]["torch.writes"] >= 1
    fresh = Machine(tmp_path, "fresh")
    restored = fresh.run(store, work, "--kind", "inline")
    assert restored["value"] == [2.0, 2.0, 2.0]
    assert restored["stats"]["torch.extension.hits"] == 1
    assert fresh.runs() == [], "a compiler or ninja ran on a machine whose store held the build"
    [info] = LocalStore(store).scan("torch/extension/")
    assert info.name == "cc_twice"


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ("source", "sources changed"),
        ("flag", "-O3"),
        ("compiler", "compiler changed"),
        ("torch", "torch changed"),
        ("cuda", f"CUDA version changed: {torch.version.cuda or 'none'} -> 99.9"),
    ],
)
def test_a_changed_source_flag_compiler_torch_or_cuda_misses(
    tmp_path: Path, change: str, words: str
) -> None:
    store = str(tmp_path / "store")
    work = checkout(tmp_path)
    Machine(tmp_path, "first").run(store, work)
    args: list[str] = []
    if change == "source":
        checkout(tmp_path, extra=1)
    elif change == "flag":
        args = ["--cflags=-O3"]
    elif change == "torch":
        args = ["--fake-torch", torch.__version__ + ".other"]
    elif change == "cuda":
        args = ["--fake-cuda", "99.9"]
    other = Machine(tmp_path, "other", other_compiler=change == "compiler")
    result = other.run(store, work, *args)
    assert result["stats"]["torch.extension.misses"] == 1
    assert result["stats"].get("torch.extension.hits", 0) == 0
    assert any(r.startswith("ninja") for r in other.runs())
    records = [r for r in history.read(LocalStore(store), history.MISS) if r["name"] == "cc_plain"]
    [explained] = [r for r in records if r.get("nearest")]
    assert words in explained["summary"], explained["summary"]


def test_a_changed_header_is_a_stale_miss_and_the_build_runs(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    work = checkout(tmp_path)
    Machine(tmp_path, "first").run(store, work)
    checkout(tmp_path, value=8)  # the header the compiler read, not a source torch names
    other = Machine(tmp_path, "other")
    result = other.run(store, work)
    assert result["stats"]["torch.extension.stale"] == 1
    assert any(r.startswith("c++") for r in other.runs())
    # The rebuild replaced the stale entry: a machine with the new header restores it.
    third = Machine(tmp_path, "third")
    assert third.run(store, work)["stats"]["torch.extension.hits"] == 1 and third.runs() == []


def test_the_build_directory_entry_holds_the_library_and_the_headers_read(
    tmp_path: Path,
) -> None:
    store = str(tmp_path / "store")
    work = checkout(tmp_path)
    Machine(tmp_path, "first").run(store, work)
    local = LocalStore(store)
    [info] = local.scan("torch/extension/")
    from compilecache import entry

    found = entry.decode(local.get(info.key) or b"", expect_key=info.key)
    files = fileset.unpack(found.payload)
    assert "cc_plain.so" in files and files["cc_plain.so"].mode == 0o755
    assert "lock" not in files and "build.ninja" in files
    deps = [d[0] for d in found.header.extra["deps"]]
    assert str(work / "include" / "value.h") in deps


def test_compile_inputs_reads_the_compile_edges_only(tmp_path: Path) -> None:
    ninja = (
        "rule compile\n  command = $cxx -c $in -o $out\n"
        "build main.o: compile /src/a$ b.cpp | /src/extra.h\n"
        "build k.cuda.o: cuda_compile k.cu\n"
        "build x.so: link main.o k.cuda.o\n"
    )
    inputs = torch_extensions.compile_inputs(ninja, str(tmp_path))
    assert inputs == ["/src/a b.cpp", str(tmp_path / "k.cu")]


def test_without_compilecache_torch_builds_as_before(tmp_path: Path) -> None:
    machine = Machine(tmp_path, "plain")
    work = checkout(tmp_path)
    code = (
        "import sys, torch; from torch.utils.cpp_extension import load;"
        f"print(load('cc_plain', [{str(work / 'plain.cpp')!r}],"
        f" extra_include_paths=[{str(work / 'include')!r}], is_python_module=False))"
    )
    env = clean_env(
        {
            "PATH": f"{machine.bin}{os.pathsep}{os.environ['PATH']}",
            "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext"),
        }
    )
    assert "cc_plain" in run_python(["-c", code], env).stdout
    assert any(r.startswith("ninja") for r in machine.runs())


def test_an_unreachable_store_costs_a_warning_and_the_extension_builds(tmp_path: Path) -> None:
    """Fail-open: the store is down, torch builds the extension as it would without us."""
    from tests.servers import free_port

    work = checkout(tmp_path)
    machine = Machine(tmp_path, "offline")
    result = machine.run(f"redis://127.0.0.1:{free_port()}/0?timeout=0.5s", work)
    assert result["library"].endswith("cc_plain.so")
    assert any(r.startswith("ninja") for r in machine.runs())
    assert result["stats"]["errors"] >= 1 and result["stats"].get("torch.extension.hits", 0) == 0
