"""The warning for a shared store that nothing signs: any of its writers can run code here.

Compiled entries are executables (XLA programs, torch's pickled graphs, kernels' ``.so`` files),
so whoever can write a shared level (Redis, an object store, a shared mount) can place code that
every reader runs. ``doctor`` reports it every time; ``compilecache run`` says it once per store
and host (a marker under the state directory), so that it informs without nagging.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping

from compilecache import config as config_mod
from compilecache.config import Config
from compilecache.errors import CompileCacheError
from compilecache.redaction import redact
from compilecache.stores import registry


def shared_unsigned(cfg: Config) -> list[str]:
    """The shared levels of ``cfg``'s store when nothing is signed or checked (else none)."""
    if cfg.disabled or cfg.signing is not None:
        return []
    return registry.shared_levels(cfg.url)


def message(levels: list[str]) -> str:
    """The warning, in plain words, with how to set up trusted writers."""
    names = ", ".join(redact(level) for level in levels)
    return (
        f"{names} {'is' if len(levels) == 1 else 'are'} shared and entries are not signed: "
        "any host, job or user that can write to that store can run code in this process "
        "(cache entries are compiled programs). To trust only your writers: run "
        "`compilecache keygen --out writer.pem` once, give the job that fills the cache "
        "COMPILECACHE_SIGNING_KEY_FILE=writer.pem, and every other process "
        "COMPILECACHE_TRUSTED_KEYS=<the public key it printed> (the README, "
        'section "Stores"; `compilecache check` shows this process\'s signing role).'
    )


def marker_path(url: str, env: Mapping[str, str] | None = None) -> str:
    """The file that records that this host was told about the shared level ``url``."""
    digest = hashlib.sha256(url.encode()).hexdigest()[:20]
    return os.path.join(os.path.dirname(config_mod.host_key_path(env)), f"unsigned-{digest}")


def _answers(level: str) -> bool:
    """Whether the shared level ``level`` opens and answers a lookup (one round trip; done only
    when the warning is about to be given: a store that does not open gets no warning about its
    signatures)."""
    try:
        # The bare backend (no guard: its failure is not this run's outage to warn about); a
        # shared directory not made yet is made, as the run would.
        store = registry.open_url(level)
        try:
            store.stat("compilecache/check")
        finally:
            store.close()
    except Exception:
        return False
    return True


def first_run_warning(env: Mapping[str, str]) -> str | None:
    """The warning for ``compilecache run``, the first time this host runs on a shared store
    that nothing signs; ``None`` otherwise (signing configured, no shared level, told before,
    or a configuration the run's own processes will report)."""
    try:
        cfg = config_mod.load(env)
        levels = shared_unsigned(cfg)
    except (CompileCacheError, ValueError):
        return None
    if not levels:
        return None
    # Once per host and shared store: whatever levels of this host's own stand in front of it
    # (and whatever else the URL holds), each shared level is said once.
    untold = [level for level in levels if not os.path.exists(marker_path(level, env))]
    if not untold:
        return None
    if not all(_answers(level) for level in untold):
        return None  # a store that does not open is reported by the run's processes instead
    told = []
    for level in untold:
        marker = marker_path(level, env)
        try:
            os.makedirs(os.path.dirname(marker), mode=0o700, exist_ok=True)
            with open(marker, "x"):
                pass
        except FileExistsError:
            continue  # another run said it meanwhile
        except OSError:
            pass  # no state directory: say it every time rather than never
        told.append(level)
    if not told:
        return None
    return message(told)
