"""Miss explanations: real JAX runs for each category, the wording tables, and ``explain``.

One base run fills a store; copies of it then meet one change each (the function body, an XLA
flag, the device count, ``jax._src.cache_key.custom_hook``), in parallel processes, and the
miss history must say what changed in plain words.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from compilecache import entry
from compilecache.cli import main
from compilecache.entry import EntryHeader
from compilecache.frameworks.jax import words as jax_words
from compilecache.frameworks.torch import words as torch_words
from compilecache.runtime import explain, history
from compilecache.runtime.cache import Cache
from compilecache.stores.base import EntryMeta
from compilecache.stores.local import LocalStore
from compilecache.stores.memory import MemoryStore
from compilecache.stores.tiers import Tiered
from tests.conftest import clean_env

# The frameworks' vocabularies are registered with explain when their modules are imported: both
# here, so that the wording tests do not depend on which tests ran before in this process.
VOCABULARIES = (jax_words.JAX, torch_words.TORCH)

PROGRAM = """
import os
import compilecache
compilecache.enable()
import jax, jax.numpy as jnp
if os.environ.get("HOOK"):
    from jax._src import cache_key
    cache_key.custom_hook = lambda: os.environ["HOOK"]

def f(x):
    if os.environ.get("BODY") == "2":
        return jnp.cos(x) * 3.0
    return jnp.sin(x) * 3.0

x = jnp.arange(8, dtype=jnp.float32)
print(float(jax.jit(f)(x).sum()))
"""

# category -> environment of the second run
CHANGES = {
    "body": {"BODY": "2"},
    "xla_flag": {"XLA_FLAGS": "--xla_cpu_enable_fast_math=true"},
    "devices": {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"},
    "custom_hook": {"HOOK": "run-b"},
}


def _run(script: Path, store: Path, extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = clean_env()
    env.pop("XLA_FLAGS", None)
    env.update({"COMPILECACHE_URL": str(store), **extra})
    proc = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def _misses(store: Path, name: str = "jit_f") -> list[dict[str, Any]]:
    s = LocalStore(store)
    try:
        return [r for r in history.read(s, history.MISS) if r.get("name") == name]
    finally:
        s.close()


@pytest.fixture(scope="module")
def changed_stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A base store, and one copy per category after a run with that change."""
    root = tmp_path_factory.mktemp("explain")
    script = root / "prog.py"
    script.write_text(PROGRAM)
    base = root / "base"
    _run(script, base, {})
    stores = {"base": base}
    for category in CHANGES:
        stores[category] = root / category
        shutil.copytree(base, stores[category])
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(lambda c: _run(script, stores[c], CHANGES[c]), CHANGES))
    return stores


@pytest.mark.slow
def test_first_compile_is_a_new_function(changed_stores: dict[str, Path]) -> None:
    (record,) = _misses(changed_stores["base"])
    assert record["summary"] == "jit_f: new function: no earlier entry of that name"
    assert record["nearest"] is None and record["stored"] is True
    assert record["key"].startswith("jax/jit_f-") and record["compile_time_s"] > 0
    assert {"time", "host", "pid", "run"} <= set(record)


@pytest.mark.slow
def test_body_change(changed_stores: dict[str, Path]) -> None:
    record = _misses(changed_stores["body"])[0]
    assert [d["component"] for d in record["differences"]] == ["computation"]
    assert record["summary"].startswith("jit_f: the function body changed")
    assert record["nearest"] == _misses(changed_stores["base"])[0]["key"]


@pytest.mark.slow
def test_xla_flag_change(changed_stores: dict[str, Path]) -> None:
    record = _misses(changed_stores["xla_flag"])[0]
    assert "jit_f: XLA flags changed: --xla_cpu_enable_fast_math=true added" in record["summary"]
    flags = next(d for d in record["differences"] if d["component"] == "XLA flags")
    assert (flags["before"], flags["after"]) == ("", "--xla_cpu_enable_fast_math=true")
    assert "computation" not in {d["component"] for d in record["differences"]}


@pytest.mark.slow
def test_device_count_change(changed_stores: dict[str, Path]) -> None:
    record = _misses(changed_stores["devices"])[0]
    assert "device topology changed: 1 -> 4 CPU devices" in record["summary"], record["summary"]
    topo = next(d for d in record["differences"] if d["component"] == "accelerator_config")
    assert topo["before"] == "1 x cpu" and topo["after"].startswith("4 x cpu")
    assert "computation" not in {d["component"] for d in record["differences"]}


@pytest.mark.slow
def test_custom_hook_change(changed_stores: dict[str, Path]) -> None:
    record = _misses(changed_stores["custom_hook"])[0]
    assert [d["component"] for d in record["differences"]] == ["custom_hook"]
    assert "jax._src.cache_key.custom_hook() changed: '' -> run-b" in record["summary"]


@pytest.mark.slow
def test_explain_cli_lists_and_details(
    changed_stores: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    url = str(changed_stores["xla_flag"])
    assert main(["explain", "--url", url]) == 0
    listing = capsys.readouterr().out
    assert "jit_f: XLA flags changed: --xla_cpu_enable_fast_math=true added" in listing
    assert "jit_f: new function" in listing

    assert main(["explain", "jit_f", "--json", "--url", url]) == 0
    records = json.loads(capsys.readouterr().out)
    assert len(records) == 2 and all(r["name"] == "jit_f" for r in records)

    assert main(["explain", "jit_f", "--url", url]) == 0
    detail = capsys.readouterr().out
    assert "- XLA flags: '' -> '--xla_cpu_enable_fast_math=true'" in detail
    assert "nearest entry: jax/jit_f-" in detail


@pytest.mark.slow
def test_explain_a_stored_key_without_a_recorded_miss(
    changed_stores: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """History cleared: ``explain KEY`` compares the entry with its nearest neighbour."""
    store = tmp_path / "store"
    shutil.copytree(changed_stores["body"], store)
    s = LocalStore(store)
    s.history.clear()
    key = next(i.key for i in s.scan("jax/jit_f-"))
    s.close()
    assert main(["explain", key, "--json", "--url", str(store)]) == 0
    (record,) = json.loads(capsys.readouterr().out)
    assert record["recorded"] is False
    assert [d["component"] for d in record["differences"]] == ["computation"]


def test_explain_without_history_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    LocalStore(tmp_path / "empty").close()  # reading commands never create a store (issue 11)
    assert main(["explain", "--url", str(tmp_path / "empty")]) == 0
    assert "no misses recorded" in capsys.readouterr().out
    assert main(["explain", "--url", "memory://no-history"]) == 0
    assert "no misses recorded" in capsys.readouterr().out
    assert main(["explain", "nothing", "--url", str(tmp_path / "empty")]) == 1


# -- the machinery, without a framework --------------------------------------------------------


def test_nearest_entry_prefers_the_same_program_then_fewest_differences() -> None:
    store = MemoryStore("memory://nearest")
    cache = Cache(store)
    base = {"computation": "c1", "XLA flags": "f1", "compile_options": "o1", "custom_hook": "h"}
    for key, comps in {
        "jax/jit_g-1": base,
        "jax/jit_g-2": {**base, "computation": "c2"},  # another shape: one difference
        "jax/jit_h-3": {**base, "XLA flags": "f2"},  # another name
    }.items():
        header = EntryHeader("jax", key, name=key[4:9], components=comps)
        assert cache.save(header, b"x")
    found = explain.explain(
        Tiered([store]),
        framework="jax",
        name="jit_g",
        key="jax/jit_g-4",
        components={**base, "XLA flags": "f2", "compile_options": "o2"},
        readable={"XLA flags": "--a"},
        prefix="jax/jit_g-",
    )
    # jit_g-1 differs in two components but is the same computation; jit_g-2 in three.
    assert found.nearest == "jax/jit_g-1" and found.candidates == 2
    assert [d.component for d in found.differences] == ["XLA flags", "compile_options"]
    assert store.stat("jax/jit_g-1").hits == 0  # type: ignore[union-attr]  # peeked, not hit


def _miss_then_store(cache: Cache, i: int, before: int = 0) -> explain.Explanation:
    """The ``i``-th compile of a cold run of ``jit_f``s that differ in their computation alone:
    its miss recorded (``i`` same-name entries stored before it, and ``before`` others), then
    its entry stored."""
    components = {"computation": f"c{i}", "XLA flags": "f"}
    found = explain.record_miss(
        cache,
        framework="jax",
        name="jit_f",
        key=f"jax/jit_f-{i}",
        components=components,
        prefix="jax/jit_f-",
    )
    assert found is not None and found.candidates == before + i
    header = EntryHeader("jax", f"jax/jit_f-{i}", name="jit_f", components=components)
    assert cache.save(header, b"x")
    return found


def test_many_misses_of_one_name_read_each_neighbour_once(tmp_path: Path) -> None:
    """A cold run of many same-name compiles: each miss is explained against the newest
    same-name entries, but a neighbour another process wrote is read from its file once in the
    process, not again at every later miss (that was 16 file reads per miss, on the background
    thread a cold JAX run's main thread waits for), and one this process wrote never (what
    explanations read of it is known from its miss)."""
    from compilecache.stores.base import StoreWrapper

    peeked: list[str] = []

    class Counting(StoreWrapper):
        def peek(self, key: str) -> bytes | None:
            peeked.append(key)
            return self.inner.peek(key)

    # Entries of the same name another process stored before the run (other XLA flags).
    others = Cache(LocalStore(tmp_path / "store"))
    for i in range(100, 110):
        components = {"computation": f"c{i}", "XLA flags": "g"}
        assert others.save(
            EntryHeader("jax", f"jax/jit_f-{i}", "jit_f", components=components), b"x"
        )
    store = Counting(LocalStore(tmp_path / "store"))
    cache = Cache(store)
    for i in range(30):
        found = _miss_then_store(cache, i, before=10)
        if i:  # this run's previous compile differs in its computation alone
            assert [d.component for d in found.differences] == ["computation"]
    assert sorted(peeked) == [f"jax/jit_f-{i}" for i in range(100, 110)]  # each once


def test_a_run_lists_the_store_once_and_sees_its_own_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cold run's misses are explained against a listing kept for LISTING_KEPT_S, with the
    entries the run stores itself added as it goes: one listing for 20 misses (it grew with
    every entry, and was most of a miss's background work), each miss still compared with the
    run's previous compile. An entry another process writes is seen once the listing is
    older than that."""
    from compilecache.stores.base import StoreWrapper

    scans: list[str] = []

    class Counting(StoreWrapper):
        def scan(self, prefix: str = "") -> Any:
            scans.append(prefix)
            return self.inner.scan(prefix)

    local = LocalStore(tmp_path / "store")
    cache = Cache(Counting(local))
    for i in range(20):
        found = _miss_then_store(cache, i)
        assert found.nearest == (f"jax/jit_f-{i - 1}" if i else None)
    assert scans == ["jax/jit_f-"]

    # Another process writes an entry that differs in its flags alone.
    other = {"computation": "c-new", "XLA flags": "g"}
    local.put(
        "jax/jit_f-other",
        entry.encode(EntryHeader("jax", "jax/jit_f-other", name="jit_f", components=other), b"x"),
        EntryMeta("jax", "jit_f"),
    )
    new = {"computation": "c-new", "XLA flags": "f"}
    found = explain.record_miss(
        cache,
        framework="jax",
        name="jit_f",
        key="jax/jit_f-new",
        components=new,
        prefix="jax/jit_f-",
        stored=False,
    )
    assert found is not None and found.nearest != "jax/jit_f-other" and len(scans) == 1
    monkeypatch.setattr(explain, "LISTING_KEPT_S", -1.0)  # the listing is now too old
    found = explain.record_miss(
        cache,
        framework="jax",
        name="jit_f",
        key="jax/jit_f-new",
        components=new,
        prefix="jax/jit_f-",
        stored=False,
    )
    assert found is not None and found.nearest == "jax/jit_f-other" and len(scans) == 2


def test_record_miss_counts_and_remembers() -> None:
    store = MemoryStore("memory://record")
    cache = Cache(store)
    cache.events = []
    result = explain.record_miss(
        cache, framework="jax", name="jit_k", key="jax/jit_k-1", components={"a": "1"}
    )
    assert result is not None and result.nearest is None
    (record,) = history.read(store, history.MISS)
    assert record["summary"] == "jit_k: new function: no earlier entry of that name"
    assert cache.events[0]["event"] == "miss" and cache.events[0]["components"] == {"a": "1"}
    assert cache.stats.snapshot()["fn.jax.jit_k.misses"] == 1


def test_record_miss_never_raises() -> None:
    class Broken(MemoryStore):
        def scan(self, prefix: str = "") -> Any:
            raise OSError("disk on fire")

        def add_history(self, kind: str, record: Any) -> None:
            raise OSError("disk on fire")

    cache = Cache(Broken("memory://broken"))
    result = explain.record_miss(cache, framework="jax", name="f", key="jax/f-1", components={})
    assert result is not None and result.nearest is None


@pytest.mark.parametrize(
    ("framework", "component", "before", "after", "words"),
    [
        ("jax", "jax_lib version", "0.10.1", "0.10.2", "jaxlib 0.10.1 -> 0.10.2"),
        (
            "jax",
            "XLA flags",
            "--xla_a=1 --xla_b",
            "--xla_a=2 --xla_c",
            "XLA flags changed: --xla_a=1 -> --xla_a=2, --xla_c added, --xla_b removed",
        ),
        ("jax", "accelerator_config", "1 x cpu", "4 x cpu", "device topology changed: 1 -> 4 CPU"),
        (
            "jax",
            "compile_options",
            "a=/tmp/x",
            "a=/tmp/y",
            "compile options changed: a=/tmp/x -> a=/tmp/y",
        ),
        (
            "torch",
            "inductor_config[cpp.simdlen]",
            "None",
            "256",
            "torch: inductor config cpp.simdlen None -> 256",
        ),
        ("torch", "cpp_runtime_thread_count", "2", "1", "torch: thread count 2 -> 1"),
        ("other", "knob", "a", "b", "knob changed: a -> b"),
    ],
)
def test_wording(framework: str, component: str, before: str, after: str, words: str) -> None:
    (difference,) = explain.diff(
        {component: "h1"},
        {component: "h2"},
        {component: before},
        {component: after},
        explain.vocabulary(framework),
    )
    assert difference.text.startswith(words), difference.text
    assert (difference.before, difference.after) == (before, after)


def test_summary_of_a_miss_with_an_unrecorded_component() -> None:
    differences = explain.diff({"a": "1"}, {"a": "1", "b": "2"}, vocab=jax_words.JAX)
    assert explain.summarize("f", differences, "k") == "f: b is new in the key"
    assert "components agree" in explain.summarize("f", [], "k")


def test_a_level_that_lists_slowly_in_all_is_no_longer_scanned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each scan is quick, but a cold run's many misses add up (a remote level lists in a round
    trip or two): once the scans of a remote level took TOTAL_SCAN_BUDGET_S in all, it is left
    out. A level on this machine is not timed (its listing is indexed; slow only when busy)."""
    import time
    import uuid

    from compilecache.stores.base import StoreWrapper
    from compilecache.stores.capabilities import Health

    class Up(Health):
        def available(self) -> bool:
            return True

        def stats(self) -> dict[str, float]:
            return {}

    class Slow(StoreWrapper):
        scans = 0

        def scan(self, prefix: str = "") -> Any:
            type(self).scans += 1
            time.sleep(0.02)
            return self.inner.scan(prefix)

    class Remote(Slow):
        """Across the network: it has a guard's health."""

        scans = 0

        def __init__(self, inner: MemoryStore) -> None:
            super().__init__(inner)
            self.health = Up()

    class Local(Slow):
        scans = 0

    monkeypatch.setattr(explain, "TOTAL_SCAN_BUDGET_S", 0.05)
    monkeypatch.setattr(explain, "LISTING_KEPT_S", -1.0)  # every miss lists again
    for wrapper in (Remote, Local):
        store = wrapper(MemoryStore(f"memory://{uuid.uuid4().hex}"))
        cache = Cache(store)
        for i in range(10):
            explain.record_miss(
                cache, framework="jax", name=f"f{i}", key=f"jax/f{i}-k", components={}
            )
        assert len(history.read(store, history.MISS)) == 10  # still recorded, as new functions
    # About 0.05 s of scans (three of 0.02 s; fewer when the machine is busy), then none.
    assert 1 <= Remote.scans <= 4
    assert Local.scans == 10  # this machine's own level is always searched, however busy


def test_an_object_store_is_never_listed_for_an_explanation() -> None:
    """Its object names are hashes: listing it reads every object, a request each. A level that
    lists cheaply (here a memory store) is still searched."""
    import uuid

    from compilecache.stores.base import StoreWrapper
    from compilecache.stores.objectstore import ObjectStore

    # fsspec's memory filesystem: a bucket without a server (the compat venvs have no fsspec).
    memory = pytest.importorskip("fsspec.implementations.memory")

    class Listed(StoreWrapper):
        scans = 0

        def scan(self, prefix: str = "") -> Any:
            Listed.scans += 1
            return self.inner.scan(prefix)

    header = EntryHeader("jax", "jax/jit_g-1", name="jit_g", components={"computation": "c1"})
    bucket = Listed(ObjectStore(memory.MemoryFileSystem(), f"/cc-{uuid.uuid4().hex}"))
    assert not bucket.scans_cheaply
    Cache(bucket).save(header, b"x")
    shared = MemoryStore(f"memory://{uuid.uuid4().hex}")
    Cache(shared).save(header, b"x")
    local = MemoryStore(f"memory://{uuid.uuid4().hex}")

    def nearest(remote: Any) -> Any:
        return explain.explain(
            Tiered([local, remote]),
            framework="jax",
            name="jit_g",
            key="jax/jit_g-2",
            components={"computation": "c2"},
            prefix="jax/jit_g-",
        ).nearest

    assert nearest(bucket) is None and Listed.scans == 0
    assert nearest(shared) == "jax/jit_g-1"
