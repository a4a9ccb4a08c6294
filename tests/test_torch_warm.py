"""Warm starts at the floor (issue 12) and honest same-machine counts (issue 11, item 13).

Real torch processes (the ``tiny`` workload of ``compilecache.workloads.torch_step``), each with
its own ``TORCHINDUCTOR_CACHE_DIR`` and ``TMPDIR`` unless it plays the same machine again. Each
child logs every subprocess it starts (``subprocess.Popen`` patched), so a test sees whether the
vector-ISA probes (``python -c "...cdll.LoadLibrary..."``) and the compiler identity checks
(``g++ -v`` / ``g++ --version``) ran. Unit tests check the probe keys part by part.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from compilecache import host
from compilecache.frameworks.torch import probes as torch_probes
from compilecache.runtime import history
from compilecache.runtime.cache import Cache
from compilecache.stores.local import LocalStore
from compilecache.stores.memory import MemoryStore
from tests.conftest import clean_env, last_json, run_python
from tests.servers import free_port

torch = pytest.importorskip("torch")

# One process: log subprocesses, optionally fake a key part, enable compilecache, run the tiny
# workload, report the result, the counters and the subprocesses it started.
PROGRAM = r"""
import json, subprocess, sys
url, fake = sys.argv[1], sys.argv[2]
started = []
_init = subprocess.Popen.__init__
def init(self, args, *a, **k):
    started.append(args if isinstance(args, str) else " ".join(map(str, args)))
    _init(self, args, *a, **k)
subprocess.Popen.__init__ = init
if fake == "cpu":
    from compilecache import host
    real = host.read_cpuinfo
    def read_cpuinfo(*a, **k):
        info = dict(real(*a, **k))
        info["flags"] = info.get("flags", "") + " compilecache_fake_flag"
        return info
    host.read_cpuinfo = read_cpuinfo
    host._native = None
if fake == "torch":
    import torch
    torch.__version__ = type(torch.__version__)(torch.__version__ + ".other")
import compilecache
session = compilecache.enable(url)
from compilecache.workloads import torch_step
if fake == "fastmath":  # another compiler flag on every command line
    result = torch_step.run("tiny", inductor_config={"cpp.enable_unsafe_math_opt_flag": True})
else:
    result = torch_step.run("tiny")
result["stats"] = session.stats()
result["started"] = started
print(json.dumps(result), flush=True)
"""

WRAPPER = '#!/bin/sh\nexec "{real}" "$@"\n'
# Another build of the same compiler: its `-v` text says so.
OTHER_BUILD = (
    '#!/bin/sh\nif [ "$1" = "-v" ]; then "{real}" -v; echo "another build" >&2; exit 0; fi\n'
    'exec "{real}" "$@"\n'
)


def probes_run(result: dict[str, Any]) -> int:
    return sum("cdll.LoadLibrary" in args for args in result["started"])


def compiler_checks_run(result: dict[str, Any]) -> int:
    return sum(args.endswith((" -v", " --version")) for args in result["started"])


def header_work(result: dict[str, Any]) -> tuple[int, int]:
    """(preprocessing runs of the precompiled header, compiles of it) the process started."""
    started = result["started"]
    return (
        sum(" -E " in a and "header.hpp" in a for a in started),
        sum(".gch" in a for a in started),
    )


def wrapped_compilers(bin_dir: Path, script: str) -> str:
    """``bin_dir`` holding ``script`` in front of each C/C++ compiler; a PATH prefix."""
    bin_dir.mkdir()
    for name in ("g++", "gcc", "c++", "cc"):
        real = shutil.which(name)
        if real is not None:
            wrapper = bin_dir / name
            wrapper.write_text(script.format(real=real))
            wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return f"{bin_dir}{os.pathsep}"


class Machine:
    """A machine: its own inductor and temporary directories (kept for a second run)."""

    def __init__(self, root: Path, path_prefix: str = "") -> None:
        self.inductor = root / "inductor"
        self.tmp = root / "tmp"
        self.inductor.mkdir(parents=True)
        self.tmp.mkdir()
        self.path_prefix = path_prefix

    def run(self, url: str, fake: str = "") -> dict[str, Any]:
        env = clean_env(
            {
                "TORCHINDUCTOR_CACHE_DIR": str(self.inductor),
                "TMPDIR": str(self.tmp),
                "PATH": self.path_prefix + os.environ.get("PATH", ""),
                # No compile-worker pool: its warm-up can race the hooks' installation and ask
                # the compiler once itself (seen once in CI-size runs), which is not what these
                # tests count.
                "TORCHINDUCTOR_COMPILE_THREADS": "1",
                # What this file counts is what a warm start does beneath Dynamo's packages
                # (probes, same-machine graphs); a package would skip all of it.
                "COMPILECACHE_TORCH_PRECOMPILE": "0",
            }
        )
        proc = run_python(["-c", PROGRAM, url, fake], env, timeout=600)
        result: dict[str, Any] = last_json(proc.stdout)
        result["stderr"] = proc.stderr
        return result


@pytest.fixture(scope="module")
def warmed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Machine A compiles into a store; machine B, new, starts warm from it."""
    root = tmp_path_factory.mktemp("torch-warm")
    store = str(root / "store")
    machine_a = Machine(root / "a")
    cold = machine_a.run(store)
    warm = Machine(root / "b").run(store)
    return {"root": root, "store": store, "a": machine_a, "cold": cold, "warm": warm}


def misses_explained(store: str) -> list[dict[str, Any]]:
    s = LocalStore(Path(store))
    try:
        return [
            r for r in history.read(s, history.MISS) if str(r.get("name", "")).startswith("isa")
        ]
    finally:
        s.close()


@pytest.mark.slow
def test_new_machine_reuses_probe_answers_and_runs_no_probe(warmed: dict[str, Any]) -> None:
    cold, warm = warmed["cold"], warmed["warm"]
    assert probes_run(cold) > 0 and compiler_checks_run(cold) > 0  # torch did the work once
    assert cold["stats"]["torch.isa_probe_misses"] > 0
    assert cold["stats"].get("torch.isa_probe_hits", 0) == 0
    stats = warm["stats"]
    assert stats["torch.isa_probe_hits"] == cold["stats"]["torch.isa_probe_misses"]
    assert stats.get("torch.isa_probe_misses", 0) == 0
    assert stats["torch.compiler_check_hits"] > 0
    assert stats.get("torch.compiler_check_misses", 0) == 0
    assert probes_run(warm) == 0, warm["started"]
    assert compiler_checks_run(warm) == 0, warm["started"]
    assert warm["digest"] == cold["digest"]
    # torch_key() and triton_key() (torch_sources): computed once, then read from the store.
    assert cold["stats"].get("torch.source_key_misses", 0) >= 1
    assert stats.get("torch.source_key_hits", 0) == cold["stats"]["torch.source_key_misses"]
    assert stats.get("torch.source_key_misses", 0) == 0


@pytest.mark.slow
@pytest.mark.parametrize("part", ["cpu", "compiler", "torch"])
def test_another_cpu_compiler_or_torch_never_reuses_an_answer(
    warmed: dict[str, Any], tmp_path: Path, part: str
) -> None:
    """A fake CPU feature list, a wrapper script standing in for another g++, another torch
    version string: the probes run again, and the miss names the part that changed."""
    prefix = wrapped_compilers(tmp_path / "bin", WRAPPER) if part == "compiler" else ""
    result = Machine(tmp_path / "m", prefix).run(
        warmed["store"], fake=part if part != "compiler" else ""
    )
    stats = result["stats"]
    assert stats["torch.isa_probe_misses"] > 0 and stats.get("torch.isa_probe_hits", 0) == 0
    assert probes_run(result) > 0
    if part == "compiler":
        assert stats["torch.compiler_check_misses"] > 0
        assert compiler_checks_run(result) > 0
    if part == "torch":  # the source hashes are torch's: another torch hashes again
        assert stats["torch.source_key_misses"] > 0
        assert stats.get("torch.source_key_hits", 0) == 0
    else:  # they do not depend on the CPU or the compiler
        assert stats["torch.source_key_hits"] > 0
    assert result["digest"] == warmed["cold"]["digest"]
    changed = {d["component"] for r in misses_explained(warmed["store"]) for d in r["differences"]}
    assert part in changed, changed


@pytest.mark.slow
def test_precompiled_header_is_built_once_and_a_new_machine_needs_none(
    warmed: dict[str, Any],
) -> None:
    """Issue 23: Inductor's precompiled header stays on. The first machine preprocesses and
    compiles it once (stored); a new machine whose kernels all come from the store neither
    preprocesses it (the answer is checked against the files it read) nor compiles it."""
    cold, warm = warmed["cold"], warmed["warm"]
    assert header_work(cold) == (1, 1), cold["started"]
    assert cold["stats"]["torch.header_misses"] == 1
    assert cold["stats"]["torch.pch.misses"] == 1
    assert header_work(warm) == (0, 0), warm["started"]
    stats = warm["stats"]
    assert stats["torch.header_hits"] == 1 and stats.get("torch.header_misses", 0) == 0
    assert stats.get("torch.kernel.misses", 0) == 0
    assert stats.get("torch.pch.hits", 0) == 0  # no kernel compiled: the .gch not even read
    assert not [a for a in warm["started"] if "g++" in a or "c++" in a], warm["started"]


@pytest.mark.slow
def test_a_kernel_compiled_on_a_new_machine_uses_the_stored_precompiled_header(
    warmed: dict[str, Any], tmp_path: Path
) -> None:
    """A new machine whose store has the graphs but no kernel binaries: its kernels compile,
    with the precompiled header from the store, which no compiler builds again."""
    store = tmp_path / "store"
    shutil.copytree(warmed["store"], store)
    copy = LocalStore(store)
    try:
        kernels = [info.key for info in copy.scan("torch/kernel/")]
        assert kernels and [info.key for info in copy.scan("torch/pch/")]
        for key in kernels:
            copy.delete(key)
    finally:
        copy.close()
    result = Machine(tmp_path / "m").run(str(store))
    stats = result["stats"]
    assert stats["torch.kernel.misses"] > 0  # kernels compiled here
    assert stats["torch.header_hits"] == 1
    assert stats["torch.pch.hits"] == 1 and stats.get("torch.pch.misses", 0) == 0
    # torch's own function makes the .gch ready, preprocessing once; no compiler builds it.
    assert header_work(result) == (1, 0), result["started"]
    assert result["digest"] == warmed["cold"]["digest"]


@pytest.mark.slow
@pytest.mark.parametrize("change", ["flag", "compiler"])
def test_a_changed_flag_or_compiler_builds_the_header_again(
    warmed: dict[str, Any], tmp_path: Path, change: str
) -> None:
    """Another compiler flag (-ffast-math) or another build of the compiler (its -v text):
    the stored answer and the stored .gch are not used; torch preprocesses and compiles."""
    if change == "compiler":
        prefix = wrapped_compilers(tmp_path / "bin", OTHER_BUILD)
        result = Machine(tmp_path / "m", prefix).run(warmed["store"])
    else:
        result = Machine(tmp_path / "m").run(warmed["store"], fake="fastmath")
    stats = result["stats"]
    assert stats["torch.header_misses"] == 1 and stats.get("torch.header_hits", 0) == 0
    assert stats["torch.pch.misses"] == 1 and stats.get("torch.pch.hits", 0) == 0
    assert header_work(result) == (1, 1), result["started"]


@pytest.mark.slow
def test_unavailable_store_makes_torch_probe_itself(tmp_path: Path, warmed: dict[str, Any]) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0?timeout=1s"
    result = Machine(tmp_path / "m").run(url)
    assert probes_run(result) > 0 and compiler_checks_run(result) > 0
    stats = result["stats"]
    # The first request to the dead store fails and is counted (a probe answer's read, here
    # torch_key's, comes first); then the guard skips the store for its back-off.
    assert stats["errors"] >= 1 and stats["torch.probe_errors"] >= 1
    assert stats["hits"] == 0 and stats.get("torch.source_key_hits", 0) == 0
    assert result["digest"] == warmed["cold"]["digest"]
    assert "Traceback" not in result["stderr"]


@pytest.mark.slow
def test_second_run_on_the_same_machine_counts_its_hits(warmed: dict[str, Any]) -> None:
    """Issue 11 item 13: graphs torch's own directory serves on a second run on the same
    machine are counted as hits of the ``torch-local`` level, with the time they saved."""
    again = warmed["a"].run(warmed["store"])
    counters, stats = again["torch_counters"], again["stats"]
    assert counters["fxgraph_cache_hit"] == 2 and counters["autograd_cache_hit"] == 1
    assert stats["torch.fx.local_hits"] == 2 and stats["torch.aot.local_hits"] == 1
    assert stats["level.torch-local.hits"] == 3
    assert stats["hits"] == 3 and stats["misses"] == 0 and stats["writes"] == 0
    assert stats["compile_time_saved_s"] > 0
    assert again["digest"] == warmed["cold"]["digest"]


@pytest.mark.slow
def test_compilecache_run_summary_counts_same_machine_hits(
    warmed: dict[str, Any], tmp_path: Path
) -> None:
    """The exit summary of ``compilecache run`` on a second run on the same machine."""
    env = clean_env(
        {
            "TORCHINDUCTOR_CACHE_DIR": str(warmed["a"].inductor),
            "TMPDIR": str(warmed["a"].tmp),
            "COMPILECACHE_URL": warmed["store"],
            "COMPILECACHE_TORCH_PRECOMPILE": "0",
        }
    )
    command = [sys.executable, "-m", "compilecache.workloads.torch_step", "--model", "tiny"]
    proc = run_python(["-m", "compilecache", "run", "--", *command], env, timeout=600)
    summary = [line for line in proc.stderr.splitlines() if line.startswith("compilecache: ")]
    assert summary, proc.stderr
    hits = int(summary[-1].split()[1])
    assert hits >= 3 and " 0 misses" in summary[-1], summary[-1]
    assert json.loads(proc.stdout.splitlines()[-1])["torch_counters"]["fxgraph_cache_hit"] == 2


# --- keys: every part counts ----------------------------------------------------------------


def test_probe_key_changes_with_every_part(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    base = torch_probes.isa_key("avx2", "-mavx2", "code", "g++", "gcc version 12")
    assert base.store_key.startswith("torch/probe/isa/")
    variants = {
        "isa": torch_probes.isa_key("avx512", "-mavx512f", "code", "g++", "gcc version 12"),
        "source": torch_probes.isa_key("avx2", "-mavx2", "other code", "g++", "gcc version 12"),
        "compiler_version": torch_probes.isa_key("avx2", "-mavx2", "code", "g++", "gcc 13"),
    }
    # Another compiler behind the same name: a wrapper script first on PATH.
    wrapper = tmp_path / "g++"
    wrapper.write_text(WRAPPER.format(real=shutil.which("g++") or "/usr/bin/g++"))
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    variants["compiler"] = torch_probes.isa_key("avx2", "-mavx2", "code", "g++", "gcc version 12")
    monkeypatch.undo()
    # Another CPU: one more feature flag.
    real = host.read_cpuinfo
    monkeypatch.setattr(
        host, "read_cpuinfo", lambda *a, **k: {**real(), "flags": real().get("flags", "") + " x"}
    )
    monkeypatch.setattr(host, "_native", None)
    variants["cpu"] = torch_probes.isa_key("avx2", "-mavx2", "code", "g++", "gcc version 12")
    monkeypatch.undo()
    monkeypatch.setattr(host, "_native", None)
    # Another torch.
    monkeypatch.setattr(torch, "__version__", type(torch.__version__)("9.9.9"))
    variants["torch"] = torch_probes.isa_key("avx2", "-mavx2", "code", "g++", "gcc version 12")
    monkeypatch.undo()
    assert torch_probes.isa_key("avx2", "-mavx2", "code", "g++", "gcc version 12") == base
    for part, key in variants.items():
        assert key.digest != base.digest, part
        changed = {p for p in base.components if base.components[p] != key.components[p]}
        assert changed == {part}, (part, changed)


def test_compiler_check_key_follows_the_binary(tmp_path: Path) -> None:
    script = tmp_path / "cxx"
    script.write_text(WRAPPER.format(real="/usr/bin/g++"))
    script.chmod(0o755)
    first = torch_probes.compiler_check_key("get_compiler_version_info", (str(script),))
    assert first is not None
    script.write_text(WRAPPER.format(real="/usr/bin/clang++"))
    second = torch_probes.compiler_check_key("get_compiler_version_info", (str(script),))
    assert second is not None and second.digest != first.digest
    other_flag = torch_probes.compiler_check_key("_is_intel_compiler", (str(script),))
    assert other_flag is not None and other_flag.digest != second.digest
    # A search that may install a compiler is left to torch.
    os.environ["TORCH_INDUCTOR_INSTALL_GXX"] = "1"
    try:
        assert torch_probes.compiler_check_key("cpp_compiler_search", ((None, "g++"),)) is None
    finally:
        del os.environ["TORCH_INDUCTOR_INSTALL_GXX"]
    assert torch_probes.compiler_check_key("cpp_compiler_search", ((None, "g++"),)) is not None


def test_probe_cache_stores_only_successful_probes_and_never_raises() -> None:
    cache = Cache(MemoryStore(f"memory://probe-{uuid.uuid4().hex}"))
    probes = torch_probes.ProbeCache(cache)
    calls: list[str] = []

    def check(result: Any) -> Any:
        def original(*args: Any) -> Any:
            calls.append("ran")
            return result

        return original

    key = torch_probes.compiler_check_key("get_compiler_version_info", ("g++",))
    assert key is not None
    assert probes.compiler_check("get_compiler_version_info", check("gcc 12"), ("g++",)) == "gcc 12"
    fresh = torch_probes.ProbeCache(cache)  # another process: from the store, not memory
    assert fresh.compiler_check("get_compiler_version_info", check("x"), ("g++",)) == "gcc 12"
    assert calls == ["ran"]
    assert cache.stats.snapshot()["torch.compiler_check_hits"] == 1

    class Isa:
        def __str__(self) -> str:
            return "avx-fake"

        def build_arch_flags(self) -> str:
            return "-mfake"

    assert probes.check_build(Isa(), "code", check(False)) is False
    assert probes.check_build(Isa(), "code", check(False)) is False  # a failure is not kept
    assert calls == ["ran", "ran", "ran"]
    broken = torch_probes.ProbeCache(Cache(MemoryStore("memory://x")))
    broken.cache.store.get = None  # type: ignore[assignment,method-assign]
    assert broken.check_build(Isa(), "code", check(True)) is True  # the store fails: probe runs


def test_compiler_checks_are_answered_once_per_process_until_cache_clear(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Inductor asks the compiler checks about 100 times per start: after the first answer the
    key (a `which` and a `stat` per compiler) is not computed again, as torch's own cache does;
    ``cache_clear()`` makes the next call ask again."""
    cache = Cache(MemoryStore(f"memory://checks-{uuid.uuid4().hex}"))
    probes = torch_probes.ProbeCache(cache)
    keyed: list[tuple[str, tuple[Any, ...]]] = []
    real_key = torch_probes.compiler_check_key

    def counting(check: str, args: tuple[Any, ...]) -> Any:
        keyed.append((check, args))
        return real_key(check, args)

    monkeypatch.setattr(torch_probes, "compiler_check_key", counting)

    class Module:
        @staticmethod
        def get_compiler_version_info(compiler: str) -> str:
            return f"{compiler} 12"

    module = Module()
    hooks = torch_probes.ProbeHooks(probes)
    hooks.install_compiler(module)
    try:
        assert [module.get_compiler_version_info("g++") for _ in range(5)] == ["g++ 12"] * 5
        assert keyed == [("get_compiler_version_info", ("g++",))]
        module.get_compiler_version_info.cache_clear()  # type: ignore[attr-defined]
        assert module.get_compiler_version_info("g++") == "g++ 12"
        assert len(keyed) == 2
    finally:
        hooks.uninstall()
