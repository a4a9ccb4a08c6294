"""JAX executables read ahead: deserialised on a thread from the job's manifest, handed to JAX
only for the same key, compile options, devices and backend.

The end-to-end tests run real JAX compiles in fresh processes; the unit tests drive the
:class:`~compilecache.frameworks.jax.preload.Preloader` with JAX's real option and device
objects and a local store.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from compilecache import entry
from compilecache.entry import Entry, EntryHeader
from compilecache.frameworks.jax import preload as jax_preload
from compilecache.runtime.cache import Cache
from compilecache.runtime.prefetch import Prefetcher
from compilecache.stores.local import LocalStore
from compilecache.stores.tiers import Tiered
from tests.conftest import clean_env, last_json, run_python
from tests.polling import wait_until

jax = pytest.importorskip("jax")

PROGRAM = """
import json, sys
import numpy as np
import compilecache
compilecache.enable()
import jax, jax.numpy as jnp

def f(x):
    return jnp.tanh(x @ x.T).sum(axis=0) * 3.0

def g(x):
    return jnp.cumsum(jnp.sin(x), axis=1).max()

# NumPy input: f and g are the only compiles.
x = np.linspace(-1.0, 1.0, 32 * 32, dtype=np.float32).reshape(32, 32)
functions = {"f": f, "g": g}
results = [float(np.asarray(jax.jit(functions[name])(x)).sum()) for name in sys.argv[1]]
print(json.dumps({"results": results, "stats": compilecache.active().stats()}))
"""


def _run(script: Path, store: Path, functions: str = "fg", **extra: str) -> dict[str, Any]:
    env = clean_env({"COMPILECACHE_URL": str(store), "COMPILECACHE_JOB": "read-ahead", **extra})
    found: dict[str, Any] = last_json(run_python([str(script), functions], env).stdout)
    return found


def _reads_ahead() -> bool:
    """Whether this JAX passes a lookup the executable's devices (what a read-ahead needs)."""
    from jax._src import compilation_cache

    from compilecache.frameworks.jax import key as jax_key

    return jax_key.positional(compilation_cache.get_executable_and_time) == 4


@pytest.mark.slow
@pytest.mark.skipif(not _reads_ahead(), reason="this JAX's lookups do not name their devices")
def test_a_warm_run_is_served_executables_read_ahead(tmp_path: Path) -> None:
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    store = tmp_path / "store"
    cold = _run(script, store)
    compiled = cold["stats"]["jax.misses"]
    assert compiled == 2
    assert not cold["stats"].get("jax.read_ahead_hits")
    # Each entry says how its executable was compiled: what a reader deserialises it with.
    local = LocalStore(store)
    try:
        headers = [entry.decode(local.get(i.key) or b"").header for i in local.scan()]
    finally:
        local.close()
    executables = [h for h in headers if h.framework == "jax" and h.extra.get("layer") != "trace"]
    loads = [h.extra[jax_preload.EXTRA] for h in executables]
    assert len(loads) == compiled
    assert all(how["platform"] == "cpu" and how["devices"] == [0] for how in loads)

    warm = _run(script, store)
    assert warm["results"] == cold["results"]
    assert warm["stats"]["jax.hits"] == compiled
    assert warm["stats"]["jax.read_ahead_hits"] == compiled
    assert not warm["stats"].get("jax.misses")

    # COMPILECACHE_PREFETCH=0: no manifest read, nothing read ahead; JAX's path hits as before.
    off = _run(script, store, COMPILECACHE_PREFETCH="0")
    assert off["results"] == cold["results"]
    assert off["stats"]["jax.hits"] == compiled
    assert not off["stats"].get("jax.read_ahead_hits")

    # The program's own switches: a cache turned off, or checking its contents, is not served.
    disabled = _run(script, store, JAX_ENABLE_COMPILATION_CACHE="false")
    assert disabled["results"] == cold["results"]
    assert not disabled["stats"].get("jax.hits")
    assert not disabled["stats"].get("jax.read_ahead_hits")
    # (f alone: a check compares a fresh compile's bytes, and XLA's differ from the second
    # compile of a process on: JAX's own cache's check fails such a program the same way.)
    checked = _run(script, store, "f", JAX_COMPILATION_CACHE_CHECK_CONTENTS="true")
    assert checked["results"] == cold["results"][:1]
    assert checked["stats"]["jax.misses"] == 1  # compiled afresh and compared, not served
    assert not checked["stats"].get("jax.read_ahead_hits")


# -- the Preloader, with JAX's own objects ---------------------------------------------------


@pytest.fixture
def preloader(tmp_path: Path) -> Any:
    store = Tiered([LocalStore(tmp_path / "store")])
    cache = Cache(store)
    cache.prefetcher = Prefetcher(store)
    yield jax_preload.Preloader(cache, "jax", lambda key: f"jax/{key}")
    store.close()


def _backend() -> Any:
    from jax._src import xla_bridge

    return xla_bridge.get_backend("cpu")


def _options(replicas: int = 1) -> Any:
    from jax._src.lib import xla_client

    options = xla_client.CompileOptions()
    options.num_replicas = replicas
    return options


def _devices(backend: Any) -> Any:
    from jax._src.lib import xla_client

    return xla_client.DeviceList(tuple(backend.devices()))


def _hold(preloader: Any, key: str, backend: Any, options: Any) -> object:
    """A slot as the thread leaves it: ``key`` deserialised for ``options`` on ``backend``."""
    executable = object()
    header = EntryHeader(framework="jax", key=f"jax/{key}", name="jit_f", compile_time_s=2.0)
    slot = jax_preload._Slot(size=10)
    slot.loaded = jax_preload._Loaded(
        executable,
        2000,
        options.SerializeAsString(),
        [int(d.id) for d in backend.devices()],
        backend,
        Entry(header, b"payload"),
        10,
        0.001,
    )
    slot.ready.set()
    preloader._slots[key] = slot
    return executable


def test_a_preloaded_executable_is_handed_over_only_when_everything_matches(
    preloader: Any,
) -> None:
    backend = _backend()
    devices = _devices(backend)
    # Other compile options, other devices, another backend object: JAX's own path.
    _hold(preloader, "k1", backend, _options())
    assert preloader.claim("k1", _options(replicas=2), backend, devices) is None
    _hold(preloader, "k2", backend, _options())
    assert preloader.claim("k2", _options(), backend, []) is None
    _hold(preloader, "k3", backend, _options())
    assert preloader.claim("k3", _options(), object(), devices) is None
    assert not preloader.cache.stats.snapshot().get("jax.hits")
    # Another key is never served what was read for this one.
    _hold(preloader, "k4", backend, _options())
    assert preloader.claim("k5", _options(), backend, devices) is None
    # The same key, options, devices and backend: served once, counted as a hit.
    executable = _hold(preloader, "k6", backend, _options())
    assert preloader.claim("k6", _options(), backend, devices) == (executable, 2000)
    assert preloader.claim("k6", _options(), backend, devices) is None
    counted = preloader.cache.stats.snapshot()
    assert counted["jax.hits"] == 1
    assert counted["jax.read_ahead_hits"] == 1
    assert preloader.cache.prefetcher.lookups() == ["jax/k6"]


def test_a_key_looked_up_first_is_not_read_ahead(preloader: Any, monkeypatch: Any) -> None:
    read: list[str] = []
    monkeypatch.setattr(preloader.cache, "read_ahead", lambda fw, key: read.append(key))
    assert preloader.claim("early", _options(), _backend(), _devices(_backend())) is None
    assert preloader._read_ahead("early", {}) is True
    assert preloader._read_ahead("later", {}) is True
    assert read == ["jax/later"]


def test_held_bytes_are_bounded_and_unclaimed_ones_dropped(
    preloader: Any, monkeypatch: Any
) -> None:
    monkeypatch.setattr(jax_preload, "MAX_HELD_BYTES", 100)
    monkeypatch.setattr(jax_preload, "KEEP_S", 0.2)
    assert preloader._room_for(80)
    preloader._slots["a"] = first = jax_preload._Slot(size=80)
    first.ready.set()
    # No room for 80 more until "a" is claimed or dropped: the thread gives up after KEEP_S.
    start = time.monotonic()
    assert not preloader._room_for(80)
    assert time.monotonic() - start >= 0.2
    # A claim frees the room while the thread waits.
    got: list[bool] = []
    waiting = threading.Thread(target=lambda: got.append(preloader._room_for(80)))
    waiting.start()
    preloader.claim("a", _options(), _backend(), _devices(_backend()))
    waiting.join(5)
    assert got == [True] and preloader._held == 80
    # What nobody claims is dropped.
    preloader._slots["b"] = second = jax_preload._Slot(size=80)
    second.ready.set()
    preloader._expire()
    assert preloader._slots == {} and preloader._held == 0


def test_a_lookup_during_the_read_waits_for_that_read_and_never_for_room(
    preloader: Any, monkeypatch: Any
) -> None:
    """Each entry is read once (one hit in the store's own count): a lookup that comes while the
    thread reads its entry is served from that read, even when the thread would otherwise wait
    for room; a read that finds nothing sends the lookup down JAX's own path at once."""
    monkeypatch.setattr(jax_preload, "MAX_HELD_BYTES", 10)
    monkeypatch.setattr(jax_preload, "KEEP_S", 30.0)
    backend = _backend()
    _hold(preloader, "unclaimed", backend, _options())  # 10 bytes held: no room for more
    preloader._held = 10
    reads: list[str] = []
    reading = threading.Event()
    release = threading.Event()

    def slow_read(framework: str, key: str) -> Any:
        reads.append(key)
        reading.set()
        release.wait(5)
        if key == "jax/gone":
            return None
        header = EntryHeader(framework="jax", key=key, name="jit_f", compile_time_s=1.0)
        return Entry(header, b"payload"), 7, 0.001

    executable = object()

    def deserialise(entry: Entry, size: int, read_s: float, backends: Any) -> Any:
        devices = [int(d.id) for d in backend.devices()]
        options = _options().SerializeAsString()
        return jax_preload._Loaded(executable, 1000, options, devices, backend, entry, size, 0)

    monkeypatch.setattr(preloader.cache, "read_ahead", slow_read)
    monkeypatch.setattr(preloader, "_deserialise", deserialise)
    for key, expected in (("k", (executable, 1000)), ("gone", None)):
        reading.clear()
        release.clear()
        thread = threading.Thread(target=preloader._read_ahead, args=(key, {"cpu": backend}))
        thread.start()
        assert reading.wait(5)
        got: list[Any] = []
        lookup = threading.Thread(
            target=lambda k=key, into=got: into.append(
                preloader.claim(k, _options(), backend, _devices(backend))
            )
        )
        start = time.monotonic()
        lookup.start()
        assert wait_until(lambda k=key: k in preloader._asked)  # waits for the read under way
        assert got == []
        release.set()
        lookup.join(5)
        thread.join(5)
        assert got == [expected]
        assert time.monotonic() - start < 5  # not KEEP_S: the room was not waited for
    assert reads == ["jax/k", "jax/gone"]
    assert preloader.cache.stats.snapshot()["jax.read_ahead_hits"] == 1
    assert set(preloader._slots) == {"unclaimed"} and preloader._held == 10
