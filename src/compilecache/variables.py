"""The one table of ``COMPILECACHE_*`` variables, and what is said of any other.

``config.load`` reads these names and no others; ``check`` shows them (secrets said to be set,
never shown) and, with ``compilecache run``, reports any other ``COMPILECACHE_*`` variable with
the nearest known name: a typo would otherwise be silently ignored.

Ground layer, importing nothing (``compilecache run`` reads it before every command).
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: importing typing costs compilecache run ~10 ms
if TYPE_CHECKING:
    from collections.abc import Mapping

# Every COMPILECACHE_* variable, in the order people read them: (the Config field it sets, the
# variable, its kind). "setting": shown by ``check`` with its value; "secret": said to be set,
# never shown; "internal": set by ``compilecache run`` for its processes. ``load`` reads these
# names and no others; ``check`` and ``run`` report any other COMPILECACHE_* variable.
VARIABLES: tuple[tuple[str, str, str], ...] = (
    ("url", "COMPILECACHE_URL", "setting"),
    ("max_size", "COMPILECACHE_MAX_SIZE", "setting"),
    ("disabled", "COMPILECACHE_DISABLE", "setting"),
    ("read_only", "COMPILECACHE_READ_ONLY", "setting"),
    ("min_compile_time", "COMPILECACHE_MIN_COMPILE_TIME", "setting"),
    ("frameworks", "COMPILECACHE_FRAMEWORKS", "setting"),
    ("log_level", "COMPILECACHE_LOG", "setting"),
    ("tier_writes", "COMPILECACHE_TIER_WRITES", "setting"),
    ("writers", "COMPILECACHE_WRITERS", "setting"),
    ("lease_ttl", "COMPILECACHE_LEASE_TTL", "setting"),
    ("wait_timeout", "COMPILECACHE_WAIT_TIMEOUT", "setting"),
    ("job", "COMPILECACHE_JOB", "setting"),
    ("prefetch", "COMPILECACHE_PREFETCH", "setting"),
    ("torch_precompile", "COMPILECACHE_TORCH_PRECOMPILE", "setting"),
    ("jax_precompile", "COMPILECACHE_JAX_PRECOMPILE", "setting"),
    ("cold_streak", "COMPILECACHE_COLD_STREAK", "setting"),
    ("secret", "COMPILECACHE_SECRET", "secret"),
    ("secret_file", "COMPILECACHE_SECRET_FILE", "secret"),
    ("signing_key_file", "COMPILECACHE_SIGNING_KEY_FILE", "secret"),
    ("trusted_keys", "COMPILECACHE_TRUSTED_KEYS", "secret"),
    ("run_spool", "COMPILECACHE_RUN_SPOOL", "internal"),
    ("bootstrap_path", "COMPILECACHE_BOOTSTRAP_PATH", "internal"),
)
KNOWN_VARIABLES = frozenset(variable for _, variable, _ in VARIABLES)
_PREFIX = "COMPILECACHE_"


def unknown_variables(env: Mapping[str, str]) -> list[tuple[str, str | None]]:
    """The ``COMPILECACHE_*`` variables of ``env`` that compilecache does not read (a typo is
    silently ignored otherwise), each with the nearest known name, if one is near."""
    unknown = sorted(n for n in env if n.startswith(_PREFIX) and n not in KNOWN_VARIABLES)
    if not unknown:
        return []
    import difflib  # only when a variable is unknown

    # Compared without the common prefix, which would make every name look near.
    suffixes = {name.removeprefix(_PREFIX): name for name in KNOWN_VARIABLES}
    found: list[tuple[str, str | None]] = []
    for name in unknown:
        near = difflib.get_close_matches(name.removeprefix(_PREFIX), suffixes, n=1, cutoff=0.6)
        found.append((name, suffixes[near[0]] if near else None))
    return found


def describe_unknown(found: list[tuple[str, str | None]]) -> list[str]:
    """One sentence per unknown variable (see :func:`unknown_variables`)."""
    return [
        f"{name} is not a compilecache variable and is ignored"
        + (f" (did you mean {near}?)" if near else "")
        for name, near in found
    ]
