"""A small S3 client for the object store: the seven requests it makes, signed with SigV4, over
``http.client`` with kept-alive connections.

Why not s3fs: a process that starts warm from S3 pays for s3fs, aiobotocore and botocore three
times over. Importing them takes 0.35 s at ``enable()``; each request then costs a few ms of CPU
(botocore's event hooks, its request and response models) on a thread that holds the GIL while
the program compiles; and at exit the event loop and its sessions are torn down. This client
imports only the standard library, and a request costs well under a millisecond of CPU.

It speaks the subset of the fsspec filesystem interface :class:`ObjectStore` uses (``cat_file``,
``cat``, ``cat_ranges``, ``pipe_file`` with ``mode="create"`` / ``IfMatch``, ``info``,
``exists``, ``rm_file``, ``find``), with fsspec's conventions: paths are ``bucket/key``, a
missing object raises :class:`FileNotFoundError`, a failed condition raises an error naming
``PreconditionFailed``.

It is used only where it can do what botocore would: static credentials (the URL's ``key`` and
``secret``, the ``AWS_*`` variables, or a profile with keys in the shared credentials files),
or ``anon=true``; no HTTP proxy in the environment; and only the options below. Anything else
(instance roles, SSO, assumed roles, credential processes, a proxy, other s3fs options) opens
s3fs as before, and ``?client=s3fs`` always does. HTTPS is verified against ``AWS_CA_BUNDLE``,
else certifi's bundle where it is installed (as botocore does), else the system's. Options: ``endpoint_url`` (then path-style addressing, as MinIO and moto expect),
``region`` (default: ``AWS_REGION``, ``AWS_DEFAULT_REGION``, the profile's, else us-east-1; a
bucket elsewhere is followed once, by the region S3 names in its answer), ``key``, ``secret``,
``token``, ``profile``, ``anon``.
"""

from __future__ import annotations

import concurrent.futures
import configparser
import datetime
import hashlib
import hmac
import http.client
import os
import re
import ssl
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

# Options this client understands (every other one means s3fs); the last two are ObjectStore's
# defaults for fsspec and mean nothing here.
OPTIONS = frozenset(
    {
        "endpoint_url",
        "region",
        "region_name",
        "key",
        "secret",
        "token",
        "profile",
        "anon",
        "skip_instance_cache",
        "use_listings_cache",
    }
)
# Profile settings only botocore can turn into credentials.
_BOTOCORE_ONLY = ("role_arn", "credential_process", "sso_session", "sso_start_url")
_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
_RETRIABLE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)
# Answers S3 asks clients to retry (an internal error, a busy partition: 503 SlowDown).
_TRANSIENT = frozenset({500, 502, 503, 504})
# Variables that send botocore's requests through a proxy (http.client would ignore them).
_PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY")


class S3Error(OSError):
    """An S3 error answer: its HTTP status and code (``PreconditionFailed``, ...)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{code or 'error'} ({status}): {message}")
        self.status = status
        self.code = code


class Credentials:
    """An access key, its secret and an optional session token."""

    def __init__(self, key: str, secret: str, token: str | None = None) -> None:
        self.key, self.secret, self.token = key, secret, token


class Signer:
    """AWS Signature Version 4 for S3 (the signing key is kept per day and region)."""

    def __init__(self, credentials: Credentials) -> None:
        self.credentials = credentials
        self._keys: dict[tuple[str, str], bytes] = {}

    def sign(
        self,
        method: str,
        host: str,
        path: str,
        query: Mapping[str, str],
        headers: dict[str, str],
        payload_sha256: str,
        region: str,
        now: datetime.datetime,
    ) -> None:
        """Add ``x-amz-date``, ``x-amz-content-sha256``, the token and ``Authorization`` to
        ``headers`` (lower-case names; every header given is signed). ``path`` is encoded."""
        amz_date = now.strftime("%Y%m%dT%H%M%SZ")
        day = amz_date[:8]
        headers["host"] = host
        headers["x-amz-date"] = amz_date
        headers["x-amz-content-sha256"] = payload_sha256
        if self.credentials.token:
            headers["x-amz-security-token"] = self.credentials.token
        names = sorted(headers)
        canonical = "\n".join(
            [
                method,
                path,
                canonical_query(query),
                "".join(f"{n}:{' '.join(headers[n].split())}\n" for n in names),
                ";".join(names),
                payload_sha256,
            ]
        )
        scope = f"{day}/{region}/s3/aws4_request"
        to_sign = "\n".join(
            ["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()]
        )
        signature = hmac.new(self._key(day, region), to_sign.encode(), hashlib.sha256).hexdigest()
        headers["authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={self.credentials.key}/{scope}, "
            f"SignedHeaders={';'.join(names)}, Signature={signature}"
        )

    def _key(self, day: str, region: str) -> bytes:
        key = self._keys.get((day, region))
        if key is None:
            key = f"AWS4{self.credentials.secret}".encode()
            for part in (day, region, "s3", "aws4_request"):
                key = hmac.new(key, part.encode(), hashlib.sha256).digest()
            self._keys = {(day, region): key}
        return key


def canonical_query(query: Mapping[str, str]) -> str:
    pairs = sorted((quote(k, safe="-_.~"), quote(v, safe="-_.~")) for k, v in query.items())
    return "&".join(f"{k}={v}" for k, v in pairs)


class _Pool:
    """Kept-alive connections to one host, one request at a time each."""

    def __init__(
        self, scheme: str, host: str, timeout: float, size: int, tls: ssl.SSLContext | None
    ) -> None:
        self.scheme, self.host, self.timeout, self.size = scheme, host, timeout, size
        self.tls = tls
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def take(self) -> http.client.HTTPConnection:
        """A kept-alive connection (the server may have closed it since), else a new one."""
        with self._lock:
            if self._pid != os.getpid():  # a forked child must not share its parent's sockets
                self._idle, self._pid = [], os.getpid()
            if self._idle:
                return self._idle.pop()
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, timeout=self.timeout, context=self.tls)
        return http.client.HTTPConnection(self.host, timeout=self.timeout)

    def give(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < self.size and self._pid == os.getpid():
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


class S3Lite:
    """The object store's S3 requests (see the module docstring)."""

    protocol = "s3"

    def __init__(
        self,
        *,
        credentials: Credentials | None,
        region: str = "us-east-1",
        endpoint_url: str | None = None,
        timeout: float = 5.0,
        max_connections: int = 64,
        ca_bundle: str | None = None,
    ) -> None:
        self.region = region
        self.ca_bundle = ca_bundle
        self._tls: ssl.SSLContext | None = None
        self.endpoint_url = endpoint_url.rstrip("/") if endpoint_url else None
        self.timeout = timeout
        self.max_connections = max_connections
        self.retries = 1  # set by ObjectStore, as on s3fs; a stale kept-alive socket is retried
        self._signer = Signer(credentials) if credentials is not None else None
        self._pools: dict[tuple[str, str], _Pool] = {}
        self._lock = threading.Lock()
        self._threads: concurrent.futures.ThreadPoolExecutor | None = None

    # -- addressing and requests ---------------------------------------------------------------

    def _where(self, bucket: str, key: str) -> tuple[str, str, str]:
        """Scheme, host and encoded path of ``key`` in ``bucket`` (``key`` may be empty)."""
        if self.endpoint_url:
            parts = urlsplit(self.endpoint_url)
            base = parts.path.rstrip("/")
            return parts.scheme or "https", parts.netloc, quote(f"{base}/{bucket}/{key}", safe="/~")
        if re.fullmatch(r"[a-z0-9][a-z0-9-]{1,61}[a-z0-9]", bucket):
            return "https", f"{bucket}.s3.{self.region}.amazonaws.com", quote(f"/{key}", safe="/~")
        return "https", f"s3.{self.region}.amazonaws.com", quote(f"/{bucket}/{key}", safe="/~")

    def _pool(self, scheme: str, host: str) -> _Pool:
        with self._lock:
            pool = self._pools.get((scheme, host))
            if pool is None:
                if scheme == "https" and self._tls is None:
                    self._tls = ssl.create_default_context(cafile=self.ca_bundle)
                pool = _Pool(scheme, host, self.timeout, self.max_connections, self._tls)
                self._pools[(scheme, host)] = pool
            return pool

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: bytes = b"",
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        """Send one request for ``bucket/key``; the status, headers (lower-case) and body.
        Errors other than a 404 (:class:`FileNotFoundError`) raise :class:`S3Error`."""
        bucket, _, key = path.partition("/")
        query = dict(query or {})
        moved = retried = False
        while True:
            status, answer, data = self._send(method, bucket, key, query, body, headers or {})
            region = answer.get("x-amz-bucket-region")
            if status in (301, 400) and region and region != self.region and not moved:
                self.region, moved = str(region), True  # the bucket lives elsewhere: follow it
                continue
            if status in _TRANSIENT and not retried:
                # S3's own advice for 500 and 503 (SlowDown): try again. Once, and at once: a
                # failing bucket costs one more quick answer, never a wait.
                retried = True
                continue
            break
        if status == 404:
            raise FileNotFoundError(path)
        if status >= 300:
            code, message = _error_of(data)
            raise S3Error(status, code, message or f"{method} {path}")
        return status, answer, data

    def _send(
        self,
        method: str,
        bucket: str,
        key: str,
        query: Mapping[str, str],
        body: bytes,
        extra: Mapping[str, str],
    ) -> tuple[int, dict[str, str], bytes]:
        scheme, host, path = self._where(bucket, key)
        headers = {k.lower(): v for k, v in extra.items()}
        if self._signer is not None:
            digest = hashlib.sha256(body).hexdigest() if body else _EMPTY_SHA256
            now = datetime.datetime.now(datetime.timezone.utc)
            self._signer.sign(method, host, path, query, headers, digest, self.region, now)
        target = f"{path}?{canonical_query(query)}" if query else path
        pool = self._pool(scheme, host)
        for attempt in range(2):
            conn = pool.take()
            try:
                conn.request(method, target, body=body or None, headers=headers)
                response = conn.getresponse()
                data = response.read()
            except _RETRIABLE:
                conn.close()
                if attempt == 0:
                    # The server closed a kept-alive socket, or reset a new one (a busy server's
                    # full accept queue): once more, on a new one. Never after a timeout: a
                    # slow server costs its timeout once.
                    continue
                raise
            except BaseException:
                conn.close()
                raise
            if response.will_close:
                conn.close()
            else:
                pool.give(conn)
            return response.status, {k.lower(): v for k, v in response.getheaders()}, data
        raise AssertionError("unreachable")

    # -- the fsspec subset ObjectStore uses ----------------------------------------------------

    def cat_file(self, path: str, start: int | None = None, end: int | None = None) -> bytes:
        """The object's bytes ``[start, end)`` (fsspec's convention)."""
        headers: dict[str, str] = {}
        if start is not None or end is not None:
            last = "" if end is None else str(end - 1)
            headers["range"] = f"bytes={start or 0}-{last}"
        try:
            return self.request("GET", _strip(path), headers=headers)[2]
        except S3Error as exc:
            if exc.status == 416:  # a range past the end (an empty object): nothing there
                return b""
            raise

    def cat_with_etag(self, path: str) -> tuple[bytes, str]:
        """The whole object and its ETag, from one GET (a HEAD and a GET are two round trips,
        and the object may change between them)."""
        _, headers, data = self.request("GET", _strip(path))
        return data, headers.get("etag", "")

    def cat(
        self, paths: Sequence[str], on_error: str = "raise", start: int | None = None
    ) -> dict[str, bytes | BaseException]:
        """Several objects at once: ``{path: bytes}``, errors as values with
        ``on_error="return"``."""
        datas = self._each(paths, lambda p: self.cat_file(p, start=start), on_error)
        return dict(zip(paths, datas, strict=True))

    def cat_ranges(
        self,
        paths: Sequence[str],
        starts: int | Sequence[int] | None,
        ends: int | Sequence[int | None] | None,
        on_error: str = "raise",
    ) -> list[bytes | BaseException]:
        """The ranges ``[starts[i], ends[i])`` of ``paths`` at once (a number: for every path)."""
        count = len(paths)
        start_list = list(starts) if isinstance(starts, Sequence) else [starts] * count
        end_list = list(ends) if isinstance(ends, Sequence) else [ends] * count
        jobs = list(zip(paths, start_list, end_list, strict=True))
        return self._each(jobs, lambda job: self.cat_file(*job), on_error)

    def _each(self, items: Sequence[Any], read: Any, on_error: str) -> list[Any]:
        if not items:
            return []

        def one(item: Any) -> Any:
            try:
                return read(item)
            except Exception as exc:
                if on_error != "return":
                    raise
                return exc

        if len(items) == 1:
            return [one(items[0])]
        return list(self._pool_of_threads().map(one, items))

    def _pool_of_threads(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._lock:
            if self._threads is None:
                self._threads = concurrent.futures.ThreadPoolExecutor(
                    max_workers=min(32, self.max_connections), thread_name_prefix="compilecache-s3"
                )
            return self._threads

    def pipe_file(
        self, path: str, value: bytes, mode: str = "overwrite", IfMatch: str | None = None
    ) -> None:
        """Write the object; ``mode="create"``: only if absent, ``IfMatch``: only if its ETag is
        that (a failed condition raises an error naming PreconditionFailed)."""
        headers: dict[str, str] = {}
        if mode == "create":
            headers["if-none-match"] = "*"
        if IfMatch:
            headers["if-match"] = IfMatch
        try:
            self.request("PUT", _strip(path), body=bytes(value), headers=headers)
        except S3Error as exc:
            if exc.status == 409 and exc.code == "ConditionalRequestConflict":
                # Another conditional write of the same key is under way: it wins, like a 412.
                raise S3Error(412, "PreconditionFailed", str(exc)) from exc
            raise

    def info(self, path: str) -> dict[str, Any]:
        _, headers, _ = self.request("HEAD", _strip(path))
        return {
            "name": _strip(path),
            "size": int(headers.get("content-length", 0)),
            "ETag": headers.get("etag", ""),
            "type": "file",
        }

    def exists(self, path: str) -> bool:
        try:
            self.info(path)
        except FileNotFoundError:
            return False
        return True

    def rm_file(self, path: str) -> None:
        self.request("DELETE", _strip(path))

    def find(self, path: str) -> list[str]:
        """Every object under ``path`` (``bucket/prefix``), as ``bucket/key``."""
        import xml.etree.ElementTree as ET  # only listings need it

        bucket, _, prefix = _strip(path).partition("/")
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        found: list[str] = []
        query = {"list-type": "2", "prefix": prefix}
        while True:
            _, _, data = self.request("GET", f"{bucket}/", query=query)
            root = ET.fromstring(data)
            ns = root.tag.partition("}")[0] + "}" if root.tag.startswith("{") else ""
            found += [f"{bucket}/{e.text}" for e in root.iter(f"{ns}Key") if e.text]
            token = root.findtext(f"{ns}NextContinuationToken")
            if root.findtext(f"{ns}IsTruncated") != "true" or not token:
                return found
            query = {**query, "continuation-token": token}

    def invalidate_cache(self, path: str | None = None) -> None:
        """Nothing is cached here (fsspec's listings cache is what ObjectStore turns off)."""

    def close(self) -> None:
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
            threads, self._threads = self._threads, None
        for pool in pools:
            pool.close()
        if threads is not None:
            threads.shutdown(wait=False)


def _strip(path: str) -> str:
    return path.removeprefix("s3://").removeprefix("s3a://").lstrip("/")


def _error_of(data: bytes) -> tuple[str, str]:
    """The ``Code`` and ``Message`` of an S3 error body (empty when there is none)."""
    text = data[:4096].decode("utf-8", "replace")
    code = re.search(r"<Code>([^<]*)</Code>", text)
    message = re.search(r"<Message>([^<]*)</Message>", text)
    return (code.group(1) if code else "", message.group(1) if message else "")


# -- when this client can stand in for s3fs ----------------------------------------------------


def open_client(
    options: Mapping[str, Any],
    *,
    timeout: float,
    max_connections: int,
    env: Mapping[str, str] | None = None,
) -> S3Lite | None:
    """This client for ``options`` (the URL's s3fs options), or ``None`` where only s3fs can
    serve them: an option it does not know, or credentials it cannot read itself."""
    env = os.environ if env is None else env
    if set(options) - OPTIONS:
        return None
    if any(env.get(name) or env.get(name.lower()) for name in _PROXY_VARIABLES):
        return None  # botocore honours a proxy; this client does not
    profile_name = options.get("profile")
    profile = _profile(str(profile_name or env.get("AWS_PROFILE") or "default"), env)
    credentials: Credentials | None
    if options.get("anon") is True:
        credentials = None
    else:
        found = _credentials(options, env, profile, explicit_profile=bool(profile_name))
        if found is None:
            return None
        credentials = found
    region = str(
        options.get("region")
        or options.get("region_name")
        or env.get("AWS_REGION")
        or env.get("AWS_DEFAULT_REGION")
        or profile.get("region")
        or "us-east-1"
    )
    endpoint = options.get("endpoint_url") or env.get("AWS_ENDPOINT_URL_S3")
    endpoint = endpoint or env.get("AWS_ENDPOINT_URL")
    return S3Lite(
        credentials=credentials,
        region=region,
        endpoint_url=str(endpoint) if endpoint else None,
        timeout=timeout,
        max_connections=max_connections,
        ca_bundle=env.get("AWS_CA_BUNDLE") or _certifi_bundle(),
    )


def _certifi_bundle() -> str | None:
    """certifi's CA bundle, which botocore verifies against, where certifi is installed."""
    try:
        import certifi
    except ImportError:
        return None
    where: str = certifi.where()
    return where


def _credentials(
    options: Mapping[str, Any],
    env: Mapping[str, str],
    profile: Mapping[str, str],
    *,
    explicit_profile: bool,
) -> Credentials | None:
    """Static credentials in botocore's order, or ``None`` when botocore would go further."""
    key, secret = options.get("key"), options.get("secret")
    if key and secret:
        return Credentials(str(key), str(secret), _text(options.get("token")))
    if not explicit_profile:  # botocore skips the variables when a profile is named
        key, secret = env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_SECRET_ACCESS_KEY")
        if key and secret:
            return Credentials(key, secret, env.get("AWS_SESSION_TOKEN") or None)
    if env.get("AWS_WEB_IDENTITY_TOKEN_FILE") or any(
        k.startswith(("sso_", "web_identity")) or k in _BOTOCORE_ONLY for k in profile
    ):
        return None  # an assumed role, web identity or SSO: botocore's to resolve
    key, secret = profile.get("aws_access_key_id"), profile.get("aws_secret_access_key")
    if key and secret:
        return Credentials(key, secret, profile.get("aws_session_token") or None)
    return None


def _profile(name: str, env: Mapping[str, str]) -> dict[str, str]:
    """The profile's settings: the credentials file's section over the config file's."""
    home = Path(env.get("HOME") or Path.home())
    config = Path(env.get("AWS_CONFIG_FILE") or home / ".aws" / "config").expanduser()
    shared = Path(env.get("AWS_SHARED_CREDENTIALS_FILE") or home / ".aws" / "credentials")
    settings: dict[str, str] = {}
    section = name if name == "default" else f"profile {name}"
    for path, wanted in ((config, section), (shared.expanduser(), name)):
        parser = configparser.RawConfigParser()
        try:
            parser.read(path)
        except (OSError, configparser.Error):
            continue
        if parser.has_section(wanted):
            settings.update(parser.items(wanted))
    return settings


def _text(value: Any) -> str | None:
    return str(value) if value else None
