"""torch.compile through compilecache: real compiles in fresh processes, and the kernel keys.

The end-to-end tests run ``compilecache.workloads.torch_step`` (a tiny MLP, forward + backward) in
fresh subprocesses that each get their own empty ``TORCHINDUCTOR_CACHE_DIR`` and ``TMPDIR`` and
share only the compilecache store, as two machines would. The C++ compiler on their ``PATH`` is a
wrapper that logs every call and, in the second process, fails any call that is not a version
query: a warm start that compiled anything would fail loudly.
"""

from __future__ import annotations

import base64
import ctypes
import importlib
import json
import os
import shutil
import stat
import sys
import threading
import time
import types
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compilecache import entry
from compilecache.config import Config
from compilecache.frameworks.torch import kernels as torch_kernels
from compilecache.runtime.cache import Cache
from compilecache.stores.local import LocalStore
from compilecache.stores.memory import MemoryStore
from compilecache.stores.registry import Adapted
from tests.conftest import clean_env, last_json, run_python
from tests.servers import free_port

torch = pytest.importorskip("torch")

MODEL = "tiny"
COMPILERS = ("g++", "gcc", "c++", "cc")
VERSION_QUERIES = {"-v", "--version", "-dumpversion", "-dumpfullversion", "-dumpmachine"}

# One process: optionally register a store that fails every call, enable compilecache, run the
# workload once, report the result, the hooks and this process's counters.
PROGRAM = r"""
import json, sys
url, model, salt = sys.argv[1], sys.argv[2], sys.argv[3]
if url.startswith("broken://"):
    from compilecache.stores.registry import register_scheme

    class Broken:
        def __init__(self, url):
            self.url = url
        def _fail(self, *args, **kwargs):
            raise RuntimeError("this store fails every call")
        get = put = delete = stat = scan = _fail
        def close(self):
            pass

    register_scheme("broken", lambda parsed: Broken(parsed.raw))
import compilecache
session = compilecache.enable(url)
from compilecache.workloads import torch_step
result = torch_step.run(model, salt=salt or None)
from compilecache.frameworks.torch import integration
result["hooks"] = integration.hook_status()
result["stats"] = session.stats()
print(json.dumps(result), flush=True)
"""

FAKE_COMPILER = """#!/bin/sh
printf '%s\\n' "{name} $*" >> "$FAKE_CXX_LOG"
case "$*" in
  -v|--version|-dumpversion|-dumpfullversion|-dumpmachine) exec "{real}" "$@" ;;
esac
if [ "$FAKE_CXX_ALLOW" = "1" ]; then exec "{real}" "$@"; fi
echo "fake {name}: the C++ compiler was called on a warm start: $*" >&2
exit 97
"""


def fake_compilers(directory: Path) -> Path:
    """``g++``, ``gcc``, ``c++``, ``cc`` that log and delegate (or refuse) to the real ones."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in COMPILERS:
        real = shutil.which(name)
        if real is None:
            continue
        path = directory / name
        path.write_text(FAKE_COMPILER.format(name=name, real=real))
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return directory


def compiler_calls(log: Path) -> list[str]:
    """Logged compiler calls that were not version queries."""
    if not log.exists():
        return []
    calls = []
    for line in log.read_text().splitlines():
        args = line.split(" ", 1)[1] if " " in line else ""
        if args.strip() not in VERSION_QUERIES:
            calls.append(line)
    return calls


class Machine:
    """A fresh 'machine': its own inductor cache dir, TMPDIR and compiler log."""

    def __init__(self, root: Path, fake_bin: Path) -> None:
        self.root = root
        self.inductor = root / "inductor"
        self.tmp = root / "tmp"
        self.log = root / "compiler.log"
        self.fake_bin = fake_bin
        for d in (self.inductor, self.tmp):
            d.mkdir(parents=True, exist_ok=True)

    def run(
        self,
        url: str,
        *,
        allow_compiler: bool,
        salt: str = "",
        inductor: Path | None = None,
        **extra: str,
    ) -> dict[str, Any]:
        env = clean_env(
            {
                "TORCHINDUCTOR_CACHE_DIR": str(inductor or self.inductor),
                "TMPDIR": str(self.tmp),
                "PATH": f"{self.fake_bin}{os.pathsep}{os.environ.get('PATH', '')}",
                "FAKE_CXX_LOG": str(self.log),
                "FAKE_CXX_ALLOW": "1" if allow_compiler else "0",
                **extra,
            }
        )
        for name in list(env):
            if name.startswith("TORCHINDUCTOR_") and name not in ("TORCHINDUCTOR_CACHE_DIR",):
                del env[name]
        proc = run_python(["-c", PROGRAM, url, MODEL, salt], env, timeout=420)
        result: dict[str, Any] = last_json(proc.stdout)
        result["stderr"] = proc.stderr
        return result


@pytest.fixture(scope="module")
def cold(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> dict[str, Any]:
    """One cold compile on 'machine A', writing to a local-directory store.

    Under pytest-xdist the workers share it (the first one compiles, under a file lock, and the
    others read its result): a cold compile is the most expensive step of this file.
    """
    from filelock import FileLock  # a dependency of torch

    if worker_id == "master":
        root = tmp_path_factory.mktemp("torch")
    else:
        root = tmp_path_factory.getbasetemp().parent / "torch-cold"
    with FileLock(f"{root}.lock"):
        fake_bin = root / "bin"
        store = root / "store"
        machine = Machine(root / "machine-a", fake_bin)
        done = root / "result.json"
        if not done.exists():
            fake_compilers(fake_bin)
            done.write_text(json.dumps(machine.run(str(store), allow_compiler=True)))
        result = json.loads(done.read_text())
    return {"result": result, "store": store, "machine": machine, "fake_bin": fake_bin}


def store_entries(store: Path) -> dict[str, entry.EntryHeader]:
    s = LocalStore(store)
    try:
        return {info.key: entry.decode(s.get(info.key) or b"").header for info in s.scan()}
    finally:
        s.close()


def test_hooks_are_live_on_installed_torch() -> None:
    """Fails loudly when a torch upgrade removes a private hook compilecache relies on. No flag
    of torch's is changed: torch's own questions "use the remote cache?" say yes for the store,
    in every thread, and everything is as before after disable."""
    import compilecache
    from compilecache.frameworks.torch import integration

    autograd = importlib.import_module("torch._functorch._aot_autograd.autograd_cache")
    importlib.import_module("torch._inductor.codecache")
    utils = importlib.import_module("torch._inductor.utils")
    compile_fx = importlib.import_module("torch._inductor.compile_fx")

    config = sys.modules["torch._inductor.config"]
    functorch = sys.modules["torch._functorch.config"]
    flags = ("fx_graph_remote_cache", "fx_graph_cache", "cpp_cache_precompile_headers")
    before = [getattr(config, n) for n in flags], functorch.enable_remote_autograd_cache
    decisions = (utils.should_use_remote_fx_graph_cache, autograd.should_use_remote_autograd_cache)
    assert [d() for d in decisions] == [False, False]  # torch alone: no remote cache
    session = compilecache.enable(f"memory://torch-hooks-{uuid.uuid4().hex}")
    assert session is not None
    assert "torch" in session.installed
    status = integration.hook_status()
    assert status and all(status.values()), {k: v for k, v in status.items() if not v}
    assert torch_kernels.hook_available() == (True, "")

    remote = sys.modules["torch._inductor.remote_cache"]
    builder = sys.modules["torch._inductor.cpp_builder"].CppBuilder
    vec_isa = sys.modules["torch._inductor.cpu_vec_isa"].VecISA
    # ISA probe children do not start compilecache (see Integration._hook_cpu_vec_isa).
    assert vec_isa._build_probe_env()["COMPILECACHE_DISABLE"] == "1"
    assert ([getattr(config, n) for n in flags], functorch.enable_remote_autograd_cache) == before
    # The modules that imported the decisions by name hold the wrappers too.
    assert compile_fx.should_use_remote_fx_graph_cache is utils.should_use_remote_fx_graph_cache
    seen: dict[str, Any] = {}

    def read_decisions() -> None:
        seen["fx"] = utils.should_use_remote_fx_graph_cache()
        seen["aot"] = autograd.should_use_remote_autograd_cache()

    thread = threading.Thread(target=read_decisions)
    thread.start()
    thread.join()
    assert seen == {"fx": True, "aot": True}
    compilecache.disable()
    assert integration.active() is None
    assert integration.hook_status() == {}
    assert remote.RemoteFxGraphCache.backend_override_cls is None
    assert not hasattr(builder.build, "__compilecache__")
    assert "COMPILECACHE_DISABLE" not in vec_isa._build_probe_env()
    assert compile_fx.should_use_remote_fx_graph_cache is decisions[0]
    assert [d() for d in decisions] == [False, False]
    assert ([getattr(config, n) for n in flags], functorch.enable_remote_autograd_cache) == before


@pytest.mark.slow
def test_second_machine_hits_every_layer_and_runs_no_compiler(
    cold: dict[str, Any], tmp_path: Path
) -> None:
    first = cold["result"]
    assert compiler_calls(cold["machine"].log), "the cold run must have used the logged compiler"
    assert first["torch_counters"]["fxgraph_cache_miss"] == 2
    assert first["stats"]["hits"] == 0 and first["stats"]["errors"] == 0
    assert all(first["hooks"].values()), first["hooks"]

    written = store_entries(cold["store"])
    layers: dict[str, list[str]] = {}
    for key in written:
        layers.setdefault(key.split("/")[1], []).append(key)
    # ISA probe verdicts and compiler checks are answers, not compiles (torch_probes): a new
    # machine takes them from the store, so it needs no ISA probe library (a kernel entry).
    probes = [k for k in layers.pop("probe", []) if k.startswith("torch/probe/")]
    isa_probes = sum(k.startswith("torch/probe/isa/") for k in probes)
    assert sorted(layers) == ["aot", "dynamo", "fx", "kernel", "pch"]
    assert len(layers["fx"]) == 2 and len(layers["aot"]) == 1 and len(layers["pch"]) == 1
    assert len(layers["dynamo"]) == 1  # Dynamo's package of the model's forward (on by default)
    assert first["stats"]["writes"] == len(written) - len(probes)

    second = Machine(tmp_path / "machine-b", cold["fake_bin"])
    warm = second.run(str(cold["store"]), allow_compiler=False)

    assert compiler_calls(second.log) == []
    assert warm["digest"] == first["digest"] and warm["loss"] == first["loss"]
    # Dynamo's package is served: its backend, plain torch's AOTAutograd entry, loads the
    # compiled graphs from the FX layer; nothing is traced, and AOTAutograd is not asked.
    counters = warm["torch_counters"]
    assert counters["fxgraph_cache_hit"] == 2 and counters.get("fxgraph_cache_miss", 0) == 0
    assert counters.get("autograd_cache_hit", 0) == counters.get("autograd_cache_miss", 0) == 0
    stats = warm["stats"]
    assert stats["torch.dynamo.hits"] == 1 and stats["torch.fx.hits"] == len(layers["fx"])
    assert "torch.aot.hits" not in stats
    assert_kernels_served(warm, layers, written, probes, isa_probes, len(layers["aot"]))
    assert len(list(second.inductor.rglob("c*.so"))) == len(layers["kernel"]) - isa_probes

    # Without Dynamo's packages (COMPILECACHE_TORCH_PRECOMPILE=0): the graphs and the
    # AOTAutograd entry from the store (written with packages on, in plain torch's form).
    third = Machine(tmp_path / "machine-c", cold["fake_bin"])
    store = tmp_path / "store"  # a copy: this run's own records stay out of store A
    shutil.copytree(cold["store"], store)
    layered = third.run(str(store), allow_compiler=False, COMPILECACHE_TORCH_PRECOMPILE="0")
    assert compiler_calls(third.log) == []
    assert layered["digest"] == first["digest"] and layered["loss"] == first["loss"]
    counters = layered["torch_counters"]
    assert counters["fxgraph_cache_hit"] == 2 and counters["fxgraph_cache_miss"] == 0
    assert counters["autograd_cache_hit"] == 1 and counters.get("autograd_cache_miss", 0) == 0
    stats = layered["stats"]
    assert stats["torch.fx.hits"] == 2 and "torch.dynamo.hits" not in stats
    assert stats["torch.aot.hits"] == 1 and stats.get("writes", 0) == 0
    assert stats["torch.kernel.hits"] == len(layers["kernel"]) - isa_probes
    assert len(list(third.inductor.rglob("c*.so"))) == len(layers["kernel"]) - isa_probes


def assert_kernels_served(
    warm: dict[str, Any],
    layers: dict[str, list[str]],
    written: dict[str, Any],
    probes: list[str],
    isa_probes: int,
    unused: int,
) -> None:
    """Every kernel and probe answer of the cold run came from the store, and nothing else was
    compiled, missed or written; ``unused`` entries (of another layer) were not read."""
    stats = warm["stats"]
    assert stats["torch.kernel.hits"] == len(layers["kernel"]) - isa_probes
    assert stats["misses"] == 0 and stats["writes"] == 0 and stats["errors"] == 0
    # The precompiled header is not even read: no kernel compiles here (torch_headers).
    pch = len(layers["pch"])
    assert stats["torch.hits"] == len(written) - len(probes) - isa_probes - pch - unused
    assert stats["torch.header_hits"] == 1
    assert stats["torch.isa_probe_hits"] == isa_probes > 0
    assert stats["compile_time_saved_s"] > 0


@pytest.mark.slow
def test_entries_describe_layer_name_time_and_key_components(cold: dict[str, Any]) -> None:
    for key, header in store_entries(cold["store"]).items():
        layer = key.split("/")[1]
        assert header.framework == "torch"
        assert header.extra["layer"] == layer
        assert header.versions["torch"] == torch.__version__
        if layer == "probe":
            # ISA verdicts and compiler checks name the compiler; source hashes and kernel
            # templates (torch_sources, torch_templates) depend on torch, not on a compiler.
            assert header.extra["kind"] in ("isa", "compiler", "source", "template", "header")
            if header.extra["kind"] in ("isa", "compiler", "header"):
                assert set(header.components) >= {"compiler"}
            else:
                assert set(header.components) >= {"torch", "python"}
        elif layer == "kernel":
            assert header.name.endswith(".so")
            assert header.compile_time_s > 0
            assert set(header.components) >= {"command", "inputs", "compiler", "cpu", "torch"}
            assert "<inductor-cache>/" in header.extra["readable"]["command"]
        elif layer == "pch":  # the precompiled header (torch_headers), keyed like a kernel
            assert header.name.endswith(".h.gch")
            assert header.compile_time_s > 0
            assert set(header.components) >= {"command", "inputs", "compiler", "cpu", "torch"}
            assert "<inductor-default-cache>/" in header.extra["readable"]["command"]
        elif layer == "dynamo":  # Dynamo's package (torch_dynamo): our own key's components
            assert "forward" in header.name, header.name
            assert set(header.components) >= {"function", "module_source", "compile_call"}
            assert header.extra["sources"]
        else:
            assert header.extra["remote_key"].endswith(key.rsplit("/", 1)[1] + ":c1")
            assert "forward" in header.name, header.name
            assert header.extra["time_taken_s"] > 0
            # torch's own "[hash] attr: value" components, e.g. the Inductor config values.
            assert len(header.components) > 50
            assert header.extra["readable"]
    fx = [h for k, h in store_entries(cold["store"]).items() if k.startswith("torch/fx/")]
    assert any(k.startswith("inductor_config[") for h in fx for k in h.components)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["raising", "unreachable"])
def test_failing_store_compiles_normally_and_counts_errors(
    cold: dict[str, Any], tmp_path: Path, kind: str
) -> None:
    """A store that raises on every call, or a Redis nobody listens on: torch.compile proceeds.

    The cold run's inductor directory is reused (its kernels are there, so no kernel compiles
    and the test stays fast) with a new ``cache_key_tag``, so that every FX and AOTAutograd
    lookup misses locally and goes to the failing store, and every result is written to it.
    The compiler runs for the precompiled header only (its preprocessing and its build in this
    machine's new ``TMPDIR``), as in torch without compilecache: the answer's store is down.
    """
    url = "broken://x" if kind == "raising" else f"redis://127.0.0.1:{free_port()}/0?timeout=1s"
    machine = Machine(tmp_path / "machine", cold["fake_bin"])
    result = machine.run(
        url,
        allow_compiler=True,
        salt=f"failing-{uuid.uuid4().hex}",
        inductor=cold["machine"].inductor,
    )
    assert result["digest"] == cold["result"]["digest"]
    assert result["torch_counters"]["fxgraph_cache_miss"] == 2
    stats = result["stats"]
    assert stats["errors"] >= 1 and stats["torch.errors"] >= 1
    assert stats["hits"] == 0 and stats["writes"] == 0
    assert "Traceback" not in result["stderr"]


# --- kernels: real C++ builds in this process, no torch.compile --------------------------------

SOURCE = 'extern "C" int value() { return VALUE; }\n'


@pytest.fixture
def kernel_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    import compilecache

    inductor = tmp_path / "inductor"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(inductor))
    session = compilecache.enable(f"memory://kernels-{uuid.uuid4().hex}")
    assert session is not None
    cpp_builder = pytest.importorskip("torch._inductor.cpp_builder")
    from compilecache.frameworks.torch import integration

    assert integration.hook_status()["kernel.CppBuilder.build"]
    yield {"session": session, "cpp_builder": cpp_builder, "inductor": inductor}
    compilecache.disable()


def build(cpp_builder: Any, directory: Path, value: int, *flags: str) -> int:
    """Build ``value()`` returning VALUE into ``directory/kernel.so``; what the binary returns."""
    directory.mkdir(parents=True, exist_ok=True)
    source = directory / "kernel.cpp"
    source.write_text(SOURCE)
    target = directory / "kernel.so"
    target.unlink(missing_ok=True)
    options = cpp_builder.CppOptions(extra_flags=(f"-DVALUE={value}", *flags))
    builder = cpp_builder.CppBuilder("kernel", [str(source)], options, str(directory))
    assert builder.get_target_file_path() == str(target)
    builder.build()
    copy = directory / f"load-{uuid.uuid4().hex}.so"  # dlopen caches by path
    shutil.copy(target, copy)
    result = int(ctypes.CDLL(str(copy)).value())
    return result


def kernel_counts(session: Any) -> tuple[int, int]:
    stats = session.stats()
    return int(stats.get("torch.kernel.hits", 0)), int(stats.get("torch.kernel.misses", 0))


@pytest.mark.slow
def test_kernel_entry_is_never_served_to_other_flags_compiler_or_cpu(
    kernel_env: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    session, cpp_builder, inductor = (
        kernel_env["session"],
        kernel_env["cpp_builder"],
        kernel_env["inductor"],
    )
    out = inductor / "ab"
    assert build(cpp_builder, out, 1) == 1
    assert kernel_counts(session) == (0, 1)

    # The same build again: served from the store, the compiler is not run.
    real_run = cpp_builder.run_compile_cmd

    def no_compiler(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the C++ compiler ran on a hit")

    monkeypatch.setattr(cpp_builder, "run_compile_cmd", no_compiler)
    assert build(cpp_builder, out, 1) == 1
    assert kernel_counts(session) == (1, 1)
    monkeypatch.setattr(cpp_builder, "run_compile_cmd", real_run)

    # Same source, same output path, other flags: a miss, and the right binary.
    assert build(cpp_builder, out, 2) == 2
    assert kernel_counts(session) == (1, 2)
    assert build(cpp_builder, out, 1, "-O1") == 1
    assert kernel_counts(session) == (1, 3)

    # Another compiler answering to the same name: a miss.
    real_version = cpp_builder.get_compiler_version_info
    monkeypatch.setattr(cpp_builder, "get_compiler_version_info", lambda c: "g++ 99.1 (other)")
    assert build(cpp_builder, out, 1) == 1
    assert kernel_counts(session) == (1, 4)
    monkeypatch.setattr(cpp_builder, "get_compiler_version_info", real_version)

    # Another CPU: -march=native means something else there, so a miss.
    options = cpp_builder.CppOptions(extra_flags=("-DVALUE=1",))
    command = cpp_builder.CppBuilder("k", ["k.cpp"], options, "/x").get_command_line()
    if "native" in command:
        monkeypatch.setattr(torch_kernels, "_cpu_cached", ("0" * 64, "another CPU"))
        assert build(cpp_builder, out, 1) == 1
        assert kernel_counts(session) == (1, 5)
        monkeypatch.setattr(torch_kernels, "_cpu_cached", None)

    # Back on the original machine, from another inductor cache directory: a hit.
    other = kernel_env["inductor"].parent / "inductor-2"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(other))
    monkeypatch.setattr(cpp_builder, "run_compile_cmd", no_compiler)
    hits_before = kernel_counts(session)[0]
    assert build(cpp_builder, other / "ab", 1) == 1
    assert kernel_counts(session)[0] == hits_before + 1


@pytest.mark.slow
def test_kernel_key_has_the_compiling_threads_tag(
    kernel_env: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inductor builds kernels on a thread pool, where torch's per-thread config shows no tag."""
    cpp_builder, session = kernel_env["cpp_builder"], kernel_env["session"]
    out = kernel_env["inductor"] / "tag"
    out.mkdir(parents=True)
    (out / "kernel.cpp").write_text(SOURCE)

    def builder() -> Any:
        options = cpp_builder.CppOptions(extra_flags=("-DVALUE=3",))
        return cpp_builder.CppBuilder("kernel", [str(out / "kernel.cpp")], options, str(out))

    def build_in_thread(made: Any) -> None:
        (out / "kernel.so").unlink(missing_ok=True)
        thread = threading.Thread(target=made.build)
        thread.start()
        thread.join()

    build_in_thread(builder())
    assert kernel_counts(session) == (0, 1)
    torch.compiler.config.cache_key_tag = "other-tag"
    try:
        build_in_thread(builder())  # made in this thread: its tag counts
    finally:
        torch.compiler.config.cache_key_tag = ""
    assert kernel_counts(session) == (0, 2)
    build_in_thread(builder())
    assert kernel_counts(session) == (1, 2)


# --- unit tests of the pieces ------------------------------------------------------------------


class Failing:
    url = "failing://"

    def _fail(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("down")

    get = put = delete = stat = scan = _fail

    def close(self) -> None:
        pass


def test_store_keys() -> None:
    from compilecache.frameworks.torch.integration import store_key

    assert store_key("fx", "pt2:fx-graph-v1::fabc123:c1") == "torch/fx/fabc123"
    assert store_key("aot", "pt2:autograd-experimental::aXyz:c1") == "torch/aot/aXyz"
    hashed = store_key("fx", "pt2:fx-graph-v2::fabc123:c1")
    assert hashed.startswith("torch/fx/") and len(hashed) == len("torch/fx/") + 64
    assert store_key("autotune", "pt2:k1::k2:c1") != store_key("autotune", "pt2:k1::k3:c1")


@pytest.fixture
def integration_on_memory() -> Iterator[Any]:
    # torch's modules the hooks apply to, imported here: a test run alone finds none loaded.
    import torch._inductor.config
    import torch._inductor.remote_cache  # noqa: F401

    from compilecache.frameworks.torch import integration

    cache = Cache(MemoryStore(f"memory://unit-{uuid.uuid4().hex}"))
    integration.install(cache, Config(url=cache.store.url))
    try:
        yield integration
    finally:
        integration.uninstall()


def test_backend_round_trips_torch_values_byte_for_byte(integration_on_memory: Any) -> None:
    """FX entries (where Triton kernels are bundled on GPU) and autotune JSON come back intact."""
    backend_fx = integration_on_memory.StoreBackend("fx")
    pickled = bytes(range(256)) * 300  # arbitrary binary, like a pickled CompiledFxGraph
    value = {"data": base64.b64encode(pickled).decode("ascii"), "time_taken_ms": 2500}
    key = "pt2:fx-graph-v1::fkey:c1"
    assert backend_fx.get(key) is None
    backend_fx.put(key, json.dumps(value).encode("ascii"))
    back = json.loads(backend_fx.get(key))
    assert base64.b64decode(back["data"]) == pickled and back["time_taken_ms"] == 2500

    backend_at = integration_on_memory.StoreBackend("autotune")
    best = json.dumps({"XBLOCK": 128, "num_warps": 4, "time_taken_ms": 7}).encode()
    backend_at.put("pt2:abc::def:c1", best)
    assert backend_at.get("pt2:abc::def:c1") == best
    stats = integration_on_memory.active().cache.stats.snapshot()
    assert stats["torch.fx.hits"] == 1 and stats["torch.fx.misses"] == 1
    assert stats["torch.autotune.hits"] == 1 and stats["writes"] == 2


class _GatedStore(MemoryStore):
    """A memory store whose writes wait for ``gate`` (a slow disk or a remote store)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.gate = threading.Event()

    def put(self, key: str, value: bytes, meta: Any = None) -> None:
        self.gate.wait(30)
        super().put(key, value, meta)


def test_a_write_is_off_the_compile_and_a_lookup_here_waits_for_it() -> None:
    """torch's put returns before the store has the entry (it is encoded and written on the
    background thread, as JAX's are), and a lookup of it in this process waits for the write
    (test_singleflight holds the lease of a handed write until it is written)."""
    import torch._inductor.config
    import torch._inductor.remote_cache  # noqa: F401

    from compilecache.frameworks.torch import integration

    store = _GatedStore(f"memory://unit-{uuid.uuid4().hex}")
    cache = Cache(store)
    integration.install(cache, Config(url=cache.store.url))
    try:
        backend = integration.StoreBackend("fx")
        key = "pt2:fx-graph-v1::fgated:c1"
        value = {"data": base64.b64encode(b"graph" * 100).decode("ascii"), "time_taken_ms": 2500}
        backend.put(key, json.dumps(value).encode("ascii"))
        assert store.stat("torch/fx/fgated") is None  # put returned; the write waits
        assert cache.background.on_its_thread() is False
        threading.Timer(0.3, store.gate.set).start()
        back = json.loads(backend.get(key))  # waits for the write, then a hit
        assert base64.b64decode(back["data"]) == b"graph" * 100
        assert store.stat("torch/fx/fgated") is not None
        stats = cache.stats.snapshot()
        assert stats["torch.fx.hits"] == 1 and stats["writes"] == 1
    finally:
        store.gate.set()
        integration.uninstall()


def test_backend_never_raises_into_torch() -> None:
    # Loaded by any compile: the FX layer reads the config, torch builds its backend here.
    import torch._inductor.config
    import torch._inductor.remote_cache  # noqa: F401

    from compilecache.frameworks.torch import integration

    cache = Cache(Adapted(Failing()))  # a store of the plain protocol, as the registry opens it
    integration.install(cache, Config(url=cache.store.url))
    try:
        backend = integration.StoreBackend("fx")
        assert backend.get("pt2:fx-graph-v1::fkey:c1") is None
        backend.put("pt2:fx-graph-v1::fkey:c1", b'{"data": "AAAA", "time_taken_ms": 1}')
        backend.put("weird key", b"\xff not json")
        assert cache.background.wait_kept(10)  # writes are the background thread's
        assert cache.stats.snapshot()["errors"] == 3
    finally:
        integration.uninstall()
    assert integration.StoreBackend("fx").get("pt2:fx-graph-v1::f:c1") is None  # uninstalled


def test_a_missing_hook_warns_and_leaves_torch_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """A torch without the private names a hook needs: one warning, nothing changed, no raise."""
    from compilecache.frameworks.torch import integration

    cache = Cache(MemoryStore(f"memory://unit-{uuid.uuid4().hex}"))
    hooks = integration.Integration(cache)
    fake_remote = types.SimpleNamespace(__name__=integration.REMOTE_CACHE)
    fake_utils = types.ModuleType(integration.INDUCTOR_UTILS)
    fake_builder = types.SimpleNamespace(__name__=integration.CPP_BUILDER)
    fakes = {
        integration.REMOTE_CACHE: fake_remote,
        integration.INDUCTOR_UTILS: fake_utils,
        integration.CPP_BUILDER: fake_builder,
    }

    def fake_import(name: str) -> Any:
        if name not in fakes:
            raise ImportError(name)
        return fakes[name]

    monkeypatch.setattr(integration, "_private", fake_import)
    monkeypatch.setattr(torch_kernels, "_private", fake_import)
    for name, fake in fakes.items():
        monkeypatch.setitem(sys.modules, name, fake)
    for name in fakes:
        hooks.apply(name)
    assert hooks.applied == set()  # each one warned instead
    assert not hooks.build_hook.live
    assert vars(fake_remote) == {"__name__": integration.REMOTE_CACHE}
    assert not hasattr(fake_builder, "CppBuilder")
    assert len(hooks.patches) == 0
    assert {f"torch:hook:{name}" for name in fakes} <= cache._warned
    assert "torch:kernel-hook" in cache._warned


def test_debug_lines_become_components() -> None:
    from compilecache.frameworks.torch.integration import parse_debug_lines

    lines = [
        "[abc123] inductor_config[cpp.simdlen]: None",
        "[def456] cpp_runtime_thread_count: 2",
        "not a component line",
    ]
    components, readable = parse_debug_lines(lines)
    assert components == {
        "inductor_config[cpp.simdlen]": "abc123",
        "cpp_runtime_thread_count": "def456",
    }
    assert readable["cpp_runtime_thread_count"] == "2"


def test_kernel_key_parts(tmp_path: Path) -> None:
    source = tmp_path / "cache-a" / "c1.cpp"
    source.parent.mkdir()
    source.write_text("int f() { return 1; }")

    def key(command: str, cache: Path, **kw: Any) -> str:
        args = {"compiler_info": "g++ 12", "torch_version": "2.13", "tag": ""}
        args.update(kw)
        return torch_kernels.kernel_key(
            command, str(cache / "c1.so"), cache_dirs=[(str(cache), "<c>")], **args
        ).digest

    a = tmp_path / "cache-a"
    base = key(f"g++ {source} -O3 -march=x86-64-v3 -o {a}/c1.so", a)
    assert base == key(f"g++ {source} -O3 -march=x86-64-v3 -o {a}/c1.so", a)
    assert base != key(f"g++ {source} -O2 -march=x86-64-v3 -o {a}/c1.so", a)
    assert base != key(f"g++ {source} -O3 -march=x86-64-v3 -o {a}/c1.so", a, compiler_info="g++ 13")
    assert base != key(f"g++ {source} -O3 -march=x86-64-v3 -o {a}/c1.so", a, tag="salt")
    assert base != key(f"g++ {source} -O3 -march=x86-64-v3 -o {a}/c1.so", a, torch_version="2.14")
    source.write_text("int f() { return 2; }")
    assert base != key(f"g++ {source} -O3 -march=x86-64-v3 -o {a}/c1.so", a)
    # The same build in another cache directory (another machine's TORCHINDUCTOR_CACHE_DIR).
    b = tmp_path / "cache-b"
    b.mkdir()
    (b / "c1.cpp").write_text("int f() { return 1; }")
    source.write_text("int f() { return 1; }")
    assert base == key(f"g++ {b}/c1.cpp -O3 -march=x86-64-v3 -o {b}/c1.so", b)


def test_shared_timer_charges_overlapping_builds_once() -> None:
    timer = torch_kernels.SharedTimer()
    a = timer.start()
    b = timer.start()
    time.sleep(0.2)
    first = timer.stop(a)
    time.sleep(0.1)
    second = timer.stop(b)
    assert 0.08 <= first <= 0.2
    assert 0.17 <= first + second <= 0.45
