"""Large entries through S3 (issue 21): a 300 MB entry is a multipart upload and comes back in
parallel ranged reads, and neither side holds more than about two copies of it in memory.

Each side runs in its own process, whose peak resident size (``ru_maxrss``) is read before and
after the store call: the growth is what the call held at its peak, beside the value itself."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from tests import servers
from tests.conftest import ROOT, clean_env, last_json, run_python
from tests.servers import MotoServer

moto_server = servers.moto_server
SIZE_MB = 300

PROGRAM = r"""
import hashlib, json, resource, sys, time
sys.path.insert(0, sys.argv[3])
from compilecache.stores.base import EntryMeta
from compilecache.stores.registry import open_url
MB = 1 << 20
def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / MB
role, url, _, size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
store = open_url(url)
requests = store.fs.requests = []
if role == "put":
    value = (hashlib.sha256(b"block").digest() * (MB // 32)) * size
    digest = hashlib.sha256(value).hexdigest()
    before, start = peak(), time.perf_counter()
    store.put("jax/large", value, EntryMeta("jax", "large", 1.0))
else:
    before, start = peak(), time.perf_counter()
    value = store.get("jax/large")
    digest = hashlib.sha256(value).hexdigest()
print(json.dumps({
    "grew_mb": peak() - before, "seconds": time.perf_counter() - start, "sha256": digest,
    "requests": [m for m, _ in requests], "size_mb": len(value) / MB,
}))
"""


def side(role: str, url: str) -> dict[str, Any]:
    args = ["-c", PROGRAM, role, url, str(ROOT), str(SIZE_MB)]
    return dict(last_json(run_python(args, clean_env(), timeout=600).stdout))


@pytest.mark.slow
def test_a_300_mb_entry_round_trips_through_s3_with_bounded_memory(
    moto_server: MotoServer,
) -> None:
    url = moto_server.url(moto_server.create_bucket(), "large")
    put = side("put", url)
    got = side("get", url)
    assert got["sha256"] == put["sha256"] and got["size_mb"] == SIZE_MB
    # The write: the framed object (one copy) and the parts in flight; no second whole copy.
    assert put["grew_mb"] < 2.2 * SIZE_MB, put
    # The read: one ranged GET per 16 MB part after the first request, into one buffer, then
    # the value cut from the frame: two copies at the peak, not three.
    assert got["grew_mb"] < 2.2 * SIZE_MB, got
    assert got["requests"].count("GET") >= SIZE_MB // 16, got["requests"]
    print(json.dumps({"put": put, "get": got}), file=sys.stderr)
