"""The conformance suite every store passes.

A backend's test module subclasses :class:`StoreConformance` and provides a ``store`` fixture
that yields a fresh, empty store; every test here then runs against that backend, the optional
capabilities (:class:`CapabilityConformance`: peek, counters, history, leases) included, each
on the backends that have it (``CAPABILITIES`` says which). A wrapper that refuses writes
subclasses :class:`CapabilityConformance` alone.
"""

from __future__ import annotations

import os
import time
import uuid

import pytest

from compilecache.errors import ReadOnlyStore
from compilecache.stores.base import EntryMeta, Store
from compilecache.stores.registry import open_url
from tests.conftest import in_threads


class CapabilityConformance:
    """peek, and each capability object (counters, history, leases) on every backend that has
    it. Wrappers that refuse writes (read-only) run this part only, with a ``writer`` fixture
    that fills the store underneath."""

    @pytest.fixture
    def writer(self, store: Store) -> Store:
        return store

    def test_peek_reads_without_counting_or_touching(self, store: Store, writer: Store) -> None:
        writer.put("jax/peek-1", b"peeked value", EntryMeta("jax", "jit_peek", 1.0))
        before = store.stat("jax/peek-1")
        assert before is not None
        time.sleep(0.02)  # an access time written now would differ from the one before
        for _ in range(3):
            assert store.peek("jax/peek-1") == b"peeked value"
        assert store.peek("jax/absent") is None
        after = store.stat("jax/peek-1")
        assert after is not None
        assert (after.hits, after.accessed) == (before.hits, before.accessed)
        assert store.get("jax/peek-1") == b"peeked value"  # a real read still works after

    # The capabilities the backend under test has: each test below runs where the backend has
    # its capability, and test_capabilities checks that it has exactly these.
    CAPABILITIES: frozenset[str] = frozenset({"counters", "history", "leases"})

    def test_capabilities(self, store: Store) -> None:
        present = {name for name in ("counters", "history", "leases") if getattr(store, name)}
        assert present == set(self.CAPABILITIES)

    def test_counters(self, store: Store) -> None:
        counters = store.counters
        if counters is None:
            pytest.skip("no counters on this backend")
        counters.zero()
        counters.add({"hits": 2.0, "misses": 1.0})
        counters.add({"hits": 1.0, "compile_time_saved_s": 0.5})
        got = counters.read()
        assert got.get("hits") == 3.0 and got.get("misses") == 1.0
        assert got.get("compile_time_saved_s") == pytest.approx(0.5)
        counters.prepare()  # a hint: never blocks, never raises, loses nothing
        counters.add({"hits": 1.0})
        assert counters.read().get("hits") == 4.0
        counters.zero()
        assert not counters.read().get("hits")

    def test_history(self, store: Store) -> None:
        history = store.history
        if history is None:
            pytest.skip("no history on this backend")
        history.clear()
        history.add("miss", {"n": 1})
        history.add("miss", {"n": 2})
        history.add("run", {"n": 3})
        assert [r["n"] for r in history.read("miss")] == [2, 1]  # newest first
        assert [r["n"] for r in history.read("miss", limit=1)] == [2]
        assert [r["n"] for r in history.read("run")] == [3]
        assert all(not i.key.startswith(("miss", "run")) for i in store.scan())  # not entries
        history.clear()
        assert history.read("miss") == []

    def test_leases(self, store: Store) -> None:
        leases = store.leases
        if leases is None:
            pytest.skip("no leases on this backend")
        key = f"jax/lease-{uuid.uuid4().hex[:8]}"
        token = leases.acquire(key, 30)
        assert token
        assert leases.acquire(key, 30) is None  # held
        assert leases.renew(key, token, 30) is True
        assert leases.renew(key, "not-the-token", 30) is False
        leases.release(key, "not-the-token")  # never removes another holder's lease
        assert leases.acquire(key, 30) is None
        assert leases.claim(key, 30).state == "held"
        leases.release(key, token)
        claim = leases.claim(key, 30)
        assert claim.state == "won" and claim.token
        leases.release(key, claim.token)
        again = leases.acquire(key, 30)
        assert again
        leases.release(key, again)

    def test_folded_claim(self, store: Store, writer: Store) -> None:
        """A read folded with its claim answers as the read and the claim apart would."""
        leases = store.leases
        if leases is None:
            pytest.skip("no leases on this backend")
        key = f"jax/fold-{uuid.uuid4().hex[:8]}"
        folded = leases.get_or_claim(key, 30)
        if folded is None:
            pytest.skip("this backend reads, then claims")
        found, claim = folded
        assert found is None and claim is not None and claim.state == "won" and claim.token
        leases.release(key, claim.token)
        writer.put(key, b"there", EntryMeta("jax", "jit_fold", 1.0))
        again = leases.get_or_claim(key, 30)
        assert again is not None and again[0] is not None and again[0][0] == b"there"

    def test_facts_say_what_the_store_does(self, store: Store, writer: Store) -> None:
        writer.put("jax/facts", b"written", EntryMeta("jax", "jit_facts", 1.0))
        assert store.get("jax/facts") == b"written"
        if store.read_only:  # it says it refuses writes: it does
            with pytest.raises(ReadOnlyStore):
                store.put("jax/other", b"refused")
            assert writer.get("jax/other") is None
        else:
            store.put("jax/other", b"taken")
            assert store.get("jax/other") == b"taken"
        if store.health is not None:  # a guarded store that met no failure is up, and says so
            assert store.health.available()
            stats = store.health.stats()
            assert stats["down"] == 0 and stats["errors"] == 0 and stats["outages"] == 0


class StoreConformance(CapabilityConformance):
    """Behaviour every :class:`~compilecache.stores.base.Store` must have."""

    # Whether the store's URL alone opens its data again (not where the fixture adds endpoints,
    # credentials or a filesystem object, or composes levels).
    REOPENS_FROM_URL = True

    def test_miss_is_none(self, store: Store) -> None:
        assert store.get("absent") is None
        assert store.stat("absent") is None

    def test_put_get_roundtrip(self, store: Store) -> None:
        store.put("k", b"value")
        assert store.get("k") == b"value"

    def test_empty_value(self, store: Store) -> None:
        store.put("empty", b"")
        assert store.get("empty") == b""

    def test_binary_value_and_odd_keys(self, store: Store) -> None:
        value = bytes(range(256)) * 4
        for key in ("jax/jit_f-abc", "torch/fx/Ä/ü", "a b?c#d", "x" * 400):
            store.put(key, value)
            assert store.get(key) == value

    def test_overwrite_replaces(self, store: Store) -> None:
        store.put("k", b"old")
        store.put("k", b"new value")
        assert store.get("k") == b"new value"
        info = store.stat("k")
        assert info is not None and info.size == len(b"new value")

    def test_delete(self, store: Store) -> None:
        store.put("k", b"v")
        assert store.delete("k") is True
        assert store.get("k") is None
        assert store.stat("k") is None
        assert store.delete("k") is False

    def test_stat_and_meta(self, store: Store) -> None:
        store.put("jax/f-1", b"12345", EntryMeta("jax", "jit_f", 1.5))
        info = store.stat("jax/f-1")
        assert info is not None
        assert info.key == "jax/f-1"
        assert info.size == 5
        assert info.framework == "jax"
        assert info.name == "jit_f"
        assert info.compile_time_s == pytest.approx(1.5)
        assert info.created > 0 and info.accessed >= info.created - 1

    def test_put_many(self, store: Store) -> None:
        store.put("jax/m-0", b"older")  # replaced, and counted once in the sizes
        store.put_many(
            [
                ("jax/m-0", b"zero", EntryMeta("jax", "jit_m0", 0.5)),
                ("jax/m-1", b"one!!", EntryMeta("jax", "jit_m1", 1.5)),
                ("torch/m-2", b"", None),
            ]
        )
        assert [store.get(k) for k in ("jax/m-0", "jax/m-1", "torch/m-2")] == [
            b"zero",
            b"one!!",
            b"",
        ]
        info = store.stat("jax/m-1")
        assert info is not None and info.name == "jit_m1"
        assert info.compile_time_s == pytest.approx(1.5)
        assert {i.key: i.size for i in store.scan("jax/m-")} == {"jax/m-0": 4, "jax/m-1": 5}
        store.put_many([])

    def test_put_new(self, store: Store) -> None:
        assert store.put_new("jax/n", b"first", EntryMeta("jax", "jit_n", 2.0))
        assert not store.put_new("jax/n", b"second")  # an entry is there: it stands
        assert store.get("jax/n") == b"first"
        info = store.stat("jax/n")
        assert info is not None and info.name == "jit_n"

    def test_scan_prefix(self, store: Store) -> None:
        store.put("jax/a", b"1")
        store.put("jax/b", b"22")
        store.put("torch/c", b"333")
        assert sorted(i.key for i in store.scan("jax/")) == ["jax/a", "jax/b"]
        assert sorted(i.key for i in store.scan()) == ["jax/a", "jax/b", "torch/c"]
        sizes = {i.key: i.size for i in store.scan()}
        assert sizes == {"jax/a": 1, "jax/b": 2, "torch/c": 3}

    def test_large_value(self, store: Store) -> None:
        value = os.urandom(3 * 1024 * 1024)
        store.put("big", value)
        assert store.get("big") == value

    def test_threads(self, store: Store) -> None:
        def worker(n: int) -> None:
            for i in range(20):
                key = f"t{i % 5}"
                value = f"{key}:{n}:{i}".encode() * 50
                store.put(key, value)
                got = store.get(key)
                # Another thread may have replaced it, but only with a whole value.
                assert got is None or got.split(b":")[0] == key.encode()

        assert in_threads(worker, 4) == []

    def test_close_is_idempotent_and_keeps_what_was_written(self, store: Store) -> None:
        store.put("jax/kept", b"kept", EntryMeta("jax", "jit_kept", 1.0))
        store.close()
        store.close()  # a second close raises nothing
        if not self.REOPENS_FROM_URL:
            return
        again = open_url(store.url)  # the next opener of the same URL finds the entry
        try:
            assert again.get("jax/kept") == b"kept"
        finally:
            again.close()
