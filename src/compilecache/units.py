"""Sizes, durations and counts as people write them (``20GB``, ``7d``, ``30``), and the defaults
the storage layer needs: the ground every layer reads units from (the configuration, the
stores, the command line), importing nothing of compilecache's but its errors."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TypeVar

from compilecache.errors import ConfigError

_Default = TypeVar("_Default", float, None)

# A local store's size bound unless COMPILECACHE_MAX_SIZE or ?max_size= says otherwise.
DEFAULT_MAX_SIZE = 10 * 1000**3
# Lookups stop waiting for a remote level's answer after this many new, quick compiles in a row
# (COMPILECACHE_COLD_STREAK; 0: always wait). See compilecache.stores.tiers.coldstreak.
DEFAULT_COLD_STREAK = 5

_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_UNIT_NAMES = "s (seconds), m (minutes), h (hours), d (days) or w (weeks)"


def parse_size(text: str, what: str = "size") -> int:
    """Parse ``"20GB"``, ``"512MiB"`` or ``"1000"`` (a bare number is bytes) into bytes."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _SIZE_UNITS:
        raise ConfigError(f"{what}: cannot read {text!r} as a size (examples: 500MB, 20GB, 1GiB)")
    return int(float(match.group(1)) * _SIZE_UNITS[unit])


def parse_duration(text: str, what: str = "duration") -> float:
    """Parse ``"7d"``, ``"12h"``, ``"30m"`` or ``"1.5s"`` into seconds. A number needs its unit
    (only ``0`` is the same in every unit): ``7`` could mean seconds or days, and read as the
    wrong one, ``prune --older-than`` removes a whole store."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]?)\s*", text)
    if match is None:
        raise ConfigError(
            f"{what}: cannot read {text!r} as a duration: a number and its unit, "
            f"{_UNIT_NAMES} (examples: 7d, 12h, 30m, 1.5s)"
        )
    number, unit = float(match.group(1)), match.group(2).lower()
    if not unit and number == 0:
        return 0.0
    if not unit:
        raise ConfigError(
            f"{what}: {text.strip()!r} has no unit; write it with one of "
            f"{_UNIT_NAMES}, e.g. {match.group(1)}s or {match.group(1)}d"
        )
    if unit not in _DURATION_UNITS:
        raise ConfigError(f"{what}: unknown unit {match.group(2)!r} in {text!r}; use {_UNIT_NAMES}")
    return number * _DURATION_UNITS[unit]


def format_size(n: float) -> str:
    """Render a byte count for people: ``1.5 MB``."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


def parse_count(settings: Mapping[str, str], name: str, default: int, *, minimum: int = 0) -> int:
    """The whole number ``settings[name]`` (an environment, a URL's options), at least
    ``minimum``; ``default`` when it is unset or empty."""
    text = settings.get(name, "").strip()
    if not text:
        return default
    if not text.isdigit() or int(text) < minimum:
        wanted = "a positive whole number" if minimum == 1 else f"a whole number >= {minimum}"
        raise ConfigError(f"{name}: expected {wanted}, got {text!r}")
    return int(text)


def parse_seconds(
    settings: Mapping[str, str], name: str, default: _Default, *, positive: bool = False
) -> float | _Default:
    """The duration ``settings[name]`` in seconds (``30s``, ``1.5s``, ``2m``; an environment, a
    URL's options), or ``default`` when it is unset or blank: the one reader of durations."""
    text = (settings.get(name) or "").strip()
    if not text:
        return default
    value = parse_duration(text, name)
    if positive and value <= 0:
        raise ConfigError(f"{name} must be positive, got {text!r}")
    return value
