"""The fsspec object store: S3 against a real moto_server, and the generic path on fsspec's own
memory and local filesystems."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from compilecache.errors import CorruptEntry, StoreUnavailable
from compilecache.stores.base import EntryMeta, Store
from compilecache.stores.objectstore import ObjectStore
from compilecache.stores.obstorefs import ObstoreFS
from compilecache.stores.registry import open_url
from tests import servers
from tests.polling import wait_until
from tests.servers import MotoServer, run_race
from tests.stores.conformance import StoreConformance

# The real servers this module uses (pytest fixtures from tests/servers.py).
moto_server = servers.moto_server
azurite_server = servers.azurite_server


@pytest.fixture(scope="module")
def bucket(moto_server: MotoServer) -> str:
    return moto_server.create_bucket()


@pytest.fixture
def s3(moto_server: MotoServer, bucket: str) -> Iterator[ObjectStore]:
    """The S3 store, through obstore."""
    url = moto_server.url(bucket, f"p{uuid.uuid4().hex[:10]}")
    store = open_url(url)
    assert isinstance(store, ObjectStore)
    assert isinstance(store.fs, ObstoreFS)
    yield store
    store.close()


class TestS3Store(StoreConformance):
    REOPENS_FROM_URL = False

    CAPABILITIES = frozenset({"counters", "leases"})

    @pytest.fixture
    def store(self, s3: ObjectStore) -> Store:
        return s3


class TestAzureStore(StoreConformance):
    """Azure Blob Storage on Azurite, through obstore."""

    REOPENS_FROM_URL = False

    CAPABILITIES = frozenset({"counters", "leases"})

    @pytest.fixture
    def store(self, azurite_server: servers.AzuriteServer) -> Iterator[Store]:
        container = azurite_server.create_container()
        store = open_url(azurite_server.url(container, f"p{uuid.uuid4().hex[:10]}"))
        assert isinstance(store, ObjectStore) and isinstance(store.fs, ObstoreFS)
        assert store.conditional and store.url.startswith("az://")
        yield store
        store.close()


class TestFsspecMemoryStore(StoreConformance):
    """The generic path: a protocol without conditional writes (one PUT per object)."""

    REOPENS_FROM_URL = False

    CAPABILITIES = frozenset({"counters"})

    @pytest.fixture
    def store(self) -> Store:
        return ObjectStore(MemoryFileSystem(), f"/cc-{uuid.uuid4().hex}")


class TestFsspecRenameStore(StoreConformance):
    """A filesystem-like protocol: values are written to a temporary name, then renamed."""

    REOPENS_FROM_URL = False

    CAPABILITIES = frozenset({"counters"})

    @pytest.fixture
    def store(self, tmp_path: Path) -> Store:
        store = ObjectStore(fsspec.filesystem("file"), str(tmp_path / "objects"))
        assert not store.atomic_put and not store.conditional
        return store


def test_s3_url_and_conditional_writes_enabled(s3: ObjectStore) -> None:
    assert s3.url.startswith("s3://") and s3.conditional
    # Fail fast: one attempt per request, short timeouts, no listing cache.
    assert s3.fs.retries == 1
    retry = s3.fs.store.retry_config
    # One attempt, and one more at once after a 5xx or a reset connection, within the timeout.
    assert retry is not None and retry["max_retries"] == 1
    assert retry["retry_timeout"].total_seconds() == 5.0
    assert s3.fs.store.client_options["timeout"] == "5s"


def test_racing_creators_do_not_clobber(s3: ObjectStore, moto_server: MotoServer) -> None:
    """Both writers saw no object; the second one's If-None-Match: * fails, the first stands."""
    other = ObjectStore(s3.fs, s3.root, url=s3.url)
    s3.put("k", b"first writer", EntryMeta("jax", "f", 1.0))

    def saw_nothing(path: str, **kwargs: Any) -> dict[str, Any]:
        raise FileNotFoundError(path)

    other.fs = _Spy(s3.fs, info=saw_nothing)
    other.put("k", b"second writer")
    assert other.lost_races == 1
    assert s3.get("k") == b"first writer"


def test_racing_replacers_do_not_clobber(s3: ObjectStore) -> None:
    """A writer replaces only the version it saw (If-Match: etag)."""
    s3.put("k", b"v1")
    seen = s3.fs.info(s3.path_of("k"))
    s3.put("k", b"v2 by a faster writer")
    slow = ObjectStore(_Spy(s3.fs, info=lambda path, **kw: seen), s3.root, url=s3.url)
    slow.put("k", b"v2 by a slower writer")
    assert slow.lost_races == 1
    assert s3.get("k") == b"v2 by a faster writer"


def test_metadata_without_payload_reads(s3: ObjectStore) -> None:
    s3.put("jax/a", b"a" * 200_000, EntryMeta("jax", "jit_a", 3.0))
    s3.put("jax/b", b"b" * 10, EntryMeta("jax", "jit_b", 0.1))
    reads: list[tuple[Any, ...]] = []
    fs = s3.fs
    spy = _Spy(
        fs,
        cat_file=lambda path, start=None, end=None, **kw: (
            reads.append(("cat", start, end)) or fs.cat_file(path, start=start, end=end)
        ),
        cat_ranges=lambda paths, starts, ends, **kw: (
            reads.append(("ranges", starts, ends)) or fs.cat_ranges(paths, starts, ends, **kw)
        ),
    )
    s3.fs = spy
    info = s3.stat("jax/a")
    assert info is not None and info.size == 200_000 and info.name == "jit_a"
    assert {i.key: i.size for i in s3.scan("jax/")} == {"jax/a": 200_000, "jax/b": 10}
    assert reads == [("cat", 0, 4096), ("ranges", 0, 4096)]


def test_corrupt_and_truncated_objects(s3: ObjectStore) -> None:
    s3.put("k", b"x" * 1000)
    path = s3.path_of("k")
    s3.fs.pipe_file(path, s3.fs.cat_file(path)[:-10])  # truncated
    with pytest.raises(CorruptEntry):
        s3.get("k")
    assert not s3.fs.exists(path)  # removed
    s3.fs.pipe_file(path, b"garbage that is not a frame")
    with pytest.raises(CorruptEntry):
        s3.get("k")
    assert s3.get("k") is None


def test_concurrent_writers_of_one_large_key(moto_server: MotoServer, bucket: str) -> None:
    """Writer and reader processes race on one 1 MB object: every read is a whole value."""
    url = moto_server.url(bucket, f"race{uuid.uuid4().hex[:8]}")
    results = run_race(url, "jax/hot", writers=2, readers=2, seconds=2.0, size=1_000_000)
    writers, readers = results[:2], results[2:]
    assert sum(w["writes"] for w in writers) > 0 and all(w["errors"] == 0 for w in writers)
    assert all(r["bad"] == 0 and r["errors"] == 0 for r in readers)
    assert sum(r["whole"] for r in readers) > 0


def test_server_down_is_unavailable(moto_server: MotoServer) -> None:
    from tests.servers import free_port

    store = open_url(
        f"s3://b/p?endpoint_url=http://127.0.0.1:{free_port()}&key=x&secret=y&timeout=1s"
    )
    with pytest.raises(StoreUnavailable):
        store.get("k")
    with pytest.raises(StoreUnavailable):
        store.put("k", b"v")


@pytest.mark.parametrize(("url", "extra"), [("gs://bucket/p", "gcs"), ("az://c/p", "azure")])
def test_missing_obstore_names_the_package(
    monkeypatch: pytest.MonkeyPatch, url: str, extra: str
) -> None:
    monkeypatch.setitem(sys.modules, "obstore", None)  # as if it were not installed
    monkeypatch.setitem(sys.modules, "obstore.store", None)
    with pytest.raises(StoreUnavailable, match=rf"obstore.*compilecache\[{extra}\]"):
        open_url(url)


def test_any_fsspec_protocol_is_a_store() -> None:
    """Protocols registered with fsspec (here a test one) open through the generic fallback."""

    class TestFS(MemoryFileSystem):
        protocol = "cctestfs"
        store: dict[str, Any] = {}  # noqa: RUF012  (fsspec's class-level storage)
        pseudo_dirs = [""]  # noqa: RUF012

    fsspec.register_implementation("cctestfs", TestFS, clobber=True)
    store = open_url("cctestfs://bucket/prefix")
    assert isinstance(store, ObjectStore) and store.url == "cctestfs://bucket/prefix"
    store.put("k", b"v")
    assert store.get("k") == b"v"


class _Spy:
    """A filesystem that answers some calls itself and passes the rest through."""

    def __init__(self, fs: Any, **overrides: Any) -> None:
        self._fs = fs
        self._overrides = overrides

    def __getattr__(self, name: str) -> Any:
        if name in self._overrides:
            return self._overrides[name]
        return getattr(self._fs, name)


def test_a_write_of_a_new_entry_only_is_one_request(s3: ObjectStore) -> None:
    """``put_new`` (a cold run's write behind its claim) asks nothing first: one conditional
    PUT, whose refusal says another process wrote the key."""
    calls: list[str] = []

    def pipe_file(path: str, value: bytes, **kwargs: Any) -> Any:
        calls.append(f"pipe_file {kwargs.get('mode')}")
        return s3.fs.pipe_file(path, value, **kwargs)

    def info(path: str, **kwargs: Any) -> Any:
        calls.append("info")
        return s3.fs.info(path, **kwargs)

    spied = ObjectStore(_Spy(s3.fs, pipe_file=pipe_file, info=info), s3.root, url=s3.url)
    assert spied.put_new("jax/new", b"mine", EntryMeta("jax", "f", 1.0))
    assert not spied.put_new("jax/new", b"a second compile of it")
    assert calls == ["pipe_file create", "pipe_file create"]
    assert s3.get("jax/new") == b"mine"


def test_counters_read_ahead_make_the_exit_one_write_and_lose_nothing(
    moto_server: MotoServer, bucket: str
) -> None:
    url = moto_server.url(bucket, f"ahead{uuid.uuid4().hex[:8]}")
    first, other = open_url(url), open_url(url)
    assert isinstance(first, ObjectStore) and isinstance(first.fs, ObstoreFS)
    first.counters.add({"hits": 1.0})
    first.counters.prepare()  # at enable: the counters object is read in the background
    wait_until(lambda: first.counters._ahead is not None, 10, interval=0.01)
    first.fs.requests = []
    first.counters.add({"hits": 2.0})
    assert [m for m, _ in first.fs.requests] == ["PUT"]  # at exit: the write alone
    # A read-ahead gone stale (another process of this host added since): its write fails
    # its condition, and the counters are read again; nothing is lost.
    first.counters.prepare()
    wait_until(lambda: first.counters._ahead is not None, 10, interval=0.01)
    other.counters.add({"hits": 10.0})
    first.counters.add({"hits": 100.0})
    assert first.counters.read()["hits"] == 113.0


@pytest.mark.parametrize("case", ["missing bucket", "unreachable", "denied"])
def test_store_errors_are_one_warning_in_plain_words(
    case: str,
    moto_server: MotoServer,
    azurite_server: servers.AzuriteServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A missing bucket, an unreachable endpoint, refused credentials: one warning each, naming
    the URL and what to check; the lookups are misses and the run goes on."""
    from compilecache.entry import EntryHeader
    from compilecache.runtime.cache import Cache
    from compilecache.stores.registry import open_store

    if case == "missing bucket":
        url, words = moto_server.url("no-such-bucket-here", "c"), "does not exist: create it"
    elif case == "unreachable":
        url = f"s3://b/p?endpoint_url=http://127.0.0.1:{servers.free_port()}&key=x&secret=y"
        words = "cannot reach the endpoint"
    else:
        good = azurite_server.url(azurite_server.create_container(), "c")
        url, words = good.replace("account_key=Eby8", "account_key=AAAA"), "check the credentials"
    cache = Cache(open_store(url, None))
    with caplog.at_level("WARNING", logger="compilecache"):
        for i in range(3):
            assert cache.load("jax", f"jax/k{i}") is None
            header = EntryHeader(framework="jax", key=f"jax/w{i}", name="f", compile_time_s=1.0)
            assert not cache.save(header, b"x")
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1, warnings
    assert words in warnings[0] and url.split("?")[0] in warnings[0]
    assert cache.stats.snapshot()["misses"] == 3


def test_object_store_urls_check_their_options_and_forms() -> None:
    """Unknown options name the known ones; Azure's abfs form names its container and account."""
    from compilecache.errors import ConfigError
    from compilecache.stores.obstorefs import split_location

    with pytest.raises(ConfigError, match=r"client.*knows.*endpoint_url"):
        open_url("s3://bucket/prefix?client=s3fs")
    with pytest.raises(ConfigError, match=r"max_sise"):
        open_url("az://container/prefix?account_name=a&max_sise=1")
    assert split_location("abfss", "cache@acct.dfs.core.windows.net", "/jobs/a") == (
        "cache",
        "jobs/a",
        "acct",
    )
    store = open_url("abfs://cache@acct.dfs.core.windows.net/jobs?account_key=a2V5")
    assert isinstance(store, ObjectStore) and store.root == "cache/jobs"
    assert store.fs.store.config["account_name"] == "acct"
    store.close()


@pytest.mark.parametrize("source", ["environment", "profile"])
def test_s3_credentials_from_the_environment_or_a_profile(
    source: str, moto_server: MotoServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No keys in the URL: obstore's chain reads the AWS_* variables; ``profile=`` reads the
    shared credentials file (through boto3)."""
    bucket = moto_server.create_bucket()
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    url = f"s3://{bucket}/creds?endpoint_url={moto_server.endpoint}&region=us-east-1"
    if source == "environment":
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    else:
        credentials = tmp_path / "credentials"
        credentials.write_text("[ci]\naws_access_key_id = testing\naws_secret_access_key = x\n")
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
        monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
        url += "&profile=ci"
    store = open_url(url)
    store.put("jax/k", b"value")
    assert store.get("jax/k") == b"value"
    store.close()


def test_a_large_write_outlasts_a_short_request_timeout(
    moto_server: MotoServer, bucket: str
) -> None:
    """A multipart upload's parts and its completion may take longer than the URL's
    ``timeout`` (which bounds connecting and small requests): an 80 MB entry is written with a
    timeout of 0.5 s, shorter than sending one 16 MB part to moto takes on a 2-core machine."""
    prefix = f"bulk{uuid.uuid4().hex[:8]}"
    value = uuid.uuid4().bytes * (80 * (1 << 20) // 16)
    short = open_url(moto_server.url(bucket, prefix) + "&timeout=0.5s")
    try:
        short.put("jax/large", value, EntryMeta("jax", "large", 1.0))
    finally:
        short.close()
    reader = open_url(moto_server.url(bucket, prefix) + "&timeout=30s")
    try:
        assert reader.get("jax/large") == value
    finally:
        reader.close()


def test_a_completed_upload_whose_answer_was_lost_counts_as_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A retried multipart completion that the first attempt already completed is answered
    "no such upload" (404): the write stands when the object is there at its full size (and is
    not the object it replaced), and fails where it is not."""
    import obstore
    from obstore.store import MemoryStore

    from compilecache.stores import obstorefs

    real_put = obstore.put
    completes: list[bool] = []

    def put_then_lose_the_answer(store: Any, key: str, value: Any, **kwargs: Any) -> Any:
        if completes.pop(0):
            real_put(store, key, value, **kwargs)
        # obstore raises a missing object or upload as FileNotFoundError.
        raise FileNotFoundError("NoSuchUpload: the specified upload does not exist")

    monkeypatch.setattr(obstorefs, "MULTIPART_BYTES", 1024)
    monkeypatch.setattr(obstore, "put", put_then_lose_the_answer)
    fs = ObstoreFS(MemoryStore(), "memory", "b", describe="memory://b")
    value = bytes(range(256)) * 16

    completes.append(True)
    fs.pipe_file("b/done", value)
    assert bytes(obstore.get(fs.store, "done").bytes()) == value

    completes.append(False)
    with pytest.raises(FileNotFoundError):
        fs.pipe_file("b/lost", value)

    # A replacement whose completion was lost, over an object of the same size: the object is
    # still the one replaced, so the write failed.
    real_put(fs.store, "same", bytes(len(value)))
    old_etag = str(obstore.head(fs.store, "same")["e_tag"])
    completes.append(False)
    with pytest.raises(FileNotFoundError):
        fs.pipe_file("b/same", value, IfMatch=old_etag)
