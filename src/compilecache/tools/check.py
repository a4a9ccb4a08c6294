"""``compilecache check``: what this configuration is, whether its store answers, and what a run
would warn about, before anything runs.

The first stop when something seems off. It reports:

- every setting with its value and where it came from (the command line, a ``COMPILECACHE_*``
  variable, or the default);
- every level of the store, opened and asked a real round trip (a probe entry written, read and
  removed; only read where the level is read-only): reachable, its latency, writable or not;
- the signing role (writer, reader, none) and the trusted keys;
- the frameworks installed (their versions, read without importing them);
- what a run would warn about (a shared store nothing signs, a bound smaller than an entry, a
  read-only home for XLA's caches, levels left out).

Problems come with their fix; ``ok`` (exit status 0) when there are none. Never raises for a
bad setting: that is a problem it reports.
"""

from __future__ import annotations

import importlib.metadata
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from compilecache import config as config_mod
from compilecache import unsigned_warning
from compilecache.config import Config, format_size
from compilecache.errors import CompileCacheError
from compilecache.redaction import redact
from compilecache.stores import registry
from compilecache.stores.base import EntryMeta, flag

# (setting, its variable): the one table of variables, config.VARIABLES.
SETTINGS = tuple((name, var) for name, var, kind in config_mod.VARIABLES if kind == "setting")
# Secrets: said to be set, never shown.
SECRETS = tuple((name, var) for name, var, kind in config_mod.VARIABLES if kind == "secret")
FRAMEWORK_PACKAGES = ("jax", "jaxlib", "torch", "triton")
# Below this, a bound keeps hardly any compiled program (and a bare number is bytes).
SMALL_BOUND = 10 * 1000**2
PROBE_PAYLOAD = b"compilecache check"


@dataclass(frozen=True)
class Setting:
    name: str
    value: str
    source: str  # "argument", "COMPILECACHE_..." (the variable), or "default"


@dataclass(frozen=True)
class Level:
    url: str
    reachable: bool
    writable: bool
    latency_ms: float | None = None
    detail: str = ""


@dataclass(frozen=True)
class Problem:
    what: str
    fix: str


@dataclass
class CheckReport:
    settings: list[Setting] = field(default_factory=list)
    levels: list[Level] = field(default_factory=list)
    signing: dict[str, Any] = field(default_factory=dict)
    frameworks: dict[str, str] = field(default_factory=dict)
    warnings: list[Problem] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "settings": [asdict(s) for s in self.settings],
            "levels": [asdict(level) for level in self.levels],
            "signing": self.signing,
            "frameworks": self.frameworks,
            "warnings": [asdict(w) for w in self.warnings],
            "problems": [asdict(p) for p in self.problems],
        }

    def text(self) -> str:
        lines = ["settings:"]
        width = max((len(s.name) for s in self.settings), default=0)
        for s in self.settings:
            lines.append(f"  {s.name:<{width}}  {s.value}  ({s.source})")
        lines.append("store:")
        for level in self.levels:
            if level.reachable and level.latency_ms is None:
                state = "fine"
            elif level.reachable:
                state = f"reachable, {level.latency_ms:.1f} ms round trip"
                state += ", writable" if level.writable else ", read-only"
            else:
                state = "NOT reachable"
            lines.append(f"  {level.url}: {state}" + (f" ({level.detail})" if level.detail else ""))
        if self.signing:
            lines.append(f"signing: {self.signing.get('role')}: {self.signing.get('detail')}")
        lines.append(
            "frameworks: " + ", ".join(f"{name} {v}" for name, v in self.frameworks.items())
        )
        for heading, items in (("warnings", self.warnings), ("problems", self.problems)):
            if items:
                lines.append(f"{heading}:")
                for item in items:
                    lines.append(f"  - {item.what}")
                    lines.append(f"    fix: {item.fix}")
        lines.append("ok" if self.ok else f"{len(self.problems)} problem(s)")
        return "\n".join(lines)


def check(url: str | None = None, env: Mapping[str, str] | None = None) -> CheckReport:
    """Check the configuration (``url``: the ``--url`` argument) and its store."""
    env = dict(os.environ if env is None else env)
    report = CheckReport()
    try:
        cfg = config_mod.load(env, url=url)
    except CompileCacheError as exc:
        report.problems.append(
            Problem(
                redact(f"the configuration does not load: {exc}"),
                "correct the setting named there",
            )
        )
        report.frameworks = _framework_versions()
        return report
    report.settings = _settings(cfg, env, url)
    report.signing = _signing(cfg)
    report.frameworks = _framework_versions()
    if cfg.disabled:
        report.warnings.append(
            Problem("COMPILECACHE_DISABLE=1: compilecache does nothing", "unset it to cache")
        )
    for level in registry.split_levels(cfg.url):
        report.levels.append(_probe(level, cfg, report))
    reachable = [level.url for level in report.levels if level.reachable]
    if reachable and len(report.levels) > 1:
        # Tiers: a level that is down is skipped, and the others go on serving.
        serving = f"the other levels ({', '.join(reachable)}) serve meanwhile"
        report.problems = [
            Problem(p.what, p.fix.replace(UNCACHED, serving).replace(DIRECTORY_MEANWHILE, serving))
            for p in report.problems
        ]
    _warnings(cfg, report, env)
    return report


# Settings in seconds: shown as a duration is written (30s, 30m), not as a float of seconds.
DURATIONS = frozenset({"lease_ttl", "wait_timeout", "min_compile_time"})


def _settings(cfg: Config, env: Mapping[str, str], url: str | None) -> list[Setting]:
    out = []
    for name, variable in SETTINGS:
        value = getattr(cfg, name)
        if name == "max_size" and not _has_local_level(cfg.url):
            continue  # it bounds local directories only: a Redis or S3 store has none
        shown = format_size(value) if name == "max_size" else redact(_text(value))
        if name in DURATIONS:
            shown = format_duration(float(value))
        if name == "torch_precompile" and value is None:
            shown = "on for the torch releases it was tested on"
        if name == "jax_precompile" and value is None:
            shown = "on for the JAX releases it was tested on"
        if name == "job" and not value:
            shown = "(decided by each run: a fingerprint of the command it runs)"
        if name == "url" and url:
            source = "argument (--url)"
        elif env.get(variable, "").strip():
            source = variable
        else:
            source = "default"
        out.append(Setting(name, shown, source))
    for name, variable in SECRETS:
        if variable in env:
            out.append(Setting(name, "(set, not shown)", variable))
    return out


def _has_local_level(url: str) -> bool:
    """Whether a level of ``url`` is a local (or shared) directory, which ``max_size`` bounds.
    A URL that does not parse counts as local: the setting is shown, the problem reported."""
    try:
        return any(
            registry.parse_url(level).scheme == "file" for level in registry.split_levels(url)
        )
    except CompileCacheError:
        return True


def format_duration(seconds: float) -> str:
    """Seconds as a duration is written: ``30s``, ``30m``, ``2h``, ``0s``, ``0.5s`` (the largest
    unit that gives a whole number, so the text reads back as the same value)."""
    for unit, length in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= length and seconds % length == 0:
            return f"{seconds / length:g}{unit}"
    return f"{seconds:g}s"


def _text(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def _signing(cfg: Config) -> dict[str, Any]:
    signing = cfg.signing
    trusted = len(cfg.trusted_keys)
    if signing is None:
        return {"role": "none", "trusted_keys": 0, "detail": "nothing signed or checked"}
    if not cfg.shared_writer:
        role, detail = "reader", config_mod.READER_REASON
    elif cfg.signing_key:
        role, detail = "writer", "signs what it writes (COMPILECACHE_SIGNING_KEY_FILE)"
    else:
        role, detail = "secret", "HMAC secret: signs and checks every entry"
    return {"role": role, "trusted_keys": trusted, "detail": detail}


def _framework_versions() -> dict[str, str]:
    out = {}
    for name in FRAMEWORK_PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def _probe(level: str, cfg: Config, report: CheckReport) -> Level:
    """Open ``level`` and make a real round trip: a probe entry written, read back, removed (only
    read where the level is read-only)."""
    shown = redact(level)
    try:
        parsed = registry.parse_url(level, cfg.max_size, create=False)
        # The bare backend: no fail-open guard to hide (and warn about) what fails here.
        store = registry.open_url(parsed)
        shown = redact(store.url)  # the store's own name, as `stats` and every command show it
    except CompileCacheError as exc:
        text = str(exc)
        if "does not exist" in text:
            return Level(shown, True, True, None, "not made yet: the first run makes it")
        text = redact(text)
        report.problems.append(Problem(_named(shown, text), _fix_for(text)))
        return Level(shown, False, False, detail=text)
    except Exception as exc:  # a store that fails to open in a way nobody foresaw: said, too
        text = redact(f"cannot open it: {type(exc).__name__}: {exc}")
        report.problems.append(Problem(_named(shown, text), _fix_for(text)))
        return Level(shown, False, False, detail=text)
    key = f"compilecache-check/{socket.gethostname()}-{os.getpid()}"
    media_read_only = store.read_only and not flag(parsed.params, "readonly")
    if media_read_only:
        report.warnings.append(
            Problem(
                f"{shown} is read-only (read-only media, or a directory this user cannot "
                "write): runs read its entries and write nothing",
                "expected for a store shipped in an image; to keep new compiles, put a "
                "writable local level in front of it: COMPILECACHE_URL=~/.cache/cc," + shown,
            )
        )
    try:
        writable = not cfg.read_only and not flag(parsed.params, "readonly") and not store.read_only
        start = time.perf_counter()
        if writable:
            store.put(key, PROBE_PAYLOAD, EntryMeta("check", "probe"))
            found = store.get(key)
            store.delete(key)
            if found != PROBE_PAYLOAD:
                raise CompileCacheError("what was written did not read back")
        else:
            store.stat(key)
        latency = (time.perf_counter() - start) * 1000 / (3 if writable else 1)
    except Exception as exc:  # any failure of the round trip is this level's problem
        text = redact(str(exc) or type(exc).__name__)
        report.problems.append(Problem(_named(shown, text), _fix_for(text)))
        return Level(shown, False, False, detail=text)
    finally:
        store.close()
    return Level(shown, True, writable, latency)


def _named(level: str, text: str) -> str:
    """``text``, naming ``level`` once (store errors usually name it already)."""
    return text if level.split("?")[0] in text else f"{level}: {text}"


# What a run does while a level is unusable: with one level, it runs uncached (check says it in
# these words, replaced for tiers by what the other levels do).
UNCACHED = "compilecache runs uncached meanwhile, never failing the program"
DIRECTORY_MEANWHILE = "runs meanwhile are uncached, never failing the program"


def _fix_for(text: str) -> str:
    if "as a cache directory" in text:
        return (
            "point COMPILECACHE_URL (or --url) at a directory, or at a path where one can be "
            f"made; {DIRECTORY_MEANWHILE}"
        )
    if "install" in text:
        return "install the package named above"
    if any(s in text for s in ("unknown option", "unknown store URL scheme", "malformed")):
        return "correct the URL (COMPILECACHE_URL or --url)"
    return (
        "check that the server or bucket exists and answers from this host (credentials, "
        f"network); {UNCACHED}"
    )


def _warnings(cfg: Config, report: CheckReport, env: Mapping[str, str]) -> None:
    for said in config_mod.describe_unknown(config_mod.unknown_variables(env)):
        report.warnings.append(Problem(said, "correct its name, or unset it"))
    shared = unsigned_warning.shared_unsigned(cfg)
    if shared:
        report.warnings.append(
            Problem(
                unsigned_warning.message(shared),
                "COMPILECACHE_SIGNING_KEY_FILE where the cache is filled, "
                "COMPILECACHE_TRUSTED_KEYS everywhere it is read (`compilecache keygen`)",
            )
        )
    if cfg.max_size < SMALL_BOUND:
        report.warnings.append(
            Problem(
                f"the size bound is {format_size(cfg.max_size)} ({cfg.max_size} bytes): most "
                "compiled programs are larger, and each would be evicted at once",
                "give a unit: COMPILECACHE_MAX_SIZE=20GB (a bare number is bytes)",
            )
        )
    if not cfg.shared_writer:
        report.warnings.append(
            Problem(config_mod.READER_REASON, "expected for a reader of a fleet's cache")
        )
    try:
        from compilecache.frameworks.jax.xla import usable_xla_directory

        directory, why = usable_xla_directory(create=False)  # check makes nothing
        if why:
            report.warnings.append(
                Problem(
                    f"XLA's caches use {directory}: {why}",
                    "set XDG_CACHE_HOME to a writable directory to keep them across restarts",
                )
            )
    except Exception:  # a convenience: never a reason for check to fail
        pass
