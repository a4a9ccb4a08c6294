"""Fleet-wide counters (issue 13, part 3): every level that can keep counters records what it
served for every host that used it, so ``stats --url <shared store>`` answers "how much did our
cache save?" for the fleet, while ``stats`` on a host's local level still shows that host.

Hosts are simulated by separate local directories in front of one real shared level (Redis, an
S3 server); the programs are real JAX processes.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from compilecache.stores.base import EntryMeta
from compilecache.stores.registry import open_url
from tests import servers
from tests.conftest import TESTS, clean_env, cli_json, last_json, run_python
from tests.servers import MotoServer, RedisServer, namespace

redis_server = servers.redis_server
moto_server = servers.moto_server
PROGRAM = str(TESTS / "jax_program.py")


def _host_run(local: Path, shared: str) -> dict[str, Any]:
    env = clean_env({"COMPILECACHE_URL": f"{local},{shared}"})
    stats: dict[str, Any] = last_json(run_python([PROGRAM, "before"], env).stdout)["stats"]
    return stats


def _stats(url: str, cwd: Path) -> dict[str, Any]:
    report: dict[str, Any] = cli_json("stats", "--json", url=url, cwd=cwd)
    return report


@pytest.mark.slow
@pytest.mark.parametrize("shared_kind", ["redis", "s3"])
def test_a_shared_level_counts_what_it_served_every_host(
    tmp_path: Path, redis_server: RedisServer, moto_server: MotoServer, shared_kind: str
) -> None:
    if shared_kind == "redis":
        shared = f"{redis_server.url}/{namespace()}"
    else:
        shared = moto_server.url(moto_server.create_bucket())
    first = _host_run(tmp_path / "host-a", shared)  # cold: compiles and writes both levels
    second = _host_run(tmp_path / "host-b", shared)  # a fresh host: warm from the shared level
    assert first["writes"] >= 3 and second["hits"] == first["writes"]
    assert second["misses"] == 0

    fleet = _stats(shared, tmp_path)
    assert fleet["hits"] == second["hits"]  # served by the shared level, to host b
    assert fleet["writes"] == first["writes"]  # written to it by host a
    assert fleet["misses"] == first["misses"]  # host a's lookups that reached it and missed
    assert fleet["compile_time_saved_s"] > 0

    # Each host's local level still shows that host alone.
    host_b = _stats(str(tmp_path / "host-b"), tmp_path)
    assert host_b["hits"] == second["hits"] and host_b["writes"] == 0
    host_a = _stats(str(tmp_path / "host-a"), tmp_path)
    assert host_a["hits"] == 0 and host_a["writes"] == first["writes"]

    # A third start on host b hits its local disk: the shared level served nothing more.
    third = _host_run(tmp_path / "host-b", shared)
    assert third["hits"] == second["hits"]
    assert _stats(shared, tmp_path)["hits"] == fleet["hits"]

    # The HTML report of the shared store is the fleet's.
    page = tmp_path / "fleet.html"
    proc = subprocess.run(
        [sys.executable, "-m", "compilecache", "report", "--html", str(page), "--url", shared],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert f">{fleet['hits']}<" in page.read_text().replace(" ", "")


def test_object_store_counters_are_one_object_per_host_and_day(
    moto_server: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_url(moto_server.url(moto_server.create_bucket()))
    store.put("jax/k", b"v", EntryMeta("jax", "jit_k", 1.0))
    monkeypatch.setattr(socket, "gethostname", lambda: "host-a")
    store.counters.add({"hits": 2.0, "compile_time_saved_s": 1.5})
    store.counters.add({"hits": 1.0})
    monkeypatch.setattr(socket, "gethostname", lambda: "host-b")
    store.counters.add({"hits": 4.0, "misses": 1.0})
    assert store.counters.read() == {"hits": 7.0, "misses": 1.0, "compile_time_saved_s": 1.5}
    # Counter objects are not entries.
    assert [i.key for i in store.scan()] == ["jax/k"]
    store.counters.zero()
    assert store.counters.read() == {}
    assert store.get("jax/k") == b"v"
