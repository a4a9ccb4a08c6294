"""``s3://``, ``gs://``, ``az://`` and any other fsspec protocol: a store in a bucket.

URL: ``s3://bucket/prefix?options``. Options this store reads: ``timeout`` (connect and read
timeout, seconds, default 5; a large object's parts may take 60 s), ``retries`` (attempts per request, default 1), ``conditional=0``
(disable conditional writes). S3, GCS and Azure Blob Storage (``az://container/prefix``,
``abfs[s]://container@account.dfs.core.windows.net/prefix``) are spoken through obstore
(:mod:`~compilecache.stores.obstorefs`, which lists each cloud's options and reads its standard
credential chain); any other fsspec protocol gets the remaining options as its storage options.

Layout: ``<prefix>/ab/<blake2b(key)>.cce``, each object a frame (the key and metadata as a small
JSON header, with the value's size) followed by the value: one object per entry, so publication
is the object store's own atomic PUT. ``stat`` and ``scan`` read the first few KB of each object
with range requests (concurrently where the filesystem is asynchronous), never the payload.
Object stores keep no access times: ``accessed`` is the creation time and ``hits`` is 0, so
pruning there is by age.

Racing writers. Where the protocol supports conditional writes (S3 and S3-compatible servers with
``If-None-Match``/``If-Match``, and Azure; GCS creates only if absent), ``put`` is a compare and
swap against what it saw when it started: it reads the object's ETag (or sees none), then writes
with ``If-None-Match: *`` (create if absent) or ``If-Match: <etag>`` (replace what it saw). A
writer whose condition fails lost a race to a writer that published an equivalent entry for the
same key in the meantime, and leaves that entry alone: racing writers never clobber each other,
and a sequential overwrite still replaces. Where a server answers that conditional writes are not
implemented, the store falls back to plain PUTs (still atomic per object) and says so once.
On filesystem-like protocols (sftp, smb, ...), where an open-for-write is visible while being
written, values are written to a temporary name and renamed into place.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from compilecache.errors import (
    CompileCacheError,
    ConfigError,
    CorruptEntry,
    StoreUnavailable,
    failure_text,
)
from compilecache.redaction import redact
from compilecache.stores.base import (
    WRAPPER_PARAMS,
    EntryInfo,
    EntryMeta,
    OneReadStore,
    StoreURL,
    flag,
)
from compilecache.stores.capabilities import (
    NO_COORDINATION,
    UNWRITTEN_SUFFIX,
    Claim,
    Counters,
    Found,
    Leases,
)
from compilecache.stores.frame import (
    decode_frame,
    encode_frame,
    frame_length,
    host_label,
    info_of,
    meta_of,
)
from compilecache.stores.frame import key_filename as _key_filename
from compilecache.stores.obstorefs import PROTOCOLS as _OBSTORE_PROTOCOLS
from compilecache.stores.obstorefs import ObstoreFS, open_fs, split_location
from compilecache.units import parse_seconds

log = logging.getLogger("compilecache")

_PROBE = 4096  # bytes read from the start of an object to get its frame
_SCAN_BATCH = 256
_STATS_ATTEMPTS = 5
DEFAULT_TIMEOUT = 5.0
# One attempt per request: a slow or failing bucket must cost its timeout once (the Guarded
# wrapper then skips it for a while), not once per retry.
DEFAULT_RETRIES = 1
MAX_CONNECTIONS = 64
# Protocols where one PUT publishes a whole object atomically.
_OBJECT_PROTOCOLS = frozenset(
    {"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oci", "oss", "memory", "r2"}
)
# Protocols with conditional writes the store knows how to ask for.
_CONDITIONAL = frozenset({"s3", "s3a", "gs", "gcs"})
# URL options this backend reads itself; the rest go to obstore or the fsspec filesystem.
OPTIONS = frozenset({"timeout", "retries", "conditional"})
_OWN_PARAMS = OPTIONS | WRAPPER_PARAMS


class ObjectStore(OneReadStore):
    """Entries as objects under ``root`` on an fsspec filesystem."""

    # Object names are hashes, so a scan reads the head of every object under the prefix (a
    # request each: 100,000 for a bucket of 100,000 entries).
    scans_cheaply = False

    def __init__(
        self,
        fs: Any,
        root: str,
        *,
        url: str | None = None,
        conditional: bool | None = None,
        atomic_put: bool | None = None,
    ) -> None:
        protocol = _protocol(fs)
        self.fs = fs
        self.root = root.rstrip("/")
        self.url = url or f"{protocol}://{self.root}"
        self.conditional = protocol in _CONDITIONAL if conditional is None else conditional
        self.atomic_put = protocol in _OBJECT_PROTOCOLS if atomic_put is None else atomic_put
        # Conditional replaces by ETag: S3 and Azure (GCS conditions on generations instead).
        self._etag_write = protocol in ("s3", "s3a", "az", "abfs", "abfss")
        self._lock = threading.Lock()
        self.lost_races = 0
        self._requests: concurrent.futures.ThreadPoolExecutor | None = None
        self._requests_pid = 0
        self.counters = _ObjectCounters(self)
        # Where conditional writes are off, the store cannot coordinate: every process compiles.
        self.leases = _ObjectLeases(self) if self.conditional else None

    def path_of(self, key: str) -> str:
        return f"{self.root}/{_key_filename(key)}"

    # -- the Store protocol --------------------------------------------------------------------

    def _read(self, key: str, *, look_only: bool) -> tuple[bytes, EntryMeta] | None:
        """Read an entry; unless ``look_only``, remove it if it is damaged."""
        path = self.path_of(key)
        try:
            data = _cat_whole(self.fs, path)
        except FileNotFoundError:
            return None
        except Exception as exc:
            raise self._unavailable("get", exc) from exc
        try:
            header, offset = decode_frame(data)
        except CorruptEntry:
            if not look_only:
                self._discard(path)
            raise
        if header["key"] != key:
            if look_only:
                raise CorruptEntry(f"{path} holds another key's data")
            return None
        size = header.get("size")
        if isinstance(size, int) and size != len(data) - offset:
            if not look_only:
                self._discard(path)
            raise CorruptEntry(f"{path} holds {len(data) - offset} bytes, its frame says {size}")
        return (data[offset:] if offset else bytes(data)), meta_of(header)

    def get_many(self, keys: Sequence[str]) -> dict[str, tuple[bytes, EntryMeta | None]]:
        """Several entries read concurrently (one ``cat`` of many paths: an async filesystem
        filesystem sends the requests together; obstore's go out from a pool of threads)."""
        paths = {self.path_of(key): key for key in keys}
        found: dict[str, tuple[bytes, EntryMeta | None]] = {}
        try:
            # start=0: one GET per object (see _cat_whole).
            datas = self.fs.cat(list(paths), on_error="return", start=0) if paths else {}
        except Exception as exc:
            raise self._unavailable("get", exc) from exc
        for path, data in datas.items():
            key = paths.get(path) or paths.get(path.removeprefix(f"{_protocol(self.fs)}://"))
            if key is None or isinstance(data, BaseException):
                continue  # absent (or failed: the lookup itself will ask again)
            try:
                header, offset = decode_frame(data)
            except CorruptEntry:
                continue  # the lookup itself reports and removes it
            size = header.get("size")
            if header["key"] == key and (not isinstance(size, int) or size == len(data) - offset):
                found[key] = (data[offset:], meta_of(header))
        return found

    def put(self, key: str, value: bytes, meta: EntryMeta | None = None) -> None:
        path = self.path_of(key)
        body = encode_frame(key, meta or EntryMeta(), time.time(), len(value)) + value
        try:
            if self.conditional:
                self._put_conditional(path, body)
            elif self.atomic_put:
                self.fs.pipe_file(path, body)
            else:
                self._put_renamed(path, body)
        except CompileCacheError:
            raise
        except Exception as exc:
            raise self._unavailable("put", exc) from exc

    def put_new(self, key: str, value: bytes, meta: EntryMeta | None = None) -> bool:
        """One conditional create (``If-None-Match: *``): ``False`` when the object exists."""
        if not self.conditional:
            return super().put_new(key, value, meta)
        path = self.path_of(key)
        body = encode_frame(key, meta or EntryMeta(), time.time(), len(value)) + value
        try:
            return self._create(path, body)
        except Exception as exc:
            if not _not_implemented(exc):
                raise self._unavailable("put", exc) from exc
        self.put(key, value, meta)  # no conditional writes after all: put learns it and says so
        return True

    def _create(self, path: str, body: bytes) -> bool:
        """Write ``path`` only where no object is (``If-None-Match: *``): ``False`` when one
        is. Any other failure, a backend without conditional writes included, raises."""
        try:
            self.fs.pipe_file(path, body, mode="create")
            return True
        except Exception as exc:
            if _precondition_failed(exc):
                return False
            raise

    def _put_conditional(self, path: str, body: bytes) -> None:
        try:
            # A new key first (the common case): one request. An existing one is then replaced
            # only as it is now (its ETag).
            try:
                self.fs.pipe_file(path, body, mode="create")
                return
            except Exception as exc:
                if not _precondition_failed(exc):
                    raise
            try:
                seen = self.fs.info(path)
            except FileNotFoundError:
                seen = None
            if seen is None:
                self.fs.pipe_file(path, body, mode="create")
            elif self._etag_write and seen.get("ETag"):
                self.fs.pipe_file(path, body, IfMatch=seen["ETag"])
            else:
                self.fs.pipe_file(path, body)
        except Exception as exc:
            if _precondition_failed(exc):
                # Another writer published this key since we looked: theirs stands.
                with self._lock:
                    self.lost_races += 1
                log.debug("compilecache: %s: lost a write race on %s", self.url, path)
                return
            if _not_implemented(exc):
                log.warning(
                    "compilecache: %s does not support conditional writes; using plain PUTs",
                    self.url,
                )
                self.conditional = False
                self.fs.pipe_file(path, body)
                return
            raise

    def _put_renamed(self, path: str, body: bytes) -> None:
        tmp = f"{self.root}/tmp/{uuid.uuid4().hex}.tmp"
        self.fs.makedirs(path.rpartition("/")[0], exist_ok=True)
        self.fs.makedirs(f"{self.root}/tmp", exist_ok=True)
        self.fs.pipe_file(tmp, body)
        try:
            self.fs.mv(tmp, path)
        except BaseException:
            self._discard(tmp)
            raise

    def _discard(self, path: str) -> None:
        try:
            self.fs.rm_file(path)
        except Exception as exc:
            log.debug("compilecache: could not remove %s: %s", path, exc)

    def delete(self, key: str) -> bool:
        path = self.path_of(key)
        try:
            if not self.fs.exists(path):
                return False
            self.fs.rm_file(path)
        except FileNotFoundError:
            return False
        except Exception as exc:
            raise self._unavailable("delete", exc) from exc
        return True

    def stat(self, key: str) -> EntryInfo | None:
        path = self.path_of(key)
        try:
            found = self._info(path, self.fs.cat_file(path, start=0, end=_PROBE))
        except FileNotFoundError:
            return None
        except CompileCacheError:
            raise
        except Exception as exc:
            raise self._unavailable("stat", exc) from exc
        return found if found is not None and found.key == key else None

    def _info(self, path: str, head: bytes) -> EntryInfo | None:
        try:
            end = frame_length(head)
            if end > len(head):
                head = self.fs.cat_file(path, start=0, end=end)
            header, _ = decode_frame(head)
        except CorruptEntry:
            return None
        size = header.get("size")
        return info_of(header, size if isinstance(size, int) else 0)

    def scan(self, prefix: str = "") -> Iterator[EntryInfo]:
        try:
            self.fs.invalidate_cache(self.root)
            tmp = f"{self.root}/tmp/"
            paths = sorted(
                p for p in self.fs.find(self.root) if p.endswith(".cce") and not p.startswith(tmp)
            )
            infos: list[EntryInfo] = []
            for i in range(0, len(paths), _SCAN_BATCH):
                batch = paths[i : i + _SCAN_BATCH]
                heads = self.fs.cat_ranges(batch, 0, _PROBE, on_error="return")
                for path, head in zip(batch, heads, strict=True):
                    if isinstance(head, BaseException):
                        continue  # removed since the listing
                    found = self._info(path, head)
                    if found is not None and found.key.startswith(prefix):
                        infos.append(found)
        except CompileCacheError:
            raise
        except FileNotFoundError:
            return iter([])
        except Exception as exc:
            raise self._unavailable("scan", exc) from exc
        return iter(sorted(infos, key=lambda i: i.key))

    def _pool(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._lock:
            # A forked child inherits the pool but not its threads: it needs its own.
            if self._requests is None or self._requests_pid != os.getpid():
                # Three requests per claim, and the leases given back meanwhile.
                self._requests = concurrent.futures.ThreadPoolExecutor(
                    max_workers=6, thread_name_prefix="compilecache-claim"
                )
                self._requests_pid = os.getpid()
            return self._requests

    def _cat_with_etag(self, path: str) -> tuple[bytes, str]:
        """A small object and its ETag: one request with the built-in S3 client, two with
        fsspec (its info first: if the object changes before the body is read, a write
        conditional on that ETag fails, whatever the body said)."""
        if isinstance(self.fs, ObstoreFS):
            return self.fs.cat_with_etag(path)
        self.fs.invalidate_cache(path)
        info = self.fs.info(path)
        raw = _cat_whole(self.fs, path)
        return raw, str(info.get("ETag") or info.get("etag") or "")

    def close(self) -> None:
        with self._lock:
            pool, self._requests = self._requests, None
        if pool is not None:
            pool.shutdown(wait=False)
        if isinstance(self.fs, ObstoreFS):
            self.fs.close()

    def _unavailable(self, what: str, exc: BaseException) -> StoreUnavailable:
        return StoreUnavailable(failure_text(self.url, what, exc))


class _ObjectLeases(Leases):
    """Single-flight leases across every host using this bucket. ``<root>/leases/<digest>.lease`` holds {"token", "expires"}. It is taken with a conditional
    create (If-None-Match: *): one process wins. An expired lease is replaced with If-Match on
    the ETag that was judged expired, so of several processes breaking it one wins. Where
    conditional writes are off, the store cannot coordinate and every process compiles."""

    def __init__(self, store: ObjectStore) -> None:
        self._store = store

    def _lease_path(self, key: str) -> str:
        name = _key_filename(key).split("/")[1].replace(".cce", ".lease")
        return f"{self._store.root}/leases/{name}"

    def acquire(self, key: str, ttl_s: float) -> str | None:
        if not self._store.conditional:
            return NO_COORDINATION
        path = self._lease_path(key)
        token = uuid.uuid4().hex
        body = _lease_body(token, ttl_s)
        try:
            try:
                if self._store._create(path, body):
                    return token
            except Exception as exc:
                if _not_implemented(exc):
                    return NO_COORDINATION
                raise
            held = self._read_lease(path)
            if held is None or time.time() < held[1]:
                return None  # held (or released just now: the caller polls again)
            try:
                if self._store._etag_write and held[2]:
                    self._store.fs.pipe_file(path, body, IfMatch=held[2])
                else:
                    self._store._discard(path)
                    self._store.fs.pipe_file(path, body, mode="create")
            except Exception as exc:
                if _precondition_failed(exc):
                    return None  # another process broke it first
                raise
            return token
        except CompileCacheError:
            raise
        except Exception as exc:
            raise self._store._unavailable("acquire_lease", exc) from exc

    def renew(self, key: str, token: str, ttl_s: float) -> bool:
        path = self._lease_path(key)
        try:
            held = self._read_lease(path)
            if held is None or held[0] != token:
                return False
            if self._store._etag_write and held[2]:
                self._store.fs.pipe_file(path, _lease_body(token, ttl_s), IfMatch=held[2])
            else:
                self._store.fs.pipe_file(path, _lease_body(token, ttl_s))
        except Exception as exc:
            if _precondition_failed(exc):
                return False
            raise self._store._unavailable("renew_lease", exc) from exc
        return True

    def release(self, key: str, token: str) -> None:
        path = self._lease_path(key)
        try:
            held = self._read_lease(path)
            if held is not None and held[0] == token:
                self._store.fs.rm_file(path)
        except FileNotFoundError:
            pass
        except Exception as exc:
            raise self._store._unavailable("release_lease", exc) from exc

    def claim(self, key: str, ttl_s: float) -> Claim:
        """The lease, the entry and the key's unwritten mark, asked at once (three requests in
        flight together: one round trip, where one after the other took four or more).

        The entry is looked for while the lease is taken, not after: an entry published and its
        lease released within that one round trip is missed, and compiled once more here. A
        duplicate compile, never a wrong result (Redis's claim is one atomic script instead)."""
        if not self._store.conditional:
            return super().claim(key, ttl_s)
        pool = self._store._pool()
        lease = pool.submit(self.acquire, key, ttl_s)
        marked = pool.submit(self._marked_unwritten, key)
        entry = pool.submit(self._store.stat, key)
        try:
            present = entry.result() is not None
        except Exception as exc:
            self._give_back(key, lease)
            raise self._store._unavailable("acquire_lease", exc) from exc
        return self._settle(key, lease, marked, present)

    def get_or_claim(self, key: str, ttl_s: float) -> tuple[Found | None, Claim | None] | None:
        """The read, the lease and the unwritten mark, all in flight at once: a miss costs one
        round trip, like a hit (which gives the lease it took back in the background)."""
        if not self._store.conditional:
            return None
        pool = self._store._pool()
        read = pool.submit(self._store._read, key, look_only=False)
        lease = pool.submit(self.acquire, key, ttl_s)
        marked = pool.submit(self._marked_unwritten, key)
        try:
            found = read.result()
        except Exception:
            self._give_back(key, lease)
            raise
        if found is not None:
            self._give_back(key, lease)
            return found, Claim("present", checked=True)
        try:
            return None, self._settle(key, lease, marked, present=False)
        except Exception as exc:  # the read answered: the caller claims once more itself
            log.debug("compilecache: claiming %s failed: %s", key, exc)
            return None, None

    def _settle(
        self,
        key: str,
        lease: concurrent.futures.Future[str | None],
        marked: concurrent.futures.Future[bool],
        present: bool,
    ) -> Claim:
        """The claim from the three answers; a lease taken but not needed is given back."""
        try:
            unwritten = marked.result()
        except Exception:
            self._give_back(key, lease)
            raise
        token = lease.result()
        if token == NO_COORDINATION:
            return Claim("won", token)  # unchecked: the caller looks for the entry itself
        if present or unwritten:
            self._give_back(key, lease)
            return Claim("present" if present else "unwritten", checked=True)
        return Claim("won", token, checked=True) if token else Claim("held", checked=True)

    def _give_back(self, key: str, lease: concurrent.futures.Future[str | None]) -> None:
        """Release the lease ``lease`` takes, if it takes one, without waiting for it."""

        def release(done: concurrent.futures.Future[str | None]) -> None:
            try:
                token = done.result()
                if token:
                    self.release(key, token)
            except Exception as exc:  # it expires on its own
                log.debug("compilecache: could not give back the lease on %s: %s", key, exc)

        # A callback runs at once in this thread when the lease is already taken: hand the
        # release (three requests) to the pool rather than wait for it here.
        pool = self._store._pool()

        def hand_over(done: concurrent.futures.Future[str | None]) -> None:
            # RuntimeError: the store was closed meanwhile; the lease expires on its own.
            with contextlib.suppress(RuntimeError):
                pool.submit(release, done)

        lease.add_done_callback(hand_over)

    def _marked_unwritten(self, key: str) -> bool:
        """Whether ``key``'s unwritten mark is held: one read (a lease's info and body are two,
        and a missing object's info two more)."""
        try:
            raw = _cat_whole(self._store.fs, self._lease_path(key + UNWRITTEN_SUFFIX))
        except FileNotFoundError:
            return False
        return time.time() < _lease_fields(raw)[1]

    def _read_lease(self, path: str) -> tuple[str, float, str] | None:
        """Token, expiry and ETag of a lease object; ``None`` when there is none."""
        try:
            raw, etag = self._store._cat_with_etag(path)
        except FileNotFoundError:
            return None
        return (*_lease_fields(raw), etag)


class _ObjectCounters(Counters):
    """Persistent counters: one small object per host and day,
    ``<root>/stats/<host>-<YYYYMMDD>.json``, summed by ``read``. Objects have no atomic
    increment: each host adds to its
    own object of the day (read, add, write; conditionally where the store can, so two processes
    of one host flushing at once retry instead of losing counts), and readers sum them all. A
    day's object stays small and a bucket gains one object per host and day."""

    def __init__(self, store: ObjectStore) -> None:
        self._store = store
        # This host's counters object as read ahead by prepare(): (path, counters, ETag).
        self._ahead: tuple[str, dict[str, float], str | None] | None = None

    def _stats_path(self, day: str | None = None) -> str:
        day = day or time.strftime("%Y%m%d", time.gmtime())
        return f"{self._store.root}/stats/{host_label()}-{day}.json"

    def prepare(self) -> None:
        """Read this host's counters object now, in the background, so that the exit's
        add_stats is one conditional write (a round trip) instead of a read and a write. Only
        where the write is conditional on the ETag read: a stale read then fails its write and
        is read again, never lost."""
        if not (self._store.conditional and self._store._etag_write):
            return

        def read_ahead() -> None:
            path = self._stats_path()
            try:
                current, etag = self._read_counters(path)
            except Exception as exc:  # add_stats reads it then
                log.debug("compilecache: could not read %s ahead: %s", path, exc)
                return
            self._ahead = (path, current, etag)

        threading.Thread(target=read_ahead, name="compilecache-counters", daemon=True).start()

    def add(self, counters: Mapping[str, float]) -> None:
        path = self._stats_path()
        ahead, self._ahead = self._ahead, None
        try:
            for _ in range(_STATS_ATTEMPTS):
                if ahead is not None and ahead[0] == path:
                    current, etag = dict(ahead[1]), ahead[2]
                else:
                    current, etag = self._read_counters(path)
                ahead = None
                for name, value in counters.items():
                    current[name] = current.get(name, 0.0) + float(value)
                body = json.dumps(current, sort_keys=True).encode()
                try:
                    if self._store.conditional and etag and self._store._etag_write:
                        self._store.fs.pipe_file(path, body, IfMatch=etag)
                    elif self._store.conditional and etag is None:
                        self._store.fs.pipe_file(path, body, mode="create")
                    elif self._store.atomic_put:
                        self._store.fs.pipe_file(path, body)
                    else:
                        self._store._put_renamed(path, body)
                    return
                except Exception as exc:
                    if not _precondition_failed(exc):
                        raise
            log.debug("compilecache: %s: counters lost a race %d times", path, _STATS_ATTEMPTS)
        except CompileCacheError:
            raise
        except Exception as exc:
            raise self._store._unavailable("add_stats", exc) from exc

    def _read_counters(self, path: str) -> tuple[dict[str, float], str | None]:
        try:
            raw, etag = self._store._cat_with_etag(path)
        except FileNotFoundError:
            return {}, None
        return _counters(raw), etag

    def read(self) -> dict[str, float]:
        totals: dict[str, float] = {}
        try:
            self._store.fs.invalidate_cache(f"{self._store.root}/stats")
            paths = [
                p for p in self._store.fs.find(f"{self._store.root}/stats") if p.endswith(".json")
            ]
            for raw in (
                self._store.fs.cat_ranges(paths, 0, None, on_error="return") if paths else []
            ):
                if isinstance(raw, BaseException):
                    continue
                for name, value in _counters(raw).items():
                    totals[name] = totals.get(name, 0.0) + value
        except FileNotFoundError:
            return {}
        except Exception as exc:
            raise self._store._unavailable("read_stats", exc) from exc
        return totals

    def zero(self) -> None:
        try:
            paths = [
                p for p in self._store.fs.find(f"{self._store.root}/stats") if p.endswith(".json")
            ]
            for path in paths:
                self._store._discard(path)
        except FileNotFoundError:
            return
        except Exception as exc:
            raise self._store._unavailable("zero_stats", exc) from exc


def _cat_whole(fs: Any, path: str) -> bytes:
    """The whole object in one request (``start=0``: fsspec filesystems may otherwise ask for
    the size first). Objects here are never empty (a frame, a lease, counters), so the open
    range is always satisfiable."""
    data: bytes = fs.cat_file(path, start=0)
    return data


def _counters(raw: bytes) -> dict[str, float]:
    try:
        data = json.loads(raw)
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, (int, float))}


def _lease_body(token: str, ttl_s: float) -> bytes:
    return json.dumps({"token": token, "expires": time.time() + ttl_s}).encode()


def _lease_fields(raw: bytes) -> tuple[str, float]:
    """A lease object's token and expiry; an unreadable one reads as expired, so that a damaged
    lease cannot block anyone."""
    try:
        data = json.loads(raw)
        return str(data["token"]), float(data["expires"])
    except (ValueError, KeyError, TypeError):
        return "", 0.0


def _protocol(fs: Any) -> str:
    proto = fs.protocol
    return str(proto if isinstance(proto, str) else proto[0])


def _error_text(exc: BaseException) -> str:
    parts = [str(exc)]
    cause = exc.__cause__
    if cause is not None:
        parts.append(repr(cause))
    return " ".join(parts)


def _precondition_failed(exc: BaseException) -> bool:
    if isinstance(exc, FileExistsError):
        return True
    if getattr(exc, "code", None) == 412:  # an fsspec filesystem's HTTP error
        return True
    text = _error_text(exc)
    return "PreconditionFailed" in text or "Precondition Failed" in text


def _not_implemented(exc: BaseException) -> bool:
    if getattr(exc, "code", None) == 501:
        return True
    return "NotImplemented" in _error_text(exc)


def _option(value: str) -> Any:
    lowered = value.strip().lower()
    if lowered in ("true", "yes", "on"):
        return True
    if lowered in ("false", "no", "off"):
        return False
    return value


def from_url(url: StoreURL) -> ObjectStore:
    """Open ``PROTOCOL://bucket/prefix``: S3, GCS and Azure through obstore, any other fsspec
    protocol through fsspec."""
    protocol = url.scheme
    root = (url.netloc + url.path).rstrip("/")
    if not root:
        raise ConfigError(f"no bucket or path in store URL {redact(url.raw)!r}")
    params = url.params
    options: dict[str, Any] = {k: _option(v) for k, v in params.items() if k not in _OWN_PARAMS}
    timeout = parse_seconds(params, "timeout", DEFAULT_TIMEOUT)
    retries = int(params.get("retries", DEFAULT_RETRIES))
    conditional = params.get("conditional")
    conditional_flag = None if conditional is None else flag(params, "conditional")
    if protocol in _OBSTORE_PROTOCOLS:
        bucket, prefix, account = split_location(protocol, url.netloc, url.path)
        if not bucket:
            raise ConfigError(f"no bucket or container in store URL {redact(url.raw)!r}")
        describe = f"{protocol}://{url.netloc}{url.path}".rstrip("/")
        try:
            fs: Any = open_fs(
                protocol,
                bucket,
                options,
                timeout=timeout,
                retries=retries,
                describe=describe,
                account=account,
            )
        except CompileCacheError:
            raise
        except Exception as exc:  # the client refused its options (a malformed key): say so
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise ConfigError(
                f"{describe}: the client refused the URL's options: {first}"
            ) from None
        root = f"{bucket}/{prefix}".rstrip("/")
        return ObjectStore(
            fs,
            root,
            url=describe,
            conditional=True if conditional_flag is None else conditional_flag,
            atomic_put=True,
        )
    options.setdefault("skip_instance_cache", True)
    options.setdefault("use_listings_cache", False)
    fs = _fsspec_filesystem(url, options, timeout)
    if hasattr(fs, "retries"):
        fs.retries = max(1, retries)
    return ObjectStore(fs, root, url=f"{protocol}://{root}", conditional=conditional_flag)


def _fsspec_filesystem(url: StoreURL, options: dict[str, Any], timeout: float) -> Any:
    """The fsspec filesystem of ``url`` (a protocol obstore does not speak: sftp, hdfs, ...)."""
    import fsspec  # only here: S3, GCS and Azure need none of it

    protocol = url.scheme
    try:
        return fsspec.filesystem(protocol, **options)
    except ImportError:
        raise  # the registry names the package to install
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"cannot open {url.raw!r}: {exc}") from exc


def known_protocol(scheme: str) -> bool:
    """Whether fsspec knows ``scheme`` (the generic fallback of the URL registry)."""
    from fsspec.registry import known_implementations, registry

    return scheme in known_implementations or scheme in registry


__all__ = ["ObjectStore", "from_url", "known_protocol"]
