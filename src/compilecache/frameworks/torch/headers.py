"""Inductor's precompiled C++ header through the store, so that compilecache can leave it on.

With ``cpp_cache_precompile_headers`` (torch's default), Inductor compiles the header every CPU
kernel includes (``cpp_prefix.h``: the ATen vector library and more) once into a ``.gch`` file
and every kernel build reuses it: without it each kernel parses the headers again, and a cold
compile of a transformers GPT-2 took 1.35x as long. torch's ``_precompile_header``
does three things on every first compile of a process, hit or miss:

1. it preprocesses the header (``g++ -E``: 0.15-0.2 s) and hashes the output (``openssl
   sha512``), so that a change in any header it includes makes a new header file name;
2. it writes ``<header dir>/<hash>.h`` (one ``#include`` line) under that name;
3. it compiles that into ``<hash>.h.gch`` unless the file is there (several seconds, 100+ MB),
   in ``default_cache_dir()/precompiled_headers``: a machine-local directory outside
   ``TORCHINDUCTOR_CACHE_DIR``, so a new machine compiles it again even when every kernel
   binary comes from the store.

compilecache keeps the result of each step and does the steps only when they are needed:

- **Step 1 and 2, answered as ccache's direct mode does.** The answer (the header file's name
  and contents) is a ``header`` entry keyed by the header, torch's command line and options, the
  compiler (its identity and ``-v`` text), this CPU (``-march=native`` changes the predefined
  macros), torch, Python and the C library. It also lists every file the preprocessor read, with
  its size and content hash (from ``-MD``, added to torch's own preprocessing run, which does
  not change its output). A hit is used only when every one of those files still has that size
  and content (a few MB read: milliseconds), so an edited or upgraded header anywhere makes it a
  miss, and torch preprocesses again.
- **Step 3, only when a kernel is compiled, and from the store.** After an answered header, the
  ``.gch`` is not built: a warm start whose kernels all come from the store never needs it. The
  first kernel that must run the compiler first calls torch's ``_precompile_header`` itself,
  whose build goes through the ``kernel`` hook (:mod:`compilecache.frameworks.torch.kernels`):
  the ``.gch`` is a ``pch`` entry under the kernel key (command line, inputs, compiler, CPU,
  torch, Python, C library), fetched if stored, else compiled and stored. Without a ``.gch``,
  ``-include <hash>.h`` still compiles the kernel from the headers, so nothing depends on it
  being there but speed.

On a miss (a first run, a changed header) torch's function runs as without compilecache: steps
1 to 3 at once, the ``.gch`` fetched from the store or compiled. Counted as
``torch.header_hits`` / ``torch.header_misses`` (the answers) and ``torch.pch.hits`` /
``torch.pch.misses`` (the compiled headers).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import platform
import re
import shlex
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from compilecache import host
from compilecache.frameworks.torch.kernels import command_words, write_into_place
from compilecache.frameworks.torch.probes import (
    ProbeCache,
    ProbeKey,
    compiler_identity,
    make_key,
    torch_identity,
)
from compilecache.host import framework_module as _private
from compilecache.patches import Patches
from compilecache.runtime.dircache import Dependency, dependencies

log = logging.getLogger("compilecache")

CODECACHE = "torch._inductor.codecache"
CPP_BUILDER = "torch._inductor.cpp_builder"
FUNCTION = "_precompile_header"
COUNTER = "header"
# What torch names its header files: <hash>.h, flat in its header directory.
_HEADER_NAME = re.compile(r"^[A-Za-z0-9_\-]{1,200}\.h$")
_DEPFILE_SUFFIX = ".compilecache.d"


def parse_depfile(text: str) -> list[str]:
    """The prerequisites of a make rule written by ``-MD`` (``target: dep dep \\`` lines)."""
    _, _, rest = text.partition(":")
    rest = rest.replace("\\\n", " ")
    paths: list[str] = []
    for token in re.split(r"(?<!\\)\s+", rest.strip()):
        if token:
            path = token.replace("\\ ", " ")
            if path not in paths:
                paths.append(path)
    return paths


def header_key(
    header: str, command: str, options: dict[str, Any], compiler: str, compiler_info: str
) -> ProbeKey:
    """The key of ``_precompile_header(header, command, **options)``'s answer."""
    cpu_digest, cpu_readable = host.native_cpu()
    parts = {
        "header": header,
        "command": command,
        "options": json.dumps({k: str(v) for k, v in sorted(options.items())}),
        "compiler": compiler_identity(compiler),
        "compiler_version": compiler_info,
        "cpu": f"{cpu_readable} [{cpu_digest}]",
        "torch": torch_identity(),
        "python": sys.version,
        "libc": " ".join(platform.libc_ver()),
    }
    return make_key(COUNTER, f"header {header}", parts)


class HeaderCache:
    """``_precompile_header`` through the store, and the lazy ``.gch`` builds it leaves."""

    def __init__(self, probes: ProbeCache) -> None:
        self.probes = probes
        self._local = threading.local()
        self._lock = threading.Lock()
        # Header file path -> torch's own call that builds its .gch, for answered headers.
        self._deferred: dict[str, Callable[[], str]] = {}
        self._building: dict[str, threading.Lock] = {}
        self._memo: dict[tuple[Any, ...], str] = {}

    def precompile_header(
        self, original: Callable[..., str], header: str, command: str, **options: Any
    ) -> str:
        """torch's ``_precompile_header``, answered from the store where every dependency is as
        recorded (the ``.gch`` then waits for a kernel that needs it)."""
        if self.probes.off():  # torch's switches turn caching off: torch precompiles it
            return original(header, command, **options)
        memo_key = (header, command, tuple(sorted((k, str(v)) for k, v in options.items())))
        with self._lock:
            known = self._memo.get(memo_key)
        if known is not None:
            return known
        try:
            cpp_builder = _private(CPP_BUILDER)
            compiler = str(cpp_builder.get_cpp_compiler())
            info = str(cpp_builder.get_compiler_version_info(compiler))
            header_dir = str(_private(CODECACHE)._HEADER_DIR)
            key: ProbeKey | None = header_key(header, command, options, compiler, info)
        except Exception as exc:  # computing a key must never stop a compile
            log.debug("compilecache: precompiled header not keyed: %s", exc)
            key = None
        if key is None:
            return original(header, command, **options)
        path = self._answered(key, header_dir)
        if path is not None:
            with self._lock:
                self._deferred.setdefault(
                    path, functools.partial(original, header, command, **options)
                )
                self._memo[memo_key] = path
            return path
        self._local.capturing, self._local.read = True, None
        try:
            path = original(header, command, **options)  # may raise: as torch does
        finally:
            self._local.capturing = False
        with self._lock:
            self._memo[memo_key] = path
        if self._local.read is not None:
            read, seconds = self._local.read
            self._record(key, header_dir, path, read, seconds)
        self._local.read = None
        return path

    def _answered(self, key: ProbeKey, header_dir: str) -> str | None:
        """The stored answer's header path, written into place, when its files are unchanged."""
        hit, answer = self.probes.lookup(key, COUNTER, decode=_valid_answer)
        if not hit:
            return None
        path = os.path.join(header_dir, answer["name"])
        try:
            if not os.path.exists(path):
                write_into_place(path, answer["text"].encode())
        except OSError as exc:
            log.debug("compilecache: header %s not written, torch precompiles: %s", path, exc)
            return None
        return path

    def _record(
        self, key: ProbeKey, header_dir: str, path: str, read: list[Dependency], seconds: float
    ) -> None:
        name = os.path.relpath(path, header_dir)
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as exc:
            log.debug("compilecache: header %s not recorded: %s", path, exc)
            return
        if not _HEADER_NAME.match(name):
            log.debug("compilecache: header %s not recorded: unexpected name", path)
            return
        answer = {
            "name": name,
            "text": text,
            "deps": [[d.path, d.size, d.digest] for d in read],
        }
        # What a hit saves: torch's preprocessing run (the .gch is counted by its own entry).
        self.probes.save(key, answer, seconds)

    def preprocess(self, builder: Any, original: Callable[[Any], None]) -> None:
        """torch's preprocessing build of a header, with ``-MD`` added so that the files it
        reads are known (the preprocessed output, which torch hashes, is unchanged)."""
        if not getattr(self._local, "capturing", False):
            original(builder)
            return
        target = str(builder.get_target_file_path())
        depfile = target + _DEPFILE_SUFFIX
        command = str(builder.get_command_line())
        builder.get_command_line = lambda: f"{command} -MD -MF {shlex.quote(depfile)}"
        start = time.perf_counter()
        try:
            original(builder)
        finally:
            del builder.get_command_line
        seconds = time.perf_counter() - start
        try:
            with open(depfile, encoding="utf-8", errors="surrogateescape") as f:
                # The first is the one-line source torch wrote in a temporary directory (its
                # contents are part of the key: the header's name).
                paths = parse_depfile(f.read())[1:]
            os.unlink(depfile)
            if not all(os.path.isabs(p) for p in paths):
                # Relative to the build's own directory, not to ours: no answer (a miss).
                log.debug("compilecache: header dependencies with relative paths: not answered")
                return
            self._local.read = (dependencies(paths), seconds)
        except (OSError, ValueError) as exc:
            log.debug("compilecache: header dependencies not read: %s", exc)

    def ensure_for(self, command: str) -> None:
        """Before a kernel is compiled: build (or fetch) the ``.gch`` of an answered header it
        includes. Never raises: without the ``.gch`` the kernel still compiles."""
        if not self._deferred:
            return
        for path in _included(command):
            with self._lock:
                build = self._deferred.get(path)
                lock = self._building.setdefault(path, threading.Lock())
            if build is None:
                continue
            with lock:
                if path not in self._deferred:
                    continue
                try:
                    built = build()
                    if built != path:
                        log.warning(
                            "compilecache: torch precompiled %s where the stored answer said %s",
                            built,
                            path,
                        )
                except Exception as exc:
                    log.debug("compilecache: precompiled header %s not built: %s", path, exc)
                with self._lock:
                    self._deferred.pop(path, None)


def _included(command: str) -> list[str]:
    """The files named by ``-include`` on a compiler command line."""
    tokens = command_words(command)
    return [tokens[i + 1] for i, t in enumerate(tokens[:-1]) if t == "-include"]


def _valid_answer(answer: Any) -> dict[str, Any]:
    """A stored answer whose every dependency is unchanged; otherwise raises (a miss)."""
    if not isinstance(answer, dict) or not _HEADER_NAME.match(str(answer.get("name", ""))):
        raise ValueError("not a header answer")
    if not isinstance(answer.get("text"), str) or not isinstance(answer.get("deps"), list):
        raise ValueError("not a header answer")
    for path, size, digest in answer["deps"]:
        if not Dependency(str(path), int(size), str(digest)).unchanged():
            raise ValueError(f"{path} changed since the header was preprocessed")
    return answer


class HeaderHook:
    """Installs :class:`HeaderCache` as ``codecache._precompile_header`` and restores it."""

    def __init__(self, headers: HeaderCache) -> None:
        self.headers = headers
        self.patches = Patches()

    def install(self, module: Any) -> None:
        original = getattr(module, FUNCTION, None)
        if not callable(original):
            log.debug("compilecache: no codecache.%s in this torch; headers left alone", FUNCTION)
            return
        headers = self.headers

        @functools.wraps(original)
        def precompile_header(header: str, command: str, **options: Any) -> str:
            return headers.precompile_header(original, header, command, **options)

        precompile_header.cache_clear = getattr(original, "cache_clear", lambda: None)  # type: ignore[attr-defined]
        self.patches.replace(module, FUNCTION, precompile_header, label=f"headers.{FUNCTION}")

    def uninstall(self) -> None:
        self.patches.undo()

    @property
    def live(self) -> bool:
        return any(self.patches.live().values())
