"""A small Redis client for the Redis store: RESP2 over a socket, from the standard library.

Why not redis-py: importing it at ``enable()`` takes 70 to 100 ms of the main thread in every
process that uses a Redis level (redis-py 8 imports asyncio and its own async client, sentinel,
cluster and OCSP modules among others), 3% of a 3-second warm start by itself. This client
imports ``socket`` (and ``ssl``, for ``rediss://`` only, at the first connection).

It speaks the subset of redis-py's ``Redis`` API that :class:`RedisStore` uses, with the same
return shapes: ``pipeline(transaction=False)`` (``hmget``, ``mget``, ``set``, ``hincrbyfloat``,
``lpush``, ``ltrim``, ``execute_command``, then ``execute(raise_on_error=...)``), ``close``,
``delete``, ``eval``, ``execute_command``, ``get``, ``hget``, ``hgetall`` (a dict), ``hmget``,
``lrange``, ``mget``, ``ping``, ``scan_iter``, ``set`` (``nx``, ``px``). Arguments are encoded
as redis-py does (str as UTF-8, int by ``str``, float by ``repr``, bytes and memoryview as they
are). Replies: simple and bulk strings as bytes, nil as None, integers as int, arrays as lists,
and error replies as :class:`ResponseError`, raised, or in their place in a pipeline's list
with ``raise_on_error=False``.

Connections: a thread takes an idle socket from the pool (or opens one, up to
``max_connections``: more raises :class:`RespConnectionError`, as redis-py's default pool does)
and gives it back after a complete exchange; a socket whose exchange failed in any way is closed,
never reused. A new connection costs TCP (and TLS) and nothing more when there is no password
and db is 0; otherwise ``AUTH`` and ``SELECT`` go together, one round trip. There is no
``HELLO``, no ``CLIENT SETINFO`` and no health-check ``PING``: the server speaks RESP2, which
every Redis and Redis-speaking proxy answers.

Failures: ``socket_timeout`` bounds every wait for the server and ``socket_connect_timeout``
the connect (and TLS handshake); a timeout raises :class:`RespTimeoutError`, which is also a
builtin :class:`TimeoutError`. A reused socket that fails before any answer (the server closed
it while it sat idle: a restart, ``CLIENT KILL``, the server's ``timeout``) is retried once, at
once, on a new connection; a timeout is never retried (a slow server costs its timeout once),
and neither is a failure on a new connection.

URLs: ``redis://[user:password@]host[:port][/db]`` and ``rediss://`` (TLS), with the TLS
options redis-py takes in the query (:data:`URL_OPTIONS`): ``ssl_ca_certs``, ``ssl_certfile``,
``ssl_keyfile``, ``ssl_cert_reqs`` (none, optional, required) and ``ssl_check_hostname``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote, urlsplit

if TYPE_CHECKING:
    import ssl

# The query options of a URL this client understands (TLS settings, named as redis-py names
# them); any other option is one only redis-py can honour.
URL_OPTIONS = frozenset(
    {"ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs", "ssl_check_hostname"}
)
DEFAULT_PORT = 6379
_CERT_REQS = ("none", "optional", "required")
# redis-py's reading of a boolean option (anything else is true; "off" added, as base.flag reads
# it), not base.flag's stricter one: ``ssl_check_hostname=n`` is no error with either client.
_FALSE = ("0", "f", "false", "n", "no", "off")
# Arguments up to this size are copied into the command buffer; larger ones (chunks of MiB) are
# sent from their own memory, never copied.
_COPY_LIMIT = 16 * 1024
_READ_BUFFER = 64 * 1024
# The longest header or simple reply line accepted (a guard against a stream out of step).
_MAX_LINE = 1024 * 1024

Arg = str | bytes | bytearray | memoryview | int | float
Command = Sequence[Arg]


class RespError(Exception):
    """Every error of this client."""


class RespConnectionError(RespError):
    """The server could not be reached, closed the connection, or answered out of protocol."""


class RespTimeoutError(RespError, TimeoutError):
    """The server did not answer within ``socket_timeout`` (or connect within
    ``socket_connect_timeout``)."""


class ResponseError(RespError):
    """An error reply of the server (``ERR ...``, ``WRONGTYPE ...``, ``NOSCRIPT ...``)."""


class Connection:
    """One socket to the server and a buffered reader of its replies; used by one thread at a
    time (the pool hands it out)."""

    def __init__(self, sock: socket.socket, generation: int) -> None:
        self.sock = sock
        self.generation = generation
        self.answered = False  # whether any reply byte arrived during the current exchange
        self._file = sock.makefile("rb", buffering=_READ_BUFFER)

    def send(self, pieces: Sequence[bytes | bytearray | memoryview]) -> None:
        """Send the packed commands of one round trip."""
        self.answered = False
        for piece in pieces:
            self.sock.sendall(piece)

    def read_reply(self) -> Any:
        """One whole reply; an error reply is returned (not raised) as a :class:`ResponseError`."""
        line = self._file.readline(_MAX_LINE)
        if not line:
            raise RespConnectionError("the server closed the connection")
        self.answered = True  # the server started on the commands: they are not sent again
        if not line.endswith(b"\r\n"):
            raise RespConnectionError(f"protocol error: unterminated line {line[:40]!r}")
        kind, rest = line[:1], line[1:-2]
        if kind == b"$":
            size = int(rest)
            if size < 0:
                return None
            data = self._file.read(size)
            if len(data) != size or self._file.read(2) != b"\r\n":
                raise RespConnectionError("the server closed the connection mid-reply")
            return data
        if kind == b":":
            return int(rest)
        if kind == b"+":
            return rest
        if kind == b"*":
            count = int(rest)
            return None if count < 0 else [self.read_reply() for _ in range(count)]
        if kind == b"-":
            return ResponseError(rest.decode("utf-8", "replace"))
        raise RespConnectionError(f"protocol error: unexpected reply {line[:40]!r}")

    def close(self) -> None:
        try:
            self._file.close()
        finally:
            self.sock.close()


def encode(arg: Arg) -> bytes | bytearray | memoryview:
    """One argument as redis-py encodes it."""
    if isinstance(arg, (bytes, bytearray)):
        return arg
    if isinstance(arg, memoryview):
        return arg if arg.format == "B" and arg.ndim == 1 else arg.cast("B")
    if isinstance(arg, str):
        return arg.encode("utf-8")
    if isinstance(arg, bool):  # redis-py refuses booleans too: True would be sent as b"True"
        raise TypeError("a bool is not a Redis argument: convert it to int, str or bytes")
    if isinstance(arg, int):
        return str(arg).encode()
    if isinstance(arg, float):
        return repr(arg).encode()
    raise TypeError(f"a {type(arg).__name__} is not a Redis argument")


def pack(commands: Iterable[Command]) -> list[bytes | bytearray | memoryview]:
    """The RESP encoding of ``commands``, as pieces to send in order: small parts coalesced,
    large arguments by reference."""
    pieces: list[bytes | bytearray | memoryview] = []
    buffer = bytearray()
    for command in commands:
        buffer += b"*%d\r\n" % len(command)
        for arg in command:
            data = encode(arg)
            size = len(data) if not isinstance(data, memoryview) else data.nbytes
            buffer += b"$%d\r\n" % size
            if size > _COPY_LIMIT:
                pieces.append(buffer)
                pieces.append(data)
                buffer = bytearray(b"\r\n")
            else:
                buffer += data
                buffer += b"\r\n"
    if buffer:
        pieces.append(buffer)
    return pieces


def _failure(exc: Exception, what: str) -> RespError:
    """``exc`` (from a socket, ssl, or a reply that did not parse) as this client's error."""
    if isinstance(exc, RespError):
        return exc
    if isinstance(exc, TimeoutError):
        return RespTimeoutError(f"{what}: timed out")
    if isinstance(exc, OSError):
        return RespConnectionError(f"{what}: {exc}")
    return RespConnectionError(f"{what}: protocol error: {type(exc).__name__}: {exc}")


def _to_bool(text: str) -> bool:
    return text.strip().lower() not in _FALSE


def _ok(reply: Any) -> bool | None:
    """``SET``'s answer as redis-py gives it: True when set, None when not (``NX``)."""
    return True if reply == b"OK" else None


def _pairs(reply: Any) -> dict[bytes, bytes]:
    return dict(zip(reply[::2], reply[1::2], strict=True))


def _flat(keys: Arg | Iterable[Arg], args: Sequence[Arg]) -> list[Arg]:
    """redis-py's convention: ``keys`` is one argument or an iterable of them, then ``args``."""
    if isinstance(keys, (str, bytes, bytearray, memoryview, int, float)):
        return [keys, *args]
    return [*keys, *args]


class _Pool:
    """Idle connections, and the count of open ones (idle or in use) against the bound."""

    def __init__(self, connect: Callable[[int], Connection], max_connections: int | None) -> None:
        self._connect = connect
        self.max_connections = max_connections
        self._lock = threading.Lock()
        self._idle: list[Connection] = []
        self.open = 0
        self._generation = 0  # bumped by close(): connections in use then are not kept
        self._pid = os.getpid()

    @property
    def idle(self) -> int:
        return len(self._idle)

    def take(self, *, reuse: bool = True) -> tuple[Connection, bool]:
        """An idle connection (True: it may have been closed by the server since) or a new one
        (False)."""
        if self._pid != os.getpid():
            # A forked child must not talk on its parent's sockets: it forgets them (and the
            # lock, which another thread of the parent may have held at the fork).
            self._lock = threading.Lock()
            self._idle, self.open, self._pid = [], 0, os.getpid()
        with self._lock:
            if reuse and self._idle:
                return self._idle.pop(), True  # the most recently used: the likeliest alive
            if self.max_connections is not None and self.open >= self.max_connections:
                raise RespConnectionError(
                    f"too many connections (max_connections={self.max_connections})"
                )
            self.open += 1
            generation = self._generation
        try:
            return self._connect(generation), False
        except BaseException:
            with self._lock:
                self.open -= 1
            raise

    def give(self, conn: Connection) -> None:
        """Keep a connection after a complete exchange."""
        with self._lock:
            if conn.generation == self._generation and self._pid == os.getpid():
                self._idle.append(conn)
                return
        self.discard(conn)

    def discard(self, conn: Connection) -> None:
        """Close a connection that failed (or outlived a close of the client)."""
        with contextlib.suppress(OSError):
            conn.close()
        with self._lock:
            self.open = max(0, self.open - 1)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
            self._generation += 1
        for conn in idle:
            self.discard(conn)


class RespClient:
    """A thread-safe client of one Redis server (one database), with a connection pool."""

    connection_class: type[Connection] = Connection

    def __init__(
        self,
        host: str = "localhost",
        port: int = DEFAULT_PORT,
        *,
        db: int = 0,
        username: str | None = None,
        password: str | None = None,
        socket_timeout: float | None = None,
        socket_connect_timeout: float | None = None,
        max_connections: int | None = None,
        tls: bool = False,
        ssl_ca_certs: str | None = None,
        ssl_certfile: str | None = None,
        ssl_keyfile: str | None = None,
        ssl_cert_reqs: str = "required",
        ssl_check_hostname: bool = True,
    ) -> None:
        if ssl_cert_reqs not in _CERT_REQS:
            raise ValueError(
                f"ssl_cert_reqs: expected none, optional or required, got {ssl_cert_reqs!r}"
            )
        if max_connections is not None and max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, got {max_connections}")
        self.host, self.port, self.db = host, port, db
        self.username = username
        self.socket_timeout = socket_timeout
        self.socket_connect_timeout = socket_connect_timeout
        self.tls = tls
        self.ssl_ca_certs, self.ssl_certfile, self.ssl_keyfile = (
            ssl_ca_certs,
            ssl_certfile,
            ssl_keyfile,
        )
        self.ssl_cert_reqs = ssl_cert_reqs
        # As redis-py: no certificate check, no host name check.
        self.ssl_check_hostname = ssl_check_hostname and ssl_cert_reqs != "none"
        self._tls: ssl.SSLContext | None = None
        self._tls_lock = threading.Lock()
        # What a new connection says before its first command, sent as one round trip.
        handshake: list[Command] = []
        if password is not None:
            handshake.append(("AUTH", username, password) if username else ("AUTH", password))
        if db:
            handshake.append(("SELECT", db))
        self._handshake = (pack(handshake), len(handshake)) if handshake else None
        self._pool = _Pool(self._connect, max_connections)

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        socket_timeout: float | None = None,
        socket_connect_timeout: float | None = None,
        max_connections: int | None = None,
    ) -> RespClient:
        """A client for ``redis://[user:password@]host[:port][/db][?tls options]`` or
        ``rediss://``; ValueError for anything else (another scheme, an unknown option)."""
        parts = urlsplit(url)
        if parts.scheme not in ("redis", "rediss"):
            raise ValueError(f"expected a redis:// or rediss:// URL, got {parts.scheme}://")
        options = dict(parse_qsl(parts.query))
        unknown = sorted(set(options) - URL_OPTIONS)
        if unknown:
            raise ValueError(f"the built-in Redis client does not know {', '.join(unknown)}")
        tls = parts.scheme == "rediss"
        if options and not tls:
            raise ValueError(f"{', '.join(sorted(options))} need a rediss:// URL (TLS)")
        path = unquote(parts.path).strip("/")
        if path and not path.isdigit():
            raise ValueError(f"expected a database number after the host, got {path!r}")
        return cls(
            parts.hostname or "localhost",
            parts.port or DEFAULT_PORT,  # ValueError for a port out of range
            db=int(path or 0),
            username=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password else None,
            socket_timeout=socket_timeout,
            socket_connect_timeout=socket_connect_timeout,
            max_connections=max_connections,
            tls=tls,
            ssl_ca_certs=options.get("ssl_ca_certs"),
            ssl_certfile=options.get("ssl_certfile"),
            ssl_keyfile=options.get("ssl_keyfile"),
            ssl_cert_reqs=options.get("ssl_cert_reqs", "required").strip().lower(),
            ssl_check_hostname=_to_bool(options.get("ssl_check_hostname", "1")),
        )

    # -- connections ---------------------------------------------------------------------------

    @property
    def max_connections(self) -> int | None:
        return self._pool.max_connections

    def connections(self) -> tuple[int, int]:
        """How many connections are open, and how many of those are idle in the pool."""
        return self._pool.open, self._pool.idle

    def _tls_context(self) -> ssl.SSLContext:
        """The TLS settings of every connection, made once (loading CA files is slow)."""
        with self._tls_lock:
            if self._tls is None:
                import ssl  # only for rediss://

                # As redis-py: the system's CAs, plus ssl_ca_certs when given.
                context = ssl.create_default_context()
                context.check_hostname = self.ssl_check_hostname
                context.verify_mode = {
                    "none": ssl.CERT_NONE,
                    "optional": ssl.CERT_OPTIONAL,
                    "required": ssl.CERT_REQUIRED,
                }[self.ssl_cert_reqs]
                if self.ssl_certfile or self.ssl_keyfile:
                    context.load_cert_chain(self.ssl_certfile or "", self.ssl_keyfile)
                if self.ssl_ca_certs:
                    context.load_verify_locations(cafile=self.ssl_ca_certs)
                self._tls = context
            return self._tls

    def _connect(self, generation: int) -> Connection:
        """A new connection, past its TLS handshake and its AUTH and SELECT."""
        where = f"{self.host}:{self.port}"
        try:
            sock = socket.create_connection((self.host, self.port), self.socket_connect_timeout)
        except Exception as exc:
            raise _failure(exc, f"connect to {where}") from exc
        try:
            # Requests are written whole: never wait for a delayed ACK between two of them.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.tls:
                sock = self._tls_context().wrap_socket(sock, server_hostname=self.host)
            sock.settimeout(self.socket_timeout)
        except Exception as exc:
            sock.close()
            raise _failure(exc, f"TLS handshake with {where}") from exc
        conn = self.connection_class(sock, generation)
        if self._handshake is not None:
            pieces, count = self._handshake
            try:
                conn.send(pieces)
                replies = [conn.read_reply() for _ in range(count)]
            except Exception as exc:
                conn.close()
                raise _failure(exc, f"AUTH/SELECT on {where}") from exc
            for reply in replies:
                if isinstance(reply, ResponseError):
                    conn.close()
                    raise reply
        return conn

    def _exchange(self, commands: Sequence[Command]) -> list[Any]:
        """Send ``commands`` together and read their replies: one round trip on one connection
        (two when a reused connection turns out closed: the retry)."""
        pieces = pack(commands)
        reuse = True
        while True:
            conn, reused = self._pool.take(reuse=reuse)
            try:
                conn.send(pieces)
                replies = [conn.read_reply() for _ in commands]
            except Exception as exc:
                self._pool.discard(conn)
                error = _failure(exc, f"{self.host}:{self.port}")
                # Only a connection that sat idle, failing before any answer, is tried again:
                # the server closed it meanwhile, and never saw the commands.
                if reused and not conn.answered and type(error) is RespConnectionError:
                    reuse = False
                    continue
                raise error from exc
            except BaseException:
                self._pool.discard(conn)  # interrupted mid-exchange: the stream is out of step
                raise
            self._pool.give(conn)
            return replies

    def close(self) -> None:
        """Close the idle connections (and those in use once they are given back); a later
        command opens new ones."""
        self._pool.close()

    # -- commands ------------------------------------------------------------------------------

    def pipeline(self, transaction: bool = False) -> Pipeline:
        """Commands queued, then sent together by :meth:`Pipeline.execute`."""
        if transaction:
            raise ValueError("the built-in Redis client has no MULTI/EXEC pipelines")
        return Pipeline(self)

    def execute_command(self, *args: Arg) -> Any:
        (reply,) = self._exchange([args])
        if isinstance(reply, ResponseError):
            raise reply
        return reply

    def ping(self) -> bool:
        return bool(self.execute_command("PING") == b"PONG")

    def get(self, name: Arg) -> bytes | None:
        reply: bytes | None = self.execute_command("GET", name)
        return reply

    def set(self, name: Arg, value: Arg, *, nx: bool = False, px: int | None = None) -> bool | None:
        """True when set; None when not (``nx`` and the key exists)."""
        return _ok(self.execute_command(*_set_args(name, value, nx, px)))

    def delete(self, *names: Arg) -> int:
        return int(self.execute_command("DEL", *names))

    def eval(self, script: str, numkeys: int, *keys_and_args: Arg) -> Any:
        return self.execute_command("EVAL", script, numkeys, *keys_and_args)

    def hget(self, name: Arg, key: Arg) -> bytes | None:
        reply: bytes | None = self.execute_command("HGET", name, key)
        return reply

    def hgetall(self, name: Arg) -> dict[bytes, bytes]:
        return _pairs(self.execute_command("HGETALL", name))

    def hmget(self, name: Arg, keys: Arg | Iterable[Arg], *args: Arg) -> list[bytes | None]:
        reply: list[bytes | None] = self.execute_command("HMGET", name, *_flat(keys, args))
        return reply

    def lrange(self, name: Arg, start: int, end: int) -> list[bytes]:
        reply: list[bytes] = self.execute_command("LRANGE", name, start, end)
        return reply

    def mget(self, keys: Arg | Iterable[Arg], *args: Arg) -> list[bytes | None]:
        reply: list[bytes | None] = self.execute_command("MGET", *_flat(keys, args))
        return reply

    def scan_iter(self, match: Arg | None = None, count: int | None = None) -> Iterator[bytes]:
        """Every key matching ``match``, one ``SCAN`` at a time (a key may come twice, as with
        any SCAN); no connection is held between batches."""
        cursor: bytes = b"0"
        while True:
            args: list[Arg] = ["SCAN", cursor]
            if match is not None:
                args += ["MATCH", match]
            if count is not None:
                args += ["COUNT", count]
            cursor, names = self.execute_command(*args)
            yield from names
            if cursor == b"0":
                return


def _set_args(name: Arg, value: Arg, nx: bool, px: int | None) -> list[Arg]:
    args: list[Arg] = ["SET", name, value]
    if px is not None:
        args += ["PX", px]
    if nx:
        args.append("NX")
    return args


class Pipeline:
    """Commands sent in one round trip by :meth:`execute` (not atomic: no MULTI). Each queueing
    method returns the pipeline. Not shared between threads (the client is)."""

    def __init__(self, client: RespClient) -> None:
        self._client = client
        self._commands: list[Command] = []
        self._shapes: list[Callable[[Any], Any] | None] = []

    def __len__(self) -> int:
        return len(self._commands)

    def _queue(self, shape: Callable[[Any], Any] | None, *args: Arg) -> Pipeline:
        self._commands.append(args)
        self._shapes.append(shape)
        return self

    def execute_command(self, *args: Arg) -> Pipeline:
        return self._queue(None, *args)

    def hmget(self, name: Arg, keys: Arg | Iterable[Arg], *args: Arg) -> Pipeline:
        return self._queue(None, "HMGET", name, *_flat(keys, args))

    def mget(self, keys: Arg | Iterable[Arg], *args: Arg) -> Pipeline:
        return self._queue(None, "MGET", *_flat(keys, args))

    def set(self, name: Arg, value: Arg, *, nx: bool = False, px: int | None = None) -> Pipeline:
        return self._queue(_ok, *_set_args(name, value, nx, px))

    def hincrbyfloat(self, name: Arg, key: Arg, amount: float = 1.0) -> Pipeline:
        return self._queue(float, "HINCRBYFLOAT", name, key, amount)

    def lpush(self, name: Arg, *values: Arg) -> Pipeline:
        return self._queue(None, "LPUSH", name, *values)

    def ltrim(self, name: Arg, start: int, end: int) -> Pipeline:
        return self._queue(lambda reply: reply == b"OK", "LTRIM", name, start, end)

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        """The replies, in order. An error reply is raised (the first one) or, with
        ``raise_on_error=False``, left in its place as a :class:`ResponseError`. The pipeline
        is empty afterwards."""
        commands, shapes = self._commands, self._shapes
        self._commands, self._shapes = [], []
        if not commands:
            return []
        replies = self._client._exchange(commands)
        for i, (reply, shape) in enumerate(zip(replies, shapes, strict=True)):
            if isinstance(reply, ResponseError):
                if raise_on_error:
                    raise reply
            elif shape is not None:
                replies[i] = shape(reply)
        return replies
