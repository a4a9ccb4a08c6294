"""Source hashes torch recomputes on every start although they cannot have changed, answered from
the store like the probes of :mod:`compilecache.frameworks.torch.probes`:

- ``codecache.torch_key()``: a SHA-256 over the source of every torch module (2,300 files read on
  every start: about 0.12 s here);
- ``codecache.triton_key()``: Triton's own key, over its compiler, backend and language sources
  and its 500 MB ``libtriton.so`` (about 0.34 s here). torch asks for it on CPU too (it is part
  of every FX graph's key) whenever Triton is installed, as it is beside torch on Linux.

Reading those files is the work to skip, so the key cannot hash them. It holds the package's
installed file list with each file's content hash (the wheel's ``RECORD``: the same on every
machine that installed the same wheel), the package's name and version, torch's version (the
hashing code is torch's) and Python's. That list is trusted only while the files on disk are the
ones it describes: every module file of the package is listed with its recorded size, and
neither the file nor its directory changed after ``RECORD`` was written (their ``ctime``, which
no tool can set back; an added, removed or edited file changes it). A package without a
``RECORD`` (a source checkout, an egg), or one changed after it was installed, gets no key, and
torch computes the hash itself, exactly as without compilecache. The check costs about 30 ms for
torch and 2 ms for Triton.

A hit sets the answer into torch's own cache (``prefetchable_cache.set``) as well, so callers
that hold torch's function see it too. Hits and misses are counted as
``torch.source_key_hits`` / ``torch.source_key_misses``.
"""

from __future__ import annotations

import base64
import csv
import functools
import hashlib
import importlib.util
import io
import logging
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from compilecache.frameworks.torch.probes import ProbeCache, ProbeKey, make_key, torch_identity
from compilecache.patches import Patches

log = logging.getLogger("compilecache")

COUNTER = "source_key"
# The files a source hash can read: Python modules, extension modules, and torch's two extra
# files (``codegen/aoti_runtime/interface.cpp``, ``script.ld``).
_MODULE_SUFFIXES = (".py", ".so", ".pyd", ".cpp", ".ld")


@dataclass(frozen=True)
class Installed:
    """A package as its wheel installed it: ``RECORD``'s hash, and the distribution's name."""

    record_sha256: str
    distribution: str


def installed(package_dir: str) -> Installed | None:
    """The installed state of the package at ``package_dir``, or ``None`` when it cannot be
    vouched for (no single ``RECORD`` beside it, or a file changed since it was written)."""
    parent, name = os.path.split(os.path.abspath(package_dir))
    try:
        candidates = [
            d
            for d in os.listdir(parent)
            if d.endswith(".dist-info") and d.lower().startswith(name.lower() + "-")
        ]
    except OSError:
        return None
    if len(candidates) != 1:  # none, or stale ones beside the live one: cannot tell which
        return None
    record = os.path.join(parent, candidates[0], "RECORD")
    try:
        with open(record, "rb") as f:
            raw = f.read()
        written = os.stat(record).st_ctime_ns
        if not _as_installed(parent, name, raw.decode("utf-8"), written):
            return None
    except (OSError, ValueError):
        return None
    distribution = candidates[0].removesuffix(".dist-info")
    return Installed(hashlib.sha256(raw).hexdigest(), distribution)


def _as_installed(parent: str, name: str, record: str, written: int) -> bool:
    """Whether every module file of package ``name`` listed in ``record`` has its recorded size
    and, like its directory, was not changed after ``written`` (``RECORD``'s ctime)."""
    directories: set[str] = set()
    listed = 0
    for row in csv.reader(io.StringIO(record)):
        if (
            len(row) < 3
            or not row[0].startswith(name + "/")
            or not row[0].endswith(_MODULE_SUFFIXES)
        ):
            continue
        path = os.path.join(parent, row[0])
        st = os.stat(path)
        if not row[2] or st.st_size != int(row[2]) or st.st_ctime_ns > written:
            return False
        directories.add(os.path.dirname(path))
        listed += 1
    if not listed:
        return False
    return all(os.stat(d).st_ctime_ns <= written for d in directories)


def source_key(function: str, package: str) -> ProbeKey | None:
    """The store key of ``codecache.<function>()``, which hashes package ``package``'s sources;
    ``None`` when the package is missing or not as installed."""
    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if len(locations) != 1:
        return None
    found = installed(locations[0])
    if found is None:
        return None
    parts = {
        "function": f"torch._inductor.codecache.{function}",
        "package": found.distribution,
        "record": found.record_sha256,
        "torch": torch_identity(),
        "python": sys.version,
    }
    return make_key("source", f"source {function}", parts)


@dataclass(frozen=True)
class _Answer:
    package: str
    encode: Callable[[Any], Any]
    decode: Callable[[Any], Any]


def _bytes_out(value: Any) -> Any:
    return base64.b64encode(value).decode("ascii")


def _bytes_in(value: Any) -> bytes:
    decoded = base64.b64decode(str(value).encode("ascii"), validate=True)
    if len(decoded) != hashlib.sha256().digest_size:
        raise ValueError("not a SHA-256 digest")
    return decoded


def _text_in(value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ValueError("not a string")
    return value


ANSWERS = {
    "torch_key": _Answer("torch", _bytes_out, _bytes_in),
    "triton_key": _Answer("triton", lambda v: v, _text_in),
}


class SourceKeyHooks:
    """Puts :data:`ANSWERS` of ``torch._inductor.codecache`` through the store, and restores
    torch's functions."""

    def __init__(self, probes: ProbeCache) -> None:
        self.probes = probes
        self.patches = Patches()
        self._lock = threading.Lock()
        self._known: dict[str, Any] = {}  # answers of this process, by function

    def install(self, module: Any) -> None:
        for name, how in ANSWERS.items():
            original = getattr(module, name, None)
            if not callable(original):
                log.debug("compilecache: no codecache.%s in this torch; left alone", name)
                continue
            self.patches.replace(
                module, name, self._wrap(name, how, original), label=f"sources.{name}"
            )

    def _wrap(self, name: str, how: _Answer, original: Any) -> Callable[[], Any]:
        key_of = functools.cache(lambda: _safe_key(name, how.package))

        def answer() -> Any:
            if self.probes.off():  # torch's switches turn caching off: torch answers
                return original()
            with self._lock:
                if name in self._known:
                    return self._known[name]
            key = key_of()
            if key is None:
                value = original()
            else:
                value = self.probes.answer(
                    key, COUNTER, original, encode=how.encode, decode=how.decode
                )
                _set_into(original, value)
            with self._lock:
                self._known[name] = value
            return value

        def set_value(value: Any) -> None:
            # torch hands its compile workers the parent's answer this way.
            with self._lock:
                self._known[name] = value
            original.set(value)

        def clear() -> None:
            # torch forgets its answer (a fresh cache): forget ours too, or it would outlive it.
            with self._lock:
                self._known.pop(name, None)
            getattr(original, "clear", lambda: None)()

        answer.__wrapped__ = original  # type: ignore[attr-defined]
        answer.set = set_value  # type: ignore[attr-defined]
        answer.clear = clear  # type: ignore[attr-defined]
        answer.prefetch = getattr(original, "prefetch", lambda: None)  # type: ignore[attr-defined]
        return answer

    def uninstall(self) -> None:
        self.patches.undo()

    def live(self) -> dict[str, bool]:
        return self.patches.live()


def _safe_key(function: str, package: str) -> ProbeKey | None:
    try:
        return source_key(function, package)
    except Exception as exc:  # computing a key must never stop a compile
        log.debug("compilecache: %s not keyed: %s", function, exc)
        return None


def _set_into(original: Any, value: Any) -> None:
    """Give torch's own cache the answer (it refuses a second value: then it has one)."""
    setter = getattr(original, "set", None)
    if setter is None:
        return
    try:
        setter(value)
    except Exception as exc:
        log.debug("compilecache: torch's cache kept its own answer: %s", exc)
