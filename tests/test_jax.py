"""Real JAX compiles in fresh processes, through compilecache's local store."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

from compilecache import entry
from compilecache.stores.local import LocalStore
from tests.conftest import TESTS, clean_env, last_json, run_python
from tests.test_jax_versions import jax_version

PROGRAM = str(TESTS / "jax_program.py")
pytestmark = pytest.mark.slow


def run_program(mode: str, store: Path, **extra: str) -> dict[str, Any]:
    env = clean_env({"COMPILECACHE_URL": str(store), **extra})
    result: dict[str, Any] = last_json(run_python([PROGRAM, mode], env).stdout)
    return result


def entries(store: Path) -> dict[str, Any]:
    s = LocalStore(store)
    try:
        # The job's manifest (the list of keys a run looked up) is not a compile's entry.
        # The executables (JAX's entries), without the job's lookup lists and the guarded traces.
        return {i.key: i for i in s.scan() if not i.key.startswith(("manifest/", "jax/trace/"))}
    finally:
        s.close()


def test_hook_is_live_on_installed_jax() -> None:
    """Fails loudly when a JAX upgrade removes the private functions the hook relies on."""
    from compilecache.frameworks.jax import integration
    from compilecache.frameworks.jax.adapter import MARKER_DIR

    ok, reason = integration.hook_available()
    assert ok, reason
    cc = importlib.import_module("jax._src.compilation_cache")
    import compilecache

    session = compilecache.enable("memory://hook-live")
    assert session is not None
    assert "jax" in session.installed
    assert cc.get_file_cache(MARKER_DIR)[0] is integration.active_adapter()
    compilecache.disable()
    assert integration.active_adapter() is None


@pytest.mark.parametrize("mode", ["before", "after"])
def test_second_process_hits_every_entry(tmp_path: Path, mode: str) -> None:
    store = tmp_path / "store"
    cold = run_program(mode, store)
    written = entries(store)
    assert cold["jax_cache_dir_env"] is None
    assert cold["stats"]["writes"] >= 3 and cold["stats"]["hits"] == 0
    assert len(written) == cold["stats"]["writes"]
    assert all(k.startswith("jax/jit_") for k in written)

    warm = run_program(mode, store)
    assert warm["stats"]["misses"] == 0
    assert warm["stats"]["hits"] == len(written)
    assert warm["stats"]["writes"] == 0
    assert warm["stats"]["compile_time_saved_s"] > 0
    for name in ("step", "other", "grad_sum"):
        assert warm[name] == cold[name]
    assert {k: i.hits for k, i in entries(store).items()} == dict.fromkeys(written, 1)


def test_entries_record_float_compile_time_and_key_components(tmp_path: Path) -> None:
    store = tmp_path / "store"
    run_program("before", store)
    s = LocalStore(store)
    infos = [i for i in s.scan() if not i.key.startswith(("manifest/", "jax/trace/"))]
    assert infos
    for info in infos:
        header = entry.decode(s.get(info.key) or b"").header
        assert header.framework == "jax"
        assert header.name == info.name and info.name.startswith("jit_")
        assert 0 < header.compile_time_s < 60 and not float(header.compile_time_s).is_integer()
        assert set(header.components) == {
            "computation",
            "jax_lib version",
            "backend version",
            "XLA flags",
            "compile_options",
            "accelerator_config",
            "compression",
            "custom_hook",
        }
        assert header.extra["components_verified"] is True
        assert header.extra["readable"]["accelerator_config"] == "1 x cpu"
        assert header.versions["jaxlib"]
    s.close()


def test_key_does_not_depend_on_store_location(tmp_path: Path) -> None:
    """jax.md's 0.10.x pitfall: the cache directory must not leak into the keys."""
    run_program("before", tmp_path / "a")
    run_program("before", tmp_path / "somewhere" / "else")
    assert set(entries(tmp_path / "a")) == set(entries(tmp_path / "somewhere" / "else"))


def test_min_compile_time_skips_writes(tmp_path: Path) -> None:
    store = tmp_path / "store"
    result = run_program("before", store, COMPILECACHE_MIN_COMPILE_TIME="1000s")
    assert result["stats"]["writes"] == 0 and result["stats"]["skipped"] >= 3
    assert entries(store) == {}


def test_disable_variable_turns_everything_off(tmp_path: Path) -> None:
    store = tmp_path / "store"
    result = run_program("before", store, COMPILECACHE_DISABLE="1")
    assert result["stats"] is None
    assert not store.exists()


def test_corrupt_entry_is_a_counted_miss_and_rewritten(tmp_path: Path) -> None:
    store = tmp_path / "store"
    cold = run_program("before", store)
    s = LocalStore(store)
    victim = next(i.key for i in s.scan() if i.name == "jit_step")
    path = s.path_of(victim)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    s.close()
    warm = run_program("before", store)
    assert warm["stats"]["corrupt"] == 1
    assert warm["stats"]["misses"] == 1 and warm["stats"]["writes"] == 1
    assert warm["step"] == cold["step"] and warm["grad_sum"] == cold["grad_sum"]
    again = run_program("before", store)
    assert again["stats"]["misses"] == 0 and again["stats"]["corrupt"] == 0


def test_missing_hook_warns_once_and_leaves_jax_alone(tmp_path: Path) -> None:
    """Another JAX version without the private hook: one warning, JAX still works, no entries."""
    script = tmp_path / "prog.py"
    script.write_text(
        "from jax._src import compilation_cache\n"
        "del compilation_cache.get_file_cache\n"
        "import compilecache\n"
        f"compilecache.enable({str(tmp_path / 'store')!r})\n"
        "import jax, jax.numpy as jnp\n"
        "print(float(jax.jit(lambda x: x * 2)(jnp.ones(3)).sum()))\n"
    )
    proc = run_python([str(script)], clean_env())
    assert proc.stdout.strip() == "6.0"
    assert proc.stderr.count("not supported") == 1
    assert entries(tmp_path / "store") == {}


def test_unwritable_store_never_breaks_the_program(tmp_path: Path) -> None:
    """The store root is a regular file: every write fails, the program completes."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    result = run_program("before", blocker / "store")
    assert result["stats"] is None or result["stats"]["writes"] == 0
    assert result["step"] == run_program("plain", tmp_path / "unused")["step"]


ETILS_LIKE_PATH = r"""
import json, sys
import compilecache
session = compilecache.enable(sys.argv[1])
import jax, jax.numpy as jnp
from jax._src import compiler, path as jax_path

class StrictPath(type(jax_path.Path("/"))):
    # etils.epath's rule: a "scheme://" it has no class for is an error (KeyError in etils).
    def __new__(cls, *parts):
        if parts and "://" in str(parts[0]):
            raise KeyError(str(parts[0]).split("://")[0] + "://")
        return super().__new__(cls, *parts)

class Namespace:
    Path = StrictPath
compiler.pathlib = Namespace  # what get_compile_options builds the cache directory with
print(json.dumps({"v": float(jax.jit(lambda a: (a * 3).sum())(jnp.ones(4))),
                  "stats": session.stats()}))
"""


def test_the_cache_dir_marker_is_a_path_etils_accepts(tmp_path: Path) -> None:
    """Where etils is installed JAX makes an ``epath.Path`` of the cache directory on every
    compile; a ``scheme://`` marker it does not know failed every compile (GPU machine, JAX
    0.11.2). The marker is a plain path: compiles work and still go through the store."""
    env = clean_env({})
    first = last_json(run_python(["-c", ETILS_LIKE_PATH, str(tmp_path / "s")], env).stdout)
    second = last_json(run_python(["-c", ETILS_LIKE_PATH, str(tmp_path / "s")], env).stdout)
    assert first["v"] == second["v"] == 12.0
    assert first["stats"]["writes"] >= 1 and second["stats"]["hits"] >= 1
    assert second["stats"]["misses"] == 0


def test_key_components_come_from_jax_own_key_computation(monkeypatch: pytest.MonkeyPatch) -> None:
    """One pass: each component's hash is taken as JAX's cache_key.get feeds it, never by
    running JAX's key steps again after a miss; the hashes are those the steps give alone."""
    import jax
    import jax.numpy as jnp

    import compilecache
    from compilecache.frameworks.jax import adapter as jax_adapter
    from compilecache.frameworks.jax import integration
    from compilecache.frameworks.jax import key as jax_key

    seen: list[tuple[str, tuple[Any, ...], dict[str, str] | None]] = []
    remember = jax_adapter.JaxCacheAdapter.remember_key_args

    def recording(self: Any, key: str, args: tuple[Any, ...], hashes: Any = None) -> None:
        seen.append((key, args, hashes))
        remember(self, key, args, hashes)

    def again(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the key steps ran a second time")

    monkeypatch.setattr(jax_adapter.JaxCacheAdapter, "remember_key_args", recording)
    monkeypatch.setattr(jax_adapter, "key_components", again)
    session = compilecache.enable("memory://one-pass", min_compile_time=0)
    assert session is not None
    try:
        jax.jit(lambda x: jnp.sin(x) * 3.0 + 1.0)(jnp.arange(4.0)).block_until_ready()
        adapter = integration.active_adapter()
        assert adapter is not None
        key, args, hashes = seen[-1]
        assert adapter.cache.wait_writes()  # the entry is written on the background thread
        data = adapter.cache.store.peek(jax_adapter.store_key(key))
        assert data is not None
        header = entry.decode(data).header
    finally:
        compilecache.disable()
    # JAX 0.10 and later build the key in eight steps, 0.4.30 in seven; releases in between
    # were not run here (either layout).
    newest, seven = jax_key.LAYOUTS
    version = jax_version()
    if version >= (0, 10):
        expected = [newest]
    elif version <= (0, 4, 30):
        expected = [seven]
    else:
        expected = [newest, seven]
    assert hashes is not None and tuple(hashes) in expected
    assert header.components == hashes and header.extra["components_verified"] is True
    assert header.extra["readable"]["accelerator_config"] == "1 x cpu"
    monkeypatch.undo()
    recomputed, _, verified = jax_key.key_components(key, *args)
    assert verified and recomputed == hashes
