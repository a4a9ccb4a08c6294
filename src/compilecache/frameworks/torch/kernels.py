"""C++ kernel binaries for torch.compile on CPU: the ``kernel`` layer of the torch integration.

Inductor's FX graph entries hold the C++ *source* of their CPU kernels. On a machine whose
``TORCHINDUCTOR_CACHE_DIR`` is empty, loading such an entry runs the C++ compiler again for every
kernel, plus one dry-run build per candidate vector ISA (the ``VecISA`` probes): on a small MLP
that is most of a cold compile (a remote FX hit alone saves almost nothing on a CPU). So the
binaries travel too, as separate entries.

The hook is :meth:`torch._inductor.cpp_builder.CppBuilder.build`, the one method every
``CppCodeCache`` compile and every ISA probe goes through, called only when the target file is
missing. Wrapped, it first asks the store for the target's bytes and writes them into place
atomically (a hit: no compiler runs); on a miss it builds as before, then stores the result.

Never a wrong hit: the key is a SHA-256 over everything that decides the bytes gcc produces:

- the full command line, with only the inductor cache directories replaced by placeholders (those
  differ per process but name files whose *contents* are hashed separately);
- the contents of every input file on that command line (sources, objects, headers);
- the compiler's identity (``<cxx> -v``: version, target, configure flags; the same string
  Inductor uses for its precompiled-header key);
- the CPU target: with ``-march=native`` (Inductor's default) the vendor, family, model and
  feature flags of this CPU, since ``native`` means something else on another CPU generation;
  with a pinned ``TORCHINDUCTOR_CPP_MARCH`` only the machine architecture;
- torch's version and git revision (its headers), the Python version (``Python.h``), the C
  library, and torch's ``cache_key_tag``.

Inductor's precompiled headers (``.gch``) travel the same way, as ``pch`` entries; the header's
preprocessing is handed to :mod:`compilecache.frameworks.torch.headers`, which also builds an
answered header's ``.gch`` before the first kernel that needs the compiler (``before_compile``).
fbcode remote builds are left alone.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import platform
import shlex
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from compilecache.entry import INTERNAL, EntryHeader
from compilecache.frameworks.torch import words as torch_words
from compilecache.host import framework_module as _private
from compilecache.host import native_cpu, torch_versions
from compilecache.patches import Patches
from compilecache.runtime.cache import Cache
from compilecache.runtime.dircache import write_file
from compilecache.runtime.keys import chain, inputs_digest, text_digest

log = logging.getLogger("compilecache")

FRAMEWORK = torch_words.FRAMEWORK  # importing it registers the vocabulary
LAYER = "kernel"
PCH_LAYER = "pch"
PCH_SUFFIX = ".gch"
KEY_VERSION = "compilecache-torch-kernel-v1"
_CACHE_DIR_MARK = "<inductor-cache>"
_DEFAULT_DIR_MARK = "<inductor-default-cache>"
TAG_ATTRIBUTE = "_compilecache_tag"
# Why torch's switches turned caching off in the thread that made a builder ("" when on).
OFF_ATTRIBUTE = "_compilecache_off"


def current_tag() -> str:
    """torch's ``cache_key_tag`` as this thread sees it."""
    torch = _private("torch")
    return str(getattr(torch.compiler.config, "cache_key_tag", ""))


def store_key(digest: str, layer: str = LAYER) -> str:
    return f"torch/{layer}/{digest}"


# What -march=native resolves from on this CPU (host.native_cpu), kept here per process so that a
# test can stand in for another CPU.
_cpu_cached: tuple[str, str] | None = None


def cpu_identity() -> tuple[str, str]:
    """(digest, readable) of this CPU for ``-march=native`` kernels."""
    global _cpu_cached
    if _cpu_cached is None:
        _cpu_cached = native_cpu()
    return _cpu_cached


def file_digest(path: str, new: Callable[[], Any] = hashlib.sha256) -> str:
    """A hash of the file's contents (``new()``: a hashlib- or xxhash-style hasher)."""
    h = new()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return str(h.hexdigest())


def normalize_command(command: str, dirs: Iterable[tuple[str, str]]) -> str:
    """``command`` with each (directory, placeholder) replaced, longest directory first."""
    for directory, mark in sorted(dirs, key=lambda d: -len(d[0])):
        if directory:
            command = command.replace(directory.rstrip("/") + "/", mark + "/")
    return command


def command_words(command: str) -> list[str]:
    """A compiler command line split as a shell would (on whitespace if it does not parse)."""
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()


def input_files(command: str, target: str) -> list[str]:
    """The existing files named on ``command`` (sources, objects, ``-include`` headers)."""
    tokens = command_words(command)
    found: list[str] = []
    for token in tokens[1:]:
        if token == target or token.startswith("-"):
            continue
        if os.path.isfile(token) and token not in found:
            found.append(token)
    return found


@dataclass(frozen=True)
class KernelKey:
    """A kernel's store key and the parts it was made from (kept in the entry's header)."""

    digest: str
    components: dict[str, str]
    readable: dict[str, str]
    layer: str = LAYER

    @property
    def store_key(self) -> str:
        return store_key(self.digest, self.layer)


def kernel_key(
    command: str,
    target: str,
    *,
    compiler_info: str,
    cache_dirs: Iterable[tuple[str, str]],
    torch_version: str,
    tag: str = "",
) -> KernelKey:
    """The key of the binary that ``command`` builds into ``target``."""
    normalized = normalize_command(command, cache_dirs)
    inputs = input_files(command, target)
    sources = inputs_digest(inputs, lambda p: normalize_command(p, cache_dirs), file_digest)
    native = "native" in normalized  # -march=native / -mcpu=native
    if native:
        cpu_digest, cpu_readable = cpu_identity()
    else:
        cpu_digest, cpu_readable = text_digest(f"machine={platform.machine()}"), platform.machine()
    libc = " ".join(platform.libc_ver())
    components = {
        "command": text_digest(normalized),
        "inputs": sources,
        "compiler": text_digest(compiler_info),
        "cpu": cpu_digest,
        "torch": text_digest(torch_version),
        "python": text_digest(sys.version),
        "libc": text_digest(libc),
        "tag": text_digest(tag),
    }
    readable = {
        "command": normalized[:4000],
        "compiler": compiler_info.split("_")[-1][:300] if compiler_info else "",
        "cpu": cpu_readable if native else f"{cpu_readable} (no -march=native)",
        "torch": torch_version,
        "python": sys.version.split()[0],
        "libc": libc,
        "tag": tag,
        "inputs": " ".join(os.path.basename(p) for p in inputs),
    }
    return KernelKey(chain(KEY_VERSION, components), components, readable, layer_of(target))


def write_into_place(path: str, data: bytes) -> None:
    """Publish ``data`` at ``path`` atomically, executable (a kernel's ``.so``)."""
    write_file(path, data, 0o755)


class SharedTimer:
    """Wall time of overlapping jobs, shared fairly: while n builds run at once, each is charged
    1/n of the elapsed time. Inductor compiles kernels on a thread pool, and summing their
    durations would claim more compile time than the wall clock saw."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._charged: dict[int, float] = {}
        self._last = 0.0
        self._next = 0

    def _advance(self, now: float) -> None:
        if self._charged:
            share = (now - self._last) / len(self._charged)
            for token in self._charged:
                self._charged[token] += share
        self._last = now

    def start(self) -> int:
        with self._lock:
            self._advance(time.perf_counter())
            self._next += 1
            self._charged[self._next] = 0.0
            return self._next

    def stop(self, token: int) -> float:
        with self._lock:
            self._advance(time.perf_counter())
            return self._charged.pop(token, 0.0)


class KernelCache:
    """Fetches and stores the binaries of ``CppBuilder.build`` through a :class:`Cache`."""

    def __init__(self, cache: Cache, on_built: Callable[[float], None] | None = None) -> None:
        self.cache = cache
        self.on_built = on_built
        self.timer = SharedTimer()
        # Set by the torch integration (headers.py): a header's preprocessing build, and
        # what must be ready before the compiler runs for a command line.
        self.preprocess: Callable[[Any, Callable[[Any], None]], None] | None = None
        self.before_compile: Callable[[str], None] | None = None
        # Why torch's own switches turn the store off now ("" when they do not): set by the
        # torch integration (switches.py). A builder carries the answer of the thread that
        # made it (see BuildHook), since torch's configuration values are per thread.
        self.off: Callable[[], str] = lambda: ""
        # Store keys this process fetched or stored: built_before need not ask the store about
        # them (a round trip each on a remote store, which the exit waited for).
        self.in_store: set[str] = set()

    def off_for(self, builder: Any) -> str:
        off = getattr(builder, OFF_ATTRIBUTE, None)
        return off if isinstance(off, str) else self.off()

    def _context(self, builder: Any = None) -> tuple[str, list[tuple[str, str]], str]:
        torch = _private("torch")
        codecache = _private("torch._inductor.codecache")
        runtime_cache = _private("torch._inductor.runtime.cache_dir_utils")
        dirs = [(str(runtime_cache.cache_dir()), _CACHE_DIR_MARK)]
        default_dir = getattr(runtime_cache, "default_cache_dir", None)
        if default_dir is not None:
            dirs.append((str(default_dir()), _DEFAULT_DIR_MARK))
        header_dir = getattr(codecache, "_HEADER_DIR", None)
        if isinstance(header_dir, str):
            dirs.append((os.path.dirname(header_dir), _DEFAULT_DIR_MARK))
        git = getattr(getattr(torch, "version", None), "git_version", "")
        # The tag of the thread that created the builder: builds run on Inductor's thread pool,
        # and torch's config values are per thread (see BuildHook).
        tag = getattr(builder, TAG_ATTRIBUTE, None)
        if tag is None:
            tag = current_tag()
        return f"{torch.__version__} {git}", dirs, str(tag)

    def key_for(self, builder: Any) -> tuple[KernelKey, str]:
        cpp_builder = _private("torch._inductor.cpp_builder")
        target = str(builder.get_target_file_path())
        command = str(builder.get_command_line())
        compiler = str(getattr(builder, "_compiler", "") or cpp_builder.get_cpp_compiler())
        compiler_info = str(cpp_builder.get_compiler_version_info(compiler))
        torch_version, dirs, tag = self._context(builder)
        key = kernel_key(
            command,
            target,
            compiler_info=compiler_info,
            cache_dirs=dirs,
            torch_version=torch_version,
            tag=tag,
        )
        return key, target

    def build(self, builder: Any, original: Callable[[Any], None]) -> None:
        """``CppBuilder.build`` through the store: fetch, else build and store. While torch's
        switches turn caching off, torch builds and nothing is fetched or stored."""
        if self.off_for(builder):
            original(builder)
            return
        if self.preprocess is not None and getattr(builder, "_preprocessing", False):
            self.preprocess(builder, original)
            return
        try:
            handled = _cacheable(builder)
            key, target = self.key_for(builder) if handled else (None, "")
        except Exception as exc:  # computing a key must never stop a compile
            self.cache.warn_once("torch:kernel-key", f"kernel key failed, not cached: {exc}")
            key, target = None, ""
        if key is not None and self._fetch(key, target):
            self.in_store.add(key.store_key)
            return
        if self.before_compile is not None and not getattr(builder, "_precompiling", False):
            try:
                self.before_compile(str(builder.get_command_line()))
            except Exception as exc:  # an optimisation only: the kernel compiles without it
                log.debug("compilecache: precompiled header not prepared: %s", exc)
        token = self.timer.start()
        try:
            original(builder)
        finally:
            elapsed = self.timer.stop(token)
        if self.on_built is not None:
            self.on_built(elapsed)
        if key is not None:
            # Read, encoded and written on the background thread (never dropped, see
            # Cache.save_later): the compile goes on. A precompiled header is 156 MB, whose
            # compression alone held up a cold compile 0.35 s.
            self.cache.save_later(
                key.store_key, functools.partial(self._save, key, target, elapsed), awaited=True
            )
            self.in_store.add(key.store_key)

    def built_before(self, builders: list[Any]) -> None:
        """Store the binaries of ``builders`` that torch found already built in its own
        directory (it builds nothing then) and the store lacks: their build time is unknown,
        so they save nothing when counted, but a new machine loads them. Never raises."""
        for builder in builders:
            try:
                if self.off_for(builder) or not _cacheable(builder):
                    continue
                if not os.path.exists(str(builder.get_target_file_path())):
                    continue
                key, target = self.key_for(builder)
                if key.store_key in self.in_store:
                    continue  # fetched or stored by this process: nothing to ask the store
                if (
                    self.cache.writes(key.store_key)
                    and self.cache.store.stat(key.store_key) is None
                ):
                    self._save(key, target, 0.0)
                self.in_store.add(key.store_key)
            except Exception as exc:
                log.debug("compilecache: torch's own kernel binary not stored: %s", exc)

    def _fetch(self, key: KernelKey, target: str) -> bool:
        try:
            found = self.cache.load(FRAMEWORK, key.store_key)
            if found is None:
                self.cache.stats.add(f"{FRAMEWORK}.{key.layer}.misses")
                return False
            write_into_place(target, found.payload)
        except Exception as exc:
            self.cache.warn_once("torch:kernel-get", f"kernel fetch failed, compiling: {exc}")
            return False
        self.cache.stats.add(f"{FRAMEWORK}.{key.layer}.hits")
        log.debug("compilecache: kernel %s from %s", os.path.basename(target), key.store_key)
        return True

    def _save(self, key: KernelKey, target: str, elapsed: float) -> None:
        try:
            with open(target, "rb") as f:
                payload = f.read()
            header = EntryHeader(
                framework=FRAMEWORK,
                key=key.store_key,
                name=os.path.basename(target),
                compile_time_s=elapsed,
                versions=torch_versions(),
                components=key.components,
                extra={"layer": key.layer, "readable": key.readable, INTERNAL: True},
            )
            self.cache.save(header, payload)
        except Exception as exc:
            self.cache.warn_once("torch:kernel-put", f"kernel not stored: {exc}")


def layer_of(target: str) -> str:
    """``pch`` for a precompiled header, ``kernel`` for everything else built."""
    return PCH_LAYER if target.endswith(PCH_SUFFIX) else LAYER


def _cacheable(builder: Any) -> bool:
    """Shared libraries, objects and precompiled headers built locally; not preprocessing or
    remote builds."""
    if any(getattr(builder, name, False) for name in ("_preprocessing", "_use_relative_path")):
        return False
    target = str(builder.get_target_file_path())
    if getattr(builder, "_precompiling", False):
        return target.endswith(PCH_SUFFIX)
    return target.endswith((".so", ".o", ".dylib", ".pyd", ".dll"))


_REQUIRED = ("build", "get_command_line", "get_target_file_path")


def hook_available() -> tuple[bool, str]:
    """Whether this torch has what the kernel hook needs; the reason when it does not."""
    try:
        cpp_builder = _private("torch._inductor.cpp_builder")
        runtime_cache = _private("torch._inductor.runtime.cache_dir_utils")
    except ImportError as exc:
        return False, f"cannot import torch._inductor.cpp_builder: {exc}"
    builder_cls = getattr(cpp_builder, "CppBuilder", None)
    missing = [f"CppBuilder.{n}" for n in _REQUIRED if not hasattr(builder_cls, n)]
    missing += [
        n for n in ("get_compiler_version_info", "get_cpp_compiler") if not hasattr(cpp_builder, n)
    ]
    if not hasattr(runtime_cache, "cache_dir"):
        missing.append("cache_dir_utils.cache_dir")
    if missing:
        return False, f"this torch lacks {', '.join(missing)}"
    return True, ""


class BuildHook:
    """Installs :class:`KernelCache` as ``CppBuilder.build`` and restores the original."""

    def __init__(self, kernels: KernelCache) -> None:
        self.kernels = kernels
        self.patches = Patches()

    def install(self) -> bool:
        ok, reason = hook_available()
        if not ok:
            self.kernels.cache.warn_once(
                "torch:kernel-hook", f"C++ kernels will not be cached ({reason})"
            )
            return False
        builder_cls = _private("torch._inductor.cpp_builder").CppBuilder
        original: Callable[[Any], None] = builder_cls.build
        kernels = self.kernels

        def build(builder: Any) -> None:
            kernels.build(builder, original)

        build.__wrapped__ = original  # type: ignore[attr-defined]
        build.__compilecache__ = True  # type: ignore[attr-defined]
        original_init: Callable[..., None] = builder_cls.__init__

        def init(builder: Any, *args: Any, **kwargs: Any) -> None:
            # Builders are made in the compiling thread and built on a pool thread; torch's
            # config values are per thread, so remember the compiling thread's tag.
            original_init(builder, *args, **kwargs)
            try:
                setattr(builder, TAG_ATTRIBUTE, current_tag())
                setattr(builder, OFF_ATTRIBUTE, kernels.off())
            except Exception as exc:
                log.debug("compilecache: cache_key_tag not recorded: %s", exc)

        init.__wrapped__ = original_init  # type: ignore[attr-defined]
        self.patches.replace(builder_cls, "build", build, label="kernel.CppBuilder.build")
        self.patches.replace(builder_cls, "__init__", init, label="kernel.CppBuilder.__init__")
        return True

    def uninstall(self) -> None:
        self.patches.undo()

    @property
    def live(self) -> bool:
        live = self.patches.live()
        return bool(live) and all(live.values())
