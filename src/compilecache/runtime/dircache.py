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
import json
import logging
import os
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import xxhash

from compilecache.entry import INTERNAL, EntryHeader, encode
from compilecache.runtime import fileset
from compilecache.runtime.cache import Cache
from compilecache.stores.base import EntryMeta

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

    @staticmethod
    def _header(
        key: DirKey,
        files: Mapping[str, fileset.File],
        elapsed: float,
        deps: Iterable[Dependency] | None,
        versions: Mapping[str, str] | None,
    ) -> EntryHeader:
        extra: dict[str, Any] = {"layer": key.layer, "readable": dict(key.readable)}
        if deps is not None:
            extra["deps"] = [[d.path, d.size, d.digest] for d in deps]
        extra["files"] = sorted(files)
        return EntryHeader(
            framework=key.framework,
            key=key.store_key,
            name=key.name,
            compile_time_s=elapsed,
            versions=dict(versions or {}),
            components=key.components,
            extra=extra,
        )

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
        the dependencies read by the build outside it; explain the miss. Never raises."""
        files: dict[str, fileset.File] | None = None
        recorded: list[Dependency] = []
        try:
            files = {n: f for n, f in fileset.read_tree(directory).items() if keep(n)}
            recorded = dependencies(p for p in deps if _inside(p, directory) is None)
        except Exception as exc:  # unreadable: nothing is stored, the miss is still explained
            self.cache.warn_once(f"{key.layer}:put", f"{key.name} not stored: {exc}")
            files = None
        return self.save_files(key, files, elapsed=elapsed, deps=recorded, versions=versions)

    def save_files(
        self,
        key: DirKey,
        files: Mapping[str, fileset.File] | None,
        *,
        elapsed: float,
        deps: Iterable[Dependency] | None = None,
        versions: Mapping[str, str] | None = None,
    ) -> bool:
        """Store ``files`` as the entry of ``key`` (with ``deps``, the files outside them that
        must be unchanged at restore, when given; ``None``: nothing to store); explain the miss.
        Never raises."""
        from compilecache.runtime import explain

        cache = self.cache
        stored = False
        if files is not None:  # None: unreadable, and already warned about
            try:
                stored = cache.save(
                    self._header(key, files, elapsed, deps, versions), fileset.pack(files)
                )
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


class SyncedDirectory:
    """A local directory whose files are also store entries, listed per job.

    For a JIT cache that names each file by everything that makes it valid: XLA's per-fusion
    autotuning results are files named by a hash of the fusion, the device description and XLA's
    cache version, so whatever file XLA finds under a name is right for whoever asks for that
    name. Each file is an entry ``<framework>/<layer>/<hash of its name>``; the job's index entry
    ``<framework>/<layer>-index/<job>`` lists the names, so that a fresh host fetches the files
    of its job before the framework asks for them (:meth:`restore`), and :meth:`publish` stores
    what the framework added (any process may: whichever process's file is kept, it is valid
    for every reader of that name).

    Concurrent publishers of one job may each rewrite the index from what they read; a name lost
    that way is missing from the next fresh host (its fusion is tuned again, and published
    again), never wrong.
    """

    def __init__(
        self, cache: Cache, *, framework: str, layer: str, directory: str, job: str = ""
    ) -> None:
        self.cache = cache
        self.framework = framework
        self.layer = layer
        self.directory = directory
        self.job = job  # may be set later, before the first restore or publish
        self.versions: dict[str, str] = {}
        self.known: set[str] = set()  # names the store holds, as far as this process knows
        self._seen: tuple[int, int] | None = None  # the directory's (mtime, size) at last look
        # Whether the store had the job's index at restore. With a remote level behind a local
        # one, a job with no files (on a CPU XLA writes no autotune file) gets an empty index in
        # the local level, so that the next start on this host reads it there and asks no
        # remote level.
        self._listed: bool | None = None

    @property
    def index_key(self) -> str:
        digest = hashlib.sha256(self.job.encode()).hexdigest()[:32]
        return f"{self.framework}/{self.layer}-index/{digest}"

    def file_key(self, name: str) -> str:
        return f"{self.framework}/{self.layer}/{hashlib.sha256(name.encode()).hexdigest()}"

    def local_names(self) -> set[str]:
        """The finished files in the directory (not temporaries or hidden files)."""
        try:
            names = os.listdir(self.directory)
        except OSError:
            return set()
        return {
            n
            for n in names
            if not n.startswith(".")
            and ".tmp" not in n
            and fileset.safe_name(n)
            and os.path.isfile(os.path.join(self.directory, n))
        }

    def _index_header(self) -> EntryHeader:
        """The header of this directory's index entry (the names the store holds)."""
        return EntryHeader(
            framework=self.framework,
            key=self.index_key,
            name=f"{self.layer} index",
            versions=dict(self.versions),
            extra={"layer": f"{self.layer}-index", INTERNAL: True},
        )

    def _list_locally(self) -> None:
        """An empty index in the first level of tiers (see ``_listed``). Never raises."""
        self._listed = True
        levels = self.cache.store.levels
        if len(levels) < 2 or levels[0].read_only:
            return
        header = self._index_header()
        try:
            data = encode(header, b"[]", compress=False, signing=self.cache.signing)
            levels[0].put(self.index_key, data, EntryMeta(self.framework, header.name, 0.0))
        except Exception as exc:
            log.debug("compilecache: %s not listed locally: %s", self.index_key, exc)

    def _index_exists(self) -> bool:
        return self.cache.peek(self.framework, self.index_key) is not None

    def _index(self) -> set[str]:
        found = self.cache.peek(self.framework, self.index_key)  # a list: no hit or miss
        if found is None:
            return set()
        try:
            names = json.loads(found.payload)
        except ValueError:
            return set()
        return (
            {n for n in names if isinstance(n, str) and fileset.safe_name(n)}
            if isinstance(names, list)
            else set()
        )

    def restore(self) -> int:
        """Fetch the job's files the directory lacks; how many were written. Never raises."""
        written = 0
        try:
            os.makedirs(self.directory, exist_ok=True)
            listed = self._index()
            self._listed = bool(listed) or self._index_exists()
            self.known |= listed
            for name in sorted(listed - self.local_names()):
                found = self.cache.load(self.framework, self.file_key(name))
                member = fileset.unpack(found.payload).get(name) if found is not None else None
                if member is None:
                    self.known.discard(name)
                    continue
                write_file(os.path.join(self.directory, name), member.data, member.mode)
                written += 1
        except Exception as exc:  # the directory's files are an optimisation: never in the way
            self.cache.warn_once(f"{self.layer}:restore", f"{self.directory} not restored: {exc}")
        self._seen = self._stamp()
        return written

    def _stamp(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.directory)
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size

    def changed(self) -> bool:
        """Whether files may have been added since the last look (one ``stat``)."""
        return self._stamp() != self._seen

    def publish(self) -> int:
        """Store the files the store lacks and list them in the job's index; how many were
        stored. Never raises."""
        if self.cache.read_only:
            return 0
        stored = 0
        try:
            self._seen = self._stamp()
            new = sorted(self.local_names() - self.known)
            if not new:
                if self._listed is False:
                    self._list_locally()
                return 0
            for name in new:
                member = fileset.read_file(os.path.join(self.directory, name))
                header = EntryHeader(
                    framework=self.framework,
                    key=self.file_key(name),
                    name=name,
                    versions=dict(self.versions),
                    extra={"layer": self.layer, INTERNAL: True},
                )
                if self.cache.save(header, fileset.pack({name: member}), any_time=True):
                    self.known.add(name)
                    stored += 1
            listed = self._index()
            if not self.known <= listed:
                names = sorted(self.known | listed)
                self.cache.save(self._index_header(), json.dumps(names).encode(), any_time=True)
        except Exception as exc:
            self.cache.warn_once(f"{self.layer}:publish", f"{self.directory} not stored: {exc}")
        return stored
