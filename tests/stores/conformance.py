"""The conformance suite every store passes.

A backend's test module subclasses :class:`StoreConformance` and provides a ``store`` fixture
that yields a fresh, empty store; every test here then runs against that backend.
"""

from __future__ import annotations

import os
import threading

import pytest

from compilecache.stores.base import EntryMeta, Store


class StoreConformance:
    """Behaviour every :class:`~compilecache.stores.base.Store` must have."""

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
        errors: list[BaseException] = []

        def worker(n: int) -> None:
            try:
                for i in range(20):
                    key = f"t{i % 5}"
                    value = f"{key}:{n}:{i}".encode() * 50
                    store.put(key, value)
                    got = store.get(key)
                    # Another thread may have replaced it, but only with a whole value.
                    assert got is None or got.split(b":")[0] == key.encode()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []

    def test_close_is_idempotent(self, store: Store) -> None:
        store.close()
        store.close()
