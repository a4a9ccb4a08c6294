"""A fleet of unlike hosts: never an entry this host cannot run, on every read.

The rule (:func:`compilecache.host.cpu_problem`) is tested as a unit, then through the cache with
an in-memory store, then in fresh processes that play other hosts: a private mount namespace
binds a made-up ``/proc/cpuinfo`` over the real one (what compilecache's host detection reads;
root only: skipped, saying so, without it), and ``setarch linux32`` makes ``uname -m`` say
``i686``. XLA and Inductor still compile for the real CPU there, so these check compilecache's
rule, and that the program's results stay the same when it misses.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from compilecache import entry, host
from compilecache.entry import EntryHeader
from compilecache.host import SAME_VECTORS, SUPERSET, HostCheck, cpu_problem
from compilecache.runtime.cache import OWN_KIND_SEP, Cache, own_key
from compilecache.stores.memory import MemoryStore
from tests.conftest import (
    JAX_PROGRAM,
    clean_env,
    in_mount_namespace,
    is_trace,
    last_json,
    mount_namespaces_work,
    same_jax_results,
)

X86 = ["avx", "avx2", "f16c", "fma", "sse4_2", "avx512f", "avx512bw", "avx512dq", "avx512vl"]


def _target(*features: str, machine: str = "x86_64", **more: Any) -> dict[str, Any]:
    return {"machine": machine, "features": sorted(features), **more}


# -- the rule ------------------------------------------------------------------------------------


def test_jax_rule_serves_a_host_with_every_feature_and_refuses_one_lacking_any() -> None:
    entry_cpu = _target("avx", "avx2", "fma", "sse4_2")
    assert cpu_problem(entry_cpu, _target("avx", "avx2", "fma", "sse4_2"), SUPERSET) is None
    assert cpu_problem(entry_cpu, _target(*X86), SUPERSET) is None  # more features: served
    lesser = cpu_problem(entry_cpu, _target("avx", "sse4_2"), SUPERSET)
    assert lesser == "compiled for a CPU with avx2, fma, which this CPU lacks"
    arm = cpu_problem(entry_cpu, _target("asimd", machine="aarch64"), SUPERSET)
    assert arm == "compiled on x86_64; this host is aarch64"
    unknown = cpu_problem(entry_cpu, _target(), SUPERSET)
    assert unknown is not None and "unknown" in unknown
    # Code that relies on nothing runs anywhere of its architecture.
    assert cpu_problem(_target(), _target("avx"), SUPERSET) is None


def test_torch_rule_serves_only_the_same_vector_features() -> None:
    avx2 = _target("avx", "avx2", "f16c", "fma", "sse4_2")
    # A feature Inductor does not choose its ISA by: the same code, served.
    assert (
        cpu_problem(avx2, _target("avx", "avx2", "f16c", "fma", "sse4_2", "sha_ni"), SAME_VECTORS)
        is None
    )
    assert cpu_problem(avx2, _target("avx", "avx2", "f16c", "fma"), SAME_VECTORS) is None
    more = cpu_problem(avx2, _target(*X86), SAME_VECTORS)
    assert more is not None and "without avx512bw" in more and "other code" in more
    fewer = cpu_problem(_target(*X86), avx2, SAME_VECTORS)
    assert fewer is not None and fewer.startswith("compiled for a CPU with avx512bw")


def test_sve_vector_length_must_match() -> None:
    sve256 = _target("asimd", "sve", machine="aarch64", sve_bits=256)
    sve128 = _target("asimd", "sve", machine="aarch64", sve_bits=128)
    assert cpu_problem(sve256, sve256, SAME_VECTORS) is None
    assert "256 SVE bits" in (cpu_problem(sve256, sve128, SUPERSET) or "")
    assert "SVE" in (cpu_problem(sve256, sve128, SAME_VECTORS) or "")


def _header(framework: str, layer: str, cpu: dict[str, Any] | None, key: str) -> EntryHeader:
    extra: dict[str, Any] = {"layer": layer}
    if cpu is not None:
        extra["cpu"] = cpu
    versions = {"python": host.python_version()}
    return EntryHeader(framework=framework, key=key, name="f", versions=versions, extra=extra)


def test_the_live_check_applies_each_framework_rule_and_what_keys_leave_out() -> None:
    live = HostCheck(live=True)
    here = host.cpu_target()
    if not here["features"]:
        pytest.skip("this host's /proc/cpuinfo lists no ISA features")
    lacking = {**here, "features": [*here["features"], "compilecache_fake_feature"]}
    assert live.reason(_header("jax", "", here, "jax/f-1")) is None
    assert "compilecache_fake_feature" in (
        live.reason(_header("jax", "", lacking, "jax/f-1")) or ""
    )
    for layer in ("fx", "aot", "dynamo"):
        assert live.reason(_header("torch", layer, here, "torch/fx/1")) is None
        # torch's graphs without a recorded CPU: when in doubt, miss.
        assert "no CPU target" in (live.reason(_header("torch", layer, None, "torch/x/1")) or "")
    # Kernels, headers and probes hold the CPU in their keys: not checked again on reads.
    assert live.reason(_header("torch", "kernel", None, "torch/kernel/1")) is None
    old_python = EntryHeader(
        "torch", "torch/fx/1", versions={"python": "2.7.18"}, extra={"layer": "fx", "cpu": here}
    )
    assert "Python 2.7.18" in (live.reason(old_python) or "")


def test_a_read_costs_no_host_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    """Host facts are read once per process: a read's check opens no file."""
    live = HostCheck(live=True)
    header = _header("jax", "", host.cpu_target(), "jax/f-1")
    live.reason(header)
    monkeypatch.setattr(host, "read_cpuinfo", lambda *a, **k: pytest.fail("cpuinfo read again"))
    monkeypatch.setattr(host, "installed_version", lambda *a: pytest.fail("metadata read"))
    for _ in range(1000):
        live.reason(header)


# -- through the cache ---------------------------------------------------------------------------


def _store_entry(store: MemoryStore, key: str, cpu: dict[str, Any], payload: bytes) -> None:
    header = _header("jax", "", cpu, key)
    store.put(key, entry.encode(header, payload), None)


def test_another_hosts_entry_is_a_miss_kept_in_place_and_this_hosts_compile_goes_beside_it() -> (
    None
):
    store = MemoryStore(f"memory://{uuid.uuid4().hex}")
    here = host.cpu_target()
    other = {**here, "machine": "aarch64" if here["machine"] != "aarch64" else "x86_64"}
    _store_entry(store, "jax/f-1", other, b"theirs")
    cache = Cache(store)
    assert cache.load("jax", "jax/f-1") is None
    counters = cache.stats.snapshot()
    assert (counters["misses"], counters["unrunnable"], counters["hits"]) == (1, 1, 0)
    assert "compiled on" in cache.unrunnable["jax/f-1"]
    # This host's compile of that key is written beside it; the other host's stays.
    assert cache.save(_header("jax", "", here, "jax/f-1"), b"mine")
    assert store.peek(own_key("jax/f-1")) is not None
    theirs = entry.decode(store.peek("jax/f-1") or b"", expect_key="jax/f-1")
    assert theirs.payload == b"theirs"
    # The next process of this kind reads its own; the other kind still reads its own.
    again = Cache(store)
    found = again.load("jax", "jax/f-1")
    assert found is not None and found.payload == b"mine"
    assert again.stats.snapshot()["unrunnable"] == 0
    assert again.peek("jax", "jax/f-1") is not None


def test_an_entry_this_host_can_run_is_served_as_before() -> None:
    store = MemoryStore(f"memory://{uuid.uuid4().hex}")
    _store_entry(store, "jax/f-1", host.cpu_target(), b"ok")
    cache = Cache(store)
    found = cache.load("jax", "jax/f-1")
    assert found is not None and found.payload == b"ok"
    assert not cache.unrunnable
    assert not any(OWN_KIND_SEP in i.key for i in store.scan())


# -- other hosts, played in fresh processes ------------------------------------------------------


needs_namespaces = pytest.mark.skipif(
    not mount_namespaces_work(),
    reason="playing another host needs a private mount namespace (unshare -m; root): not here",
)


def _cpuinfo(drop: tuple[str, ...] = (), add: tuple[str, ...] = ()) -> str:
    text = Path("/proc/cpuinfo").read_text()
    for flag in drop:
        text = re.sub(rf"(?m)^((flags|Features)\s*:.*?)\b{flag}\b", r"\1", text)
    if add:
        text = re.sub(r"(?m)^((flags|Features)\s*:.*)$", rf"\1 {' '.join(add)}", text)
    return text


def _as_host(
    cpuinfo: str | None, tmp_path: Path, argv: list[str], env: dict[str, str], arch: str = ""
) -> subprocess.CompletedProcess[str]:
    """``argv`` as a host whose /proc/cpuinfo reads ``cpuinfo`` (and, with ``arch``, whose
    ``uname -m`` says so)."""
    command = list(argv)
    if arch:
        command = ["setarch", arch, *command]
    if cpuinfo is not None:
        fake = tmp_path / f"cpuinfo-{abs(hash(cpuinfo))}"
        fake.write_text(cpuinfo)
        command = in_mount_namespace(
            'mount --bind "$0" /proc/cpuinfo && exec "$@"', str(fake), *command
        )
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{command}: {proc.returncode}\n{proc.stderr[-3000:]}"
    return proc


def _jax_run(
    tmp_path: Path, url: str, cpuinfo: str | None = None, arch: str = ""
) -> dict[str, Any]:
    env = clean_env({"COMPILECACHE_URL": url})
    proc = _as_host(cpuinfo, tmp_path, [sys.executable, JAX_PROGRAM, "before"], env, arch)
    result: dict[str, Any] = last_json(proc.stdout)
    return result


def _keys(url: str) -> list[str]:
    """The keys of JAX's executables in the store at ``url`` (not the guarded traces beside
    them: records about the executables, which name no host)."""
    from compilecache.stores.registry import open_url

    store = open_url(url)
    try:
        return sorted(i.key for i in store.scan() if i.framework == "jax" and not is_trace(i.key))
    finally:
        store.close()


@needs_namespaces
def test_jax_entries_are_not_served_to_a_host_with_fewer_features_and_are_to_one_with_more(
    tmp_path: Path,
) -> None:
    pytest.importorskip("jax")
    if "avx2" not in host.cpu_target()["features"]:
        pytest.skip("this host has no avx2 to take away")
    url = str(tmp_path / "store")
    first = _jax_run(tmp_path, url)
    written = _keys(url)
    assert first["stats"]["writes"] == len(written) > 0

    lesser = _cpuinfo(drop=("avx2", "fma"))
    there = _jax_run(tmp_path, url, lesser)
    stats = there["stats"]
    # Every entry refused, compiled afresh with the same results, and kept beside the others.
    assert stats["hits"] == 0 and stats["unrunnable"] == stats["misses"] == len(written)
    assert same_jax_results(first, there)
    keys = _keys(url)
    assert set(written) <= set(keys)
    assert sorted(k for k in keys if OWN_KIND_SEP in k) == sorted(
        f"{k}{OWN_KIND_SEP}{k_kind}" for k, k_kind in ((k, _kind_of(lesser)) for k in written)
    )
    # That host is warm the next time, from its own entries.
    again = _jax_run(tmp_path, url, lesser)["stats"]
    assert again["hits"] == len(written) and again["misses"] == 0

    # A host with every feature and one more is served the first host's entries.
    more = _jax_run(tmp_path, url, _cpuinfo(add=("compilecache_newer_feature",)))["stats"]
    assert more["hits"] == len(written) and more["misses"] == 0 and more["unrunnable"] == 0

    # explain and stats say why.
    explained = subprocess.run(
        [sys.executable, "-m", "compilecache", "explain", "--url", url],
        env=clean_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert (
        "cannot run on this host (compiled for a CPU with avx2, fma, which this CPU lacks)"
        in explained
    )
    counted = json.loads(
        subprocess.run(
            [sys.executable, "-m", "compilecache", "stats", "--json", "--url", url],
            env=clean_env(),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert counted["unrunnable"] == len(written)


def _kind_of(cpuinfo: str) -> str:
    info: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        name, sep, value = line.partition(":")
        if sep:
            info.setdefault(name.strip(), value.strip())
    import platform

    target = {"machine": platform.machine(), "features": host.isa_features(info)}
    sve = host.cpu_target().get("sve_bits")
    if sve:
        target["sve_bits"] = sve
    return host.host_kind(target)


def test_jax_entries_of_another_architecture_are_refused(tmp_path: Path) -> None:
    pytest.importorskip("jax")
    if shutil.which("setarch") is None or host.cpu_target()["machine"] != "x86_64":
        pytest.skip("needs setarch on x86_64 (linux32 makes uname -m say i686)")
    url = str(tmp_path / "store")
    first = _jax_run(tmp_path, url)
    n = first["stats"]["writes"]
    other = _jax_run(tmp_path, url, arch="linux32")
    assert other["stats"]["unrunnable"] == n and other["stats"]["hits"] == 0
    assert same_jax_results(first, other)
    # And an entry that says it was compiled on Arm is refused here.
    from compilecache.stores.registry import open_url

    store = open_url(url)
    try:
        for key in _keys(url):
            if OWN_KIND_SEP in key:
                store.delete(key)
                continue
            found = entry.decode(store.peek(key) or b"", expect_key=key)
            arm = {"machine": "aarch64", "features": ["asimd", "fp"]}
            header = replace(found.header, extra={**found.header.extra, "cpu": arm})
            store.put(key, entry.encode(header, found.payload, compress=False), None)
    finally:
        store.close()
    arm_read = _jax_run(tmp_path, url)["stats"]
    assert arm_read["unrunnable"] == n and arm_read["hits"] == 0


TORCH_STEP = [
    sys.executable,
    "-m",
    "compilecache.workloads.torch_step",
    "--model",
    "tiny",
    "--fresh-dirs",
]


@needs_namespaces
def test_torch_graphs_and_packages_follow_the_same_vector_rule(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    if "avx2" not in host.cpu_target()["features"]:
        pytest.skip("this host has no avx2 to take away")
    url = str(tmp_path / "store")
    env = clean_env({"COMPILECACHE_URL": url})
    runner = [sys.executable, "-m", "compilecache", "run", "--", *TORCH_STEP]

    def step(cpuinfo: str | None) -> tuple[dict[str, Any], dict[str, float]]:
        proc = _as_host(cpuinfo, tmp_path, runner, env)
        summary = [line for line in proc.stderr.splitlines() if line.startswith("compilecache: ")]
        # "1 hit" and "2 hits", "1 miss" and "2 misses": counted under the plural.
        plural = {"hit": "hits", "miss": "misses"}
        counts = {
            plural.get(m[1], m[1]): float(m[0])
            for m in re.findall(r"(\d+) (hits?|miss(?:es)?|built for another host)", summary[-1])
        }
        return last_json(proc.stdout), counts

    first, _ = step(None)
    warm, warm_counts = step(None)
    assert warm_counts.get("misses") == 0 and warm["digest"] == first["digest"]

    lesser = _cpuinfo(drop=("avx2", "fma"))
    there, counts = step(lesser)
    assert there["digest"] == first["digest"]
    # The Dynamo package, the FX graphs and the AOTAutograd entry: refused, compiled there.
    assert counts.get("built for another host", 0) >= 3, counts
    _, again = step(lesser)
    assert again.get("misses") == 0 and "built for another host" not in again, again

    # Inductor writes other code where it has more vector features: torch's graphs are not
    # shared upward either.
    here = set(host.cpu_target()["features"])
    newer = sorted(
        f for f in ("amx_fp16", "amx_tile", "avx512_bf16", "avx512_vnni") if f not in here
    )
    if newer:
        _, upward = step(_cpuinfo(add=(newer[0],)))
        assert upward.get("built for another host", 0) >= 3, upward


def test_doctor_notes_a_store_filled_by_several_kinds_of_host(tmp_path: Path) -> None:
    from compilecache.stores.local import LocalStore

    store = LocalStore(tmp_path / "store")
    cache = Cache(store)
    here = host.cpu_target()
    for n, cpu in enumerate(
        [here, {**here, "features": ["sse2"]}, {"machine": "aarch64", "features": ["asimd"]}]
    ):
        assert cache.save(_header("jax", "", cpu, f"jax/f{n}-{n}"), b"x" * 100)
    cache.close()
    proc = subprocess.run(
        [sys.executable, "-m", "compilecache", "doctor", "--", sys.executable, "-c", "pass"],
        env=clean_env({"COMPILECACHE_URL": str(tmp_path / "store")}),
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert "the store holds entries compiled on 3 kinds of host" in out, out
    assert "aarch64" in out
    # One kind of host: nothing to say.
    alone = tmp_path / "alone"
    single = Cache(LocalStore(alone))
    assert single.save(_header("jax", "", here, "jax/g-1"), b"x" * 100)
    single.close()
    quiet = subprocess.run(
        [sys.executable, "-m", "compilecache", "doctor", "--", sys.executable, "-c", "pass"],
        env=clean_env({"COMPILECACHE_URL": str(alone)}),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "kinds of host" not in quiet.stdout + quiet.stderr
