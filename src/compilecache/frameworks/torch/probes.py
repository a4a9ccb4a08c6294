"""Answers torch.compile recomputes on every start although they cannot have changed: the vector
ISA probes and the C++ compiler identity checks, kept in the store as small ``probe`` entries.

Measured on torch 2.13.0 CPU (2 cores, a warm start of ``bench_torch.py``'s MLP and transformer
block, ``subprocess.Popen`` patched to list every child; about 2.2 s per first step):

- ``cpu_vec_isa.VecISA.check_build``: six ISA probes per process on this x86 machine, each a
  dry-run build (a ``kernel`` entry already skips the compiler) and a fresh
  ``python -c "cdll.LoadLibrary(...)"`` that loads libtorch: 0.27-0.39 s for three of them,
  0.02-0.04 s for the others; about 1.0 s of the 2.2 s.
- ``cpp_builder.cpp_compiler_search`` (``g++ --version``), ``get_compiler_version_info``
  (``g++ -v``) and ``_is_intel_compiler`` (``g++ --version``): 2-6 ms each.
- With Inductor's precompiled headers on (torch's default), the header source is preprocessed
  (``g++ -E``, 0.14-0.20 s) and hashed (``openssl sha512``); that answer is a ``header`` probe
  entry (:mod:`compilecache.frameworks.torch.headers`), checked against the files it read.

Each answer is stored under a key made of everything it depends on, so that a different CPU,
compiler or torch never reuses one (a changed part is a miss, explained by
``explain.record_miss`` naming the part):

- an ISA verdict: the ISA and its compiler flags, the probe source, the CPU (vendor, family,
  model and feature flags: :func:`compilecache.host.native_cpu`), the compiler's identity and its
  ``-v`` text, torch's version and git revision, Python and the C library;
- a compiler check: the command it runs (the compiler name and its arguments), and for each
  compiler involved its identity: the path it resolves to on ``PATH`` (symbolic links followed),
  that file's size, modification time and inode, and for files under 64 KB (wrapper scripts)
  a hash of their contents.

Only a successful ISA probe is stored: a failed one may come from a timeout under load, and it
is probed again next time, as torch does. Each answer is also kept in memory for the process
(torch caches them per process too). They are not compiles: they are read and written with the
session's store and keys (signed, verified like every entry) but counted apart from the
graphs' hits, misses and writes: ``torch.isa_probe_hits`` / ``_misses``,
``torch.compiler_check_hits`` / ``_misses``, ``torch.probe_writes``, ``torch.probe_errors`` and
``torch.probe_time_saved_s``; a store error is also one of the process's ``errors``. A store that is down or corrupt is a miss: torch does the work
itself, exactly as without compilecache.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import platform
import shutil
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from compilecache import entry, host
from compilecache.entry import EntryHeader
from compilecache.errors import ForeignEntry
from compilecache.frameworks.torch import words as torch_words
from compilecache.patches import Patches
from compilecache.runtime.cache import Cache
from compilecache.runtime.keys import chain, text_digest
from compilecache.stores.base import EntryMeta

log = logging.getLogger("compilecache")

FRAMEWORK = torch_words.FRAMEWORK  # importing it registers the vocabulary
LAYER = "probe"
KEY_VERSION = "compilecache-torch-probe-v1"
_SMALL_FILE = 64 * 1024  # wrapper scripts: hash their contents too
CPU_VEC_ISA = "torch._inductor.cpu_vec_isa"
CPP_BUILDER = "torch._inductor.cpp_builder"
# cpp_builder functions whose answer depends only on the compiler named by their arguments.
COMPILER_CHECKS = {
    "cpp_compiler_search": "--version",
    "get_compiler_version_info": "-v",
    "_is_intel_compiler": "--version",
    # `is_apple_clang()`: asked on every platform by some code paths, answered by `--version`.
    "_is_apple_clang": "--version",
    # torch >= 2.15: the compiler-kind checks share one cached `--version` call.
    "_compiler_version_string": "--version",
}


def compiler_identity(compiler: str) -> str:
    """What says which compiler ``compiler`` runs: the file it resolves to on ``PATH`` (links
    followed), its size, modification time and inode; the contents' hash for small files."""
    found = shutil.which(compiler)
    if found is None:
        return f"{compiler}: not found"
    real = os.path.realpath(found)
    try:
        st = os.stat(real)
    except OSError as exc:
        return f"{compiler}: {real}: {exc.strerror}"
    text = f"{compiler}: {real} size={st.st_size} mtime_ns={st.st_mtime_ns} inode={st.st_ino}"
    if st.st_size <= _SMALL_FILE:
        try:
            with open(real, "rb") as f:
                text += f" sha256={hashlib.sha256(f.read()).hexdigest()}"
        except OSError as exc:
            text += f" unreadable={exc.strerror}"
    return text


def torch_identity() -> str:
    versions = host.torch_versions()
    return f"{versions.get('torch', '?')} {versions.get('git', '')}".strip()


@dataclass(frozen=True)
class ProbeKey:
    """A probe answer's store key and the parts it was made of (kept in the entry's header)."""

    kind: str  # "isa" or "compiler"
    name: str  # what is probed: "isa avx512", "compiler g++ -v"
    digest: str
    components: dict[str, str]
    readable: dict[str, str]

    @property
    def store_key(self) -> str:
        return f"{FRAMEWORK}/{LAYER}/{self.kind}/{self.digest}"

    @property
    def prefix(self) -> str:
        return f"{FRAMEWORK}/{LAYER}/{self.kind}/"


def make_key(kind: str, name: str, parts: dict[str, str]) -> ProbeKey:
    """A key over every part (each part hashed on its own, so a miss can name the one that
    changed)."""
    components = {part: text_digest(value) for part, value in parts.items()}
    digest = chain(f"{KEY_VERSION}\n{kind}\n{name}\n", components)
    readable = {part: value[:300] for part, value in parts.items()}
    return ProbeKey(kind, name, digest, components, readable)


def isa_key(
    isa_name: str, arch_flags: str, code: str, compiler: str, compiler_info: str
) -> ProbeKey:
    cpu_digest, cpu_readable = host.native_cpu()
    parts = {
        "isa": f"{isa_name} {arch_flags}".strip(),
        "source": code,
        "cpu": f"{cpu_readable} [{cpu_digest}]",
        "compiler": compiler_identity(compiler),
        "compiler_version": compiler_info,
        "torch": torch_identity(),
        "python": sys.version,
        "libc": " ".join(platform.libc_ver()),
    }
    return make_key("isa", f"isa {isa_name}", parts)


def compiler_check_key(check: str, args: tuple[Any, ...]) -> ProbeKey | None:
    """The key of ``cpp_builder.<check>(*args)``; ``None`` when it cannot be keyed safely (a
    search that may install a compiler, an argument that is not a compiler name)."""
    flag = COMPILER_CHECKS[check]
    if check == "cpp_compiler_search":
        (search,) = args
        if not isinstance(search, tuple):
            return None
        # None in the list means "install g++ with conda", which torch does only on Linux
        # with TORCH_INDUCTOR_INSTALL_GXX set: then this is no probe, leave it to torch.
        if None in search and (sys.platform == "linux" and os.getenv("TORCH_INDUCTOR_INSTALL_GXX")):
            return None
        compilers = [c for c in search if c is not None]
        if not all(isinstance(c, str) for c in compilers):
            return None
    else:
        (compiler,) = args
        if not isinstance(compiler, str):
            return None
        compilers = [compiler]
    parts = {
        "check": f"{check} {' '.join(compilers)} {flag}",
        "compiler": "\n".join(compiler_identity(c) for c in compilers),
    }
    return make_key("compiler", f"compiler {compilers[0] if compilers else '?'} {flag}", parts)


class _Refused(Exception):
    """A stored answer that its ``decode`` refused (it no longer holds on this host)."""


class ProbeCache:
    """Probe answers through a :class:`Cache`: fetch, else run and store."""

    def __init__(self, cache: Cache) -> None:
        self.cache = cache
        self._lock = threading.Lock()
        self._memo: dict[str, Any] = {}
        # Compiler checks answered in this process, by their arguments: torch's own functions
        # are functools.cache'd, and Inductor asks them about 100 times per warm start (the
        # key, a `which` and a `stat` per compiler, cost 0.3 ms each).
        self._checked: dict[tuple[str, tuple[Any, ...]], Any] = {}
        # Why torch's own switches turn the store off now ("" when they do not): set by the
        # torch integration (switches.py); while off, torch's own functions answer.
        self.off: Callable[[], str] = _never

    def lookup(
        self, key: ProbeKey, counter: str, decode: Callable[[Any], Any] | None = None
    ) -> tuple[bool, Any]:
        """(True, the stored answer) or (False, None); ``decode`` turns the stored JSON into
        the answer, and an answer it refuses (raises) is a miss. Nothing is read (or counted)
        while torch's switches turn caching off."""
        if self.off():
            return False, None
        with self._lock:
            if key.store_key in self._memo:
                return True, self._memo[key.store_key]
        cache = self.cache
        start = time.perf_counter()
        try:
            data = cache.read(key.store_key)
            if data is not None:
                found = cache.reader.decode(data, key.store_key)
                if found.header.framework != FRAMEWORK:
                    raise ValueError(f"entry belongs to {found.header.framework!r}")
                value = json.loads(found.payload)["answer"]
                if decode is not None:
                    try:
                        value = decode(value)
                    except Exception as exc:
                        raise _Refused from exc
                with self._lock:
                    self._memo[key.store_key] = value
                saved = found.header.compile_time_s - (time.perf_counter() - start)
                cache.stats.add(f"{FRAMEWORK}.{counter}_hits")
                cache.stats.add(f"{FRAMEWORK}.probe_time_saved_s", max(0.0, saved))
                return True, value
        except ForeignEntry as exc:  # signed with another key: one warning per process, kept
            cache.note_foreign(FRAMEWORK, key.store_key, exc, count_miss=False)
        except _Refused as exc:  # a stored answer that no longer holds here: a miss
            log.debug("compilecache: stored %s not used: %s", key.name, exc.__cause__)
        except Exception as exc:  # never raise into torch: a miss, and torch does the work
            # A store error is one, whatever asked: the headline count says the store failed.
            cache.count_error(FRAMEWORK, exc)
            cache.stats.add(f"{FRAMEWORK}.probe_errors")
            cache.warn_once("torch:probe-get", f"probe answer not read, torch probes: {exc}")
        cache.stats.add(f"{FRAMEWORK}.{counter}_misses")
        return False, None

    def save(self, key: ProbeKey, value: Any, seconds: float, *, explain: bool = True) -> None:
        """Store an answer. Not a compile: it is counted apart from the graphs' hits, misses
        and writes (``torch.probe_writes``), so that those still count compiles. ``explain``:
        record why it was not reused (an answer that only grew, a bundle, was not missed).
        Nothing is kept while torch's switches turn caching off."""
        if self.off():
            return
        with self._lock:
            self._memo[key.store_key] = value
        cache = self.cache
        stored = False
        if cache.writes(key.store_key):
            try:
                header = EntryHeader(
                    framework=FRAMEWORK,
                    key=key.store_key,
                    name=key.name,
                    compile_time_s=seconds,
                    versions=host.torch_versions(),
                    components=key.components,
                    extra={
                        "layer": LAYER,
                        "kind": key.kind,
                        "readable": key.readable,
                        entry.INTERNAL: True,
                    },
                )
                payload = json.dumps({"answer": value}).encode()
                data = entry.encode(header, payload, compress=False, signing=cache.signing)
                cache.store.put(key.store_key, data, EntryMeta(FRAMEWORK, key.name, seconds))
                stored = True
                cache.stats.add(f"{FRAMEWORK}.probe_writes")
            except Exception as exc:
                cache.count_error(FRAMEWORK, exc)
                cache.stats.add(f"{FRAMEWORK}.probe_errors")
                cache.warn_once("torch:probe-put", f"probe answer not stored: {exc}")
        if explain:
            self._explain(key, seconds, stored)

    def _explain(self, key: ProbeKey, seconds: float, stored: bool) -> None:
        """Why this answer was not reused: the nearest stored answer of the same probe and
        the key parts that differ (``cpu``, ``compiler``, ``torch``, ...)."""
        from compilecache.runtime import explain

        explain.record_miss(
            self.cache,
            framework=FRAMEWORK,
            name=key.name,
            key=key.store_key,
            components=key.components,
            readable=key.readable,
            prefix=key.prefix,
            compile_time_s=seconds,
            stored=stored,
            reason="" if stored else self.cache.skip_reason(seconds, key.store_key),
            background=True,
            internal=True,
        )

    def answer(
        self,
        key: ProbeKey,
        counter: str,
        compute: Callable[[], Any],
        *,
        encode: Callable[[Any], Any],
        decode: Callable[[Any], Any],
    ) -> Any:
        """``compute()`` through the store: the stored answer when one decodes, else computed
        (as torch would) and stored. ``encode``/``decode`` turn it into JSON and back; an answer
        that does not decode is a miss."""
        if self.off():
            return compute()
        hit, stored = self.lookup(key, counter)
        if hit:
            try:
                return decode(stored)
            except Exception as exc:
                log.debug("compilecache: stored %s unusable: %s", key.name, exc)
        start = time.perf_counter()
        value = compute()  # may raise: as torch does, nothing stored
        try:
            encoded = encode(value)
        except Exception as exc:
            log.debug("compilecache: %s not stored: %s", key.name, exc)
            return value
        self.save(key, encoded, time.perf_counter() - start)
        return value

    def check_build(self, isa: Any, code: str, original: Callable[[Any, str], bool]) -> bool:
        """``VecISA.check_build`` through the store (only a successful probe is stored)."""
        try:
            cpp_builder = host.framework_module(CPP_BUILDER)
            compiler = str(cpp_builder.get_cpp_compiler())
            info = str(cpp_builder.get_compiler_version_info(compiler))
            key: ProbeKey | None = isa_key(
                str(isa), str(isa.build_arch_flags()), code, compiler, info
            )
        except Exception as exc:  # computing a key must never stop a compile
            log.debug("compilecache: ISA probe not keyed: %s", exc)
            key = None
        if key is None:
            return original(isa, code)
        verdict: bool = self.answer(
            key, "isa_probe", lambda: original(isa, code), encode=_success, decode=_success
        )
        return verdict

    def compiler_check(
        self, check: str, original: Callable[..., Any], args: tuple[Any, ...]
    ) -> Any:
        """``cpp_builder.<check>(*args)`` through the store, once per process and arguments."""
        if self.off():
            return original(*args)
        try:
            return self._checked[(check, args)]
        except (KeyError, TypeError):  # not asked yet, or arguments that do not hash
            pass
        try:
            key = compiler_check_key(check, args)
        except Exception as exc:
            log.debug("compilecache: compiler check not keyed: %s", exc)
            key = None
        if key is None:
            return original(*args)
        # original may raise (no compiler): as torch does, nothing stored.
        value = self.answer(
            key,
            "compiler_check",
            lambda: original(*args),
            encode=_text_or_flag,
            decode=_text_or_flag,
        )
        with self._lock, contextlib.suppress(TypeError):
            self._checked[(check, args)] = value
        return value

    def forget_checks(self, check: str) -> None:
        """``cache_clear()`` of torch's function: ask again (and the store) next time."""
        with self._lock:
            for known in [k for k in self._checked if k[0] == check]:
                del self._checked[known]


def _never() -> str:
    return ""


def _success(verdict: Any) -> bool:
    """Only a successful ISA probe is an answer: a failed one may be a timeout under load."""
    if verdict is not True:
        raise ValueError(f"not a successful probe: {verdict!r}")
    return True


def _text_or_flag(value: Any) -> str | bool:
    """A compiler check answers a string or a flag; anything else is not stored or reused."""
    if not isinstance(value, (str, bool)):
        raise ValueError(f"not a compiler check's answer: {value!r}")
    return value


class ProbeHooks:
    """Installs :class:`ProbeCache` on ``VecISA.check_build`` and the compiler checks, and
    restores torch's functions."""

    def __init__(self, probes: ProbeCache) -> None:
        self.probes = probes
        self.patches = Patches()

    def install_isa(self, module: Any) -> None:
        cls = getattr(module, "VecISA", None)
        original = getattr(cls, "__dict__", {}).get("check_build")
        if cls is None or not callable(original):
            log.debug("compilecache: no VecISA.check_build in this torch; probes left alone")
            return
        probes = self.probes

        @functools.wraps(original)
        def check_build(isa: Any, code: str) -> bool:
            return probes.check_build(isa, code, original)

        self.patches.replace(cls, "check_build", check_build, label="probes.check_build")

    def install_compiler(self, module: Any) -> None:
        probes = self.probes
        for check in COMPILER_CHECKS:
            original = getattr(module, check, None)
            if not callable(original):
                log.debug("compilecache: no cpp_builder.%s in this torch; left alone", check)
                continue

            def compiler_check(*args: Any, _check: str = check, _original: Any = original) -> Any:
                return probes.compiler_check(_check, _original, args)

            def cache_clear(_check: str = check, _original: Any = original) -> None:
                probes.forget_checks(_check)
                getattr(_original, "cache_clear", lambda: None)()

            compiler_check.__wrapped__ = original  # type: ignore[attr-defined]
            compiler_check.cache_clear = cache_clear  # type: ignore[attr-defined]
            self.patches.replace(module, check, compiler_check, label=f"probes.{check}")

    def uninstall(self) -> None:
        self.patches.undo()

    def live(self) -> dict[str, bool]:
        return self.patches.live()
