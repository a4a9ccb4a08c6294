"""Configuration: arguments > environment > defaults, read at call time, clear errors."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

import compilecache
from compilecache import config
from compilecache.errors import ConfigError
from compilecache.stores.memory import MemoryStore


def test_defaults_follow_xdg(tmp_path: Path) -> None:
    cfg = config.load({"XDG_CACHE_HOME": str(tmp_path)})
    assert cfg.url == str(tmp_path / "compilecache")
    assert cfg.max_size == 10 * 1000**3
    assert cfg.min_compile_time == 0.0
    assert cfg.frameworks == ("jax", "torch")
    assert not cfg.read_only and not cfg.disabled


def test_arguments_beat_environment() -> None:
    env = {"COMPILECACHE_URL": "memory://env", "COMPILECACHE_MAX_SIZE": "20GB"}
    assert config.load(env).max_size == 20 * 1000**3
    cfg = config.load(env, url="memory://arg", max_size="1GiB")
    assert (cfg.url, cfg.max_size) == ("memory://arg", 1024**3)


@pytest.mark.parametrize(
    ("text", "expected"), [("500MB", 500 * 1000**2), ("1.5GB", 1_500_000_000), ("42", 42)]
)
def test_sizes(text: str, expected: int) -> None:
    assert config.parse_size(text) == expected


@pytest.mark.parametrize(("text", "expected"), [("7d", 604800.0), ("12h", 43200.0), ("90", 90.0)])
def test_durations(text: str, expected: float) -> None:
    assert config.parse_duration(text) == expected


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"COMPILECACHE_MAX_SIZE": "lots"}, "COMPILECACHE_MAX_SIZE"),
        ({"COMPILECACHE_DISABLE": "maybe"}, "COMPILECACHE_DISABLE"),
        ({"COMPILECACHE_FRAMEWORKS": "jax,tensorflow"}, "tensorflow"),
        ({"COMPILECACHE_MIN_COMPILE_TIME": "soon"}, "COMPILECACHE_MIN_COMPILE_TIME"),
        ({"COMPILECACHE_LOG": "loud"}, "COMPILECACHE_LOG"),
        ({"COMPILECACHE_TIER_WRITES": "some"}, "COMPILECACHE_TIER_WRITES"),
    ],
)
def test_bad_values_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config.load(env)


def test_environment_is_read_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPILECACHE_URL", "memory://first")
    assert config.load().url == "memory://first"
    monkeypatch.setenv("COMPILECACHE_URL", "memory://second")
    assert config.load().url == "memory://second"


def test_enable_is_idempotent_and_disable_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"memory://{uuid.uuid4().hex}"
    first = compilecache.enable(url, frameworks="jax")
    assert first is not None and compilecache.enable(url, frameworks="jax") is first
    other = compilecache.enable(url + "-other", frameworks="jax")
    assert other is not first and compilecache.active() is other
    compilecache.disable()
    assert compilecache.active() is None
    monkeypatch.setenv("COMPILECACHE_DISABLE", "1")
    assert compilecache.enable(url) is None


def test_tier_writes_local_writes_only_the_first_level(monkeypatch: pytest.MonkeyPatch) -> None:
    fast, slow = f"memory://{uuid.uuid4().hex}", f"memory://{uuid.uuid4().hex}"
    monkeypatch.setenv("COMPILECACHE_TIER_WRITES", "local")
    store = compilecache.open_store(f"{fast},{slow}")
    store.put("k", b"v")
    assert MemoryStore(fast).get("k") == b"v"
    assert MemoryStore(slow).get("k") is None
