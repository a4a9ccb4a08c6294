"""The one place that reads the environment.

Settings are resolved at call time, never at import: explicit arguments win over ``COMPILECACHE_*``
variables, which win over the defaults. Parsing errors raise :class:`ConfigError` with the name of
the offending variable.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from compilecache.errors import ConfigError
from compilecache.signing import Signing, parse_public_list, read_private, require_ed25519
from compilecache.units import DEFAULT_COLD_STREAK as DEFAULT_COLD_STREAK
from compilecache.units import DEFAULT_MAX_SIZE as DEFAULT_MAX_SIZE
from compilecache.units import format_size as format_size
from compilecache.units import parse_count as parse_count
from compilecache.units import parse_duration as parse_duration
from compilecache.units import parse_seconds as parse_seconds
from compilecache.units import parse_size as parse_size
from compilecache.variables import VARIABLES as VARIABLES
from compilecache.variables import describe_unknown as describe_unknown
from compilecache.variables import unknown_variables as unknown_variables

# Single-flight compiles: a compiling process's lease lasts this long unless renewed (it is
# renewed while the compile runs, so this bounds how long a crashed compiler blocks others)...
DEFAULT_LEASE_TTL = 30.0
# ...and the others wait at most this long for its entry before compiling themselves.
DEFAULT_WAIT_TIMEOUT = 1800.0
KNOWN_FRAMEWORKS = ("jax", "torch", "triton")
# The frameworks a stored entry can belong to (``ls``, ``export`` and ``warm`` select by them):
# the integrations', and XLA's autotune results, which the JAX integration keeps.
ENTRY_FRAMEWORKS = (*KNOWN_FRAMEWORKS, "xla")
LOG_LEVELS = ("debug", "info", "warning")


def default_url(env: Mapping[str, str]) -> str:
    """``$XDG_CACHE_HOME/compilecache``, else ``~/.cache/compilecache``."""
    xdg = env.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return str(base / "compilecache")


# Schemes whose URL names a directory on this machine (the registry's local and shared-directory
# backends); their relative paths are made absolute by :func:`absolute_url`.
_DIRECTORY_SCHEMES = ("file", "file+shared")


def absolute_url(url: str, cwd: str | None = None) -> str:
    """``url`` with each relative local directory (``rel/cache``, ``./cache``, ``~/cache``,
    ``file:rel/cache``, ``file://./cache``; alone or as a level of a comma list) made absolute
    against ``cwd`` (default: the current directory), ``?options`` kept.

    Resolved once, when the cache is enabled: a store opened on a relative path would follow
    the program's later ``os.chdir`` and fail (or split) its writes. Remote levels and absolute
    paths are returned as written; a current directory that no longer exists leaves the URL as
    it is (the store then reports what fails).
    """
    try:
        base = cwd if cwd is not None else os.getcwd()
    except OSError:
        return url
    return ",".join(_absolute_level(level, base) for level in url.split(","))


def _absolute_level(level: str, cwd: str) -> str:
    text = level.strip()
    if not text:
        return level
    try:
        parts = urlsplit(text)
    except ValueError:  # not a URL this module can read: the registry reports it
        return level
    scheme = parts.scheme.lower()
    if len(scheme) <= 1:  # a bare path (or a Windows drive letter), as the registry reads it
        path, sep, query = text.partition("?")
        resolved = _absolute_path(path, cwd) if path else path
        return level if resolved == path else resolved + sep + query
    if scheme not in _DIRECTORY_SCHEMES:
        return level
    # The same reading as stores.frame.directory_and_size: ``file://rel/x`` names ``rel/x``.
    path = parts.path if scheme == "file" and not parts.netloc else parts.netloc + parts.path
    resolved = _absolute_path(path, cwd) if path else path
    if resolved == path:
        return level
    query = f"?{parts.query}" if parts.query else ""
    fragment = f"#{parts.fragment}" if parts.fragment else ""
    return f"{parts.scheme}://{resolved}{query}{fragment}"


def _absolute_path(path: str, cwd: str) -> str:
    expanded = os.path.expanduser(path)
    if os.path.isabs(expanded):
        return expanded
    return os.path.normpath(os.path.join(cwd, expanded))


def _flag(env: Mapping[str, str], name: str, default: bool = False) -> bool:
    value = env.get(name, "").strip().lower()
    if not value:
        return default
    if value in ("0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    raise ConfigError(f"{name}: expected 1 or 0, got {value!r}")


@dataclass(frozen=True)
class Config:
    """Resolved settings of one compilecache session."""

    # Local directories in it are absolute (resolved at load, see absolute_url).
    url: str
    max_size: int = DEFAULT_MAX_SIZE
    disabled: bool = False
    read_only: bool = False
    secret: bytes | None = field(default=None, repr=False)
    # Ed25519 (COMPILECACHE_SIGNING_KEY_FILE: the raw private key this process signs with;
    # COMPILECACHE_TRUSTED_KEYS: the raw public keys whose entries it accepts).
    signing_key: bytes | None = field(default=None, repr=False)
    trusted_keys: tuple[bytes, ...] = ()
    min_compile_time: float = 0.0
    frameworks: tuple[str, ...] = KNOWN_FRAMEWORKS
    log_level: str = "warning"
    # With several store levels: write to "all" of them, or only the first ("local").
    tier_writes: Literal["all", "local"] = "all"
    # Set by ``compilecache run`` for its children: where each process leaves its counters.
    run_spool: str | None = None
    # Single-flight compiles (COMPILECACHE_LEASE_TTL, COMPILECACHE_WAIT_TIMEOUT; 0 = no waiting).
    lease_ttl: float = DEFAULT_LEASE_TTL
    wait_timeout: float = DEFAULT_WAIT_TIMEOUT
    # Multi-process jobs (COMPILECACHE_WRITERS): every process writes its own entries ("all"),
    # or only process 0 does ("first", JAX's own rule).
    writers: Literal["all", "first"] = "all"
    # The job's name for its lookup manifest (COMPILECACHE_JOB; default: a fingerprint of the
    # command line and framework versions), and whether it is read at start
    # (COMPILECACHE_PREFETCH, default on): a fresh host prefetches its entries from the remote
    # levels, and JAX's executables are read ahead.
    job: str = ""
    prefetch: bool = True
    # After this many new, quick compiles in a row, lookups stop waiting for the remote levels'
    # "nothing here" (COMPILECACHE_COLD_STREAK; 0: always wait).
    cold_streak: int = DEFAULT_COLD_STREAK
    # torch: serve Dynamo's own output (its transformed bytecode and guards) from the store, so a
    # warm start does not trace the program again (COMPILECACHE_TORCH_PRECOMPILE). None (unset):
    # on for the torch releases it was tested on, quietly off for others; True: asked for (a
    # warning where torch is another release); False: off.
    torch_precompile: bool | None = None
    # JAX: serve a jitted function's stored trace where its guards hold, so a warm start does not
    # trace or lower it again (COMPILECACHE_JAX_PRECOMPILE). None (unset): on for the JAX releases
    # they were tested on, quietly off for others; True: asked for (a warning where JAX is another
    # release); False: off.
    jax_precompile: bool | None = None

    @property
    def signing(self) -> Signing | None:
        """What this process signs with and accepts; ``None`` when nothing is configured."""
        signing = Signing(self.secret, self.signing_key, self.trusted_keys)
        return signing if signing.enabled else None

    @property
    def shared_writer(self) -> bool:
        """Whether this process writes the levels other processes read: not when it trusts
        writers' keys without holding one (:data:`READER_REASON`)."""
        signing = self.signing
        return signing is None or signing.shared_writer


def load(
    env: Mapping[str, str] | None = None,
    *,
    url: str | None = None,
    max_size: int | str | None = None,
    read_only: bool | None = None,
    min_compile_time: float | None = None,
    frameworks: tuple[str, ...] | str | None = None,
) -> Config:
    """Resolve the configuration: explicit arguments > environment > defaults."""
    env = os.environ if env is None else env

    resolved_url = absolute_url(url or env.get("COMPILECACHE_URL", "").strip() or default_url(env))

    # Errors name where the value came from: the argument, else the variable.
    size_source = "max_size" if max_size is not None else "COMPILECACHE_MAX_SIZE"
    size_value: int | str = (
        max_size if max_size is not None else env.get("COMPILECACHE_MAX_SIZE", "")
    )
    if isinstance(size_value, str):
        size = parse_size(size_value, size_source) if size_value else DEFAULT_MAX_SIZE
    else:
        size = size_value
    if size <= 0:
        raise ConfigError(f"{size_source} must be positive, got {size}")

    time_source = "min_compile_time"
    if min_compile_time is None:
        time_source = "COMPILECACHE_MIN_COMPILE_TIME"
        text = env.get(time_source, "").strip()
        if text.startswith("-"):
            raise ConfigError(f"{time_source}: expected seconds (0 or more), got {text}")
        min_compile_time = parse_duration(text, time_source) if text else 0.0
    if not min_compile_time >= 0:  # negative, or NaN
        raise ConfigError(f"{time_source}: expected seconds (0 or more), got {min_compile_time}")

    fw_value = frameworks if frameworks is not None else env.get("COMPILECACHE_FRAMEWORKS", "")
    if isinstance(fw_value, str):
        names = tuple(n.strip().lower() for n in fw_value.split(",") if n.strip())
        fw = names if fw_value.strip() else KNOWN_FRAMEWORKS
    else:
        fw = tuple(fw_value)
    unknown = [n for n in fw if n not in KNOWN_FRAMEWORKS]
    if unknown:
        raise ConfigError(
            f"COMPILECACHE_FRAMEWORKS: unknown {unknown}; choose from {', '.join(KNOWN_FRAMEWORKS)}"
        )

    level = env.get("COMPILECACHE_LOG", "warning").strip().lower() or "warning"
    if level not in LOG_LEVELS:
        raise ConfigError(f"COMPILECACHE_LOG: expected one of {LOG_LEVELS}, got {level!r}")

    writes_text = env.get("COMPILECACHE_TIER_WRITES", "all").strip().lower() or "all"
    if writes_text not in ("all", "local"):
        raise ConfigError(f"COMPILECACHE_TIER_WRITES: expected all or local, got {writes_text!r}")
    tier_writes: Literal["all", "local"] = "local" if writes_text == "local" else "all"

    writers_text = env.get("COMPILECACHE_WRITERS", "all").strip().lower() or "all"
    if writers_text not in ("all", "first"):
        raise ConfigError(f"COMPILECACHE_WRITERS: expected all or first, got {writers_text!r}")
    writers: Literal["all", "first"] = "first" if writers_text == "first" else "all"

    return Config(
        url=resolved_url,
        max_size=size,
        disabled=_flag(env, "COMPILECACHE_DISABLE"),
        read_only=read_only if read_only is not None else _flag(env, "COMPILECACHE_READ_ONLY"),
        secret=_secret(env),
        signing_key=_signing_key(env),
        trusted_keys=_trusted_keys(env),
        min_compile_time=min_compile_time,
        frameworks=fw,
        log_level=level,
        tier_writes=tier_writes,
        run_spool=env.get("COMPILECACHE_RUN_SPOOL") or None,
        lease_ttl=parse_seconds(env, "COMPILECACHE_LEASE_TTL", DEFAULT_LEASE_TTL, positive=True),
        wait_timeout=parse_seconds(env, "COMPILECACHE_WAIT_TIMEOUT", DEFAULT_WAIT_TIMEOUT),
        writers=writers,
        job=env.get("COMPILECACHE_JOB", "").strip(),
        prefetch=_flag(env, "COMPILECACHE_PREFETCH", default=True),
        cold_streak=parse_count(env, "COMPILECACHE_COLD_STREAK", DEFAULT_COLD_STREAK),
        torch_precompile=(
            _flag(env, "COMPILECACHE_TORCH_PRECOMPILE")
            if env.get("COMPILECACHE_TORCH_PRECOMPILE", "").strip()
            else None
        ),
        jax_precompile=(
            _flag(env, "COMPILECACHE_JAX_PRECOMPILE")
            if env.get("COMPILECACHE_JAX_PRECOMPILE", "").strip()
            else None
        ),
    )


def _secret(env: Mapping[str, str]) -> bytes | None:
    """The HMAC key, or ``None`` when neither variable is set. A variable that is set but holds
    nothing (an empty value, an empty file) is an error: an empty key would sign every entry
    with a key anyone can compute, and a writer that meant to sign would silently not."""
    value = env.get("COMPILECACHE_SECRET")
    if value is not None:
        if not value.strip():
            raise ConfigError("COMPILECACHE_SECRET is set but empty; unset it or give a key")
        return value.encode()
    path = env.get("COMPILECACHE_SECRET_FILE")
    if path is not None:
        if not path.strip():
            raise ConfigError("COMPILECACHE_SECRET_FILE is set but empty; unset it or name a file")
        try:
            secret = Path(path).read_bytes().strip()
        except OSError as exc:
            raise ConfigError(f"COMPILECACHE_SECRET_FILE: cannot read {path}: {exc}") from exc
        if not secret:
            raise ConfigError(f"COMPILECACHE_SECRET_FILE: {path} is empty; a key is needed")
        return secret
    return None


def host_key_path(env: Mapping[str, str] | None = None) -> str:
    """Where this host and user keep the key that signs a reader's own local entries:
    ``$XDG_STATE_HOME/compilecache/host-key.pem``, else ``~/.local/state/compilecache/...``."""
    env = os.environ if env is None else env
    base = env.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "compilecache", "host-key.pem")


def _trusted_keys(env: Mapping[str, str]) -> tuple[bytes, ...]:
    keys = parse_public_list(env.get("COMPILECACHE_TRUSTED_KEYS", ""))
    if keys:
        require_ed25519()  # now, at enable: not as an error on every lookup
    return keys


def _signing_key(env: Mapping[str, str]) -> bytes | None:
    path = env.get("COMPILECACHE_SIGNING_KEY_FILE")
    if path is None:
        return None
    if not path.strip():
        raise ConfigError(
            "COMPILECACHE_SIGNING_KEY_FILE is set but empty; unset it or name a key file"
        )
    return read_private(os.path.expanduser(path.strip()))


# Why a process that trusts writers but is none writes nothing shared (stats, explain, doctor).
READER_REASON = (
    "this process trusts only signed entries (COMPILECACHE_TRUSTED_KEYS) and holds no signing "
    "key (COMPILECACHE_SIGNING_KEY_FILE), so it writes nothing to the levels other processes read"
)

READ_ONLY_REASON = "the store is read-only (COMPILECACHE_READ_ONLY)"


@dataclass(frozen=True)
class WritePlan:
    """Who writes what: decided once, from the configuration, and handed to the stores (which
    levels take writes, backfills included) and to the cache (whether it saves, and why not).

    ``levels_read_only``: no level is written. ``shared_read_only``: only this host's own levels
    (a local directory, memory) are. ``reason``: why the cache saves nothing (``""``: it saves).
    ``signing``: what saved entries are signed with and read entries are checked against.
    """

    levels_read_only: bool = False
    shared_read_only: bool = False
    reason: str = ""
    signing: Signing | None = None

    @property
    def saves(self) -> bool:
        return not self.reason

    @classmethod
    def of_session(cls, cfg: Config, has_private_level: bool) -> WritePlan:
        """A program's session: a process that trusts writers' keys without holding one writes
        only its host's own level (``has_private_level``: the URL has one in front of shared
        ones), and with no such level nothing at all."""
        signing = cfg.signing
        if cfg.read_only:
            return cls(True, True, READ_ONLY_REASON, signing)
        if cfg.shared_writer:
            return cls(signing=signing)
        if not has_private_level:
            return cls(True, True, READER_REASON, signing)
        return cls(shared_read_only=True, signing=signing)

    @classmethod
    def of_command(cls, cfg: Config) -> WritePlan:
        """A command the user runs on a store (import, warm, prune): it writes where it is told
        to, unless the store is read-only."""
        return cls(cfg.read_only, cfg.read_only, READ_ONLY_REASON if cfg.read_only else "")
