"""The local disk store: sharded entry files plus a SQLite index for metadata and LRU order.

Layout of a store directory::

    CACHEDIR.TAG                 tells backup tools to skip the directory
    index.sqlite (-wal, -shm)    key -> size, times, hits, framework, name; running total size
    entries/ab/abcdef....cce     one file per key: a small frame (key and metadata) + the value
    tmp/                         files being written; renamed into entries/ when complete

Crash safety comes from ordering, not locks (diskcache does the same): a value is written to a
unique temporary file and renamed into place, so a reader sees the old file, the new file or
nothing, never a partial one; the index row is written after the file is published and removed
before the file is unlinked. A file without a row (a writer killed between the two steps) is
adopted on its next read; a row without a file is dropped on its next read. The index is only a
cache of what the files say: if it is lost or corrupt it is rebuilt from the frames.

``get`` never consults the index to find a value (the path is derived from the key), and ``put``
keeps a running total instead of summing sizes, so both are O(1) in the number of entries.
Eviction removes the least recently used rows a few at a time, through an index on ``accessed``.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import sqlite3
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from compilecache.config import DEFAULT_MAX_SIZE, parse_size
from compilecache.errors import CorruptEntry, StoreUnavailable
from compilecache.stores.base import EntryInfo, EntryMeta, StoreURL

_FRAME_MAGIC = b"CCS1"
_FRAME_PREFIX = struct.Struct(">4sI")
_MAX_FRAME_HEADER = 1024 * 1024
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
INSERT OR IGNORE INTO meta VALUES ('total_size', 0);
INSERT OR IGNORE INTO meta VALUES ('schema', 1);
"""


def key_filename(key: str) -> str:
    """The sharded relative path of ``key``'s file: a hash, so any key is a safe file name."""
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
    return f"{digest[:2]}/{digest}.cce"


def _encode_frame(key: str, meta: EntryMeta, created: float) -> bytes:
    header = json.dumps(
        {
            "key": key,
            "framework": meta.framework,
            "name": meta.name,
            "compile_time_s": meta.compile_time_s,
            "created": created,
        },
        separators=(",", ":"),
    ).encode()
    return _FRAME_PREFIX.pack(_FRAME_MAGIC, len(header)) + header


def _read_frame(f: Any) -> dict[str, Any]:
    """Read the frame at the start of an open entry file; raises CorruptEntry when damaged."""
    prefix = f.read(_FRAME_PREFIX.size)
    if len(prefix) != _FRAME_PREFIX.size:
        raise CorruptEntry("entry file truncated")
    magic, length = _FRAME_PREFIX.unpack(prefix)
    if magic != _FRAME_MAGIC or length > _MAX_FRAME_HEADER:
        raise CorruptEntry("entry file has a bad frame")
    raw = f.read(length)
    try:
        header = json.loads(raw)
        if not isinstance(header, dict) or not isinstance(header.get("key"), str):
            raise ValueError("no key")
    except ValueError:
        raise CorruptEntry("entry file has an unreadable frame header") from None
    return header


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


class LocalStore:
    """A bounded, multi-process-safe store in one directory."""

    def __init__(self, root: str | os.PathLike[str], max_size: int = DEFAULT_MAX_SIZE) -> None:
        self.root = Path(root).expanduser()
        self.url = str(self.root)
        self.max_size = max_size
        self.entries_dir = self.root / "entries"
        self.tmp_dir = self.root / "tmp"
        self.index_path = self.root / "index.sqlite"
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
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
        try:
            conn, fresh = self._connect()
        except sqlite3.DatabaseError:
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
            conn.execute("PRAGMA journal_mode=WAL")
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
        row = conn.execute("SELECT size FROM entries WHERE key = ?", (key,)).fetchone()
        old = row[0] if row else 0
        conn.execute(
            "INSERT OR REPLACE INTO entries VALUES (?, ?, ?, ?, 0, ?, ?, ?)",
            (key, size, created, created, meta.framework, meta.name, meta.compile_time_s),
        )
        conn.execute("UPDATE meta SET value = value + ? WHERE name = 'total_size'", (size - old,))

    def _drop_row(self, conn: sqlite3.Connection, key: str) -> bool:
        row = conn.execute("SELECT size FROM entries WHERE key = ?", (key,)).fetchone()
        if row is None:
            return False
        conn.execute("DELETE FROM entries WHERE key = ?", (key,))
        conn.execute("UPDATE meta SET value = value - ? WHERE name = 'total_size'", (row[0],))
        return True

    @_index_errors
    def total_size(self) -> int:
        """Bytes of values the index accounts for (a running total, not a scan)."""
        with self._lock:
            row = self._db().execute("SELECT value FROM meta WHERE name = 'total_size'").fetchone()
        return int(row[0]) if row else 0

    # -- the Store protocol ------------------------------------------------------------------

    def path_of(self, key: str) -> Path:
        return self.entries_dir / key_filename(key)

    def get(self, key: str) -> bytes | None:
        path = self.path_of(key)
        try:
            with open(path, "rb") as f:
                header = _read_frame(f)
                # Key collisions are astronomically unlikely, but a wrong hit is never acceptable.
                if header["key"] != key:
                    return None
                value = f.read()
        except FileNotFoundError:
            self._forget(key)
            return None
        except CorruptEntry:
            self._remove(key, path)
            raise
        except OSError as exc:
            raise StoreUnavailable(f"cannot read {path}: {exc}") from exc
        self._touch(key, len(value), header)
        return value

    def _touch(self, key: str, size: int, header: Mapping[str, Any]) -> None:
        """Record the access for LRU order; adopt a file whose row a crash lost."""
        now = time.time()
        try:
            with self._transaction() as conn:
                cur = conn.execute(
                    "UPDATE entries SET accessed = ?, hits = hits + 1 WHERE key = ?", (now, key)
                )
                if cur.rowcount == 0:
                    self._upsert_row(conn, key, size, _meta_from_frame(header), now)
        except sqlite3.Error:
            # LRU order is approximate by design; a busy index must not fail a hit.
            pass

    def _forget(self, key: str) -> None:
        """A row without a file (the file was removed behind our back): drop the row."""
        try:
            # Read first: a true miss must not take the index's write lock.
            if self.stat(key) is None:
                return
            with self._transaction() as conn:
                self._drop_row(conn, key)
        except sqlite3.Error:
            pass

    def _remove(self, key: str, path: Path) -> None:
        with contextlib.suppress(sqlite3.Error), self._transaction() as conn:
            self._drop_row(conn, key)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()

    def put(self, key: str, value: bytes, meta: EntryMeta | None = None) -> None:
        meta = meta or EntryMeta()
        created = time.time()
        path = self.path_of(key)
        frame = _encode_frame(key, meta, created)
        try:
            path.parent.mkdir(exist_ok=True)
            self._write_atomic(path, frame, value)
        except OSError as exc:
            raise StoreUnavailable(f"cannot write {path}: {exc}") from exc
        try:
            with self._transaction() as conn:
                self._upsert_row(conn, key, len(value), meta, created)
                total = conn.execute("SELECT value FROM meta WHERE name = 'total_size'").fetchone()
            if total and total[0] > self.max_size:
                self.evict(self.max_size)
        except sqlite3.Error as exc:
            # The file is published and valid; the next read adopts it into the index.
            raise StoreUnavailable(f"cannot update the index {self.index_path}: {exc}") from exc

    def _write_atomic(self, path: Path, *chunks: bytes) -> None:
        tmp = self.tmp_dir / f"{uuid.uuid4().hex}.tmp"
        try:
            with open(tmp, "wb") as f:
                for chunk in chunks:
                    f.write(chunk)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise

    @_index_errors
    def delete(self, key: str) -> bool:
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
        with self._lock:
            row = self._db().execute("SELECT * FROM entries WHERE key = ?", (key,)).fetchone()
        return _info(row) if row else None

    @_index_errors
    def scan(self, prefix: str = "") -> Iterator[EntryInfo]:
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
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None

    # -- bounds, stats and repair --------------------------------------------------------------

    @_index_errors
    def evict(self, target_size: int) -> int:
        """Remove least recently used entries until the total is at most ``target_size``."""
        removed = 0
        while True:
            with self._transaction() as conn:
                total = conn.execute("SELECT value FROM meta WHERE name = 'total_size'").fetchone()
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

    @_index_errors
    def add_stats(self, counters: Mapping[str, float]) -> None:
        with self._transaction() as conn:
            conn.executemany(
                "INSERT INTO stats VALUES (?, ?) "
                "ON CONFLICT(name) DO UPDATE SET value = value + excluded.value",
                list(counters.items()),
            )

    @_index_errors
    def read_stats(self) -> dict[str, float]:
        with self._lock:
            rows = self._db().execute("SELECT name, value FROM stats").fetchall()
        return {name: value for name, value in rows}

    @_index_errors
    def zero_stats(self) -> None:
        with self._transaction() as conn:
            conn.execute("DELETE FROM stats")

    @_index_errors
    def rebuild_index(self) -> int:
        """Recreate every index row from the entry files' frames; returns the entry count."""
        rows = []
        for path in self.entries_dir.glob("*/*.cce"):
            try:
                with open(path, "rb") as f:
                    header = _read_frame(f)
                    size = os.fstat(f.fileno()).st_size - f.tell()
            except (OSError, CorruptEntry):
                with contextlib.suppress(OSError):
                    path.unlink()
                continue
            if path != self.path_of(header["key"]):
                continue
            created = float(header.get("created", 0.0))
            meta = _meta_from_frame(header)
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
            conn.execute(
                "UPDATE meta SET value = (SELECT COALESCE(SUM(size), 0) FROM entries) "
                "WHERE name = 'total_size'"
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


def _meta_from_frame(header: Mapping[str, Any]) -> EntryMeta:
    try:
        return EntryMeta(
            framework=str(header.get("framework", "")),
            name=str(header.get("name", "")),
            compile_time_s=float(header.get("compile_time_s", 0.0)),
        )
    except (TypeError, ValueError):
        return EntryMeta()


def _info(row: tuple[Any, ...]) -> EntryInfo:
    key, size, created, accessed, hits, framework, name, compile_time = row
    return EntryInfo(key, size, created, accessed, hits, EntryMeta(framework, name, compile_time))


def from_url(url: StoreURL) -> Any:
    if url.params.get("shared", "").strip().lower() in ("1", "true", "yes", "on"):
        from compilecache.stores.sharedfs import from_url as shared_from_url

        return shared_from_url(url)  # NFS/Lustre: no SQLite index, no flock
    path = url.path if url.scheme == "file" and not url.netloc else url.netloc + url.path
    if not path:
        raise StoreUnavailable(f"no directory in store URL {url.raw!r}")
    size = url.max_size or DEFAULT_MAX_SIZE
    if "max_size" in url.params:
        size = parse_size(url.params["max_size"], "max_size")
    return LocalStore(path, max_size=size)
