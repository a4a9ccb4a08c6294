"""Configuration: arguments > environment > defaults, read at call time, clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import compilecache
from compilecache import config
from compilecache.errors import ConfigError
from compilecache.stores.memory import MemoryStore
from tests.conftest import clean_env


def test_defaults_follow_xdg(tmp_path: Path) -> None:
    cfg = config.load({"XDG_CACHE_HOME": str(tmp_path)})
    assert cfg.url == str(tmp_path / "compilecache")
    assert cfg.max_size == 10 * 1000**3
    assert cfg.min_compile_time == 0.0
    assert cfg.frameworks == ("jax", "torch", "triton")
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


@pytest.mark.parametrize(
    ("text", "expected"), [("7d", 604800.0), ("12h", 43200.0), ("90s", 90.0), ("0", 0.0)]
)
def test_durations(text: str, expected: float) -> None:
    assert config.parse_duration(text) == expected


@pytest.mark.parametrize(
    "env",
    [
        {"COMPILECACHE_LEASE_TTL": "30"},
        {"COMPILECACHE_WAIT_TIMEOUT": "30"},
        {"COMPILECACHE_MIN_COMPILE_TIME": "2"},
    ],
)
def test_a_duration_variable_without_a_unit_is_an_error_naming_the_units(
    env: dict[str, str],
) -> None:
    """``7`` could be seconds or days: a number needs its unit (``0`` alone is the same in all)."""
    (name,) = env
    with pytest.raises(ConfigError, match=f"{name}: '[0-9]+' has no unit.*s \\(seconds\\)"):
        config.load(env)
    assert config.load({name: "30s"}) is not None


@pytest.mark.parametrize(
    "option", ["timeout", "connect_timeout", "ttl", "backoff", "max_backoff", "deadline"]
)
def test_a_duration_option_of_a_url_without_a_unit_is_an_error(option: str) -> None:
    from compilecache.stores.registry import open_store

    with pytest.raises(ConfigError, match=f"{option}: '7' has no unit"):
        open_store(f"redis://127.0.0.1:9/0?{option}=7")
    for url in ("s3://b/p?timeout=7", "/tmp/x?shared=1&evict_interval=7"):
        with pytest.raises(ConfigError, match="has no unit"):
            open_store(url)


def test_a_size_without_a_unit_stays_bytes() -> None:
    assert config.parse_size("1000") == 1000
    assert config.load({"COMPILECACHE_MAX_SIZE": "4096"}).max_size == 4096


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"COMPILECACHE_MAX_SIZE": "lots"}, "COMPILECACHE_MAX_SIZE"),
        ({"COMPILECACHE_DISABLE": "maybe"}, "COMPILECACHE_DISABLE"),
        ({"COMPILECACHE_FRAMEWORKS": "jax,tensorflow"}, "tensorflow"),
        ({"COMPILECACHE_MIN_COMPILE_TIME": "soon"}, "COMPILECACHE_MIN_COMPILE_TIME"),
        ({"COMPILECACHE_LOG": "loud"}, "COMPILECACHE_LOG"),
        ({"COMPILECACHE_TIER_WRITES": "some"}, "COMPILECACHE_TIER_WRITES"),
        ({"COMPILECACHE_TORCH_PRECOMPILE": "perhaps"}, "COMPILECACHE_TORCH_PRECOMPILE"),
    ],
)
def test_bad_values_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config.load(env)


@pytest.mark.parametrize(("value", "expected"), [("", None), ("1", True), ("0", False)])
def test_dynamo_packages_are_on_unless_turned_off(value: str, expected: bool | None) -> None:
    """Unset: ``None``, on for the torch releases they were tested on; ``1``: asked for (a
    warning on another torch); ``0``: off."""
    assert config.load({"COMPILECACHE_TORCH_PRECOMPILE": value}).torch_precompile is expected


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


def test_disable_imports_no_framework_the_program_did_not(tmp_path: Path) -> None:
    """disable() undoes the integrations installed; one never installed (its framework never
    imported) is not imported to be undone: Triton's integration imports Triton (0.23 s)."""
    program = (
        "import json, sys, compilecache\n"
        f"compilecache.enable({str(tmp_path / 'store')!r})\n"
        "import jax\n"
        "installed = sorted(compilecache.active().installed)\n"
        "compilecache.disable()\n"
        "print(json.dumps({'installed': installed, 'triton': 'triton' in sys.modules,\n"
        "    'torch': 'torch' in sys.modules}))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", program], env=clean_env(), capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"installed": ["jax"], "triton": False, "torch": False}


def test_tier_writes_local_writes_only_the_first_level(monkeypatch: pytest.MonkeyPatch) -> None:
    fast, slow = f"memory://{uuid.uuid4().hex}", f"memory://{uuid.uuid4().hex}"
    monkeypatch.setenv("COMPILECACHE_TIER_WRITES", "local")
    store = compilecache.open_store(f"{fast},{slow}")
    store.put("k", b"v")
    assert MemoryStore(fast).get("k") == b"v"
    assert MemoryStore(slow).get("k") is None


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("rel/cache", "/work/dir/rel/cache"),
        ("./cache", "/work/dir/cache"),
        ("../up/cache?max_size=1GB", "/work/up/cache?max_size=1GB"),
        ("file:rel/cache", "file:///work/dir/rel/cache"),
        ("file://./cache?shared=1", "file:///work/dir/cache?shared=1"),
        ("./a?max_size=1GB,redis://h:6379/0", "/work/dir/a?max_size=1GB,redis://h:6379/0"),
        ("memory://x,rel", "memory://x,/work/dir/rel"),
        # written as they are: absolute paths, remote and in-memory stores
        ("/abs/cache/", "/abs/cache/"),
        ("file:///abs/cache", "file:///abs/cache"),
        ("redis://localhost:6379/0?prefix=a", "redis://localhost:6379/0?prefix=a"),
        ("s3://bucket/prefix", "s3://bucket/prefix"),
        ("memory://x", "memory://x"),
    ],
)
def test_relative_store_paths_are_made_absolute(url: str, expected: str) -> None:
    assert config.absolute_url(url, cwd="/work/dir") == expected


def test_relative_url_resolved_once_at_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    cfg = config.load({"COMPILECACHE_URL": "./cache?max_size=1GB"})
    assert cfg.url == f"{tmp_path / 'cache'}?max_size=1GB"
    assert config.load(url="~/cache").url == str(home / "cache")
    # The Config keeps naming the same store after the program moves elsewhere.
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    assert cfg.url == f"{tmp_path / 'cache'}?max_size=1GB"
    assert config.load(url="cache").url == str(tmp_path / "sub" / "cache")


def test_store_opened_from_a_relative_url_survives_chdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path)
    store = compilecache.open_store("rel/cache")
    try:
        monkeypatch.chdir(tmp_path / "elsewhere")
        store.put("k", b"value")
        assert store.get("k") == b"value"
    finally:
        store.close()
    assert (tmp_path / "rel" / "cache").is_dir()
    assert not any((tmp_path / "elsewhere").iterdir())


def test_every_variable_compilecache_reads_is_in_the_one_table() -> None:
    """The names the code reads are the table's (docs and ``check`` list the table)."""
    import re

    from compilecache.variables import KNOWN_VARIABLES

    source = Path(__file__).resolve().parent.parent / "src" / "compilecache"
    read = {
        name
        for path in source.rglob("*.py")
        for name in re.findall(r"COMPILECACHE_[A-Z_]*[A-Z]", path.read_text())
    }
    assert read - KNOWN_VARIABLES == set()


def test_a_mistyped_variable_is_reported_with_the_nearest_name(tmp_path: Path) -> None:
    from compilecache.variables import describe_unknown, unknown_variables

    env = {"COMPILECACHE_MAXSIZE": "5GB", "COMPILECACHE_URL": "/x", "COMPILECACHE_ZZZ": "1"}
    assert unknown_variables(env) == [
        ("COMPILECACHE_MAXSIZE", "COMPILECACHE_MAX_SIZE"),
        ("COMPILECACHE_ZZZ", None),
    ]
    said = describe_unknown(unknown_variables(env))
    assert said[0].endswith("(did you mean COMPILECACHE_MAX_SIZE?)")
    for command in (["check"], ["run", "--", sys.executable, "-c", "pass"]):
        proc = subprocess.run(
            [sys.executable, "-m", "compilecache", *command],
            env=clean_env({"COMPILECACHE_MAXSIZE": "5GB", "XDG_CACHE_HOME": str(tmp_path)}),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert "COMPILECACHE_MAXSIZE is not a compilecache variable" in proc.stdout + proc.stderr
