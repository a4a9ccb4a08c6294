"""``redis://``, ``rediss://`` (TLS) and ``redis+cluster://``: a store shared through Redis.

URL: ``redis://[user:password@]host:port[/db[/namespace]][?options]``; ``rediss://`` for TLS;
``redis+cluster://host:port/namespace`` (or ``rediss+cluster://``) for a Redis Cluster, from any
one node (the client discovers the others; commas separate tiers, not nodes). Options:

==================  =========================================================================
``prefix``          namespace of every key (default ``compilecache``; also the path after db)
``ttl``             expire entries not read for this long (``7d``); refreshed on every hit
``chunk_size``      values above this are split into chunks (default ``4MiB``)
``timeout``         socket timeout per operation, seconds (default 2)
``connect_timeout`` default ``timeout``
``max_connections`` connection pool bound (default 16)
``client``          ``auto`` (default), ``builtin`` or ``redis-py``: which Redis client (below)
==================  =========================================================================
TLS options, for ``rediss://``, named as redis-py names them: ``ssl_ca_certs``, ``ssl_certfile``,
``ssl_keyfile``, ``ssl_cert_reqs`` (``none``, ``optional``, ``required``) and
``ssl_check_hostname``. Any other option is handed to redis-py as it is.

The client: ``redis://`` and ``rediss://`` use a small built-in client
(:mod:`compilecache.stores.resp`, standard library only) when every option of the URL is one
above, because importing redis-py costs 70 to 100 ms at ``enable()``; any other option (say
``protocol=3`` or ``ssl_ca_path``), or ``client=redis-py``, opens redis-py instead, as does a
cluster. ``client=builtin`` insists on the built-in client (an option it cannot honour is then a
configuration error). Both speak RESP2 with the same timeouts, pool bound and single retry of a
pooled connection the server closed.

Layout, for a namespace ``N`` and a key whose blake2b digest is ``D``::

    N:{D}:m          hash: key, size, created, accessed, hits, framework, name, compile_time,
                     ver, n, and ``v`` (the value itself when it fits in one chunk, n == 0)
    N:{D}:c:VER:I    chunk I of version VER of a larger value (n chunks)
    N:{D}:lease      single-flight lease of a key being compiled (SET NX PX, a token)
    N:{D}:unwritten  the key's last compile wrote nothing (a lease left to expire)
    N:stats          hash of persistent counters (HINCRBYFLOAT)
    N:history:KIND   list of JSON records, newest first, capped (LPUSH + LTRIM)

``{D}`` is a hash tag: an entry's hash and chunks live in one cluster slot, so the Lua scripts
below, which touch them together, are legal in a Cluster.

Atomic commit of chunked values: a writer uploads its chunks under a fresh version id, with a
pending expiry (chunks of a writer that dies mid-upload disappear on their own), then one script
checks that every chunk arrived, replaces the hash in one step (pointing at the new version), makes
the new chunks permanent (or gives them the TTL) and gives the *old* version's chunks a short grace
expiry. A reader reads the hash (one command: a consistent snapshot of version and size), then the
chunks of that version with one MGET. Versions are never mixed because chunk names carry the
version; a reader that was slower than the grace period finds a chunk gone and starts again from
the hash. So readers see a whole value or a miss, however many writers race on one key.

A hit costs one round trip when the value fits in a chunk (the hash read and the access update
are pipelined) and two otherwise. ``stat`` and ``scan`` read hash fields only, never ``v``.
Eviction is Redis's own: give the server a ``maxmemory-policy`` (``allkeys-lru``) and/or use
``ttl``; a chunk evicted under a live hash is detected on read and the entry dropped.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlencode

from compilecache.errors import ConfigError, StoreUnavailable, failure_text
from compilecache.redaction import redact
from compilecache.stores.base import (
    WRAPPER_PARAMS,
    EntryInfo,
    EntryMeta,
    OneReadStore,
    StoreURL,
)
from compilecache.stores.capabilities import (
    HISTORY_KINDS,
    HISTORY_LIMIT,
    UNWRITTEN_SUFFIX,
    Claim,
    Counters,
    Found,
    History,
    Leases,
)
from compilecache.stores.leasefile import holder, holder_gone
from compilecache.stores.resp import URL_OPTIONS as BUILTIN_OPTIONS
from compilecache.stores.resp import RespClient, RespError, ResponseError
from compilecache.units import parse_count, parse_seconds, parse_size

DEFAULT_NAMESPACE = "compilecache"
DEFAULT_CHUNK_SIZE = 4 * 1024 * 1024
DEFAULT_TIMEOUT = 2.0
DEFAULT_MAX_CONNECTIONS = 16
# How long the chunks of a replaced version stay readable for readers already fetching them.
GRACE_MS = 60_000
# How long chunks of an upload stay without a commit before Redis drops them.
PENDING_MS = 3_600_000
_READ_ATTEMPTS = 3
_META_FIELDS = (
    "key",
    "size",
    "created",
    "accessed",
    "hits",
    "framework",
    "name",
    "compile_time",
)
_ENTRY_META = ("framework", "name", "compile_time")
# The hash fields a read asks for, in the order _finish_read and get_many unpack them.
_READ_FIELDS = ("v", "n", "ver", "key", "size", *_ENTRY_META)
# URL options this backend reads itself (the registry checks a URL against them and the
# wrappers' ones); everything else goes to the client.
OPTIONS = frozenset(
    {
        "prefix",
        "namespace",
        "ttl",
        "chunk_size",
        "timeout",
        "connect_timeout",
        "max_connections",
        "client",
    }
)
# What redis-py reads from a URL's query (its URL_QUERY_ARGUMENT_PARSERS, and the connection
# arguments it passes on as they are): a Redis URL may carry these for the client; anything else
# is refused when the URL is parsed (redis-py would fail every call on it).
CLIENT_OPTIONS = frozenset(
    {
        "db",
        "socket_timeout",
        "socket_connect_timeout",
        "socket_read_size",
        "socket_keepalive",
        "retry_on_timeout",
        "retry_on_error",
        "health_check_interval",
        "ssl_check_hostname",
        "ssl_include_verify_flags",
        "ssl_exclude_verify_flags",
        "ssl_min_version",
        "protocol",
        "legacy_responses",
        "client_name",
        "ssl_cert_reqs",
        "ssl_ca_certs",
        "ssl_ca_path",
        "ssl_ca_data",
        "ssl_certfile",
        "ssl_keyfile",
        "ssl_password",
        "ssl_validate_ocsp",
        "username",
        "password",
    }
)

_OWN_PARAMS = OPTIONS | WRAPPER_PARAMS
_CLIENTS = ("auto", "builtin", "redis-py")

# KEYS[1] = hash. ARGV: base, ver, n, ttl_ms, grace_ms, then field/value pairs.
_COMMIT = """
local base, ver, n = ARGV[1], ARGV[2], tonumber(ARGV[3])
local ttl, grace = tonumber(ARGV[4]), tonumber(ARGV[5])
for i = 0, n - 1 do
  if redis.call('EXISTS', base .. ':c:' .. ver .. ':' .. i) == 0 then
    return redis.error_reply('compilecache: chunk ' .. i .. ' of the upload is missing')
  end
end
local old = redis.call('HMGET', KEYS[1], 'ver', 'n')
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'ver', ver, 'n', n, unpack(ARGV, 6))
for i = 0, n - 1 do
  local c = base .. ':c:' .. ver .. ':' .. i
  if ttl > 0 then redis.call('PEXPIRE', c, ttl) else redis.call('PERSIST', c) end
end
if ttl > 0 then redis.call('PEXPIRE', KEYS[1], ttl) end
local on = tonumber(old[2] or '0') or 0
if old[1] and old[1] ~= ver then
  for i = 0, on - 1 do redis.call('PEXPIRE', base .. ':c:' .. old[1] .. ':' .. i, grace) end
end
return 1
"""

# KEYS[1] = hash. ARGV: base, now, ttl_ms. Record a hit; refresh the TTL of hash and chunks.
_TOUCH = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HINCRBY', KEYS[1], 'hits', 1)
redis.call('HSET', KEYS[1], 'accessed', ARGV[2])
local ttl = tonumber(ARGV[3])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
  local f = redis.call('HMGET', KEYS[1], 'ver', 'n')
  for i = 0, (tonumber(f[2] or '0') or 0) - 1 do
    redis.call('PEXPIRE', ARGV[1] .. ':c:' .. f[1] .. ':' .. i, ttl)
  end
end
return 1
"""

# KEYS[1] = hash. ARGV: base, expected ver ('' = any). Remove the entry and its chunks.
_DELETE = """
local f = redis.call('HMGET', KEYS[1], 'ver', 'n')
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if ARGV[2] ~= '' and f[1] ~= ARGV[2] then return 0 end
redis.call('DEL', KEYS[1])
for i = 0, (tonumber(f[2] or '0') or 0) - 1 do
  redis.call('DEL', ARGV[1] .. ':c:' .. f[1] .. ':' .. i)
end
return 1
"""

# Leases for single-flight compiles: KEYS[1] = N:{D}:lease, ARGV[1] = the holder's token.
# Renew and release compare the token first, so a holder never touches a lease it lost.
_LEASE_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
_LEASE_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
# The single-flight step after a miss, in one round trip (Leases.claim). KEYS: hash, lease,
# unwritten mark (one hash tag). ARGV: key, token, lease ttl_ms.
_CLAIM = """
if redis.call('HGET', KEYS[1], 'key') == ARGV[1] then return 'present' end
if redis.call('EXISTS', KEYS[3]) == 1 then return 'unwritten' end
if redis.call('SET', KEYS[2], ARGV[2], 'NX', 'PX', ARGV[3]) then return 'won' end
return 'held ' .. (redis.call('GET', KEYS[2]) or '')
"""


class _Again:
    """A read to start again from the hash (a writer replaced the chunks meanwhile)."""


_AGAIN = _Again()


class RedisStore(OneReadStore):
    """A store in one Redis database (or one Redis Cluster) under a namespace."""

    def __init__(
        self,
        client: Any = None,
        *,
        client_factory: Callable[[], Any] | None = None,
        url: str = "redis://",
        namespace: str = DEFAULT_NAMESPACE,
        ttl: float | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        errors: tuple[type[Exception], ...] | None = None,
    ) -> None:
        """``errors``: the exceptions of the client that mean a failed request (caught, and
        raised as :class:`StoreUnavailable`); by default those of the built-in client, and
        redis-py's when redis-py is loaded."""
        if chunk_size < 1024:
            raise ConfigError(f"chunk_size must be at least 1KiB, got {chunk_size}")
        if not namespace or any(c in namespace for c in "{}*?[]\\ "):
            raise ConfigError(f"Redis namespace {namespace!r} must be non-empty, without {{}}*?[]")
        # A factory is called on first use: opening the store never touches the network (a
        # cluster client connects as soon as it is built, to learn the slot map).
        if (client is None) == (client_factory is None):
            raise ValueError("give a client or a client_factory")
        self._client: Any = client
        self._factory = client_factory
        self.url = url
        self.namespace = namespace
        self.ttl_ms = int(ttl * 1000) if ttl else 0
        self.chunk_size = chunk_size
        self._closed = False
        self._lock = threading.Lock()
        # RespError always: _claim raises ResponseError for an answer it does not know.
        self._errors: tuple[type[Exception], ...] = (
            *(errors or _default_errors(client)),
            RespError,
        )
        self.counters = _RedisCounters(self)
        self.history = _RedisHistory(self)
        self.leases = _RedisLeases(self)

    @property
    def client(self) -> Any:
        if self._client is None:
            with self._lock:
                if self._client is None:
                    assert self._factory is not None
                    try:
                        self._client = self._factory()
                    except self._errors as exc:
                        raise self._unavailable("connect", exc) from exc
        return self._client

    # -- names ---------------------------------------------------------------------------------

    def _base(self, key: str) -> str:
        digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
        return f"{self.namespace}:{{{digest}}}"

    def _chunk_names(self, base: str, ver: str, n: int) -> list[str]:
        return [f"{base}:c:{ver}:{i}" for i in range(n)]

    # -- the Store protocol --------------------------------------------------------------------

    def _read(self, key: str, *, look_only: bool) -> tuple[bytes, EntryMeta] | None:
        """Read an entry; unless ``look_only``, count the hit, refresh its access time and TTL,
        and drop an entry whose chunks were evicted."""
        base = self._base(key)
        try:
            for _ in range(_READ_ATTEMPTS):
                pipe = self.client.pipeline(transaction=False)
                self._queue_read(pipe, base, None if look_only else repr(time.time()))
                # The access update may fail (a read-only replica or ACL): the read still counts.
                found = self._finish_read(
                    key, base, pipe.execute(raise_on_error=False)[0], look_only
                )
                if not isinstance(found, _Again):
                    return found
            return None
        except self._errors as exc:
            raise self._unavailable("get", exc) from exc

    def _queue_read(self, pipe: Any, base: str, now: str | None) -> None:
        """Queue an entry's read in ``pipe``: its hash fields (``_finish_read`` takes them), then,
        with ``now``, the touch that records the hit (access time, hits, TTL)."""
        pipe.hmget(base + ":m", *_READ_FIELDS)
        if now is not None:
            pipe.execute_command("EVAL", _TOUCH, 1, base + ":m", base, now, self.ttl_ms)

    def _finish_read(
        self, key: str, base: str, fields: Any, look_only: bool
    ) -> tuple[bytes, EntryMeta] | _Again | None:
        """The entry from its hash fields (reading its chunks if it has any); ``_AGAIN`` when a
        writer replaced the chunks meanwhile (read the hash again)."""
        if isinstance(fields, Exception):
            raise fields
        value, n_raw, ver_raw, stored_key, size_raw, *entry_meta = fields
        if stored_key is None or stored_key.decode("utf-8", "surrogatepass") != key:
            return None  # a miss (or a digest collision: never a wrong hit)
        size = int(size_raw or -1)
        n = int(n_raw or 0)
        if n == 0:
            if value is None or len(value) != size:
                return None
            return value, _meta(entry_meta)
        ver = ver_raw.decode()
        chunks = self.client.mget(self._chunk_names(base, ver, n))
        if all(c is not None for c in chunks):
            joined = b"".join(chunks)
            return (joined, _meta(entry_meta)) if len(joined) == size else None
        # A chunk is gone: replaced by a writer (retry from the hash) or evicted.
        if self.client.hget(base + ":m", "ver") == ver_raw:
            if not look_only:
                self.client.eval(_DELETE, 1, base + ":m", base, ver)
            return None
        return _AGAIN

    def get_many(self, keys: Sequence[str]) -> dict[str, tuple[bytes, EntryMeta | None]]:
        """Several entries in two round trips: one pipeline of hash reads (and, outside a
        cluster, access-time touches), one of the chunks of the chunked ones. An entry that
        changed in between is read again on its own."""
        if self._factory is not None:  # a cluster: scripts in pipelines are not portable
            return super().get_many(keys)
        found: dict[str, tuple[bytes, EntryMeta | None]] = {}
        chunked: list[tuple[str, str, int, int, EntryMeta]] = []
        try:
            pipe = self.client.pipeline(transaction=False)
            now = repr(time.time())
            for key in keys:
                self._queue_read(pipe, self._base(key), now)
            replies = pipe.execute(raise_on_error=False)
            for key, fields in zip(keys, replies[::2], strict=True):
                if isinstance(fields, Exception):
                    raise fields
                value, n_raw, ver_raw, stored_key, size_raw, *entry_meta = fields
                if stored_key is None or stored_key.decode("utf-8", "surrogatepass") != key:
                    continue
                size, n = int(size_raw or -1), int(n_raw or 0)
                if n == 0:
                    if value is not None and len(value) == size:
                        found[key] = (value, _meta(entry_meta))
                    continue
                chunked.append((key, ver_raw.decode(), n, size, _meta(entry_meta)))
            if chunked:
                pipe = self.client.pipeline(transaction=False)
                for key, ver, n, _, _ in chunked:
                    pipe.mget(self._chunk_names(self._base(key), ver, n))
                for (key, _, _, size, meta), chunks in zip(chunked, pipe.execute(), strict=True):
                    joined = b"".join(chunks) if all(c is not None for c in chunks) else b""
                    if len(joined) == size:
                        found[key] = (joined, meta)
                    else:  # replaced or evicted since the first read: the careful path
                        again = self.get_with_meta(key)
                        if again is not None:
                            found[key] = again
        except self._errors as exc:
            raise self._unavailable("get", exc) from exc
        return found

    def put(self, key: str, value: bytes, meta: EntryMeta | None = None) -> None:
        meta = meta or EntryMeta()
        base = self._base(key)
        now = repr(time.time())
        fields: list[Any] = [
            "key",
            key,
            "size",
            len(value),
            "created",
            now,
            "accessed",
            now,
            "hits",
            0,
            "framework",
            meta.framework,
            "name",
            meta.name,
            "compile_time",
            repr(float(meta.compile_time_s)),
        ]
        try:
            pipe = self.client.pipeline(transaction=False)
            if len(value) <= self.chunk_size:
                ver, n = "", 0
                fields += ["v", value]
            else:
                ver = uuid.uuid4().hex[:16]
                view = memoryview(value)
                names = self._chunk_names(base, ver, -(-len(value) // self.chunk_size))
                n = len(names)
                for i, name in enumerate(names):
                    chunk = view[i * self.chunk_size : (i + 1) * self.chunk_size]
                    pipe.set(name, chunk, px=PENDING_MS)
            pipe.execute_command(
                "EVAL", _COMMIT, 1, base + ":m", base, ver, n, self.ttl_ms, GRACE_MS, *fields
            )
            results = pipe.execute(raise_on_error=False)
        except self._errors as exc:
            raise self._unavailable("put", exc) from exc
        for result in results:
            if isinstance(result, Exception):
                raise self._unavailable("put", result)

    def delete(self, key: str) -> bool:
        base = self._base(key)
        try:
            return bool(self.client.eval(_DELETE, 1, base + ":m", base, ""))
        except self._errors as exc:
            raise self._unavailable("delete", exc) from exc

    def stat(self, key: str) -> EntryInfo | None:
        try:
            fields = self.client.hmget(self._base(key) + ":m", *_META_FIELDS)
        except self._errors as exc:
            raise self._unavailable("stat", exc) from exc
        found = _info(fields)
        return found if found is not None and found.key == key else None

    def scan(self, prefix: str = "") -> Iterator[EntryInfo]:
        """Metadata of every entry (hash fields only); an O(entries) walk, for ls and prune."""
        infos: list[EntryInfo] = []
        try:
            batch: list[bytes] = []
            for name in self.client.scan_iter(match=f"{self.namespace}:{{*}}:m", count=1000):
                batch.append(name)
                if len(batch) >= 500:
                    infos += self._infos(batch, prefix)
                    batch = []
            infos += self._infos(batch, prefix)
        except self._errors as exc:
            raise self._unavailable("scan", exc) from exc
        return iter(sorted(infos, key=lambda i: i.key))

    def _infos(self, names: Sequence[bytes], prefix: str) -> list[EntryInfo]:
        if not names:
            return []
        pipe = self.client.pipeline(transaction=False)
        for name in names:
            pipe.hmget(name, *_META_FIELDS)
        found = (_info(fields) for fields in pipe.execute())
        return [i for i in found if i is not None and i.key.startswith(prefix)]

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._client is not None:
            with contextlib.suppress(*self._errors):
                self._client.close()

    def _unavailable(self, what: str, exc: Exception) -> StoreUnavailable:
        return StoreUnavailable(failure_text(self.url, what, exc))


class _RedisCounters(Counters):
    """The counters: one hash, ``<namespace>:stats``, added to with HINCRBYFLOAT."""

    def __init__(self, store: RedisStore) -> None:
        self._store = store

    def add(self, counters: Mapping[str, float]) -> None:
        name = f"{self._store.namespace}:stats"
        try:
            pipe = self._store.client.pipeline(transaction=False)
            for counter, value in counters.items():
                pipe.hincrbyfloat(name, counter, float(value))
            pipe.execute()
        except self._store._errors as exc:
            raise self._store._unavailable("add_stats", exc) from exc

    def read(self) -> dict[str, float]:
        try:
            raw = self._store.client.hgetall(f"{self._store.namespace}:stats")
        except self._store._errors as exc:
            raise self._store._unavailable("read_stats", exc) from exc
        return {k.decode(): float(v) for k, v in raw.items()}

    def zero(self) -> None:
        try:
            self._store.client.delete(f"{self._store.namespace}:stats")
        except self._store._errors as exc:
            raise self._store._unavailable("zero_stats", exc) from exc


class _RedisHistory(History):
    """History: one capped list per kind, ``<namespace>:history:<kind>``."""

    def __init__(self, store: RedisStore) -> None:
        self._store = store

    def add(self, kind: str, record: Mapping[str, object]) -> None:
        name = f"{self._store.namespace}:history:{kind}"
        raw = json.dumps(record, default=str, separators=(",", ":"))
        try:
            pipe = self._store.client.pipeline(transaction=False)
            pipe.lpush(name, raw)
            pipe.ltrim(name, 0, HISTORY_LIMIT - 1)
            pipe.execute()
        except self._store._errors as exc:
            raise self._store._unavailable("add_history", exc) from exc

    def read(self, kind: str, limit: int = HISTORY_LIMIT) -> list[dict[str, object]]:
        try:
            raw = self._store.client.lrange(
                f"{self._store.namespace}:history:{kind}", 0, max(limit, 1) - 1
            )
        except self._store._errors as exc:
            raise self._store._unavailable("read_history", exc) from exc
        out: list[dict[str, object]] = []
        for item in raw:
            with contextlib.suppress(ValueError):
                record = json.loads(item)
                if isinstance(record, dict):
                    out.append(record)
        return out

    def clear(self) -> None:
        try:
            for kind in HISTORY_KINDS:
                self._store.client.delete(f"{self._store.namespace}:history:{kind}")
        except self._store._errors as exc:
            raise self._store._unavailable("clear_history", exc) from exc


class _RedisLeases(Leases):
    """Single-flight leases across every host using this Redis: ``SET NX PX`` keys beside the
    entries, and a claim that checks the entry and the unwritten mark in the same script."""

    def __init__(self, store: RedisStore) -> None:
        self._store = store

    def _lease_name(self, key: str) -> str:
        """The lease of ``key``. A key's unwritten mark (the lease of ``key#unwritten``) sits
        beside it, under the same hash tag: one cluster slot, so one script reads both."""
        if key.endswith(UNWRITTEN_SUFFIX):
            return self._store._base(key[: -len(UNWRITTEN_SUFFIX)]) + ":unwritten"
        return self._store._base(key) + ":lease"

    def acquire(self, key: str, ttl_s: float) -> str | None:
        """``SET N:{D}:lease TOKEN NX PX ttl``: one process wins; Redis expires it on its own."""
        # A mark of an unwritten key outlives its maker on purpose: no holder named.
        token = uuid.uuid4().hex if key.endswith(UNWRITTEN_SUFFIX) else _token()
        try:
            won = self._store.client.set(self._lease_name(key), token, nx=True, px=_ms(ttl_s))
        except self._store._errors as exc:
            raise self._store._unavailable("acquire_lease", exc) from exc
        return token if won else None

    def renew(self, key: str, token: str, ttl_s: float) -> bool:
        try:
            renewed = self._store.client.eval(
                _LEASE_RENEW, 1, self._lease_name(key), token, _ms(ttl_s)
            )
        except self._store._errors as exc:
            raise self._store._unavailable("renew_lease", exc) from exc
        return bool(renewed)

    def release(self, key: str, token: str) -> None:
        try:
            self._store.client.eval(_LEASE_RELEASE, 1, self._lease_name(key), token)
        except self._store._errors as exc:
            raise self._store._unavailable("release_lease", exc) from exc

    def _claim_args(self, key: str, token: str, ttl_s: float) -> list[Any]:
        names = [
            self._store._base(key) + ":m",
            self._lease_name(key),
            self._lease_name(key + UNWRITTEN_SUFFIX),
        ]
        return [_CLAIM, len(names), *names, key, token, _ms(ttl_s)]

    def claim(self, key: str, ttl_s: float) -> Claim:
        """One script, one round trip: the entry's presence, the unwritten mark and the lease.
        A lease held by a process of this host that no longer runs (killed) is broken and
        claimed again at once, rather than waited out."""
        broke = False
        for _ in range(2):
            token = _token()
            try:
                answer = self._store.client.eval(*self._claim_args(key, token, ttl_s))
            except self._store._errors as exc:
                raise self._store._unavailable("acquire_lease", exc) from exc
            claim, dead = _claim(answer, token)
            if dead is None:
                if broke and claim.state == "won":
                    return Claim("won", claim.token, checked=True, took_over=True)
                return claim
            self.release(key, dead)  # only that token's lease: a new holder's stays
            broke = True
        return claim

    def get_or_claim(self, key: str, ttl_s: float) -> tuple[Found | None, Claim | None] | None:
        """The read and, should it miss, the claim, pipelined: one round trip for either."""
        if self._store._factory is not None:  # a cluster: scripts in pipelines are not portable
            return None
        base = self._store._base(key)
        token = _token()
        try:
            pipe = self._store.client.pipeline(transaction=False)
            self._store._queue_read(pipe, base, repr(time.time()))
            # The claim script looks for the entry again: it answers "present", taking nothing,
            # whenever the read above could have found it.
            pipe.execute_command("EVAL", *self._claim_args(key, token, ttl_s))
            fields, _, answer = pipe.execute(raise_on_error=False)
            if isinstance(answer, Exception):
                raise answer
            claim, dead = _claim(answer, token)
            read = self._store._finish_read(key, base, fields, look_only=False)
            found = self._store._read(key, look_only=False) if isinstance(read, _Again) else read
        except self._store._errors as exc:
            raise self._store._unavailable("get", exc) from exc
        if found is not None and claim.state == "won":
            # Removed between the read and the claim: the lease is not needed.
            self.release(key, token)
            claim = Claim("present", checked=True)
        elif found is None and dead is not None:
            # Held by a process of this host that was killed: break it, claim again.
            self.release(key, dead)
            claim = self.claim(key, ttl_s)
            if claim.state == "won":
                claim = Claim("won", claim.token, checked=True, took_over=True)
        return found, claim


def _token() -> str:
    """A new lease token that names its holder (read back by a waiter on the same host)."""
    return f"{uuid.uuid4().hex}@{holder()}"


def _claim(answer: Any, token: str) -> tuple[Claim, str | None]:
    """The claim the script answered, and the token of a lease held by a process of this host
    that no longer runs (to break), if that is what holds it."""
    state = answer.decode() if isinstance(answer, bytes) else str(answer)
    if state == "won":
        return Claim("won", token, checked=True), None
    if state in ("present", "unwritten"):
        return Claim(state, checked=True), None  # type: ignore[arg-type]
    if state == "held" or state.startswith("held "):
        held = state[5:]
        _, at, who = held.partition("@")
        return Claim("held", checked=True), (held if at and holder_gone(who) else None)
    raise ResponseError(f"unexpected answer to the lease claim: {answer!r}")


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def _meta(fields: Sequence[bytes | None]) -> EntryMeta:
    framework, name, compile_time = fields
    try:
        return EntryMeta(
            framework=(framework or b"").decode(),
            name=(name or b"").decode("utf-8", "replace"),
            compile_time_s=float(compile_time or 0),
        )
    except ValueError:
        return EntryMeta()


def _info(fields: Sequence[bytes | None]) -> EntryInfo | None:
    key, size, created, accessed, hits, framework, name, compile_time = fields
    if key is None:
        return None
    try:
        return EntryInfo(
            key=key.decode("utf-8", "surrogatepass"),
            size=int(size or 0),
            created=float(created or 0),
            accessed=float(accessed or created or 0),
            hits=int(hits or 0),
            meta=EntryMeta(
                framework=(framework or b"").decode(),
                name=(name or b"").decode("utf-8", "replace"),
                compile_time_s=float(compile_time or 0),
            ),
        )
    except ValueError:
        return None


def _redacted(url: StoreURL, db: int, namespace: str) -> str:
    """The URL for messages and ``ls``: the server, database and namespace, no password and no
    options."""
    path = f"/{namespace}" if url.scheme.endswith("+cluster") else f"/{db}/{namespace}"
    return redact(f"{url.scheme}://{url.netloc}{path}")


def from_url(url: StoreURL) -> RedisStore:
    """Open ``redis://``, ``rediss://``, ``redis+cluster://`` or ``rediss+cluster://``.

    ``redis://`` and ``rediss://`` use the built-in client (:mod:`compilecache.stores.resp`)
    when it understands every option of the URL, and redis-py otherwise (or with
    ``client=redis-py``); a cluster always uses redis-py."""
    cluster = url.scheme.endswith("+cluster")
    scheme = url.scheme.removesuffix("+cluster")
    segments = [s for s in url.path.split("/") if s]
    db = 0
    if segments and not cluster and segments[0].isdigit():
        db = int(segments.pop(0))
    namespace = url.params.get("prefix") or url.params.get("namespace") or "/".join(segments)
    namespace = namespace or DEFAULT_NAMESPACE
    where = _redacted(url, db, namespace)
    params = url.params
    timeout = parse_seconds(params, "timeout", DEFAULT_TIMEOUT)
    connect_timeout = parse_seconds(params, "connect_timeout", timeout)
    max_connections = parse_count(params, "max_connections", DEFAULT_MAX_CONNECTIONS, minimum=1)
    chunk_text = params.get("chunk_size")
    choice = params.get("client", "auto").strip().lower()
    if choice not in _CLIENTS:
        raise ConfigError(f"client: expected auto, builtin or redis-py, got {choice!r} in {where}")
    extra = {k: v for k, v in params.items() if k not in _OWN_PARAMS}
    query = f"?{urlencode(extra, quote_via=quote)}" if extra else ""
    foreign = sorted(set(extra) - BUILTIN_OPTIONS)
    if choice == "builtin" and (cluster or foreign):
        what = f"{url.scheme}://" if cluster else ", ".join(foreign)
        raise ConfigError(
            f"client=builtin: the built-in Redis client cannot honour {what} in {where} "
            "(use client=redis-py)"
        )
    client: Any = None
    factory: Callable[[], Any] | None = None
    try:
        if choice == "redis-py" or cluster or foreign:
            client, factory, errors = _redis_py(
                f"{scheme}://{url.netloc}/{0 if cluster else db}{query}",
                cluster=cluster,
                timeout=timeout,
                connect_timeout=connect_timeout,
                max_connections=max_connections,
                where=where,
            )
        else:
            client = RespClient.from_url(
                f"{scheme}://{url.netloc}/{db}{query}",
                socket_timeout=timeout,
                socket_connect_timeout=connect_timeout,
                max_connections=max_connections,
            )
            errors = (RespError,)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"cannot use {where}: {exc}") from exc
    return RedisStore(
        client,
        client_factory=factory,
        url=where,
        namespace=namespace,
        ttl=parse_seconds(params, "ttl", None),
        chunk_size=parse_size(chunk_text, "chunk_size") if chunk_text else DEFAULT_CHUNK_SIZE,
        errors=errors,
    )


def _redis_py(
    url: str,
    *,
    cluster: bool,
    timeout: float,
    connect_timeout: float,
    max_connections: int,
    where: str,
) -> tuple[Any, Callable[[], Any] | None, tuple[type[Exception], ...]]:
    """A redis-py client of ``url`` (or, for a cluster, a factory of one: it connects as soon
    as it is built), and redis-py's base error. Imported only here: it takes 70 to 100 ms."""
    try:
        import redis
    except ImportError as exc:
        raise StoreUnavailable(
            f"cannot open {where} with redis-py ({exc}): install redis "
            "(pip install 'compilecache[redis]'), or leave out the options only redis-py knows"
        ) from exc
    from redis.backoff import NoBackoff
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import RedisError
    from redis.retry import Retry

    kwargs: dict[str, Any] = {
        "socket_timeout": timeout,
        "socket_connect_timeout": connect_timeout,
        # One retry on a broken connection (a pooled socket the server closed); none on a
        # timeout: a slow server must cost its timeout once, not once per retry.
        "retry": Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
        # A new connection is one round trip to its first answer, not five: redis-py's default
        # handshake adds HELLO 3 (RESP3), two CLIENT SETINFO and a health-check PING, each a
        # round trip, and a process opens a connection per thread that talks to the server at
        # once. RESP2 is what every Redis (and Redis-speaking proxy) answers; a socket the
        # server closed fails at once and is retried once (above), and a dead link costs its
        # timeout with or without a PING first. ``?protocol=3`` in the URL still asks for RESP3.
        "protocol": 2,
        **_no_setinfo(),
        "health_check_interval": 0,
    }
    if cluster:
        from redis.cluster import RedisCluster

        def factory() -> Any:
            return RedisCluster.from_url(url, **kwargs)

        return None, factory, (RedisError,)
    try:
        client = redis.Redis.from_url(url, max_connections=max_connections, **kwargs)
    except RedisError as exc:
        raise StoreUnavailable(f"cannot reach {where}: {exc}") from exc
    return client, None, (RedisError,)


def _default_errors(client: Any) -> tuple[type[Exception], ...]:
    """The errors of a client given to :class:`RedisStore` directly: redis-py's when it is
    redis-py's (told by its module, without importing redis-py for a client that is not)."""
    if type(client).__module__.partition(".")[0] == "redis" or "redis" in sys.modules:
        from redis.exceptions import RedisError

        return (RedisError,)
    return ()


def _no_setinfo() -> dict[str, None]:
    """No CLIENT SETINFO on connect: redis-py 8 takes ``driver_info=None``, and deprecates the
    ``lib_name``/``lib_version`` that redis-py 5 to 7 take."""
    import importlib.util

    if importlib.util.find_spec("redis.driver_info") is not None:
        return {"driver_info": None}
    return {"lib_name": None, "lib_version": None}
