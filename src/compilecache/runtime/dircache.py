"""Directory caches: a JIT cache that only knows a directory, carried by the store.

Many JIT caches keep what they build in a directory and decide for themselves whether its files
are still good (torch's C++/CUDA extensions in ``TORCH_EXTENSIONS_DIR``, numba's
``NUMBA_CACHE_DIR``, CuPy's ``CUPY_CACHE_DIR``). An integration that can compute a key capturing
everything that makes such a directory's files valid (the sources, the flags, the compiler and
the versions) uses :class:`DirectoryCache` to keep the directory's files as one entry under that
key: :meth:`~DirectoryCache.restore` before the build, :meth:`~DirectoryCache.save` after it.

Some inputs are only known once a build has run: the headers a source includes. They are stored
with the entry as :class:`Dependency` records (path, size, xxh3-128) and checked at restore, as
ccache's direct mode does: an entry whose recorded files differ here is a miss, never a restore.
Files inside the directory are not recorded: they are the entry's own files, or sources that
the key already hashes.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import xxhash

from compilecache.entry import EntryHeader
from compilecache.runtime import fileset
from compilecache.runtime.cache import Cache

log = logging.getLogger("compilecache")


@dataclass(frozen=True)
class Dependency:
    """A file a build read, as it was: its size and a hash of its contents."""

    path: str
    size: int
    digest: str

    def unchanged(self) -> bool:
        try:
            if os.path.getsize(self.path) != self.size:
                return False
            return file_digest(self.path) == self.digest
        except OSError:
            return False


def file_digest(path: str) -> str:
    """xxh3-128 of the file's contents (fast: headers are checked on every warm start)."""
    h = xxhash.xxh3_128()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return str(h.hexdigest())


def dependencies(paths: Iterable[str]) -> list[Dependency]:
    """Each file's size and content hash, now (a file that cannot be read: an error)."""
    return [Dependency(p, os.path.getsize(p), file_digest(p)) for p in paths]


@dataclass(frozen=True)
class DirKey:
    """What a directory's files are stored under, and the parts of that key (for explanations)."""

    framework: str
    layer: str
    name: str
    digest: str
    components: dict[str, str]
    readable: dict[str, str] = field(default_factory=dict)

    @property
    def store_key(self) -> str:
        return f"{self.framework}/{self.layer}/{self.digest}"


def chain(version: str, components: Mapping[str, str]) -> str:
    """One digest of named component hashes (the order of ``components`` does not matter)."""
    h = hashlib.sha256(version.encode())
    for name in sorted(components):
        h.update(f"{name}={components[name]}\n".encode())
    return h.hexdigest()


def _inside(path: str, directory: str) -> str | None:
    """``path`` relative to ``directory`` (POSIX separators) when it lies inside it."""
    relative = os.path.relpath(os.path.abspath(path), os.path.abspath(directory))
    if relative == ".." or relative.startswith(".." + os.sep) or os.path.isabs(relative):
        return None
    return relative.replace(os.sep, "/")


def write_file(path: str, data: bytes, mode: int) -> None:
    """Publish ``data`` at ``path`` atomically (unique temporary name, then rename)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class DirectoryCache:
    """Restores and saves named directories through a :class:`Cache`.

    Counters, per layer: ``<framework>.<layer>.hits`` / ``.misses``, and ``.stale`` for a stored
    directory whose recorded dependencies differ here (also a miss).
    """

    def __init__(self, cache: Cache) -> None:
        self.cache = cache

    def _count(self, key: DirKey, what: str) -> None:
        self.cache.stats.add(f"{key.framework}.{key.layer}.{what}")

    def restore(self, key: DirKey, directory: str) -> bool:
        """Write the stored files of ``key`` into ``directory``; ``False`` (a miss) when there
        are none, they are unusable, or a file they depend on differs here."""
        try:
            found = self.cache.load(key.framework, key.store_key)
            if found is None:
                self._count(key, "misses")
                return False
            files = fileset.unpack(found.payload)
            stale = _stale(found.header.extra.get("deps"))
            if stale:
                self._count(key, "stale")
                self._count(key, "misses")
                log.info("compilecache: %s not restored: %s changed", key.name, stale)
                return False
            for name, member in files.items():
                write_file(os.path.join(directory, *name.split("/")), member.data, member.mode)
        except fileset.BadFileSet as exc:
            self.cache.warn_once(f"{key.layer}:bad", f"{key.store_key} unusable ({exc}); building")
            self._count(key, "misses")
            return False
        except Exception as exc:  # the store is never in the way of a build
            self.cache.warn_once(f"{key.layer}:get", f"{key.layer} restore failed: {exc}")
            self._count(key, "misses")
            return False
        self._count(key, "hits")
        return True

    def save(
        self,
        key: DirKey,
        directory: str,
        *,
        elapsed: float,
        deps: Iterable[str] = (),
        keep: Callable[[str], bool] = lambda name: True,
        versions: Mapping[str, str] | None = None,
    ) -> bool:
        """Store the files under ``directory`` (those whose relative name ``keep`` accepts) with
        the dependencies read by the build; explain the miss. Never raises."""
        from compilecache.runtime import explain

        cache = self.cache
        stored = False
        try:
            files = {n: f for n, f in fileset.read_tree(directory).items() if keep(n)}
            outside = [p for p in deps if _inside(p, directory) is None]
            header = EntryHeader(
                framework=key.framework,
                key=key.store_key,
                name=key.name,
                compile_time_s=elapsed,
                versions=dict(versions or {}),
                components=key.components,
                extra={
                    "layer": key.layer,
                    "readable": dict(key.readable),
                    "deps": [[d.path, d.size, d.digest] for d in dependencies(outside)],
                    "files": sorted(files),
                },
            )
            stored = cache.save(header, fileset.pack(files))
        except Exception as exc:
            cache.warn_once(f"{key.layer}:put", f"{key.name} not stored: {exc}")
        explain.record_miss(
            cache,
            framework=key.framework,
            name=key.name,
            key=key.store_key,
            components=key.components,
            readable=key.readable,
            prefix=f"{key.framework}/{key.layer}/",
            compile_time_s=elapsed,
            stored=stored,
            reason="" if stored else cache.skip_reason(elapsed, key.store_key),
            background=True,
        )
        return stored


def _stale(recorded: Any) -> str:
    """The first recorded dependency that differs here ("" when all are unchanged)."""
    if recorded is None:
        return ""
    if not isinstance(recorded, list):
        return "its dependency list (unreadable)"
    for item in recorded:
        try:
            path, size, digest = item
            if not Dependency(str(path), int(size), str(digest)).unchanged():
                return str(path)
        except (TypeError, ValueError):
            return "its dependency list (unreadable)"
    return ""
