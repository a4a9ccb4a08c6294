"""JAX's cache key, step by step: each component's hash taken from JAX's own key computation as
it runs (the tap), or computed again from the key's arguments, and the readable values
``explain`` shows beside them. The steps differ between JAX releases (0.4.30 has seven, 0.10
eight): they are chosen from the helpers' signatures and checked against the real key."""

from __future__ import annotations

import hashlib
import inspect
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from compilecache.frameworks.jax import words as jax_words
from compilecache.host import framework_module as _private
from compilecache.patches import Patches

log = logging.getLogger("compilecache")

# The steps of ``cache_key.get``, in order, as JAX releases have had them. The newest first: 0.10
# hashes the backend's platform version as a step of its own; 0.4.30 hashes it only inside
# accelerator_config, when the topology cannot be serialized. Releases between those two were not
# run here: whichever layout reproduces the key is kept.
_STEPS_NEWEST = jax_words.STEPS  # the names explain words (jax_words.JAX)
LAYOUTS: tuple[tuple[str, ...], ...] = (
    _STEPS_NEWEST,
    tuple(step for step in _STEPS_NEWEST if step != "backend version"),  # 0.4.30
)


class Recorder:
    """Stands in for the running sha256 of ``cache_key.get``: keeps what one step feeds it, so
    each step runs once and its bytes can be hashed alone and chained in any layout."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def update(self, data: Any) -> None:
        self.parts.append(bytes(data))

    def data(self) -> bytes:
        return b"".join(self.parts)


class _TappedSha256:
    """The running sha256 of one ``cache_key.get``, which also hashes each step's bytes alone:
    JAX calls ``_log_cache_key_hash`` after every step, and :class:`KeyTap` closes the step
    there. The key is the whole stream's digest, exactly as JAX's own object computes it."""

    def __init__(self) -> None:
        self._whole = hashlib.sha256()
        self._step = hashlib.sha256()
        self.steps: dict[str, str] = {}

    def update(self, data: Any) -> None:
        self._whole.update(data)
        self._step.update(data)

    def digest(self) -> bytes:
        return self._whole.digest()

    def hexdigest(self) -> str:
        return self._whole.hexdigest()

    def close_step(self, name: str) -> None:
        self.steps[name] = self._step.hexdigest()
        self._step = hashlib.sha256()


class KeyTap:
    """Takes each key component's hash from JAX's own key computation, in the same pass.

    ``cache_key.get`` makes one ``hashlib.sha256()``, feeds it each step and calls
    ``_log_cache_key_hash(hash_obj, name, hashfn)`` after each. The tap stands in for the
    module's ``hashlib`` (only its first ``sha256()`` inside :meth:`record`, on this thread, is
    the tapped one) and for ``_log_cache_key_hash`` (which closes a step, then calls JAX's).
    Computing the components again after a miss cost a cold compile 0.6 ms: the module was
    serialised a second time."""

    def __init__(self) -> None:
        self._local = threading.local()

    def sha256(self, *args: Any, **kwargs: Any) -> Any:
        tapped = getattr(self._local, "pending", None)
        if tapped is None or args or kwargs:
            return hashlib.sha256(*args, **kwargs)
        self._local.pending = None  # JAX's debug log makes a second one: a plain one
        return tapped

    def wrap_log(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def log_cache_key_hash(hash_obj: Any, last_serialized: str, hashfn: Any) -> Any:
            if isinstance(hash_obj, _TappedSha256):
                hash_obj.close_step(last_serialized)
            return original(hash_obj, last_serialized, hashfn)

        return log_cache_key_hash

    def record(self, compute: Callable[[], str]) -> tuple[str, dict[str, str] | None]:
        """``compute()`` (which calls ``cache_key.get``) and the step hashes it fed; ``None``
        for them when the key is not the tapped stream's digest (JAX computed it otherwise)."""
        tapped = _TappedSha256()
        self._local.pending = tapped
        try:
            key = compute()
        finally:
            self._local.pending = None
        if not tapped.steps or not key.endswith("-" + tapped.hexdigest()):
            return key, None
        return key, tapped.steps


class _HashlibWithTap:
    """``hashlib`` for ``jax._src.cache_key``, whose ``sha256`` is the tap's."""

    def __init__(self, tap: KeyTap) -> None:
        self.sha256 = tap.sha256

    def __getattr__(self, name: str) -> Any:
        return getattr(hashlib, name)


def positional(function: Any) -> int:
    """How many positional parameters ``function`` takes (-1 when it cannot be read)."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return -1
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(1 for p in parameters if p.kind in kinds)


def _step(helper: Callable[..., object], arg: Any, newer: Any) -> Callable[[Any], object]:
    """``helper(h, arg, newer)`` where the helper takes a third argument (newer JAX), else
    ``helper(h, arg)`` (0.4.30: ``ignore_callbacks`` did not exist, the backend was not hashed
    with the accelerator config)."""
    if positional(helper) >= 3:
        return lambda h: helper(h, arg, newer)
    return lambda h: helper(h, arg)


def key_steps(
    ck: Any,
    module: Any,
    devices: Any,
    compile_options: Any,
    backend: Any,
    ignore_callbacks: Any,
    compression: str,
) -> dict[str, Callable[[Any], object]]:
    """Each step of this JAX's ``cache_key.get``, called as its own ``get`` calls it (the
    helpers' signatures differ between releases: 0.4.30 has no ``ignore_callbacks`` and hashes
    the backend inside ``_hash_accelerator_config``)."""
    return {
        "computation": _step(ck._hash_computation, module, ignore_callbacks),
        "jax_lib version": lambda h: h.update(ck.jaxlib_version_str.encode("utf-8")),
        "backend version": lambda h: ck._hash_platform(h, backend),
        "XLA flags": lambda h: ck._hash_xla_flags(h, ck.get_flag_prefixes()),
        "compile_options": lambda h: ck._hash_serialized_compile_options(
            h, compile_options, strip_device_assignment=(backend.platform == "gpu")
        ),
        "accelerator_config": _step(ck._hash_accelerator_config, devices, backend),
        "compression": lambda h: ck._hash_string(h, compression),
        "custom_hook": lambda h: ck._hash_string(h, ck.custom_hook()),
    }


def _preferred_layout(ck: Any) -> tuple[str, ...]:
    """The layout this JAX's helpers point to: 0.4.30's ``_hash_accelerator_config`` takes the
    backend because its key has no platform step."""
    return LAYOUTS[1] if positional(ck._hash_accelerator_config) >= 3 else LAYOUTS[0]


def key_components(
    key: str,
    module: Any,
    devices: Any,
    compile_options: Any,
    backend: Any,
    ignore_callbacks: Any,
    compression: str,
) -> tuple[dict[str, str], dict[str, str], bool]:
    """Hash each key component separately, as ``cache_key.get`` does in sequence.

    Returns the per-component hashes, readable values for the small components, and whether the
    components, chained, reproduce ``key`` (a self-check that fails loudly if JAX changes). The
    steps are chosen by the helpers' signatures; of the known layouts, the one that reproduces
    the key is kept (else this JAX's preferred one, unverified).
    """
    ck = _private("jax._src.cache_key")
    steps = key_steps(ck, module, devices, compile_options, backend, ignore_callbacks, compression)
    fed: dict[str, bytes] = {}
    for name, step in steps.items():
        recorder = Recorder()
        try:
            step(recorder)
        except Exception as exc:  # a helper this JAX calls differently: that component is unknown
            log.debug("compilecache: key component %s not hashed: %s", name, exc)
            continue
        fed[name] = recorder.data()
    preferred = _preferred_layout(ck)
    layout, verified = preferred, False
    for candidate in (preferred, *(c for c in LAYOUTS if c != preferred)):
        if all(n in fed for n in candidate) and key.endswith(
            "-" + hashlib.sha256(b"".join(fed[n] for n in candidate)).hexdigest()
        ):
            layout, verified = candidate, True
            break
    hashes = {name: hashlib.sha256(fed[name]).hexdigest() for name in layout if name in fed}
    readable = readable_components(devices, compile_options, backend, compression)
    return hashes, readable, verified


def readable_components(
    devices: Any, compile_options: Any, backend: Any, compression: str
) -> dict[str, str]:
    """The readable values of the small key components (what ``explain`` shows beside their
    hashes); a value this JAX cannot say is left out."""
    ck = _private("jax._src.cache_key")
    kinds = [str(d.device_kind) for d in devices.flat]
    said: dict[str, Callable[[], str]] = {
        "jax_lib version": lambda: str(ck.jaxlib_version_str),
        "backend version": lambda: f"{backend.platform} {backend.platform_version}",
        "XLA flags": lambda: " ".join(_xla_flags(ck)),
        # jit(compiler_options=...) land here: the part of compile_options people set.
        "compile_options": lambda: " ".join(
            sorted(f"{k}={v}" for k, v in getattr(compile_options, "env_option_overrides", ()))
        )[:2000],
        # The topology fingerprint covers the client's devices, not only those used here.
        "accelerator_config": lambda: _topology(devices, kinds),
        "compression": lambda: compression,
        "custom_hook": lambda: str(ck.custom_hook())[:500],
    }
    readable: dict[str, str] = {}
    for name, say in said.items():
        try:
            readable[name] = say()
        except Exception as exc:  # one value this JAX cannot say: the others still help
            log.debug("compilecache: readable %s not recorded: %s", name, exc)
    return readable


def _topology(devices: Any, kinds: list[str]) -> str:
    """``4 x cpu`` (``(1 used)`` when the computation uses fewer devices than there are).

    In a multi-process job, prefixed with ``process 1 of 2, local device ids [1]: ``: the
    topology fingerprint follows the process, so each process's keys differ from the others'
    while the device count and kind agree, and only this says what differs.
    """
    try:
        client = devices.flat[0].client
        every = list(client.devices())
    except Exception:  # a backend without the attribute: what the computation uses
        client, every = None, []
    total = len(every) or len(kinds)
    text = f"{total} x {', '.join(sorted(set(kinds)))}"
    text = text if total == len(kinds) else f"{text} ({len(kinds)} used)"
    try:
        processes = len({int(d.process_index) for d in every})
        if client is not None and processes > 1:
            local = _id_ranges(sorted(int(d.id) for d in client.local_devices()))
            where = f"process {client.process_index()} of {processes}"
            text = f"{where}, local device ids [{local}]: {text}"
    except Exception as exc:  # the count and kind are still worth recording
        log.debug("compilecache: no process index for the key components: %s", exc)
    return text


def _id_ranges(ids: list[int]) -> str:
    """``[0, 1, 2, 3, 6]`` -> ``0-3,6``."""
    runs: list[list[int]] = []
    for i in ids:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _xla_flags(ck: Any) -> list[str]:
    """The XLA flags that enter the key, as ``cache_key._hash_xla_flags`` selects them."""
    flags: list[str] = []
    for var in ("XLA_FLAGS", "LIBTPU_INIT_ARGS"):
        flags.extend(os.environ.get(var, "").split())
    prefixes = ck.get_flag_prefixes()
    flags.extend(
        a for a in sys.argv if a.startswith("--xla") or any(a.startswith(p) for p in prefixes)
    )
    # A module constant since 0.4.31; 0.4.30 keeps the list inside _hash_xla_flags.
    excluded = set(getattr(ck, "xla_flags_to_exclude_from_cache_key", ()))
    return [f for f in sorted(flags) if f.split("=")[0] not in excluded]


def tap_key_steps(patches: Patches, tap: KeyTap) -> None:
    """Let ``tap`` see ``cache_key.get``'s steps; where this JAX's module lacks the two names,
    nothing is tapped and the components are computed again after a miss."""
    ck = _private("jax._src.cache_key")
    if getattr(ck, "hashlib", None) is not hashlib or not callable(
        getattr(ck, "_log_cache_key_hash", None)
    ):
        log.debug("compilecache: JAX's key steps not tapped: cache_key has changed")
        return
    patches.wrap(ck, "_log_cache_key_hash", tap.wrap_log)
    patches.replace(ck, "hashlib", _HashlibWithTap(tap), label="jax._src.cache_key.hashlib")


def compression_name(compilation_cache: Any) -> str:
    """The compression JAX's cache names in its key (``cache_key``'s last fixed step)."""
    if getattr(compilation_cache, "zstd", None) is not None:
        return "zstandard"
    return "zstandard" if getattr(compilation_cache, "zstandard", None) is not None else "zlib"
