"""S3, GCS and Azure Blob Storage through ``obstore`` (the Rust ``object_store`` crate that Arrow,
DataFusion, Polars and delta-rs use), as the small fsspec-like surface :class:`ObjectStore`
speaks: ranged and whole reads (with the ETag), writes that are plain, create-only or
conditional on an ETag, listings, deletes.

``obstore`` imports in about 12 ms and brings each cloud's standard credential chain: for S3 the
``AWS_*`` variables, web identity (EKS), the ECS task role and the instance metadata service;
for Azure account keys, SAS tokens, managed identity and the CLI; for GCS application default
credentials and service-account files. A named AWS profile (``profile=``), which
``object_store`` does not read, is resolved through boto3 where it is installed.

Large objects: a write over :data:`MULTIPART_BYTES` is a multipart upload of
:data:`PART_BYTES` parts (``mode="create"`` then checks that the object is absent first: a
multipart upload cannot be conditional everywhere); a read of an object over that size is
:data:`PART_BYTES` ranged GETs in parallel into one buffer. Neither holds more than about two
copies of the object in memory. Those requests may take :data:`BULK_TIMEOUT_SECONDS` where the
URL's ``timeout`` is shorter, and a multipart upload whose completion was answered "no such
upload" on a retry (the first attempt completed it, its answer was lost) is taken as written
when the object is there at its full size.

Errors keep the meaning ObjectStore relies on: a missing object is ``FileNotFoundError``, a
failed condition :class:`PreconditionFailed` (a ``FileExistsError``), everything else an
``OSError`` whose message says what to check (the bucket, the credentials, the endpoint).
"""

from __future__ import annotations

import concurrent.futures
import datetime
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from compilecache.errors import ConfigError

MULTIPART_BYTES = 64 << 20
PART_BYTES = 16 << 20
PARALLEL_PARTS = 8
# The requests that move a part of a large object, and the one that completes a multipart
# upload (the server assembles the parts before it answers), may take this long even where the
# URL's ``timeout`` is shorter; connecting is still bounded by ``timeout``, so a server that is
# down fails as fast as for any request.
BULK_TIMEOUT_SECONDS = 60.0

# URL option -> obstore's configuration key, per cloud; and the boolean options.
_CONFIG_KEYS = {
    "s3": {
        "endpoint_url": "endpoint",
        "region": "region",
        "region_name": "region",
        "key": "access_key_id",
        "secret": "secret_access_key",
        "token": "session_token",
    },
    "gcs": {"token": "service_account", "endpoint_url": "base_url"},
    "azure": {
        "account_name": "account_name",
        "account_key": "account_key",
        "sas_token": "sas_key",
        "endpoint_url": "endpoint",
    },
}
_FLAGS = {"anon": "skip_signature", "use_emulator": "use_emulator"}
_STORE_CLASSES = {"s3": "S3Store", "gcs": "GCSStore", "azure": "AzureStore"}
# The options each cloud's URL takes (besides this store's own: timeout, retries, conditional).
KNOWN_OPTIONS = {
    "s3": frozenset({*_CONFIG_KEYS["s3"], "anon", "profile"}),
    "gcs": frozenset({*_CONFIG_KEYS["gcs"], "anon"}),
    "azure": frozenset({*_CONFIG_KEYS["azure"], "anon", "use_emulator"}),
}
# fsspec's cache switches, which older URLs carry: nothing is cached here, so they mean nothing.
IGNORED = frozenset({"skip_instance_cache", "use_listings_cache"})
PROTOCOLS = {
    "s3": "s3",
    "s3a": "s3",
    "gs": "gcs",
    "gcs": "gcs",
    "az": "azure",
    "abfs": "azure",
    "abfss": "azure",
}


# What a missing bucket or container says (S3, GCS, Azure), against a missing object.
_NO_BUCKET = ("NoSuchBucket", "ContainerNotFound", "The specified bucket does not exist")
# What a request that never reached a server says.
_UNREACHABLE = ("error sending request", "Connection refused", "dns error", "timed out")


class PreconditionFailed(FileExistsError):
    """A create-only write found the object, or an ETag-conditional one found another ETag."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(f"PreconditionFailed: {path}: {why}")


class NotImplementedByServer(OSError):
    """The server refused a conditional write as not implemented."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(f"NotImplemented: {path}: {why}")


def _exceptions() -> Any:
    import obstore.exceptions

    return obstore.exceptions


def _store_module() -> Any:
    import obstore.store

    return obstore.store


def _flag(value: Any) -> bool:
    return value is True or str(value).strip().lower() in ("1", "true", "yes", "on")


class ObstoreFS:
    """One bucket (or container) of an object store, addressed as ``bucket/key`` paths."""

    def __init__(
        self,
        store: Any,
        protocol: str,
        bucket: str,
        *,
        describe: str,
        bulk_store: Callable[[], Any] | None = None,
    ) -> None:
        self.store = store
        # The client for a large object's parts (built on first use): a longer request timeout.
        self._make_bulk_store = bulk_store
        self._bulk_store: Any = None
        self.protocol = protocol
        self.bucket = bucket
        self.describe = describe  # the URL, for error messages
        self.retries = 1
        # Tests and benchmarks count requests: (method, key) per request when set.
        self.requests: list[tuple[str, str]] | None = None
        self._lock = threading.Lock()
        self._threads: concurrent.futures.ThreadPoolExecutor | None = None

    # -- paths and errors ----------------------------------------------------------------------

    def _key(self, path: str) -> str:
        path = path.lstrip("/")
        if "://" in path:
            path = path.split("://", 1)[1]
        bucket, _, key = path.partition("/")
        if bucket != self.bucket:
            raise ValueError(f"{path!r} is not in bucket {self.bucket!r}")
        return key

    def _sent(self, method: str, key: str) -> None:
        if self.requests is not None:
            with self._lock:
                self.requests.append((method, key))

    def _call(self, method: str, key: str, do: Callable[[], Any]) -> Any:
        """Run one request; obstore's errors as the exceptions ObjectStore understands."""
        self._sent(method, key)
        try:
            return do()
        except (FileNotFoundError, _exceptions().BaseError) as exc:
            raise self._translate(method, key, exc) from None

    def _translate(self, method: str, key: str, exc: BaseException) -> BaseException:
        """The exception ObjectStore understands for one of obstore's, in plain words."""
        errors = _exceptions()
        text = str(exc)
        if method == "LIST" and "404" in text:
            # Listing a prefix of a bucket that exists answers 200, empty or not.
            exc = FileNotFoundError(f"NoSuchBucket: {text}")
            text = str(exc)
        if isinstance(exc, FileNotFoundError):
            if any(code in text for code in _NO_BUCKET):  # not a missing object: no bucket
                return OSError(
                    f"{self.describe}: the bucket {self.bucket!r} does not exist: create it, "
                    "or check the bucket's name and the endpoint"
                )
            return FileNotFoundError(f"{self.describe}: {key} not found")
        if isinstance(exc, (errors.AlreadyExistsError, errors.PreconditionError)):
            return PreconditionFailed(key, _first_line(exc))
        if "ConditionalRequestConflict" in text:
            # Another conditional write of the same key is under way: it wins, like a 412.
            return PreconditionFailed(key, "a conditional write of it is under way")
        if isinstance(exc, errors.NotSupportedError):
            return NotImplementedByServer(key, _first_line(exc))
        if isinstance(exc, (errors.PermissionDeniedError, errors.UnauthenticatedError)):
            return PermissionError(
                f"{self.describe}: {method} {key} was refused ({_first_line(exc)}): check the "
                "credentials and that they may read and write this bucket"
            )
        if any(sign in text for sign in _UNREACHABLE):
            return OSError(
                f"{self.describe}: cannot reach the endpoint ({_first_line(exc)}): check "
                "endpoint_url, the network and any proxy"
            )
        return OSError(
            f"{self.describe}: {method} {key} failed ({_first_line(exc)}): check that the "
            "bucket exists and the endpoint is reachable"
        )

    def _bulk(self) -> Any:
        """The client for a large object's parts and its multipart upload."""
        with self._lock:
            if self._bulk_store is None:
                make = self._make_bulk_store
                self._bulk_store = make() if make is not None else self.store
            return self._bulk_store

    def _pool(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._lock:
            if self._threads is None:
                self._threads = concurrent.futures.ThreadPoolExecutor(
                    max_workers=32, thread_name_prefix="compilecache-obstore"
                )
            return self._threads

    # -- reads ---------------------------------------------------------------------------------

    def cat_file(self, path: str, start: int | None = None, end: int | None = None) -> bytes:
        """The object's bytes ``[start, end)`` (fsspec's convention); all of it without ``end``."""
        if end is None and not start:
            return self.cat_with_etag(path)[0]
        import obstore

        key = self._key(path)
        first = start or 0
        if end is None:
            result = self._call("GET", key, lambda: obstore.get(self.store, key))
            return bytes(result.bytes())[first:]
        if end <= first:
            return b""
        try:
            return bytes(
                self._call(
                    "GET",
                    key,
                    lambda: obstore.get_range(self.store, key, start=first, end=end),
                )
            )
        except OSError as exc:
            if any(sign in str(exc) for sign in ("InvalidRange", "416", "not satisfiable")):
                return b""  # a range past the end (an empty object): nothing there
            raise

    def cat_with_etag(self, path: str) -> tuple[bytes, str]:
        """The whole object and its ETag from one GET; a large one in parallel ranges."""
        import obstore

        key = self._key(path)
        result = self._call("GET", key, lambda: obstore.get(self.store, key))
        meta = result.meta
        size = int(meta["size"])
        etag = str(meta.get("e_tag") or "")
        if size <= MULTIPART_BYTES:
            return bytes(result.bytes()), etag
        del result  # the body is read in parts instead; the response is dropped unread
        return self._read_parts(key, size, etag), etag

    def _read_parts(self, key: str, size: int, etag: str) -> bytes:
        import obstore

        bulk = self._bulk()
        buffer = bytearray(size)
        ranges = [(s, min(s + PART_BYTES, size)) for s in range(0, size, PART_BYTES)]

        def read(bounds: tuple[int, int]) -> None:
            start, end = bounds
            part = self._call(
                "GET",
                key,
                lambda: obstore.get_range(bulk, key, start=start, end=end),
            )
            view = memoryview(part)
            if len(view) != end - start:
                raise OSError(f"{self.describe}: {key} changed while it was read")
            buffer[start:end] = view

        with concurrent.futures.ThreadPoolExecutor(max_workers=PARALLEL_PARTS) as pool:
            list(pool.map(read, ranges))
        # The object may have been replaced between the parts: the ETag says.
        if etag and str(self.info(f"{self.bucket}/{key}").get("ETag") or "") != etag:
            raise OSError(f"{self.describe}: {key} changed while it was read")
        return bytes(buffer)  # the buffer is dropped on return: two copies at the peak

    def cat(
        self, paths: Sequence[str], on_error: str = "raise", start: int | None = None
    ) -> dict[str, bytes | BaseException]:
        datas = self._each(paths, lambda p: self.cat_file(p, start=start), on_error)
        return dict(zip(paths, datas, strict=True))

    def cat_ranges(
        self,
        paths: Sequence[str],
        starts: int | Sequence[int] | None,
        ends: int | Sequence[int | None] | None,
        on_error: str = "raise",
    ) -> list[bytes | BaseException]:
        count = len(paths)
        start_list = list(starts) if isinstance(starts, Sequence) else [starts] * count
        end_list = list(ends) if isinstance(ends, Sequence) else [ends] * count
        jobs = list(zip(paths, start_list, end_list, strict=True))
        return self._each(jobs, lambda job: self.cat_file(*job), on_error)

    def _each(self, items: Sequence[Any], read: Callable[[Any], Any], on_error: str) -> list[Any]:
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
        return list(self._pool().map(one, items))

    def info(self, path: str) -> dict[str, Any]:
        import obstore

        key = self._key(path)
        meta = self._call("HEAD", key, lambda: obstore.head(self.store, key))
        return {
            "name": f"{self.bucket}/{key}",
            "size": int(meta["size"]),
            "ETag": str(meta.get("e_tag") or ""),
            "type": "file",
        }

    def exists(self, path: str) -> bool:
        try:
            self.info(path)
        except FileNotFoundError:
            return False
        return True

    def find(self, path: str) -> list[str]:
        """Every object under ``path`` (``bucket/prefix``), as ``bucket/key``."""
        import obstore

        prefix = self._key(path).rstrip("/")
        found: list[str] = []

        def listing() -> None:
            for batch in obstore.list(self.store, prefix=prefix or None):
                found.extend(f"{self.bucket}/{item['path']}" for item in batch)

        self._call("LIST", prefix, listing)
        return found

    # -- writes --------------------------------------------------------------------------------

    def pipe_file(
        self, path: str, value: bytes, mode: str = "overwrite", IfMatch: str | None = None
    ) -> None:
        """Write the object; ``mode="create"``: only if absent; ``IfMatch``: only if its ETag
        is that (a failed condition raises :class:`PreconditionFailed`)."""
        import obstore

        key = self._key(path)
        if len(value) > MULTIPART_BYTES:
            self._put_large(key, value, create=mode == "create", etag=IfMatch)
            return
        put_mode: Any = "overwrite"
        if mode == "create":
            put_mode = "create"
        elif IfMatch:
            put_mode = {"e_tag": IfMatch}
        self._call(
            "PUT",
            key,
            lambda: obstore.put(self.store, key, value, mode=put_mode, use_multipart=False),
        )

    def _put_large(self, key: str, value: bytes, *, create: bool, etag: str | None) -> None:
        """A multipart upload (parts are views of ``value``: no copy). Its condition is checked
        just before: a writer racing in between writes an equivalent entry, never a wrong one."""
        import obstore

        if create or etag:
            try:
                seen = str(self.info(f"{self.bucket}/{key}").get("ETag") or "")
            except FileNotFoundError:
                seen = ""
            if (create and seen) or (etag and seen != etag):
                raise PreconditionFailed(key, "the object changed before a large write")
        view = memoryview(value)
        parts = (view[i : i + PART_BYTES] for i in range(0, len(view), PART_BYTES))
        bulk = self._bulk()
        try:
            self._call(
                "PUT",
                key,
                lambda: obstore.put(
                    bulk,
                    key,
                    parts,
                    use_multipart=True,
                    chunk_size=PART_BYTES,
                    max_concurrency=PARALLEL_PARTS,
                ),
            )
        except FileNotFoundError:
            # The upload is gone: a retried completion after the first one completed it and
            # its answer was lost (a timeout). Written if the object is there, whole (and, for
            # a replacement, no longer the object it replaced).
            if not self._written(key, len(value), replaced=etag):
                raise

    def _written(self, key: str, size: int, *, replaced: str | None) -> bool:
        """Whether ``key`` now holds an object of ``size`` bytes whose ETag is not ``replaced``."""
        try:
            found = self.info(f"{self.bucket}/{key}")
        except FileNotFoundError:
            return False
        return int(found["size"]) == size and not (replaced and found["ETag"] == replaced)

    def rm_file(self, path: str) -> None:
        import obstore

        key = self._key(path)
        self._call("DELETE", key, lambda: obstore.delete(self.store, key))

    def invalidate_cache(self, path: str | None = None) -> None:
        """Nothing is cached here."""

    def close(self) -> None:
        with self._lock:
            threads, self._threads = self._threads, None
        if threads is not None:
            threads.shutdown(wait=False)


def _first_line(exc: BaseException) -> str:
    """The error's first line, without the server's XML body (which people cannot use)."""
    text = str(exc).strip().splitlines()
    first = text[0].split("<?xml", 1)[0].rstrip(" :") if text else ""
    return first[:300] if first else type(exc).__name__


# -- opening a URL ---------------------------------------------------------------------------------


def split_location(protocol: str, netloc: str, path: str) -> tuple[str, str, str]:
    """(bucket or container, prefix, Azure account from the URL or "") of a store URL.

    Azure's forms: ``az://container/prefix`` (the account from ``account_name=``) and
    ``abfs[s]://container@account.dfs.core.windows.net/prefix``."""
    account = ""
    bucket = netloc
    if PROTOCOLS.get(protocol) == "azure" and "@" in netloc:
        bucket, _, host = netloc.partition("@")
        account = host.split(".", 1)[0]
    return bucket, path.strip("/"), account


def open_fs(
    protocol: str,
    bucket: str,
    options: Mapping[str, Any],
    *,
    timeout: float,
    retries: int,
    describe: str,
    account: str = "",
) -> ObstoreFS:
    """The obstore client of one bucket, for the URL's options (unknown ones: an error naming
    the known ones)."""
    cloud = PROTOCOLS[protocol]
    known = KNOWN_OPTIONS[cloud]
    unknown = sorted(set(options) - known - IGNORED)
    if unknown:
        raise ConfigError(
            f"{describe}: unknown option(s) {', '.join(unknown)}; {protocol}:// knows "
            f"{', '.join(sorted(known))} (and timeout, retries, conditional)"
        )
    client_options: dict[str, Any] = {
        "timeout": datetime.timedelta(seconds=timeout),
        "connect_timeout": datetime.timedelta(seconds=timeout),
    }
    endpoint = str(options.get("endpoint_url") or "")
    if endpoint.startswith("http://"):
        client_options["allow_http"] = True
    # ``retries`` attempts, and one more at once after a 5xx answer or a reset connection (as
    # the built-in client did): within ``timeout`` per attempt, never more in all.
    retry = {
        "max_retries": max(1, retries),
        "retry_timeout": datetime.timedelta(seconds=timeout * max(1, retries)),
        "backoff": {
            "init_backoff": datetime.timedelta(milliseconds=10),
            "max_backoff": datetime.timedelta(milliseconds=100),
            "base": 2.0,
        },
    }
    config: dict[str, Any] = {
        _CONFIG_KEYS[cloud][name]: str(value)
        for name, value in options.items()
        if name in _CONFIG_KEYS[cloud] and value not in (None, "")
    }
    config.update({_FLAGS[name]: True for name in _FLAGS if _flag(options.get(name))})
    if cloud == "azure" and account and "account_name" not in config:
        config["account_name"] = account
    extra: dict[str, Any] = {}
    if options.get("profile"):
        extra["credential_provider"] = _profile_credentials(str(options["profile"]))
    # The constructors read each cloud's environment and credential chain; the URL's options
    # win over them.
    store_class = getattr(_store_module(), _STORE_CLASSES[cloud])
    store = store_class(
        bucket,
        config=config or None,
        client_options=client_options,
        retry_config=retry,
        **extra,
    )

    def bulk_store() -> Any:
        bulk_timeout = datetime.timedelta(seconds=max(timeout, BULK_TIMEOUT_SECONDS))
        return store_class(
            bucket,
            config=config or None,
            client_options={**client_options, "timeout": bulk_timeout},
            retry_config={**retry, "retry_timeout": bulk_timeout * max(1, retries)},
            **extra,
        )

    fs = ObstoreFS(store, protocol, bucket, describe=describe, bulk_store=bulk_store)
    fs.retries = max(1, retries)
    return fs


def _profile_credentials(profile: str) -> Any:
    try:
        import boto3
        from obstore.auth.boto3 import Boto3CredentialProvider
    except ImportError as exc:
        raise ConfigError(
            f"profile={profile}: reading an AWS profile needs boto3 (pip install boto3), or set "
            "the AWS_* variables instead"
        ) from exc
    return Boto3CredentialProvider(boto3.Session(profile_name=profile))
