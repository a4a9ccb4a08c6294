"""Every capability through every wrapper, and the composition root (stores/registry.py).

The conformance suite (tests/stores/conformance.py) runs on each backend in its own module; here
it runs through the wrappers as the cache opens them: guarded remote levels, read-only levels
and read-only tiers, all opened by :func:`compilecache.stores.registry.open_store`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from compilecache.config import WritePlan
from compilecache.errors import ConfigError, ReadOnlyStore, StoreUnavailable
from compilecache.stores import registry
from compilecache.stores.base import EntryMeta, Store
from compilecache.stores.guarded import Guarded
from compilecache.stores.local import LocalStore
from compilecache.stores.readonly import ReadOnly
from compilecache.stores.tiers import Tiered
from tests import servers
from tests.servers import MotoServer, RedisServer, namespace
from tests.stores.conformance import CapabilityConformance, StoreConformance

redis_server = servers.redis_server
moto_server = servers.moto_server


def _tiers(tmp_path: Path, redis: RedisServer, ns: str, **kwargs: object) -> Store:
    return registry.open_store(f"{tmp_path / 'local'},{redis.url}/{ns}", **kwargs)  # type: ignore[arg-type]


def _guarded(url: str) -> Iterator[Store]:
    """The one level of ``url`` as the registry opens it: guarded."""
    tiers = registry.open_store(url)
    (store,) = tiers.levels
    assert isinstance(store, Guarded) and store.health is not None
    yield store
    tiers.close()


class TestGuardedRedis(StoreConformance):
    @pytest.fixture
    def store(self, redis_server: RedisServer) -> Iterator[Store]:
        yield from _guarded(f"{redis_server.url}/{namespace()}")


class TestGuardedSharedMount(StoreConformance):
    CAPABILITIES = frozenset({"counters", "leases"})

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[Store]:
        yield from _guarded(f"{tmp_path / 'mount'}?shared=1")


class TestGuardedS3(StoreConformance):
    REOPENS_FROM_URL = False

    CAPABILITIES = frozenset({"counters", "leases"})

    @pytest.fixture
    def store(self, moto_server: MotoServer) -> Iterator[Store]:
        yield from _guarded(moto_server.url(moto_server.create_bucket()))


class TestTieredFromRegistry(StoreConformance):
    REOPENS_FROM_URL = False

    @pytest.fixture
    def store(self, tmp_path: Path, redis_server: RedisServer) -> Iterator[Store]:
        s = _tiers(tmp_path, redis_server, namespace())
        assert isinstance(s, Tiered)
        yield s
        s.close()


class TestReadOnlyLocalLevel(CapabilityConformance):
    """``path?readonly=1``: reads, counters and history pass through; leases do not."""

    @pytest.fixture
    def writer(self, tmp_path: Path) -> Iterator[Store]:
        s = registry.open_store(str(tmp_path / "ro"))
        yield s
        s.close()

    CAPABILITIES = frozenset({"counters", "history"})

    @pytest.fixture
    def store(self, tmp_path: Path, writer: Store) -> Iterator[Store]:
        tiers = registry.open_store(f"{tmp_path / 'ro'}?readonly=1")
        (s,) = tiers.levels
        assert isinstance(s, ReadOnly) and s.read_only and tiers.read_only
        yield s
        tiers.close()

    def test_writes_are_refused(self, store: Store) -> None:
        with pytest.raises(ReadOnlyStore):
            store.put("k", b"v")
        with pytest.raises(ReadOnlyStore):
            store.delete("k")


class TestReadOnlyTiers(CapabilityConformance):
    """A read-only session over ``local,redis``: every level read-only, and the tiers too;
    counters and history on the local level (they are not entries), no leases."""

    CAPABILITIES = frozenset({"counters", "history"})

    @pytest.fixture
    def writer(self, tmp_path: Path, redis_server: RedisServer) -> Iterator[Store]:
        ns = namespace()
        s = _tiers(tmp_path, redis_server, ns)
        s.ns = ns  # type: ignore[attr-defined]
        yield s
        s.close()

    @pytest.fixture
    def store(self, tmp_path: Path, redis_server: RedisServer, writer: Store) -> Iterator[Store]:
        read_only = WritePlan(levels_read_only=True, shared_read_only=True)
        s = _tiers(tmp_path, redis_server, writer.ns, plan=read_only)  # type: ignore[attr-defined]
        assert s.read_only and all(level.read_only for level in s.levels)
        yield s
        s.close()


# -- peek through tiers: nothing counted, touched or backfilled ------------------------------------


def test_peek_through_tiers_backfills_nothing(tmp_path: Path, redis_server: RedisServer) -> None:
    ns = namespace()
    tiers = _tiers(tmp_path, redis_server, ns)
    local, remote = tiers.levels
    remote.put("jax/only-remote", b"remote value", EntryMeta("jax", "jit_r", 2.0))
    before = remote.stat("jax/only-remote")
    assert tiers.peek("jax/only-remote") == b"remote value"
    assert local.stat("jax/only-remote") is None  # not copied into the local level
    after = remote.stat("jax/only-remote")
    assert before is not None and after is not None
    assert (after.hits, after.accessed) == (before.hits, before.accessed)
    assert tiers.level_stats()[local.url]["backfills"] == 0
    # A get does backfill: the difference is the point of peek.
    assert tiers.get("jax/only-remote") == b"remote value"
    assert local.stat("jax/only-remote") is not None
    tiers.close()


# -- the composition root --------------------------------------------------------------------------


def test_unknown_url_option_is_an_error_naming_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        registry.open_store(f"{tmp_path / 'c'}?max_sise=1KB")
    message = str(err.value)
    assert "max_sise" in message and "max_size" in message and "readonly" in message
    assert not (tmp_path / "c").exists()  # refused before anything was created
    with pytest.raises(ConfigError, match="max_sise"):
        registry.open_store(f"{tmp_path / 'ok'},{tmp_path / 'c'}?max_sise=1KB")


def test_a_boolean_option_that_is_not_one_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="readonly"):
        registry.open_store(f"{tmp_path / 'c'}?readonly=maybe")


def test_reading_never_creates_a_store(tmp_path: Path) -> None:
    missing = tmp_path / "typo"
    with pytest.raises(StoreUnavailable, match="typo"):
        registry.open_store(str(missing), create=False)
    with pytest.raises(StoreUnavailable, match="typo"):
        registry.open_store(f"{missing}?shared=1", create=False)
    assert not missing.exists()
    LocalStore(tmp_path / "real").close()
    registry.open_store(str(tmp_path / "real"), create=False).close()


def test_each_level_is_parsed_once_and_wrapped_in_order(
    tmp_path: Path, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed: list[str] = []
    real = registry.parse_url

    def counting(url: str, *args: object, **kwargs: object) -> object:
        parsed.append(url)
        return real(url, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(registry, "parse_url", counting)
    remote = f"{redis_server.url}/{namespace()}?readonly=1"
    store = registry.open_store(f"{tmp_path / 'l'},{remote}")
    assert parsed == [str(tmp_path / "l"), remote]
    local, level = store.levels
    # backend -> guard -> read-only
    assert isinstance(level, ReadOnly) and isinstance(level.inner, Guarded)
    assert isinstance(local, LocalStore)
    store.close()


def test_a_third_party_store_without_the_base_has_no_capabilities() -> None:
    class Plain:
        url = "plain://x"

        def __init__(self) -> None:
            self.data: dict[str, bytes] = {}

        def get(self, key: str) -> bytes | None:
            return self.data.get(key)

        def put(self, key: str, value: bytes, meta: EntryMeta | None = None) -> None:
            self.data[key] = value

        def delete(self, key: str) -> bool:
            return self.data.pop(key, None) is not None

        def stat(self, key: str) -> None:
            return None

        def scan(self, prefix: str = "") -> Iterator[object]:
            return iter(())

    scheme = f"plain{uuid.uuid4().hex[:6]}"
    registry.register_scheme(scheme, lambda url: Plain())  # type: ignore[arg-type,return-value]
    store = registry.open_store(f"{scheme}://x")
    store.put("k", b"v")
    assert store.peek("k") == b"v"
    assert (store.counters, store.history, store.leases) == (None, None, None)
    assert store.get_with_meta("k") == (b"v", None)  # the conveniences, on its five methods


def test_a_taken_scheme_is_replaced_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """As fsspec's register_implementation: a built-in or already registered scheme is refused
    unless clobber=True, so a plugin cannot silently send every s3:// level elsewhere."""
    from compilecache.stores.memory import MemoryStore

    monkeypatch.setattr(registry, "_REGISTERED", {})
    first = MemoryStore("memory://first")
    second = MemoryStore("memory://second")

    def factory(url: object) -> MemoryStore:
        return first

    with pytest.raises(ConfigError, match="'s3' is already registered; pass clobber=True"):
        registry.register_scheme("S3", factory)
    registry.register_scheme("mine", factory)
    registry.register_scheme("mine", factory)  # the same factory again: nothing to replace
    with pytest.raises(ConfigError, match="'mine' is already registered"):
        registry.register_scheme("mine", lambda url: second)
    assert registry.open_store("mine://x").levels[0].url == "memory://first"
    registry.register_scheme("mine", lambda url: second, clobber=True)
    assert registry.open_store("mine://x").levels[0].url == "memory://second"
