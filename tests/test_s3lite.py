"""The built-in S3 client: its signatures are botocore's, byte for byte; it stands in for s3fs
only where it can read the credentials itself; it follows a bucket's region once and retries a
kept-alive socket the server closed. Its requests against a real S3 server are covered by the
object store's tests, which run with both clients."""

from __future__ import annotations

import datetime
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from compilecache.stores.s3lite import (
    Credentials,
    S3Error,
    S3Lite,
    Signer,
    canonical_query,
    open_client,
)

botocore_auth = pytest.importorskip("botocore.auth")
botocore_awsrequest = pytest.importorskip("botocore.awsrequest")
botocore_credentials = pytest.importorskip("botocore.credentials")

NOW = datetime.datetime(2026, 11, 23, 19, 30, 5, tzinfo=datetime.timezone.utc)


@pytest.mark.parametrize(
    ("method", "path", "query", "headers", "body", "token"),
    [
        ("GET", "/bucket/pre/ab/0123.cce", {}, {"range": "bytes=0-4095"}, b"", None),
        ("PUT", "/bucket/pre/leases/x.lease", {}, {"if-none-match": "*"}, b'{"t": 1}', "tok/+="),
        (
            "PUT",
            "/bucket/k%20with%20space",
            {},
            {"if-match": '"9b2cf535f27731c974343645a3985328"'},
            b"v",
            None,
        ),
        ("HEAD", "/bucket/pre/stats/h-20261123.json", {}, {}, b"", None),
        ("DELETE", "/bucket/pre/leases/x.lease", {}, {}, b"", None),
        (
            "GET",
            "/bucket/",
            {"list-type": "2", "prefix": "pre fix/", "continuation-token": "1/a+b=="},
            {},
            b"",
            None,
        ),
    ],
)
def test_signatures_are_botocores(
    monkeypatch: pytest.MonkeyPatch,
    method: str,
    path: str,
    query: dict[str, str],
    headers: dict[str, str],
    body: bytes,
    token: str | None,
) -> None:
    import hashlib

    host = "127.0.0.1:9000"
    ours = dict(headers)
    digest = hashlib.sha256(body).hexdigest()
    Signer(Credentials("AKIDEXAMPLE", "wJalr/K7MDENG+bPxRfiCY", token)).sign(
        method, host, path, query, ours, digest, "eu-west-3", NOW
    )
    # The URL as the client sends it: the query in its canonical encoding.
    url = f"http://{host}{path}" + (f"?{canonical_query(query)}" if query else "")
    theirs = botocore_awsrequest.AWSRequest(method=method, url=url, data=body, headers=headers)
    theirs.headers["X-Amz-Content-SHA256"] = digest
    signer = botocore_auth.S3SigV4Auth(
        botocore_credentials.Credentials("AKIDEXAMPLE", "wJalr/K7MDENG+bPxRfiCY", token),
        "s3",
        "eu-west-3",
    )
    # botocore signs at the time it reads (naive UTC); ours is given the same instant.
    monkeypatch.setattr(botocore_auth, "get_current_datetime", lambda: NOW.replace(tzinfo=None))
    signer.add_auth(theirs)
    assert ours["authorization"] == theirs.headers["Authorization"]


# -- when it stands in for s3fs ------------------------------------------------------------------


def home(tmp_path: Path, credentials: str = "", config: str = "") -> dict[str, str]:
    (tmp_path / ".aws").mkdir(exist_ok=True)
    (tmp_path / ".aws" / "credentials").write_text(credentials)
    (tmp_path / ".aws" / "config").write_text(config)
    return {"HOME": str(tmp_path)}


def opened(options: dict[str, object], env: dict[str, str]) -> S3Lite | None:
    return open_client(options, timeout=5.0, max_connections=8, env=env)


def test_keys_in_the_url_or_the_variables(tmp_path: Path) -> None:
    env = home(tmp_path)
    client = opened({"key": "A", "secret": "B", "token": "C"}, env)
    assert client is not None and client._signer is not None
    assert client._signer.credentials.token == "C"
    client = opened({}, {**env, "AWS_ACCESS_KEY_ID": "A", "AWS_SECRET_ACCESS_KEY": "B"})
    assert client is not None and client._signer is not None
    assert client._signer.credentials.key == "A"
    anonymous = opened({"anon": True}, env)
    assert anonymous is not None and anonymous._signer is None


def test_a_profile_with_keys_and_the_region_order(tmp_path: Path) -> None:
    env = home(
        tmp_path,
        "[default]\naws_access_key_id = D\naws_secret_access_key = DS\n"
        "[ci]\naws_access_key_id = P\naws_secret_access_key = PS\n",
        "[profile ci]\nregion = ap-south-1\n",
    )
    client = opened({}, env)
    assert client is not None and client._signer is not None
    assert client._signer.credentials.key == "D" and client.region == "us-east-1"
    # A named profile: botocore then skips the AWS_ACCESS_KEY_ID variables.
    named = opened(
        {"profile": "ci"}, {**env, "AWS_ACCESS_KEY_ID": "E", "AWS_SECRET_ACCESS_KEY": "F"}
    )
    assert named is not None and named._signer is not None
    assert named._signer.credentials.key == "P" and named.region == "ap-south-1"
    assert opened({"profile": "ci"}, {**env, "AWS_REGION": "eu-north-1"}).region == "eu-north-1"  # type: ignore[union-attr]
    assert opened({"profile": "ci", "region": "sa-east-1"}, env).region == "sa-east-1"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("options", "credentials", "config", "extra"),
    [
        ({}, "", "", {}),  # nothing static: instance metadata, containers... botocore's
        ({}, "", "[default]\nrole_arn = arn:aws:iam::1:role/r\nsource_profile = x\n", {}),
        ({}, "", "[default]\nsso_session = corp\n", {}),
        ({}, "", "[default]\ncredential_process = /bin/creds\n", {}),
        ({}, "", "", {"AWS_WEB_IDENTITY_TOKEN_FILE": "/var/run/token", "AWS_ROLE_ARN": "r"}),
        ({"key": "A", "secret": "B", "requester_pays": True}, "", "", {}),  # an s3fs option
        ({"key": "A", "secret": "B"}, "", "", {"https_proxy": "http://proxy:3128"}),
    ],
)
def test_anything_else_is_left_to_s3fs(
    tmp_path: Path,
    options: dict[str, object],
    credentials: str,
    config: str,
    extra: dict[str, str],
) -> None:
    assert opened(options, {**home(tmp_path, credentials, config), **extra}) is None


# -- behaviour on the wire, against a scripted server ---------------------------------------------


class Scripted:
    """A loopback HTTP server answering each request with the next canned response; it records
    the requests and can close the connection after an answer."""

    def __init__(self, answers: list[tuple[bytes, bool]]) -> None:
        self.answers = answers
        self.requests: list[bytes] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while self.answers:
            conn, _ = self.sock.accept()
            with conn:
                while self.answers:
                    data = self._read_request(conn)
                    if not data:
                        break
                    self.requests.append(data)
                    answer, close = self.answers.pop(0)
                    conn.sendall(answer)
                    if close:
                        break

    @staticmethod
    def _read_request(conn: socket.socket) -> bytes:
        """One whole request: its head, then as many bytes as its Content-Length says."""
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return data
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(body) < length:
            body += conn.recv(65536)
        return data


def ok(body: bytes = b"hello", extra: str = "") -> bytes:
    return f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


@pytest.fixture
def client_for() -> Iterator[object]:
    made: list[S3Lite] = []

    def make(server: Scripted) -> S3Lite:
        client = S3Lite(
            credentials=Credentials("A", "B"),
            endpoint_url=f"http://127.0.0.1:{server.port}",
            timeout=5.0,
        )
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


def test_a_kept_alive_socket_the_server_closed_is_retried_once(client_for) -> None:  # type: ignore[no-untyped-def]
    # The server answers the first request, then closes without saying so.
    server = Scripted([(ok(b"one"), True), (ok(b"two"), False)])
    client = client_for(server)
    assert client.cat_file("b/k1") == b"one"
    assert client.cat_file("b/k2") == b"two"  # the reused socket fails; a new one serves
    assert len(server.requests) == 2


def test_a_bucket_in_another_region_is_followed_once(client_for) -> None:  # type: ignore[no-untyped-def]
    moved = (
        b"HTTP/1.1 301 Moved Permanently\r\nx-amz-bucket-region: eu-central-1\r\n"
        b"Content-Length: 0\r\n\r\n"
    )
    server = Scripted([(moved, False), (ok(), False)])
    client = client_for(server)
    assert client.cat_file("b/k") == b"hello"
    assert client.region == "eu-central-1"
    assert b"/eu-central-1/s3/aws4_request" in server.requests[1]


def test_errors_say_what_s3_said(client_for) -> None:  # type: ignore[no-untyped-def]
    body = b"<Error><Code>PreconditionFailed</Code><Message>At least one</Message></Error>"
    failed = f"HTTP/1.1 412 Precondition Failed\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    missing = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"
    server = Scripted([(failed + body, False), (missing, False)])
    client = client_for(server)
    with pytest.raises(S3Error, match="PreconditionFailed") as caught:
        client.pipe_file("b/k", b"v", mode="create")
    assert caught.value.status == 412
    assert b"if-none-match: *" in server.requests[0].lower()
    with pytest.raises(FileNotFoundError):
        client.info("b/absent")


def test_a_transient_server_error_is_retried_once(client_for) -> None:  # type: ignore[no-untyped-def]
    body = b"<Error><Code>InternalError</Code><Message>try again</Message></Error>"
    failed = f"HTTP/1.1 500 Internal Server Error\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    server = Scripted(
        [(failed + body, False), (ok(), False), (failed + body, False), (failed + body, False)]
    )
    client = client_for(server)
    assert client.cat_file("b/k") == b"hello"  # the second answer
    with pytest.raises(S3Error, match="InternalError"):
        client.cat_file("b/k")  # two in a row: the error stands
    assert len(server.requests) == 4
