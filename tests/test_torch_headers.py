"""The precompiled header's answers (torch_headers), part by part; the real processes are in
``test_torch_warm.py`` (a new machine, another flag, another compiler)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from compilecache.frameworks.torch import headers as torch_headers
from compilecache.frameworks.torch.probes import ProbeCache
from compilecache.runtime.cache import Cache
from compilecache.stores.memory import MemoryStore

pytest.importorskip("torch")


def test_parse_depfile_reads_every_prerequisite_once() -> None:
    text = "header.i: /tmp/x/header.hpp /usr/include/a.h \\\n /opt/my\\ dir/b.h /usr/include/a.h\n"
    assert torch_headers.parse_depfile(text) == [
        "/tmp/x/header.hpp",
        "/usr/include/a.h",
        "/opt/my dir/b.h",
    ]


def test_a_dependency_is_unchanged_only_with_its_size_and_contents(tmp_path: Path) -> None:
    path = tmp_path / "a.h"
    path.write_text("#define A 1\n")
    (dep,) = torch_headers.dependencies([str(path)])
    assert dep.unchanged()
    path.write_text("#define A 2\n")  # same size, other contents
    assert not dep.unchanged()
    path.write_text("#define A 10\n")
    assert not dep.unchanged()
    path.unlink()
    assert not dep.unchanged()


def _answer(deps: list[torch_headers.Dependency]) -> dict[str, Any]:
    return {
        "name": "abc.h",
        "text": "#include <x.h>\n",
        "deps": [[d.path, d.size, d.digest] for d in deps],
    }


def test_an_answer_is_refused_when_a_file_it_read_changed(tmp_path: Path) -> None:
    path = tmp_path / "a.h"
    path.write_text("int a;\n")
    answer = _answer(torch_headers.dependencies([str(path)]))
    assert torch_headers._valid_answer(answer) is answer
    path.write_text("int b;\n")
    with pytest.raises(ValueError, match="changed"):
        torch_headers._valid_answer(answer)
    with pytest.raises(ValueError):
        torch_headers._valid_answer({**answer, "name": "../../etc/x.h"})


def test_included_headers_are_read_from_the_command_line() -> None:
    command = "g++ k.cpp -O3 -include /h/abc.h -o k.so"
    assert torch_headers._included(command) == ["/h/abc.h"]
    assert torch_headers._included("g++ k.cpp -o k.so") == []


def test_an_answered_header_is_built_when_a_kernel_needs_the_compiler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stored answer is used without torch's function; the function runs (once) for the
    first kernel that compiles with that header, and a store answer whose file changed is a
    miss."""
    codecache = pytest.importorskip("torch._inductor.codecache")
    header_dir = tmp_path / "headers"
    monkeypatch.setattr(codecache, "_HEADER_DIR", str(header_dir))
    dep = tmp_path / "dep.h"
    dep.write_text("int x;\n")
    cache = Cache(MemoryStore(f"memory://headers-{uuid.uuid4().hex}"))
    calls: list[str] = []

    def original(header: str, command: str, **options: Any) -> str:
        calls.append(header)
        path = header_dir / "abc.h"
        header_dir.mkdir(exist_ok=True)
        path.write_text(f"#include <{header}>\n")
        return str(path)

    first = torch_headers.HeaderCache(ProbeCache(cache))
    # A miss whose preprocessing read dep.h: what `preprocess` records in the compiling thread.
    first._local.read = None

    def recording(header: str, command: str, **options: Any) -> str:
        first._local.read = (torch_headers.dependencies([str(dep)]), 0.2)
        return original(header, command, **options)

    path = first.precompile_header(recording, "x.h", "g++ -O3", vec_isa="avx2")
    assert calls == ["x.h"] and path == str(header_dir / "abc.h")

    os.unlink(path)
    second = torch_headers.HeaderCache(ProbeCache(cache))  # a new process, a new machine
    assert second.precompile_header(original, "x.h", "g++ -O3", vec_isa="avx2") == path
    assert calls == ["x.h"]  # answered: torch's function did not run
    assert Path(path).read_text() == "#include <x.h>\n"  # the header file is in place
    second.ensure_for("g++ other.cpp -o other.so")
    assert calls == ["x.h"]
    second.ensure_for(f"g++ k.cpp -include {path} -o k.so")
    second.ensure_for(f"g++ k2.cpp -include {path} -o k2.so")
    assert calls == ["x.h", "x.h"]  # built once, for the first kernel that needed it
    assert cache.stats.snapshot()["torch.header_hits"] == 1

    dep.write_text("int y;\n")
    third = torch_headers.HeaderCache(ProbeCache(cache))
    third.precompile_header(original, "x.h", "g++ -O3", vec_isa="avx2")
    assert calls == ["x.h", "x.h", "x.h"]  # a changed dependency: torch's function runs
    another_flag = torch_headers.HeaderCache(ProbeCache(cache))
    dep.write_text("int x;\n")
    another_flag.precompile_header(original, "x.h", "g++ -O3 -ffast-math", vec_isa="avx2")
    assert len(calls) == 4


class _Builder:
    """Stands in for Inductor's preprocessing CppBuilder."""

    def __init__(self, target: Path) -> None:
        self.target = target

    def get_target_file_path(self) -> str:
        return str(self.target)

    def get_command_line(self) -> str:
        return f"g++ -E -P -o {self.target} header.hpp"


@pytest.mark.parametrize("relative", [False, True])
def test_preprocessing_records_what_it_read_from_its_depfile(
    tmp_path: Path, relative: bool
) -> None:
    """``-MD -MF`` is added to torch's own preprocessing command; the files it names (but the
    one-line source) become the answer's dependencies, and a relative path means no answer."""
    dep = tmp_path / "dep.h"
    dep.write_text("int x;\n")
    seen: list[str] = []

    def build(builder: Any) -> None:
        command = builder.get_command_line()
        seen.append(command)
        depfile = command.split("-MF ", 1)[1].strip()
        named = "dep.h" if relative else str(dep)
        Path(depfile).write_text(f"header.i: {tmp_path}/header.hpp \\\n {named}\n")

    headers = torch_headers.HeaderCache(ProbeCache(Cache(MemoryStore("memory://pre"))))
    headers._local.capturing = True
    builder = _Builder(tmp_path / "header.i")
    headers.preprocess(builder, build)
    assert seen and seen[0].startswith("g++ -E -P -o") and " -MD -MF " in seen[0]
    assert builder.get_command_line() == f"g++ -E -P -o {tmp_path / 'header.i'} header.hpp"
    assert not list(tmp_path.glob("*.compilecache.d"))  # the depfile is removed
    read = getattr(headers._local, "read", None)
    if relative:
        assert read is None
    else:
        assert read is not None and [d.path for d in read[0]] == [str(dep)]
