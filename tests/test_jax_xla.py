"""XLA's GPU sub-caches under compilecache (issue 20, section 2), with real JAX processes.

On a CPU, XLA does not autotune: these tests check the mechanism. The options XLA receives (read
where JAX hands them to XLA), the key's independence from the store's path, the host's XLA
directory and the user's ``jax_persistent_cache_enable_xla_caches``; and files written into the
autotune directory (here by the program, as XLA writes them on a GPU) reaching a fresh host before
its first compile.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from compilecache.frameworks.jax import xla as jax_xla
from compilecache.stores.local import LocalStore
from tests.conftest import clean_env, last_json, run_python

pytest.importorskip("jax")

# Enable compilecache, record what JAX hands XLA for every compile (and whether the autotune
# directory holds the file a test looks for at that moment), compile two functions, optionally
# write an autotune result into the directory as XLA would, and report.
PROGRAM = r"""
import json, os, sys
url, setting, write, expect, scale = sys.argv[1:6]
import compilecache
session = compilecache.enable(url)
import jax, jax.numpy as jnp
if setting != "default":
    jax.config.update("jax_persistent_cache_enable_xla_caches", setting)
from jax._src import compiler
seen = []
original = compiler.backend_compile_and_load
def backend_compile_and_load(backend, module, devices, options, *args, **kwargs):
    debug = options.executable_build_options.debug_options
    directory = debug.xla_gpu_per_fusion_autotune_cache_dir
    found = os.path.join(directory, expect) if directory and expect else ""
    seen.append({
        "autotune_dir": directory,
        "kernel_file": debug.xla_gpu_kernel_cache_file,
        "mode": str(debug.xla_gpu_experimental_autotune_cache_mode),
        "found": open(found).read() if found and os.path.exists(found) else None,
    })
    return original(backend, module, devices, options, *args, **kwargs)
compiler.backend_compile_and_load = backend_compile_and_load
first = float(jax.jit(lambda x: jnp.tanh(x @ x.T).sum() * float(scale))(jnp.ones((8, 8))))
if write:
    directory = os.path.join(os.environ["XDG_CACHE_HOME"], "compilecache-xla", "per_fusion_autotune")
    with open(os.path.join(directory, write), "w") as f:
        f.write("results { device: 'sm_90' fusion: '" + write + "' }\n")
second = float(jax.jit(lambda x: jnp.cos(x).sum() * 3.0)(jnp.ones((4,))))
session.cache.settle()
print(json.dumps({"seen": seen, "stats": session.stats(), "values": [first, second]}))
"""


def run(
    tmp_path: Path,
    store: str,
    host: str,
    *,
    setting: str = "default",
    write: str = "",
    expect: str = "",
    scale: float = 1.0,
) -> dict[str, Any]:
    env = clean_env(
        {
            "XDG_CACHE_HOME": str(tmp_path / host / "cache"),
            "COMPILECACHE_JOB": "train-llm",
        }
    )
    proc = run_python(["-c", PROGRAM, store, setting, write, expect, str(scale)], env)
    return dict(last_json(proc.stdout))


def jax_keys(store: str) -> list[str]:
    return sorted(i.key for i in LocalStore(store).scan("jax/"))


def test_xla_gets_this_hosts_directories_and_every_process_updates(tmp_path: Path) -> None:
    result = run(tmp_path, str(tmp_path / "store"), "a", setting="all")
    seen = result["seen"][0]
    home = tmp_path / "a" / "cache" / "compilecache-xla"
    assert seen["autotune_dir"] == str(home / "per_fusion_autotune")
    assert seen["kernel_file"] == str(home / "kernel_cache_file")
    assert "UPDATE" in seen["mode"]  # not only process 0 updates
    assert (home / "per_fusion_autotune").is_dir()


def test_the_key_does_not_depend_on_the_store_or_the_xla_directory(tmp_path: Path) -> None:
    first = str(tmp_path / "first-store")
    run(tmp_path, first, "a")
    copied = str(tmp_path / "elsewhere" / "copied-store")
    shutil.copytree(first, copied)
    second = run(tmp_path, copied, "b")  # another host: another XLA directory and store path
    assert second["stats"]["jax.hits"] >= 2 and second["stats"].get("jax.misses", 0) == 0
    # A third host writing into its own store computes the same keys.
    third = str(tmp_path / "third-store")
    run(tmp_path, third, "c")
    assert jax_keys(third) == jax_keys(first) and len(jax_keys(first)) >= 2


def test_autotune_results_reach_a_fresh_host_before_its_first_compile(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    result = run(tmp_path, store, "a", write="fusion_1.textproto")
    assert result["stats"]["xla.writes"] >= 2  # the file and the job's index
    keys = [i.key for i in LocalStore(store).scan("xla/")]
    assert any(k.startswith("xla/autotune/") for k in keys)
    assert any(k.startswith("xla/autotune-index/") for k in keys)
    # Another scale: the first function misses, and XLA compiles it with the file in place.
    fresh = run(tmp_path, store, "b", expect="fusion_1.textproto", scale=2.0)
    found = [s["found"] for s in fresh["seen"] if s["found"]]
    assert found and "fusion_1.textproto" in found[0]
    assert fresh["stats"]["xla.hits"] == 1  # the file (the index is read uncounted)
    # A result written after the last compile is published at exit.
    run(tmp_path, store, "c", write="fusion_2.textproto")
    later = run(tmp_path, store, "d", expect="fusion_2.textproto", scale=3.0)
    assert any(s["found"] for s in later["seen"])
    directory = tmp_path / "d" / "cache" / "compilecache-xla" / "per_fusion_autotune"
    assert sorted(p.name for p in directory.iterdir()) == [
        "fusion_1.textproto",
        "fusion_2.textproto",
    ]


def test_none_turns_xla_caches_off_as_with_jax(tmp_path: Path) -> None:
    result = run(tmp_path, str(tmp_path / "store"), "a", setting="none")
    assert all(s["autotune_dir"] == "" and s["kernel_file"] == "" for s in result["seen"])


def test_key_options_clears_only_the_paths() -> None:
    from jax._src import compiler

    options = compiler.get_compile_options(num_replicas=1, num_partitions=1)
    assert jax_xla.key_options(options) is options  # nothing set: no copy
    debug = options.executable_build_options.debug_options
    debug.xla_gpu_per_fusion_autotune_cache_dir = "/somewhere/on/this/host"
    debug.xla_gpu_kernel_cache_file = "/somewhere/kernels"
    debug.xla_gpu_enable_llvm_module_compilation_parallelism = True
    cleared = jax_xla.key_options(options)
    cleared_debug = cleared.executable_build_options.debug_options
    assert cleared_debug.xla_gpu_per_fusion_autotune_cache_dir == ""
    assert cleared_debug.xla_gpu_kernel_cache_file == ""
    assert cleared_debug.xla_gpu_enable_llvm_module_compilation_parallelism  # a real option
    assert debug.xla_gpu_per_fusion_autotune_cache_dir == "/somewhere/on/this/host"
    assert json.dumps(1)  # the module imports no more than it needs
