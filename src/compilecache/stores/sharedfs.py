"""``?shared=1``: the local store's files on a mount shared by several hosts (NFS, Lustre).

SQLite's locking and ``flock`` are unreliable on network filesystems (SQLite's own documentation
says so for NFS; Lustre needs ``-o flock`` and most sites mount without it). This store therefore
has no index at all: **the files are the truth**.

- Layout: ``entries/ab/<blake2b(key)>.cce``, the same names and the same frame as the local store
  (``CCS1``, header length, a JSON header holding the key and metadata, then the value), so one
  directory can be switched between the two modes; the local store rebuilds its index from the
  frames. The header also records the value's size, which detects a truncated file.
- Publication: a writer writes ``tmp/<host>-<pid>-<random>.tmp`` on the same filesystem, fsyncs it
  and renames it over the entry. ``rename`` within one filesystem is atomic on the NFS server and
  on Lustre's MDS, so a reader opens the old file, the new one, or none: never a mix. Racing
  writers of one key each publish a whole file; the last rename wins.
- Readers: ``ESTALE`` (the file was replaced or removed by another host while open) is retried
  by reopening the path; a file whose size disagrees with its header is corrupt and removed.
- Metadata without payloads: ``stat`` and ``scan`` read the frame header only. ``accessed`` is the
  file's mtime, refreshed on a hit at most once per ``touch_interval`` (atime is unreliable:
  ``noatime``/``relatime``); per-entry hit counts are not kept (they would need a write per hit).
- Eviction without a global index: ``put`` costs O(1); at most once per ``evict_interval`` (default
  10 minutes) *one* process among all hosts, the one that wins an NFS-safe lock (a hard link,
  the classic technique, since ``O_EXCL`` is not atomic on old NFS), lists the entries and removes
  the least recently used until the total is under ``max_size``. The bound is therefore
  approximate: it can be exceeded by what is written between two passes.
- Persistent stats: one small file per host and process in ``stats/`` (written only by its
  owner, atomically), summed on read. No file is ever updated by two processes.
- Single-flight leases: ``leases/<digest>.lease``, the local store's lease files
  (:mod:`compilecache.stores.leasefile`), so processes on every host that mounts the directory
  coordinate their compiles. A lease is taken with an ``O_EXCL`` create, atomic on NFSv3 and
  later and on Lustre (on NFSv2, where it is not, two processes may both lead: a duplicate
  compile, nothing worse), and written with the store's fsync policy; no ``flock``. Expiry
  compares wall clocks across hosts: a small skew costs a duplicate compile or a longer wait,
  never a wrong result. Leases are not entries: listings, sizes and eviction never see them.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from compilecache.errors import CorruptEntry, StoreUnavailable
from compilecache.stores.base import EntryInfo, EntryMeta, OneReadStore, StoreURL, flag
from compilecache.stores.capabilities import Counters
from compilecache.stores.frame import (
    DIRECTORY_OPTIONS,
    directory_and_size,
    encode_frame,
    host_label,
    info_of,
    key_filename,
    meta_of,
    read_frame,
    write_atomic,
)
from compilecache.stores.leasefile import LeaseFiles
from compilecache.units import DEFAULT_MAX_SIZE, parse_seconds

# The URL options this backend reads itself (the registry checks a URL against them).
OPTIONS = DIRECTORY_OPTIONS
_READ_RETRIES = 3
_STALE_TMP_SECONDS = 3600.0
_STALE_LOCK_SECONDS = 3600.0
DEFAULT_TOUCH_INTERVAL = 60.0
DEFAULT_EVICT_INTERVAL = 600.0
CACHEDIR_TAG = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by compilecache.\n"
    "# For information about cache directory tags see https://bford.info/cachedir/\n"
)


# -- the store -------------------------------------------------------------------------------------


class SharedFSStore(OneReadStore):
    """An index-free store in a directory that several hosts mount."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        max_size: int = DEFAULT_MAX_SIZE,
        *,
        touch_interval: float = DEFAULT_TOUCH_INTERVAL,
        evict_interval: float = DEFAULT_EVICT_INTERVAL,
        fsync: bool = True,
    ) -> None:
        self.root = Path(root).expanduser()
        self.url = f"{self.root}?shared=1"
        self.max_size = max_size
        self.touch_interval = touch_interval
        self.evict_interval = evict_interval
        self.fsync = fsync
        self.entries_dir = self.root / "entries"
        self.tmp_dir = self.root / "tmp"
        self.stats_dir = self.root / "stats"
        self.leases_dir = self.root / "leases"
        self.stamp_path = self.root / "evict.stamp"
        self.lock_path = self.root / "evict.lock"
        self._ident = f"{host_label()}-{os.getpid()}"
        self._written_since_evict = 0
        self._next_evict_check = 0.0
        self._leases = LeaseFiles(self.leases_dir, self._publish, self.path_of, fsync=fsync)
        self.leases = self._leases
        self.counters = _FileCounters(self.stats_dir, self._ident, self._publish)
        try:
            for d in (self.entries_dir, self.tmp_dir, self.stats_dir):
                d.mkdir(parents=True, exist_ok=True)
            tag = self.root / "CACHEDIR.TAG"
            if not tag.exists():
                self._publish(tag, CACHEDIR_TAG.encode())
        except OSError as exc:
            raise StoreUnavailable(f"cannot use {self.root} as a cache directory: {exc}") from exc

    def path_of(self, key: str) -> Path:
        return self.entries_dir / key_filename(key)

    # -- the Store protocol ----------------------------------------------------------------------

    def _read(self, key: str, *, look_only: bool) -> tuple[bytes, EntryMeta] | None:
        """Read an entry; unless ``look_only``, refresh its LRU time and remove it if damaged."""
        path = self.path_of(key)
        for attempt in range(_READ_RETRIES):
            try:
                with open(path, "rb") as f:
                    header, _ = read_frame(f)
                    if header["key"] != key:  # a hash collision: never a wrong hit
                        if look_only:
                            raise CorruptEntry(f"{path} holds another key's data")
                        return None
                    value = f.read()
                    mtime = os.fstat(f.fileno()).st_mtime
            except FileNotFoundError:
                return None
            except CorruptEntry:
                if not look_only:
                    self._discard(path)
                raise
            except OSError as exc:
                # ESTALE: another host replaced or removed the file under our open handle.
                if exc.errno == errno.ESTALE and attempt + 1 < _READ_RETRIES:
                    continue
                raise StoreUnavailable(f"cannot read {path}: {exc}") from exc
            expected = header.get("size")
            if isinstance(expected, int) and expected != len(value):
                if not look_only:
                    self._discard(path)
                raise CorruptEntry(f"{path} holds {len(value)} bytes, its frame says {expected}")
            if not look_only and time.time() - mtime > self.touch_interval:
                # LRU order for eviction; approximate by design, never worth failing a hit.
                with contextlib.suppress(OSError):
                    os.utime(path)
            return value, meta_of(header)
        return None  # unreachable: the loop returns or raises

    def head(self, key: str, size: int) -> bytes | None:
        """The first ``size`` bytes of the value, read from its file without touching it."""
        path = self.path_of(key)
        try:
            with open(path, "rb") as f:
                header, _ = read_frame(f)
                if header["key"] != key:
                    raise CorruptEntry(f"{path} holds another key's data")
                return f.read(size)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreUnavailable(f"cannot read {path}: {exc}") from exc

    def put(self, key: str, value: bytes, meta: EntryMeta | None = None) -> None:
        path = self.path_of(key)
        frame = encode_frame(key, meta or EntryMeta(), time.time(), len(value))
        try:
            path.parent.mkdir(exist_ok=True)
            self._publish(path, frame, value)
        except OSError as exc:
            raise StoreUnavailable(f"cannot write {path}: {exc}") from exc
        self._written_since_evict += len(frame) + len(value)
        self._maybe_evict()

    def _publish(self, path: Path, *chunks: bytes) -> None:
        """Write a unique temporary file, flush it to the server, rename it over ``path``."""
        tmp = self.tmp_dir / f"{self._ident}-{uuid.uuid4().hex}.tmp"
        write_atomic(tmp, path, chunks, fsync=self.fsync)

    def _discard(self, path: Path) -> None:
        with contextlib.suppress(OSError):
            path.unlink()

    def delete(self, key: str) -> bool:
        try:
            self.path_of(key).unlink()
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise StoreUnavailable(f"cannot remove {key!r}: {exc}") from exc
        return True

    def stat(self, key: str) -> EntryInfo | None:
        path = self.path_of(key)
        found = self._read_info(path)
        return found if found is not None and found.key == key else None

    def _read_info(self, path: Path) -> EntryInfo | None:
        for attempt in range(_READ_RETRIES):
            try:
                with open(path, "rb") as f:
                    header, offset = read_frame(f)
                    st = os.fstat(f.fileno())
            except FileNotFoundError:
                return None
            except CorruptEntry:
                return None
            except OSError as exc:
                if exc.errno == errno.ESTALE and attempt + 1 < _READ_RETRIES:
                    continue
                raise StoreUnavailable(f"cannot read {path}: {exc}") from exc
            return info_of(header, st.st_size - offset, accessed=st.st_mtime)
        return None

    def scan(self, prefix: str = "") -> Iterator[EntryInfo]:
        infos = []
        for path in self._entry_files():
            found = self._read_info(path)
            if found is not None and found.key.startswith(prefix):
                infos.append(found)
        return iter(sorted(infos, key=lambda i: i.key))

    def _entry_files(self) -> Iterator[Path]:
        try:
            shards = sorted(self.entries_dir.iterdir())
        except OSError as exc:
            raise StoreUnavailable(f"cannot list {self.entries_dir}: {exc}") from exc
        for shard in shards:
            with contextlib.suppress(OSError):
                yield from (p for p in shard.iterdir() if p.suffix == ".cce")

    def close(self) -> None:
        pass

    # -- eviction: one process at a time, at most once per interval ------------------------------

    def _maybe_evict(self) -> None:
        now = time.time()
        pressure = self._written_since_evict > self.max_size // 8
        if now < self._next_evict_check and not pressure:
            return
        self._next_evict_check = now + min(60.0, self.evict_interval)
        try:
            last = self.stamp_path.stat().st_mtime
        except OSError:
            last = 0.0
        if now - last < self.evict_interval and not pressure:
            return
        try:
            with self._evict_lock() as held:
                if held:
                    self._written_since_evict = 0
                    self.evict(self.max_size)
                    self._publish(self.stamp_path, f"{self._ident} {now}\n".encode())
        except (OSError, StoreUnavailable):
            pass  # eviction is housekeeping: it never fails a put

    @contextlib.contextmanager
    def _evict_lock(self) -> Iterator[bool]:
        """An NFS-safe lock: hard-link a unique file to the lock name; the link count tells."""
        mine = self.tmp_dir / f"lock-{self._ident}-{uuid.uuid4().hex}"
        mine.write_text(f"{self._ident} {time.time()}\n")
        held = False
        try:
            with contextlib.suppress(OSError):
                if time.time() - self.lock_path.stat().st_mtime > _STALE_LOCK_SECONDS:
                    self.lock_path.unlink()  # its holder died mid-pass long ago
            with contextlib.suppress(OSError):
                os.link(mine, self.lock_path)
            # link() may report failure after succeeding on NFS (a lost reply): trust nlink.
            held = os.stat(mine).st_nlink == 2
            yield held
        finally:
            if held:
                with contextlib.suppress(OSError):
                    self.lock_path.unlink()
            with contextlib.suppress(OSError):
                mine.unlink()

    def evict(self, target_size: int) -> int:
        """Remove least recently used entries until the total is at most ``target_size``."""
        files: list[tuple[float, int, int, Path]] = []
        total = 0
        for path in self._entry_files():
            with contextlib.suppress(OSError):
                st = path.stat()
                files.append((st.st_mtime, st.st_ino, st.st_size, path))
                total += st.st_size
        removed = 0
        for mtime, ino, size, path in sorted(files):
            if total <= target_size:
                break
            try:
                st = path.stat()
                # Replaced or read since we listed it: it is not the entry we meant to remove.
                if st.st_ino != ino or st.st_mtime != mtime:
                    continue
                path.unlink()
            except OSError:
                continue
            total -= size
            removed += 1
        self._clean_stale_tmp()
        return removed

    def total_size(self) -> int:
        """Bytes in entry files (a listing: the shared mode keeps no running total)."""
        total = 0
        for path in self._entry_files():
            with contextlib.suppress(OSError):
                total += path.stat().st_size
        return total

    def _clean_stale_tmp(self) -> None:
        cutoff = time.time() - _STALE_TMP_SECONDS
        with contextlib.suppress(OSError):
            for tmp in self.tmp_dir.iterdir():
                with contextlib.suppress(OSError):
                    if tmp.stat().st_mtime < cutoff:
                        tmp.unlink()
        # Leases of processes that died long ago, on keys nobody compiled again since.
        self._leases.clean_stale(_STALE_TMP_SECONDS)


class _FileCounters(Counters):
    """Persistent counters: one file per host and process under ``stats/``, each with a single
    writer (no locks on a network filesystem), summed by ``read``."""

    def __init__(self, directory: Path, ident: str, publish: Callable[[Path, bytes], None]) -> None:
        self._directory = directory
        self._path = directory / f"{ident}.json"
        self._publish = publish

    def add(self, counters: Mapping[str, float]) -> None:
        current = _read_json(self._path)
        for name, value in counters.items():
            current[name] = current.get(name, 0.0) + float(value)
        try:
            self._publish(self._path, json.dumps(current).encode())
        except OSError as exc:
            raise StoreUnavailable(f"cannot write {self._path}: {exc}") from exc

    def read(self) -> dict[str, float]:
        totals: dict[str, float] = {}
        with contextlib.suppress(OSError):
            for path in self._directory.glob("*.json"):
                for name, value in _read_json(path).items():
                    totals[name] = totals.get(name, 0.0) + value
        return totals

    def zero(self) -> None:
        with contextlib.suppress(OSError):
            for path in self._directory.glob("*.json"):
                with contextlib.suppress(OSError):
                    path.unlink()


def _read_json(path: Path) -> dict[str, float]:
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, (int, float))}


def from_url(url: StoreURL) -> SharedFSStore:
    """``/mnt/shared/cache?shared=1`` (also ``file:///...?shared=1``).

    Options: ``max_size``, ``touch_interval`` and ``evict_interval`` (durations), ``fsync=0``.
    """
    path, size = directory_and_size(url)
    return SharedFSStore(
        path,
        max_size=size,
        touch_interval=parse_seconds(url.params, "touch_interval", DEFAULT_TOUCH_INTERVAL),
        evict_interval=parse_seconds(url.params, "evict_interval", DEFAULT_EVICT_INTERVAL),
        fsync=flag(url.params, "fsync", default=True),
    )
