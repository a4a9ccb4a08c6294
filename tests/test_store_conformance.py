"""The conformance suite against the built-in stores."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from compilecache.stores.base import Store
from compilecache.stores.local import LocalStore
from compilecache.stores.memory import MemoryStore
from tests.stores.conformance import StoreConformance


class TestMemoryStore(StoreConformance):
    CAPABILITIES = frozenset({"counters", "history"})

    @pytest.fixture
    def store(self) -> Iterator[Store]:
        s = MemoryStore(f"memory://{uuid.uuid4().hex}")
        yield s
        s.close()


class TestLocalStore(StoreConformance):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[Store]:
        s = LocalStore(tmp_path / "cache")
        yield s
        s.close()
