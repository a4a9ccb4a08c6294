"""The local disk store: sharded entry files plus a SQLite index for metadata and LRU order.

Layout of a store directory::

    CACHEDIR.TAG                 tells backup tools to skip the directory
    index.sqlite (-wal, -shm)    key -> size, times, hits, framework, name; total size (triggers);
                                 persistent counters; capped miss and run history
    entries/ab/abcdef....cce     one file per key: a small frame (key and metadata) + the value
    tmp/                         files being written; renamed into entries/ when complete
    leases/<digest>.lease        single-flight leases (compilecache.stores.leasefile)

Crash safety comes from ordering, not locks (diskcache does the same): a value is written to a
unique temporary file and renamed into place, so a reader sees the old file, the new file or
nothing, never a partial one; the index row is written after the file is published and removed
before the file is unlinked. A file without a row (a writer killed between the two steps) is
adopted on its next read; a row without a file is dropped on its next read. The index is only a
cache of what the files say: if it is lost or corrupt it is rebuilt from the frames.

``get`` never consults the index to find a value (the path is derived from the key), and the
index keeps a running total by triggers instead of summing sizes, so both are O(1) in the number of entries.
Eviction removes the least recently used rows a few at a time, through an index on ``accessed``.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import logging
import os
import sqlite3
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from compilecache.errors import (
    CompileCacheError,
    CorruptEntry,
    EntryTooLarge,
    ReadOnlyStore,
    StoreUnavailable,
)
from compilecache.stores.base import EntryInfo, EntryMeta, Store, StoreURL
from compilecache.stores.capabilities import HISTORY_LIMIT, Counters, History
from compilecache.stores.frame import (
    DIRECTORY_OPTIONS,
    decode_frame,
    directory_and_size,
    encode_frame,
    frame_length,
    key_filename,
    meta_of,
    read_frame,
    write_atomic,
)
from compilecache.stores.leasefile import LeaseFiles
from compilecache.units import DEFAULT_MAX_SIZE, format_size

log = logging.getLogger("compilecache")

# The URL options this backend reads itself (the registry checks a URL against them).
OPTIONS = DIRECTORY_OPTIONS

# Small entries are read whole with the frame; larger ones with a second, exactly sized read.
_SMALL_FILE = 64 * 1024
_FRAME_READ = 4096
_MAX_PREAD = 1 << 30
_TOUCH_INTERVAL = 1.0
_TOUCH_BATCH = 256
_EVICT_BATCH = 16
_STALE_TMP_SECONDS = 3600.0
CACHEDIR_TAG = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by compilecache.\n"
    "# For information about cache directory tags see https://bford.info/cachedir/\n"
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    key TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    created REAL NOT NULL,
    accessed REAL NOT NULL,
    hits INTEGER NOT NULL DEFAULT 0,
    framework TEXT NOT NULL DEFAULT '',
    name TEXT NOT NULL DEFAULT '',
    compile_time REAL NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS entries_accessed ON entries (accessed);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value);
CREATE TABLE IF NOT EXISTS stats (name TEXT PRIMARY KEY, value REAL NOT NULL);
CREATE TABLE IF NOT EXISTS history (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    record TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS history_kind ON history (kind, id);
INSERT OR IGNORE INTO meta VALUES ('schema', 1);
-- The total size is kept by triggers, so no statement that changes a row can forget it
-- (diskcache keeps its size the same way). 'total_bytes', not the 'total_size' that earlier
-- versions kept by hand: a store written by both stays right for this version.
INSERT OR IGNORE INTO meta SELECT 'total_bytes', (SELECT COALESCE(SUM(size), 0) FROM entries)
    WHERE NOT EXISTS (SELECT 1 FROM meta WHERE name = 'total_bytes');
CREATE TRIGGER IF NOT EXISTS entries_total_insert AFTER INSERT ON entries BEGIN
    UPDATE meta SET value = value + NEW.size WHERE name = 'total_bytes';
END;
CREATE TRIGGER IF NOT EXISTS entries_total_delete AFTER DELETE ON entries BEGIN
    UPDATE meta SET value = value - OLD.size WHERE name = 'total_bytes';
END;
CREATE TRIGGER IF NOT EXISTS entries_total_update AFTER UPDATE OF size ON entries BEGIN
    UPDATE meta SET value = value + NEW.size - OLD.size WHERE name = 'total_bytes';
END;
"""


_TOTAL = "SELECT value FROM meta WHERE name = 'total_bytes'"


def _frame_from_head(head: bytes, fd: int) -> tuple[dict[str, Any], int]:
    """The frame of an entry file from its first bytes, reading the rest of a long header."""
    end = frame_length(head)
    if end > len(head):
        head += _pread_exact(fd, end - len(head), len(head))
    return decode_frame(head)


def _pread_exact(fd: int, size: int, offset: int) -> bytes:
    """Read ``size`` bytes at ``offset`` (pread returns at most ~2 GiB per call on Linux)."""
    if size <= _MAX_PREAD:
        data = os.pread(fd, size, offset)
    else:
        parts = []
        done = 0
        while done < size:
            part = os.pread(fd, min(_MAX_PREAD, size - done), offset + done)
            if not part:
                break
            parts.append(part)
            done += len(part)
        data = b"".join(parts)
    if len(data) != size:
        raise CorruptEntry("entry file truncated")
    return data


def _use_wal(conn: sqlite3.Connection, patience_s: float = 10.0) -> None:
    """Put the index in WAL mode (a persistent property of the file: usually it already is).

    ``PRAGMA journal_mode=WAL`` can answer "database is locked" at once, without waiting out the
    busy timeout, while another process closes its last connection (and checkpoints); so it is
    only issued when the mode is not WAL yet, and retried for a while when busy.
    """
    deadline = time.monotonic() + patience_s
    delay = 0.005
    while True:
        try:
            row = conn.execute("PRAGMA journal_mode").fetchone()
            if row is not None and str(row[0]).lower() == "wal":
                return
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.2)


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    """SQLITE_BUSY or SQLITE_LOCKED: another connection holds a lock; trying again may work."""
    name = getattr(exc, "sqlite_errorname", None) or ""
    if name:
        return name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED"))
    return "locked" in str(exc) or "busy" in str(exc)


def _is_corruption(exc: sqlite3.DatabaseError) -> bool:
    """Whether SQLite says the file is damaged or not a database at all, as opposed to busy,
    locked or out of space (``OperationalError``, also a ``DatabaseError``)."""
    name = getattr(exc, "sqlite_errorname", None)
    if name is not None:
        return name in ("SQLITE_CORRUPT", "SQLITE_NOTADB") or name.startswith("SQLITE_CORRUPT_")
    return not isinstance(exc, sqlite3.OperationalError)


P = ParamSpec("P")
R = TypeVar("R")


def _index_errors(method: Callable[P, R]) -> Callable[P, R]:
    """Report a failing SQLite index as StoreUnavailable, the store protocol's error type."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"the store index failed: {exc}") from exc

    return wrapper


@dataclass
class _Access:
    """Accesses of one key since the last flush of the index."""

    accessed: float
    hits: int
    size: int
    header: Mapping[str, Any]
    inode: int


# Stores alive in this process, so that buffered access times are written at exit.
_open_stores: weakref.WeakSet[LocalStore] = weakref.WeakSet()


# Set once the exit flush below has run: what is buffered after it (the run's history record,
# written by the session's own exit hook, which may run later) is written at once instead.
_exit_flushed = False


def _flush_now(buffered: int) -> bool:
    """Whether a buffer of ``buffered`` items is written now rather than by the timer."""
    return buffered >= _TOUCH_BATCH or _exit_flushed


@atexit.register
def _flush_open_stores() -> None:
    global _exit_flushed
    _exit_flushed = True
    for store in list(_open_stores):
        with contextlib.suppress(Exception):
            store.flush_access()


class LocalStore(Store):
    """A bounded, multi-process-safe store in one directory.

    On read-only media (a read-only bind mount, an image layer, a directory this user cannot
    write) the store serves reads: the index is opened immutable (or, when it cannot be, rebuilt
    in memory from the entry files), access times and counters are not recorded, and writes
    raise :class:`~compilecache.errors.ReadOnlyStore`.
    """

    def __init__(self, root: str | os.PathLike[str], max_size: int = DEFAULT_MAX_SIZE) -> None:
        self.root = Path(root).expanduser()
        self.url = str(self.root)
        self.max_size = max_size
        self._warned_too_large = False
        self.entries_dir = self.root / "entries"
        self._entries_prefix = str(self.entries_dir) + os.sep
        self.tmp_dir = self.root / "tmp"
        self.index_path = self.root / "index.sqlite"
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        self._touches: dict[str, _Access] = {}
        self._missed: set[str] = set()
        # History rows (kind, record) not written yet: flushed with the access times.
        self._history_rows: list[tuple[str, str]] = []
        self._history_pid = os.getpid()
        # Entry subdirectories this process has made or written to: not made again per put.
        self._shards: set[Path] = set()
        self._touch_timer: threading.Timer | None = None
        self._touch_timer_pid = os.getpid()
        self._leases = LeaseFiles(self.root / "leases", self._write_atomic, self.path_of)
        _open_stores.add(self)
        self.writable = _writable_directory(self.root)
        self.read_only = not self.writable
        self.counters = _IndexCounters(self)
        self.history = _IndexHistory(self)
        # Read-only media lead nothing: a process that cannot write compiles at once.
        self.leases = self._leases if self.writable else None
        if not self.writable:
            if not self.entries_dir.is_dir():
                raise StoreUnavailable(f"cannot use {self.root} as a cache directory: read-only")
            return
        try:
            self.entries_dir.mkdir(parents=True, exist_ok=True)
            self.tmp_dir.mkdir(exist_ok=True)
            tag = self.root / "CACHEDIR.TAG"
            if not tag.exists():
                self._write_atomic(tag, CACHEDIR_TAG.encode())
        except OSError as exc:
            raise StoreUnavailable(f"cannot use {self.root} as a cache directory: {exc}") from exc
        self._clean_stale_tmp()

    # -- the index ---------------------------------------------------------------------------

    def _db(self) -> sqlite3.Connection:
        """This process's connection, opened lazily and reopened after a fork."""
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        if not self.writable:
            self._conn, self._pid = self._connect_read_only(), os.getpid()
            return self._conn
        try:
            conn, fresh = self._connect()
        except sqlite3.DatabaseError as exc:
            if not _is_corruption(exc):
                # Busy or locked (other processes checkpointing, a slow disk): not corrupt.
                # Setting the index aside here would pull it from under every other process.
                raise
            # A corrupt index is only a lost cache of the files' metadata: set it aside, rebuild.
            self._set_aside_index()
            conn, fresh = self._connect()
        self._conn, self._pid = conn, os.getpid()
        if fresh and any(self.entries_dir.iterdir()):
            self.rebuild_index()
        return conn

    def _connect(self) -> tuple[sqlite3.Connection, bool]:
        """Open the index; also says whether its tables had to be created (a fresh index)."""
        conn = sqlite3.connect(
            self.index_path, timeout=30.0, isolation_level=None, check_same_thread=False
        )
        try:
            _use_wal(conn)
            # NORMAL is safe with WAL: a power loss may drop recent index rows, which the files
            # can always restore; it never corrupts the database.
            conn.execute("PRAGMA synchronous=NORMAL")
            # Not "does the file exist": a zero-length file (truncated by a crash or a user) is a
            # valid empty database, and it too must be rebuilt from the entry files.
            fresh = (
                conn.execute(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'entries'"
                ).fetchone()
                is None
            )
            conn.executescript(_SCHEMA)
        except sqlite3.DatabaseError:
            conn.close()
            raise
        return conn, fresh

    def _connect_read_only(self) -> sqlite3.Connection:
        """The index of a store on read-only media: opened immutable (no locks, no -shm file,
        which read-only media cannot hold), or rebuilt in memory from the entry files when it
        is missing, damaged or incomplete."""
        uri = f"{self.index_path.as_uri()}?mode=ro&immutable=1"
        try:
            conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
            if conn.execute(
                "SELECT count(*) FROM sqlite_master WHERE name IN ('entries', 'meta', 'stats', "
                "'history')"
            ).fetchone() == (4,):
                return conn
            conn.close()
        except sqlite3.DatabaseError:
            pass
        conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        conn.executescript(_SCHEMA)
        self._conn, self._pid = conn, os.getpid()
        self.rebuild_index()
        return conn

    def _set_aside_index(self) -> None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for suffix in ("", "-wal", "-shm"):
            src = self.index_path.with_name(self.index_path.name + suffix)
            with contextlib.suppress(FileNotFoundError):
                src.rename(src.with_name(f"{src.name}.corrupt-{stamp}"))

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            conn = self._db()
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                # A failed COMMIT (disk full, I/O error) can leave the transaction open, and then
                # every later BEGIN of this connection fails; SQLite may also have rolled back
                # already, when a second ROLLBACK would raise and hide the original error.
                if conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                raise

    def _upsert_row(
        self, conn: sqlite3.Connection, key: str, size: int, meta: EntryMeta, created: float
    ) -> None:
        # An upsert, not INSERT OR REPLACE: a replaced row fires no delete trigger.
        conn.execute(
            "INSERT INTO entries VALUES (?, ?, ?, ?, 0, ?, ?, ?) ON CONFLICT(key) DO UPDATE SET "
            "size = excluded.size, created = excluded.created, accessed = excluded.accessed, "
            "hits = 0, framework = excluded.framework, name = excluded.name, "
            "compile_time = excluded.compile_time",
            (key, size, created, created, meta.framework, meta.name, meta.compile_time_s),
        )

    def _drop_row(self, conn: sqlite3.Connection, key: str) -> bool:
        return conn.execute("DELETE FROM entries WHERE key = ?", (key,)).rowcount > 0

    @_index_errors
    def total_size(self) -> int:
        """Bytes of values the index accounts for (a running total, not a scan)."""
        self.flush_access()
        with self._lock:
            db = self._db()
            row = db.execute(_TOTAL).fetchone()
            if row is None:  # an earlier version's index on read-only media: count it once
                row = db.execute("SELECT COALESCE(SUM(size), 0) FROM entries").fetchone()
        return int(row[0])

    # -- the Store protocol ------------------------------------------------------------------

    def path_of(self, key: str) -> Path:
        return Path(self._entries_prefix + key_filename(key))

    def get(self, key: str) -> bytes | None:
        path = self._entries_prefix + key_filename(key)  # a str: Path() costs on hot paths
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            if self.writable:
                self._note_miss(key)
            return None
        except OSError as exc:
            raise StoreUnavailable(f"cannot read {path}: {exc}") from exc
        try:
            # Positional reads into exactly sized buffers: a small file in one read, a large one
            # as its frame and then its value, with no buffering and one copy of the value.
            stat = os.fstat(fd)
            small = stat.st_size <= _SMALL_FILE
            head = os.pread(fd, stat.st_size if small else _FRAME_READ, 0)
            header, offset = _frame_from_head(head, fd)
            # Key collisions are astronomically unlikely, but a wrong hit is never acceptable.
            if header["key"] != key:
                return None
            size = stat.st_size - offset
            value = head[offset:] if small else _pread_exact(fd, size, offset)
        except CorruptEntry:
            self._remove(key, Path(path))
            raise
        except OSError as exc:
            raise StoreUnavailable(f"cannot read {path}: {exc}") from exc
        finally:
            os.close(fd)
        self._note_access(key, len(value), header, stat.st_ino)
        return value

    def _note_access(self, key: str, size: int, header: Mapping[str, Any], inode: int) -> None:
        """Remember the access for LRU order; the index is updated in batches, off the hot path.

        A write transaction per hit would cost more than reading a megabyte, so accesses are
        buffered and written by a background timer ``_TOUCH_INTERVAL`` seconds after the first
        one (and before any read of the index, and at close or exit): a lookup is one read and
        one checksum, never an index write. Only a buffer of ``_TOUCH_BATCH`` keys is flushed
        inline, to bound it. LRU order is approximate by design, as in ccache.
        """
        if not self.writable:
            return  # read-only media: LRU order cannot be kept, and need not be
        with self._lock:
            previous = self._touches.get(key)
            hits = previous.hits + 1 if previous else 1
            self._touches[key] = _Access(time.time(), hits, size, header, inode)
            full = _flush_now(len(self._touches))
            self._schedule_flush(full)
        if full:
            self.flush_access()

    def _note_miss(self, key: str) -> None:
        """Remember a key whose file was missing, to drop its row if it has one (the file was
        removed behind our back). Checked in the batched flush: a cold compile's lookup is a
        failed open, not an index query (measured: 0.5 ms per miss inline)."""
        with self._lock:
            self._missed.add(key)
            full = _flush_now(len(self._missed))
            self._schedule_flush(full)
        if full:
            self.flush_access()

    def _schedule_flush(self, full: bool) -> None:
        """Start the flush timer unless one runs or the caller flushes now (hold the lock)."""
        if self._touch_timer_pid != os.getpid():  # a forked child: the timer was the parent's
            self._touch_timer, self._touch_timer_pid = None, os.getpid()
        if not full and self._touch_timer is None:
            self._touch_timer = threading.Timer(_TOUCH_INTERVAL, self._timed_flush)
            self._touch_timer.daemon = True
            self._touch_timer.start()

    def _timed_flush(self) -> None:
        with self._lock:
            self._touch_timer = None
        with contextlib.suppress(Exception):  # LRU order is best effort; never a crash
            self.flush_access()

    def flush_access(self) -> None:
        """Write buffered access times, hit counts and history rows, and repair rows the files
        contradict: a file whose row a crash lost is adopted, and a row whose size is not the
        file's (a writer killed between publishing and indexing) is corrected."""
        with self._lock:
            touches, self._touches = self._touches, {}
            missed, self._missed = self._missed, set()
            rows, self._history_rows = self._own_history_rows(), []
            if missed:
                self._forget(missed - touches.keys())
            if not touches and not rows:
                return
            try:
                with self._transaction() as conn:
                    for key, access in touches.items():
                        self._apply_access(conn, key, access)
                    _insert_history(conn, rows)
            except sqlite3.Error as exc:
                # LRU order is approximate by design, and history a convenience: a busy index
                # must not fail a hit.
                if rows:
                    log.debug("compilecache: %d history records not kept: %s", len(rows), exc)

    def _add_history(self, kind: str, record: str) -> None:
        """Buffer a history row: written by the next flush (its timer, a read of the history,
        close or exit), in one transaction with the others; a run's misses each took the
        index's write lock for their row before."""
        with self._lock:
            rows = self._own_history_rows()
            rows.append((kind, record))
            full = _flush_now(len(rows))
            self._schedule_flush(full)
        if full:
            self.flush_access()

    def _own_history_rows(self) -> list[tuple[str, str]]:
        """The buffered history rows, none in a forked child (they are its parent's to write)."""
        if self._history_pid != os.getpid():
            self._history_rows, self._history_pid = [], os.getpid()
        return self._history_rows

    def _apply_access(self, conn: sqlite3.Connection, key: str, access: _Access) -> None:
        # The common case, a row that agrees with the file we read, needs no stat or SELECT.
        cur = conn.execute(
            "UPDATE entries SET accessed = max(accessed, ?), hits = hits + ? "
            "WHERE key = ? AND size = ?",
            (access.accessed, access.hits, key, access.size),
        )
        if cur.rowcount:
            return
        try:
            current = os.stat(self.path_of(key)).st_ino == access.inode
        except OSError:
            current = False
        row = conn.execute("SELECT size FROM entries WHERE key = ?", (key,)).fetchone()
        if row is None:
            if current:
                meta = meta_of(access.header)
                self._upsert_row(conn, key, access.size, meta, access.accessed)
            return
        conn.execute(
            "UPDATE entries SET accessed = max(accessed, ?), hits = hits + ? WHERE key = ?",
            (access.accessed, access.hits, key),
        )
        # Only the file we read may correct the row: a newer put may have replaced it since.
        if current and row[0] != access.size:
            conn.execute("UPDATE entries SET size = ? WHERE key = ?", (access.size, key))

    def _forget(self, keys: Set[str]) -> None:
        """Rows without a file (removed behind our back) among ``keys``: drop them."""
        try:
            # Read first: true misses must not take the index's write lock.
            db = self._db()
            listed = sorted(keys)
            rows: list[str] = []
            for i in range(0, len(listed), 500):  # SQLite's bound on parameters
                chunk = listed[i : i + 500]
                marks = ",".join("?" * len(chunk))
                query = f"SELECT key FROM entries WHERE key IN ({marks})"
                rows += [row[0] for row in db.execute(query, chunk)]
            if not rows:
                return
            with self._transaction() as conn:
                # Looked at under the write lock: a file written since the miss keeps its row,
                # and a put whose file comes later writes its row after ours is dropped.
                for key in rows:
                    if not os.path.exists(self.path_of(key)):
                        self._drop_row(conn, key)
        except Exception as exc:  # a repair, best effort: never fails the read that flushes
            log.debug("compilecache: could not drop index rows of missing files: %s", exc)

    def _remove(self, key: str, path: Path) -> None:
        if not self.writable:
            return  # read-only media: a damaged entry is a miss, and stays
        with contextlib.suppress(sqlite3.Error), self._transaction() as conn:
            self._drop_row(conn, key)
        with contextlib.suppress(OSError):
            path.unlink()

    def _refuse_writes(self) -> None:
        if not self.writable:
            raise ReadOnlyStore(f"{self.root} is on read-only media")

    def put(self, key: str, value: bytes, meta: EntryMeta | None = None) -> None:
        self.put_many([(key, value, meta)])

    def put_many(self, items: Sequence[tuple[str, bytes, EntryMeta | None]]) -> None:
        """Several entries (``put`` is one): every file first, then every row in one
        transaction (a prefetch backfills a hundred entries; a transaction each cost a commit
        each). A failure part way still indexes the files already published, then raises."""
        self._refuse_writes()
        # The index first: opened after the files, it would adopt them in directory order and
        # their upserted rows would keep that order in the LRU's ties.
        try:
            with self._lock:
                self._db()
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"cannot open the index {self.index_path}: {exc}") from exc
        created = time.time()
        rows: list[tuple[str, int, EntryMeta]] = []
        failure: CompileCacheError | None = None
        for key, value, meta in items:
            if len(value) > self.max_size:
                # It would evict everything else and then itself: not written, said once.
                failure = self._too_large(key, len(value))
                continue
            meta = meta or EntryMeta()
            path = self.path_of(key)
            try:
                self._write_entry_file(path, encode_frame(key, meta, created, len(value)), value)
            except OSError as exc:
                failure = StoreUnavailable(f"cannot write {path}: {exc}")
                failure.__cause__ = exc
                break
            rows.append((key, len(value), meta))
        try:
            if rows:
                with self._transaction() as conn:
                    for key, size, meta in rows:
                        self._upsert_row(conn, key, size, meta, created)
                    total = conn.execute(_TOTAL).fetchone()
                with self._lock:
                    # A miss written since has its file and row: nothing for _forget to check
                    # (a cold run would otherwise take the index's write lock again per miss).
                    self._missed.difference_update(key for key, _, _ in rows)
                if total and total[0] > self.max_size:
                    self.evict(self.max_size)
        except sqlite3.Error as exc:
            # The files are published and valid; their next reads adopt them into the index.
            raise StoreUnavailable(f"cannot update the index {self.index_path}: {exc}") from exc
        if failure is not None:
            raise failure

    def _too_large(self, key: str, size: int) -> EntryTooLarge:
        if not self._warned_too_large:
            self._warned_too_large = True
            log.warning(
                "compilecache: an entry of %s is larger than the whole size bound of %s "
                "(%s, COMPILECACHE_MAX_SIZE: a bare number is bytes); such entries are not kept",
                format_size(size),
                self.root,
                format_size(self.max_size),
            )
        return EntryTooLarge(
            f"{key}: {size} bytes is more than {self.root}'s whole bound of {self.max_size} bytes"
        )

    def _write_entry_file(self, path: Path, *chunks: bytes) -> None:
        """Publish an entry's file, making its subdirectory first where this process has not
        (a ``mkdir`` per put cost a cold miss a system call), or again where it was removed."""
        if path.parent not in self._shards:
            path.parent.mkdir(exist_ok=True)
            self._shards.add(path.parent)
        try:
            self._write_atomic(path, *chunks)
        except FileNotFoundError:  # the subdirectory was removed behind our back (clear)
            path.parent.mkdir(exist_ok=True)
            self._write_atomic(path, *chunks)

    def _write_atomic(self, path: Path, *chunks: bytes) -> None:
        write_atomic(self.tmp_dir / f"{uuid.uuid4().hex}.tmp", path, chunks)

    @_index_errors
    def delete(self, key: str) -> bool:
        self._refuse_writes()
        path = self.path_of(key)
        with self._transaction() as conn:
            had_row = self._drop_row(conn, key)
        try:
            path.unlink()
        except FileNotFoundError:
            return had_row
        return True

    @_index_errors
    def stat(self, key: str) -> EntryInfo | None:
        self.flush_access()
        with self._lock:
            row = self._db().execute("SELECT * FROM entries WHERE key = ?", (key,)).fetchone()
        return _info(row) if row else None

    @_index_errors
    def scan(self, prefix: str = "") -> Iterator[EntryInfo]:
        self.flush_access()
        # Keys sharing a prefix are contiguous in the primary key's (UTF-8 byte) order and
        # start at the prefix itself: walk that range of the index and stop at the first
        # key outside it. (substr() scanned every row, and a prefix holding a NUL matched nothing.)
        rows = []
        with self._lock:
            cursor = self._db().execute(
                "SELECT * FROM entries WHERE key >= ? ORDER BY key", (prefix,)
            )
            for row in cursor:
                if not row[0].startswith(prefix):
                    break
                rows.append(row)
            cursor.close()
        return iter([_info(row) for row in rows])

    def close(self) -> None:
        self.flush_access()
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None

    # -- bounds, stats and repair --------------------------------------------------------------

    @_index_errors
    def evict(self, target_size: int) -> int:
        """Remove least recently used entries until the total is at most ``target_size``."""
        self._refuse_writes()
        self.flush_access()
        removed = 0
        while True:
            with self._transaction() as conn:
                total = conn.execute(_TOTAL).fetchone()
                if total is None or total[0] <= target_size:
                    return removed
                candidates = conn.execute(
                    "SELECT key, size FROM entries ORDER BY accessed LIMIT ?", (_EVICT_BATCH,)
                ).fetchall()
                if not candidates:
                    return removed
                # The batch only saves round trips: stop at the bound, or a put evicts up to a
                # whole batch of entries (itself included) when one would have been enough.
                remaining = total[0]
                victims = []
                for key, size in candidates:
                    if remaining <= target_size:
                        break
                    self._drop_row(conn, key)
                    remaining -= size
                    victims.append(key)
            # Rows go first, files second: a reader racing us sees a clean miss at worst.
            for key in victims:
                with contextlib.suppress(FileNotFoundError):
                    self.path_of(key).unlink()
                removed += 1

    def peek(self, key: str) -> bytes | None:
        """The value under ``key`` without counting a hit, refreshing its LRU position or
        repairing anything: a damaged file raises CorruptEntry and stays where it is."""
        return self._peek(key, -1)

    def head(self, key: str, size: int) -> bytes | None:
        """The first ``size`` bytes of the value, read from its file as :meth:`peek` reads."""
        return self._peek(key, size)

    def _peek(self, key: str, size: int) -> bytes | None:
        path = self.path_of(key)
        try:
            with open(path, "rb") as f:
                header, _ = read_frame(f)
                value = f.read(size)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreUnavailable(f"cannot read {path}: {exc}") from exc
        if header["key"] != key:
            raise CorruptEntry(f"the file of {key!r} holds another key's data ({header['key']!r})")
        expected = header.get("size")
        if size >= 0 and isinstance(expected, int):
            expected = min(expected, size)
        if isinstance(expected, int) and expected != len(value):
            raise CorruptEntry(f"entry file truncated: {len(value)} of {expected} bytes")
        return value

    @_index_errors
    def rebuild_index(self) -> int:
        """Recreate every index row from the entry files' frames; returns the entry count."""
        self.flush_access()
        rows = []
        for path in self.entries_dir.glob("*/*.cce"):
            try:
                with open(path, "rb") as f:
                    header, _ = read_frame(f)
                    size = os.fstat(f.fileno()).st_size - f.tell()
            except (OSError, CorruptEntry):
                with contextlib.suppress(OSError):
                    path.unlink()
                continue
            if path != self.path_of(header["key"]):
                continue
            created = float(header.get("created", 0.0))
            meta = meta_of(header)
            rows.append(
                (
                    header["key"],
                    size,
                    created,
                    created,
                    0,
                    meta.framework,
                    meta.name,
                    meta.compile_time_s,
                )
            )
        with self._transaction() as conn:
            conn.execute("DELETE FROM entries")
            conn.executemany("INSERT OR REPLACE INTO entries VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
            # The triggers kept the total; recounting it also repairs an index edited by hand.
            conn.execute(
                "UPDATE meta SET value = (SELECT COALESCE(SUM(size), 0) FROM entries) "
                "WHERE name = 'total_bytes'"
            )
        return len(rows)

    def _clean_stale_tmp(self) -> None:
        """Remove temporary files that writers killed mid-put left behind long ago."""
        cutoff = time.time() - _STALE_TMP_SECONDS
        try:
            for tmp in self.tmp_dir.iterdir():
                with contextlib.suppress(OSError):
                    if tmp.stat().st_mtime < cutoff:
                        tmp.unlink()
        except OSError:
            pass


def _info(row: tuple[Any, ...]) -> EntryInfo:
    key, size, created, accessed, hits, framework, name, compile_time = row
    return EntryInfo(key, size, created, accessed, hits, EntryMeta(framework, name, compile_time))


def from_url(url: StoreURL) -> LocalStore:
    path, size = directory_and_size(url)
    return LocalStore(path, max_size=size)


def _writable_directory(root: Path) -> bool:
    """Whether entries can be written under ``root`` (False on read-only media)."""
    probe = root
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent  # a store to be created: judge the directory it will be made in
    try:
        if os.statvfs(probe).f_flag & os.ST_RDONLY:
            return False
    except OSError:
        return True  # cannot tell: try, and let the writes report what fails
    return os.access(probe, os.W_OK)


class _IndexCounters(Counters):
    """The counters: rows of the index's ``stats`` table."""

    def __init__(self, store: LocalStore) -> None:
        self._store = store

    @_index_errors
    def add(self, counters: Mapping[str, float]) -> None:
        if not self._store.writable:
            return  # read-only media keep the counters they were shipped with
        with self._store._transaction() as conn:
            conn.executemany(
                "INSERT INTO stats VALUES (?, ?) "
                "ON CONFLICT(name) DO UPDATE SET value = value + excluded.value",
                list(counters.items()),
            )

    @_index_errors
    def read(self) -> dict[str, float]:
        with self._store._lock:
            rows = self._store._db().execute("SELECT name, value FROM stats").fetchall()
        return {name: value for name, value in rows}

    @_index_errors
    def zero(self) -> None:
        self._store._refuse_writes()
        with self._store._transaction() as conn:
            conn.execute("DELETE FROM stats")


class _IndexHistory(History):
    """History (miss explanations, run totals): rows beside the index, never entries."""

    def __init__(self, store: LocalStore) -> None:
        self._store = store

    def add(self, kind: str, record: Mapping[str, object]) -> None:
        if not self._store.writable:
            return
        self._store._add_history(kind, json.dumps(record, default=str, separators=(",", ":")))

    @_index_errors
    def read(self, kind: str, limit: int = HISTORY_LIMIT) -> list[dict[str, object]]:
        self._store.flush_access()  # this process's own records first
        with self._store._lock:
            rows = (
                self._store._db()
                .execute(
                    "SELECT record FROM history WHERE kind = ? ORDER BY id DESC LIMIT ?",
                    (kind, limit),
                )
                .fetchall()
            )
        out: list[dict[str, object]] = []
        for (raw,) in rows:
            with contextlib.suppress(ValueError):
                record = json.loads(raw)
                if isinstance(record, dict):
                    out.append(record)
        return out

    @_index_errors
    def clear(self) -> None:
        self._store._refuse_writes()
        with self._store._lock:
            self._store._history_rows.clear()
        with self._store._transaction() as conn:
            conn.execute("DELETE FROM history")


def _insert_history(conn: sqlite3.Connection, rows: list[tuple[str, str]]) -> None:
    """Append history ``rows`` (kind, record) and cap each kind that grew at ``HISTORY_LIMIT``
    records, dropping the oldest (a walk of the (kind, id) index, bounded)."""
    if not rows:
        return
    conn.executemany("INSERT INTO history (kind, record) VALUES (?, ?)", rows)
    for kind in {kind for kind, _ in rows}:
        conn.execute(
            "DELETE FROM history WHERE kind = ? AND id <= (SELECT id FROM history "
            "WHERE kind = ? ORDER BY id DESC LIMIT 1 OFFSET ?)",
            (kind, kind, HISTORY_LIMIT),
        )
