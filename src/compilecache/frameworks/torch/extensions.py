"""torch's JIT-built C++/CUDA extensions (``torch.utils.cpp_extension.load`` / ``load_inline``).

torch builds an extension with ninja in its build directory (``TORCH_EXTENSIONS_DIR/<name>``):
it writes the sources (``load_inline``) and ``build.ninja``, then ``_run_ninja_build`` runs
ninja, which compiles what its own checks (file times, ``.ninja_log``) find out of date. On a new
machine or in a new container the directory is empty and everything compiles, often for minutes.

The hook wraps ``_run_ninja_build``, the one function both ``load`` and ``load_inline`` reach
after ``build.ninja`` is written. The build directory is a :class:`~compilecache.runtime.dircache.
DirectoryCache` entry (``torch/extension/<digest>``) keyed by everything that decides what ninja
builds there:

- ``build.ninja`` itself, with only the build directory's path replaced (the compiler and every
  flag, include path, define and linker flag torch chose);
- the contents of every source the compile rules name;
- each compiler's identity (``c++ -v``, ``nvcc --version`` when the extension has CUDA sources),
  torch's version and git revision, its CUDA version, Python, the C library, and the CPU when a
  flag says ``native``;
- at restore, the user headers the compiler read (from ninja's own dependency log, ``ninja -t
  deps``), each unchanged (size and content).

A hit writes the stored files into the build directory and returns without running ninja: torch
then imports the module it would have built. A miss runs ninja as torch does and stores the
directory afterwards. ninja's own logs travel with the files, so a later run without compilecache
still finds the directory consistent and decides for itself.
"""

from __future__ import annotations

import functools
import logging
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from compilecache.frameworks.torch import words as torch_words
from compilecache.frameworks.torch.kernels import (
    command_words,
    cpu_identity,
    file_digest,
    normalize_command,
)
from compilecache.host import framework_module as _private
from compilecache.host import torch_versions
from compilecache.runtime.cache import Cache
from compilecache.runtime.dircache import DirectoryCache, DirKey
from compilecache.runtime.keys import chain, inputs_digest, text_digest

log = logging.getLogger("compilecache")

FRAMEWORK = torch_words.FRAMEWORK  # importing it registers the vocabulary
LAYER = "extension"
MODULE = "torch.utils.cpp_extension"
FUNCTION = "_run_ninja_build"
KEY_VERSION = "compilecache-torch-extension-v1"
_BUILD_MARK = "<build>"
_TOOL = re.compile(r"^(cxx|nvcc|sycl)\s*=\s*(.+)$", re.MULTILINE)
_FLAGS = re.compile(
    r"^((?:cuda_|sycl_)?(?:post_)?cflags|(?:cuda_)?ldflags|\w*dlink\w*)\s*=(.*)$", re.MULTILINE
)
# Not part of what the build produced: torch's lock, and compiler temporaries.
_SKIPPED = ("lock",)


def _unescape(token: str) -> str:
    return re.sub(r"\$(.)", r"\1", token)


def compile_inputs(ninja: str, build_directory: str) -> list[str]:
    """The inputs of ``build.ninja``'s compile edges, as absolute paths."""
    inputs: list[str] = []
    for line in ninja.splitlines():
        if not line.startswith("build "):
            continue
        _, _, rest = line.partition(": ")
        tokens = [_unescape(t) for t in re.split(r"(?<!\$)\s+", rest.strip()) if t]
        if not tokens or "compile" not in tokens[0]:
            continue
        for token in tokens[1:]:
            if token in ("|", "||"):
                break
            path = token if os.path.isabs(token) else os.path.join(build_directory, token)
            if path not in inputs:
                inputs.append(path)
    return inputs


@functools.cache
def compiler_identity(compiler: str) -> str:
    """``<compiler> -v`` (else ``--version``) in the C locale: version, target, configure flags.
    Run here, not through Inductor's helper, whose module costs 0.75 s to import."""
    env = {**os.environ, "LC_ALL": "C"}
    for flag in ("-v", "--version"):
        try:
            proc = subprocess.run(
                [*command_words(compiler), flag],
                capture_output=True,
                text=True,
                env=env,
                timeout=60,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if proc.returncode == 0:
            return (proc.stdout + proc.stderr).replace("\r", "_").replace("\n", "_")
    return ""


def extension_key(build_directory: str, name: str) -> DirKey:
    """The key of what ninja builds in ``build_directory`` (its ``build.ninja`` written)."""
    with open(os.path.join(build_directory, "build.ninja"), encoding="utf-8") as f:
        ninja = f.read()
    marks = [(build_directory, _BUILD_MARK)]
    normalized = normalize_command(ninja, marks)
    inputs = compile_inputs(ninja, build_directory)
    sources = inputs_digest(inputs, lambda p: normalize_command(p, marks), file_digest)
    tools = {tool: command.strip() for tool, command in _TOOL.findall(ninja)}
    identities = " | ".join(f"{t}: {compiler_identity(c)}" for t, c in sorted(tools.items()))
    torch = _private("torch")
    versions = torch_versions()
    cuda = str(getattr(torch.version, "cuda", None) or "none")
    if "native" in ninja:
        cpu, cpu_words = cpu_identity()
    else:
        cpu, cpu_words = text_digest(platform.machine()), platform.machine()
    libc = " ".join(platform.libc_ver())
    components = {
        "flags": text_digest(normalized),
        "sources": sources,
        "compiler": text_digest(identities),
        "cuda": text_digest(cuda),
        "torch_version": text_digest(f"{versions['torch']} {versions['git']}"),
        "python": text_digest(sys.version),
        "libc": text_digest(libc),
        "cpu": cpu,
    }
    flags = " ".join(f"{k}={v.strip()}" for k, v in _FLAGS.findall(normalized) if v.strip())
    readable = {
        "flags": flags[:4000],
        "sources": " ".join(os.path.basename(p) for p in inputs),
        "compiler": identities[-300:],
        "cuda": cuda,
        "torch_version": versions["torch"],
        "python": sys.version.split()[0],
        "libc": libc,
        "cpu": cpu_words,
    }
    return DirKey(FRAMEWORK, LAYER, name, chain(KEY_VERSION, components), components, readable)


def ninja_dependencies(build_directory: str) -> list[str]:
    """The files the compiler read, from ninja's dependency log (``ninja -t deps``)."""
    out = subprocess.run(
        ["ninja", "-t", "deps"],
        cwd=build_directory,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    paths: list[str] = []
    for line in out.splitlines():
        if line.startswith((" ", "\t")) and line.strip():
            path = line.strip()
            path = path if os.path.isabs(path) else os.path.join(build_directory, path)
            if path not in paths:
                paths.append(path)
    return paths


def _kept(name: str) -> bool:
    return name not in _SKIPPED and not name.endswith(".tmp")


class ExtensionCache:
    """``_run_ninja_build`` through a :class:`DirectoryCache`."""

    def __init__(self, cache: Cache) -> None:
        self.cache = cache
        self.directories = DirectoryCache(cache)
        self.original: Callable[..., None] | None = None
        # Why torch's own switches turn the store off now ("" when they do not); set by the
        # torch integration (switches.py).
        self.off: Callable[[], str] = lambda: ""

    def run_ninja_build(
        self, original: Callable[..., None], build_directory: str, *args: Any, **kwargs: Any
    ) -> None:
        if self.off():  # torch's switches turn caching off: built as torch would
            original(build_directory, *args, **kwargs)
            return
        directory = os.path.abspath(build_directory)
        try:
            key: DirKey | None = extension_key(directory, os.path.basename(directory))
        except Exception as exc:  # a key that cannot be computed: build as torch would
            self.cache.warn_once("torch:extension-key", f"extension not cached: {exc}")
            key = None
        if key is not None and self.directories.restore(key, directory):
            log.info("compilecache: extension %s restored from the store", key.name)
            return
        start = time.perf_counter()
        original(build_directory, *args, **kwargs)
        elapsed = time.perf_counter() - start
        if key is None:
            return
        try:
            deps = ninja_dependencies(directory)
        except Exception as exc:  # without the headers it read, the build is not stored
            self.cache.warn_once("torch:extension-deps", f"extension not stored: {exc}")
            return
        self.directories.save(
            key, directory, elapsed=elapsed, deps=deps, keep=_kept, versions=torch_versions()
        )

    def wrap(self, original: Callable[..., None]) -> Callable[..., None]:
        def run_ninja_build(build_directory: str, *args: Any, **kwargs: Any) -> None:
            self.run_ninja_build(original, build_directory, *args, **kwargs)

        return run_ninja_build
