"""Stats in depth: per function, per framework, per store level, run history, Prometheus."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from compilecache import config as config_mod
from compilecache import stats
from compilecache.cli import main
from compilecache.entry import EntryHeader
from compilecache.errors import StoreUnavailable
from compilecache.runtime import history
from compilecache.runtime.cache import Cache
from compilecache.session import Session, open_store, plan_writes
from compilecache.stats import function_counter, split_counters
from compilecache.stores.base import EntryMeta
from compilecache.stores.capabilities import HISTORY_LIMIT
from compilecache.stores.guarded import Guarded
from compilecache.stores.local import LocalStore
from compilecache.stores.memory import MemoryStore
from compilecache.stores.registry import open_url
from compilecache.tools import prune
from compilecache.tools import report as report_mod
from compilecache.tools.report import prometheus
from compilecache.tools.store_stats import StatsReport
from tests import servers
from tests.conftest import TESTS, clean_env, last_json

SAMPLE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)"
    r'(?P<labels>\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*",?)*\})?'
    r" (?P<value>[-+]?(?:[0-9.]+(?:e[-+]?[0-9]+)?|NaN|Inf))$"
)


def _fill(cache: Cache) -> None:
    for name, seconds in (("jit_a", 2.0), ("jit_b", 0.5)):
        header = EntryHeader("jax", f"jax/{name}-1", name=name, compile_time_s=seconds)
        assert cache.save(header, b"payload " * 100)
    assert cache.load("jax", "jax/jit_a-1") is not None
    assert cache.load("jax", "jax/jit_a-1") is not None
    assert cache.load("jax", "jax/jit_zzz-1") is None


def test_function_counters_are_kept_apart_from_framework_ones() -> None:
    counters = {
        "hits": 3.0,
        "jax.hits": 3.0,
        function_counter("jax", "jit.with.dots", "hits"): 2.0,
        function_counter("torch", "MLP.forward:0_forward", "misses"): 1.0,
        "level.redis://h:6379/0.hits": 4.0,
    }
    totals, frameworks, functions, levels = split_counters(counters)
    assert totals == {"hits": 3.0}
    assert frameworks == {"jax": {"hits": 3.0}}
    assert functions == {
        ("jax", "jit.with.dots"): {"hits": 2.0},
        ("torch", "MLP.forward:0_forward"): {"misses": 1.0},
    }
    assert levels == {"redis://h:6379/0": {"hits": 4.0}}


def test_stats_json_per_function_framework_and_level(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"{tmp_path / 'fast'},{tmp_path / 'slow'}"
    cfg = config_mod.load({}, url=url)
    plan = plan_writes(cfg)
    session = Session(cfg, open_store(cfg=cfg, plan=plan), plan)
    _fill(session.cache)
    session.flush_stats()
    session.record_run()
    session.close()

    assert main(["stats", "--json", "--url", url]) == 0
    report = json.loads(capsys.readouterr().out)
    for field in ("hits", "misses", "writes", "errors", "entries", "size_bytes"):
        assert field in report
    assert report["hits"] == 2 and report["writes"] == 2 and report["entries"] == 2
    jit_a = report["functions"]["jax/jit_a"]
    assert (jit_a["hits"], jit_a["writes"], jit_a["entries"]) == (2, 1, 1)
    assert jit_a["compile_time_saved_s"] > 3.5
    assert set(report["frameworks"]) == {"jax"}  # no "fn" or "level" pseudo-frameworks
    assert report["frameworks"]["jax"]["hits"] == 2
    assert set(report["levels"]) == {str(tmp_path / "fast"), str(tmp_path / "slow")}
    assert report["levels"][str(tmp_path / "fast")]["hits"] == 2
    assert report["levels"][str(tmp_path / "slow")]["writes"] == 2

    # One run record per session, kept in the first level's history.
    (run,) = history.read(open_store(cfg=cfg, plan=plan_writes(cfg)), history.RUN)
    assert run["hits"] == 2 and run["misses"] == 1 and run["frameworks"]["jax"]["hits"] == 2

    assert main(["stats", "--url", url]) == 0
    text = capsys.readouterr().out
    assert "jax/jit_a" in text and f"level {tmp_path / 'fast'}" in text


def test_prometheus_text_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = MemoryStore("memory://prom")
    cache = Cache(store)
    _fill(cache)
    weird = EntryHeader("jax", 'jax/jit_"q\\-1', name='jit_"q\\', compile_time_s=1.0)
    assert cache.save(weird, b"x")
    cache.stats.add("waited", 3, framework="torch")  # single-flight counters are exported too
    store.counters.add(cache.stats.snapshot())
    text = prometheus(StatsReport.of(store))
    families: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            families[name] = kind
            continue
        if line.startswith("# HELP "):
            continue
        match = SAMPLE.match(line)
        assert match, f"not a Prometheus sample: {line!r}"
        assert match["name"] in families, f"sample before its TYPE: {line!r}"
    assert families["compilecache_hits_total"] == "counter"
    assert families["compilecache_entries"] == "gauge"
    assert 'compilecache_hits_total{store="memory://prom"} 2' in text
    assert 'compilecache_framework_hits_total{store="memory://prom",framework="jax"} 2' in text
    assert (
        'compilecache_function_hits_total{store="memory://prom",framework="jax",function="jit_a"} 2'
        in text
    )
    assert 'compilecache_waited_total{store="memory://prom"} 3' in text
    assert 'compilecache_framework_waited_total{store="memory://prom",framework="torch"} 3' in text
    assert 'function="jit_\\"q\\\\"' in text  # escaped quote and backslash
    assert text.endswith("\n")

    assert main(["stats", "--prometheus", "--url", "memory://prom"]) == 0
    assert capsys.readouterr().out == text


def test_history_is_capped_and_never_an_entry(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    store.put("jax/jit_a-1", b"v")
    for i in range(HISTORY_LIMIT + 5):
        store.history.add("miss", {"i": i})
    store.history.add("run", {"r": 1})
    misses = store.history.read("miss")
    assert len(misses) == HISTORY_LIMIT and misses[0]["i"] == HISTORY_LIMIT + 4
    assert store.history.read("miss", 3) == [{"i": HISTORY_LIMIT + 4 - k} for k in range(3)]
    assert store.history.read("run") == [{"r": 1}]
    assert [i.key for i in store.scan()] == ["jax/jit_a-1"]
    assert store.total_size() == 1
    plan = prune.plan(store, max_size=0)
    assert [info.key for info, _ in plan.victims] == ["jax/jit_a-1"]
    store.history.clear()
    assert store.history.read("miss") == []

    memory = MemoryStore("memory://capped")
    for i in range(HISTORY_LIMIT + 2):
        memory.history.add("miss", {"i": i})
    assert len(memory.history.read("miss")) == HISTORY_LIMIT
    assert list(memory.scan()) == []


@pytest.mark.slow
def test_real_jax_runs_per_function(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "store"
    env = clean_env({"COMPILECACHE_URL": str(store)})
    for _ in range(2):
        proc = subprocess.run(
            [sys.executable, str(TESTS / "jax_program.py"), "before"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
    warm = last_json(proc.stdout)["stats"]
    assert warm["fn.jax.jit_step.hits"] == 1

    assert main(["stats", "--json", "--url", str(store)]) == 0
    report = json.loads(capsys.readouterr().out)
    step = report["functions"]["jax/jit_step"]
    assert (step["hits"], step["misses"], step["writes"], step["entries"]) == (1, 1, 1, 1)
    assert step["compile_time_s"] > 0 and step["compile_time_saved_s"] > 0
    assert sum(f["misses"] for f in report["functions"].values()) == report["misses"]
    runs = history.read(LocalStore(store), history.RUN)
    assert [r["hits"] for r in runs] == [report["hits"], 0]  # newest first
    assert runs[0]["compile_time_saved_s"] > 0


redis_server = servers.redis_server


def test_redis_history_is_capped_and_invisible_to_scan(redis_server: servers.RedisServer) -> None:
    store = open_url(f"{redis_server.url}/{servers.namespace()}")
    try:
        store.put("jax/jit_a-1", b"v", EntryMeta("jax", "jit_a"))
        for i in range(HISTORY_LIMIT + 3):
            history.append(store, history.MISS, {"i": i})
        records = history.read(store, history.MISS)
        assert len(records) == HISTORY_LIMIT and records[0]["i"] == HISTORY_LIMIT + 2
        assert [i.key for i in store.scan()] == ["jax/jit_a-1"]
        assert history.read(store, history.RUN) == []
    finally:
        store.close()


def test_tiered_history_lives_in_the_first_writable_level(tmp_path: Path) -> None:
    url = f"{tmp_path / 'ro'}?readonly=1,{tmp_path / 'rw'}"
    cfg = config_mod.load({}, url=url)
    store = open_store(cfg=cfg, plan=plan_writes(cfg))
    assert history.append(store, history.MISS, {"m": 1})
    assert history.read(store, history.MISS) == [{"m": 1}]
    assert LocalStore(tmp_path / "rw").history.read("miss") == [{"m": 1}]
    assert LocalStore(tmp_path / "ro").history.read("miss") == []


def test_no_history_call_while_a_remote_store_is_in_back_off() -> None:
    class Flaky(MemoryStore):
        calls = 0

        def __init__(self, url: str) -> None:
            super().__init__(url)
            inner = self.history
            assert inner is not None

            class Counted(type(inner)):  # type: ignore[misc]
                def add(self, kind: str, record: Mapping[str, object]) -> None:
                    Flaky.calls += 1
                    super().add(kind, record)

            self.history = Counted(self._data)

        def get(self, key: str) -> bytes | None:
            raise ConnectionError("down")

    guarded = Guarded(Flaky("memory://flaky"), backoff=60)
    assert history.append(guarded, history.MISS, {"a": 1})
    with pytest.raises(StoreUnavailable):
        guarded.get("k")
    assert guarded.guard.down
    history.append(guarded, history.MISS, {"a": 2})  # skipped: no call, no wait, no error
    assert Flaky.calls == 1
    assert history.read(guarded, history.MISS) == []  # nor a read while the level is down


# -- the statistics record (issue 10) ---------------------------------------------------------


def test_stats_report_is_a_frozen_record_that_stats_json_prints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "store"
    store = LocalStore(root)
    cache = Cache(store)
    _fill(cache)
    cache.stats.add("foreign", 2, framework="jax")
    store.counters.add(cache.stats.snapshot())

    record = StatsReport.of(store)
    assert (record.hits, record.misses, record.writes, record.count("foreign")) == (2, 1, 2, 2)
    assert isinstance(record.hits, int) and isinstance(record.compile_time_saved_s, float)
    assert record.hit_rate == pytest.approx(2 / 3)
    assert record.entries == 2 and record.size_bytes == sum(i.size for i in store.scan())
    jit_a = record.functions["jax/jit_a"]
    assert (jit_a.label, jit_a.hits, jit_a.entries) == ("jax/jit_a", 2, 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.url = "elsewhere"  # type: ignore[misc]
    with pytest.raises(TypeError):
        record.counters["hits"] = 0  # type: ignore[index]
    with pytest.raises(TypeError):
        record.frameworks["jax"]["hits"] = 0  # type: ignore[index]

    store.close()
    assert main(["stats", "--json", "--url", str(root)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(json.dumps(record.to_json()))
    # The contract's keys, then every counter of stats.COUNTERS, and nothing else at the top.
    contract = {"hits", "misses", "writes", "errors", "entries", "size_bytes"}
    assert contract | {"compile_time_saved_s"} <= set(printed)
    assert set(printed) == {
        *stats.COUNTERS,
        "entries",
        "size_bytes",
        "job_lookup_lists",
        "url",
        "frameworks",
        "functions",
        "levels",
        "internal",
        "hit_rate",
        "settings",
        "signers",
        "stored_compile_time_s",
    }
    assert type(printed["hits"]) is int and type(printed["compile_time_s"]) is float


def test_stats_report_follows_the_counters_tuple(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A counter another module adds to stats.COUNTERS shows in every output unchanged."""
    monkeypatch.setattr(
        stats, "COUNTERS", (*stats.COUNTERS, "isa_probe_hits", "probe_time_s", "bytes_probed")
    )
    store = MemoryStore("memory://generic")
    store.counters.add({"isa_probe_hits": 3.0, "probe_time_s": 0.25, "bytes_probed": 64.0})
    record = StatsReport.of(store)
    assert record.to_json()["isa_probe_hits"] == 3.0 and record.count("isa_probe_hits") == 3
    text = prometheus(record)
    assert 'compilecache_isa_probe_hits_total{store="memory://generic"} 3' in text
    assert 'compilecache_probe_seconds_total{store="memory://generic"} 0.25' in text
    assert 'compilecache_probed_bytes_total{store="memory://generic"} 64' in text
    assert main(["stats", "--url", "memory://generic"]) == 0
    assert "isa_probe_hits 3" in capsys.readouterr().out


def test_prometheus_exports_every_counter(tmp_path: Path) -> None:
    store = MemoryStore("memory://every")
    store.counters.add({"foreign": 4.0})
    text = prometheus(StatsReport.of(store))
    families = {line.split(" ")[2] for line in text.splitlines() if line.startswith("# TYPE ")}
    for counter in stats.COUNTERS:
        assert f"compilecache_{report_mod._prom_counter(counter)[0]}" in families, counter
    assert 'compilecache_foreign_total{store="memory://every"} 4' in text
