"""torch entries in bundles, and torch's own ``save_cache_artifacts()`` format in and out.

The end-to-end tests share one cold compile of the tiny workload on 'machine A' (compilecache on,
store A) and then run fresh processes that each get empty ``TORCHINDUCTOR_CACHE_DIR`` and
``TMPDIR`` directories, as new machines would (``Machine`` from ``tests/test_torch.py``: its C++
compiler logs every call and, when told to, fails it):

- a compilecache bundle exported from store A and imported into an empty store serves Dynamo's
  package and every kernel lookup (or, with the packages off, every FX and AOTAutograd lookup):
  no compiler runs;
- a torch blob made by a process without compilecache, imported into an empty store, serves the
  FX and AOTAutograd lookups of a compilecache process, with Dynamo's packages or without (the
  C++ compiler still runs: the blob has no kernels);
- a torch blob exported from store A is loaded by a process without compilecache, whose own FX
  graph and AOTAutograd caches then hit;
- ``save_cache_artifacts()`` in a process under compilecache, cold or warm from a package, saves
  what plain torch's would: a process without compilecache that loads it gets the same hits.

compilecache sets none of torch's flags that enter the FX graphs' and AOTAutograd's keys, and
with Dynamo's packages on (the default) keeps AOTAutograd's entries in plain torch's form under
plain torch's keys, so a plain torch process computes the same keys.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from compilecache import entry
from compilecache.cli import main
from compilecache.config import Config
from compilecache.entry import EntryHeader
from compilecache.errors import BundleError
from compilecache.runtime.cache import Cache
from compilecache.signing import Signing
from compilecache.stores.local import LocalStore
from compilecache.tools import torch_artifacts
from compilecache.tools.torch_artifacts import import_blob, read_blob, write_blob
from tests.conftest import clean_env, last_json, run_python
from tests.test_torch import (
    MODEL,
    Machine,
    cold,  # noqa: F401  (the shared cold compile, a fixture)
    compiler_calls,
)

torch = pytest.importorskip("torch")

TORCH_VERSION = str(torch.__version__)


# -- fixtures and helpers ------------------------------------------------------------------------


def cli_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    """Run ``compilecache ARGS --json`` in this process; its report."""
    capsys.readouterr()
    assert main([*args, "--json"]) == 0
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    return report


def layers_of(store: Path) -> dict[str, list[str]]:
    s = LocalStore(store)
    try:
        keys = [info.key for info in s.scan()]
    finally:
        s.close()
    found: dict[str, list[str]] = {}
    for key in keys:
        found.setdefault(key.split("/")[1], []).append(key)
    return found


def headers(store: Path) -> dict[str, EntryHeader]:
    s = LocalStore(store)
    try:
        return {i.key: entry.decode(s.get(i.key) or b"").header for i in s.scan()}
    finally:
        s.close()


def plain_torch(
    machine: Machine, *args: str, inductor: Path | None = None, url: str = ""
) -> dict[str, Any]:
    """The workload in a process without compilecache, with torch's defaults, on ``machine``
    (its compiler allowed, and logged); with ``url``, under ``compilecache run --url URL``
    (Dynamo's packages on) instead."""
    env = clean_env(
        {
            "TORCHINDUCTOR_CACHE_DIR": str(inductor or machine.inductor),
            "TMPDIR": str(machine.tmp),
            "PATH": f"{machine.fake_bin}{os.pathsep}{os.environ.get('PATH', '')}",
            "FAKE_CXX_LOG": str(machine.log),
            "FAKE_CXX_ALLOW": "1",
        }
    )
    for name in list(env):
        if name.startswith("TORCHINDUCTOR_") and name != "TORCHINDUCTOR_CACHE_DIR":
            del env[name]
    program = ["-m", "compilecache.workloads.torch_step", "--model", MODEL, *args]
    if url:
        program = ["-m", "compilecache", "run", "--url", url, "--", sys.executable, *program]
    proc = run_python(program, env, timeout=420)
    result: dict[str, Any] = last_json(proc.stdout)
    return result


# -- real torch runs -----------------------------------------------------------------------------


@pytest.mark.slow
def test_bundle_into_an_empty_store_serves_every_lookup_without_a_compiler(
    cold: dict[str, Any],  # noqa: F811  (the fixture imported above)
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """compilecache's bundle carries Dynamo's packages and the kernel binaries too: nothing
    compiles on machine B, nor is traced; without the packages, every graph comes from it."""
    written = layers_of(cold["store"])
    n = sum(len(keys) for keys in written.values())
    path, store_b = tmp_path / "cache.ccb", tmp_path / "store-b"
    exported = cli_json(capsys, "export", str(path), "--url", str(cold["store"]))
    assert exported["transferred"] == n and exported["skipped"] == []
    imported = cli_json(capsys, "import", str(path), "--url", str(store_b))
    assert imported["transferred"] == n and imported["skipped"] == []

    machine = Machine(tmp_path / "machine-b", cold["fake_bin"])
    warm = machine.run(str(store_b), allow_compiler=False)

    assert compiler_calls(machine.log) == []
    assert warm["digest"] == cold["result"]["digest"]
    stats = warm["stats"]
    assert stats["torch.dynamo.hits"] == len(written["dynamo"]) == 1
    # The package's backend is plain torch's AOTAutograd entry: its graphs come from the FX
    # layer, as on plain torch's AOTAutograd hit; the entry itself is not looked up.
    assert warm["torch_counters"]["fxgraph_cache_hit"] == stats["torch.fx.hits"] == 2
    assert warm["torch_counters"].get("autograd_cache_hit", 0) == 0
    # The ISA probe verdicts come from the store (torch_probes): their libraries are not needed.
    isa_probes = sum(k.startswith("torch/probe/isa/") for k in written.get("probe", []))
    assert stats["torch.isa_probe_hits"] == isa_probes > 0
    assert stats["torch.kernel.hits"] == len(written["kernel"]) - isa_probes > 0
    assert stats["misses"] == 0 and stats["writes"] == 0 and stats["errors"] == 0

    # Without Dynamo's packages, every graph and the AOTAutograd entry come from the bundle:
    # the entry written with packages on is plain torch's, under plain torch's key.
    layered = Machine(tmp_path / "machine-b2", cold["fake_bin"])
    warm = layered.run(str(store_b), allow_compiler=False, COMPILECACHE_TORCH_PRECOMPILE="0")
    assert compiler_calls(layered.log) == []
    assert warm["digest"] == cold["result"]["digest"]
    assert warm["stats"]["torch.fx.hits"] == len(written["fx"]) == 2
    assert warm["stats"]["torch.aot.hits"] == len(written["aot"]) == 1
    assert warm["torch_counters"]["fxgraph_cache_hit"] == 2
    assert warm["torch_counters"]["autograd_cache_hit"] == 1


@pytest.mark.slow
def test_torch_blob_imported_serves_fx_and_aot_lookups_through_compilecache(
    cold: dict[str, Any],  # noqa: F811  (the fixture imported above)
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A blob from ``save_cache_artifacts()`` in a process without compilecache, imported into
    an empty store: a compilecache process on a new machine without Dynamo's packages finds
    every FX graph and AOTAutograd entry in it; one with them (the default) every FX graph. The
    blob holds no C++ kernels, so that process runs the C++ compiler (a limit of torch's format,
    which compilecache's own bundle does not have).

    The producer starts from a copy of machine A's torch cache directory, so that it loads from
    torch's own caches instead of compiling cold again; torch records the same bytes either way.
    """
    producer = Machine(tmp_path / "producer", cold["fake_bin"])
    inductor = tmp_path / "producer" / "inductor-copy"
    shutil.copytree(cold["machine"].inductor, inductor)
    blob = tmp_path / "torch.bin"
    made = plain_torch(producer, "--save-mega", str(blob), inductor=inductor)
    assert made["digest"] == cold["result"]["digest"]
    assert made["torch_counters"]["fxgraph_cache_hit"] == 2  # compilecache's keys: same flags

    store_b = tmp_path / "store-b"
    imported = cli_json(capsys, "import", str(blob), "--url", str(store_b))
    assert imported["transferred"] == 3 and imported["skipped"] == [], imported
    written = headers(store_b)
    original = headers(cold["store"])
    assert sorted(k for k in written if k.startswith("torch/fx/")) == sorted(
        k for k in original if k.startswith("torch/fx/")
    )
    assert len([k for k in written if k.startswith("torch/aot/")]) == 1
    for header in written.values():
        assert header.extra["source"] == "torch-mega-cache"
        assert header.extra["encoding"] == "pickle"
        assert header.versions["torch"] == TORCH_VERSION
        assert header.extra["time_taken_ms"] > 0
    fx = [h for k, h in written.items() if k.startswith("torch/fx/")]
    assert all(h.extra["remote_key"] == original[h.key].extra["remote_key"] for h in fx)
    assert all(h.compile_time_s > 0 for h in fx)
    assert sorted(h.name for h in fx) == ["0_backward", "0_forward"]
    assert all(h.components == original[h.key].components for h in fx)

    machine = Machine(tmp_path / "machine-c", cold["fake_bin"])
    warm = machine.run(str(store_b), allow_compiler=True, COMPILECACHE_TORCH_PRECOMPILE="0")

    assert warm["digest"] == cold["result"]["digest"]
    stats = warm["stats"]
    assert stats["torch.fx.hits"] == 2 and stats["torch.aot.hits"] == 1
    assert stats.get("torch.fx.misses", 0) == 0 and stats.get("torch.aot.misses", 0) == 0
    assert warm["torch_counters"]["fxgraph_cache_hit"] == 2
    assert warm["torch_counters"]["autograd_cache_hit"] == 1
    # No kernels in a torch blob: they were compiled here (and written to the store).
    assert stats["torch.kernel.misses"] > 0 and compiler_calls(machine.log)

    # With Dynamo's packages (the default): every FX graph and the AOTAutograd entry.
    packaged = Machine(tmp_path / "machine-c2", cold["fake_bin"])
    warm = packaged.run(str(store_b), allow_compiler=True)
    assert warm["digest"] == cold["result"]["digest"]
    assert warm["stats"]["torch.fx.hits"] == 2 and warm["torch_counters"]["fxgraph_cache_hit"] == 2
    assert (
        warm["stats"]["torch.aot.hits"] == 1 and warm["torch_counters"]["autograd_cache_hit"] == 1
    )


@pytest.mark.slow
def test_store_exported_as_torch_blob_hits_torchs_own_caches(
    cold: dict[str, Any],  # noqa: F811  (the fixture imported above)
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``export --format torch``, loaded with ``--load-mega`` by a process without compilecache
    on a new machine: torch's own FX graph and AOTAutograd caches hit (store A was written with
    Dynamo's packages on). Kernel entries and packages are left out (and counted); the C++
    compiler runs there."""
    written = layers_of(cold["store"])
    blob = tmp_path / "torch.bin"
    report = cli_json(capsys, "export", str(blob), "--format", "torch", "--url", str(cold["store"]))
    assert report["transferred"] == 3
    # Kernels, precompiled headers, probe answers (torch_probes) and Dynamo's packages have no
    # place in torch's format.
    assert sorted(s["key"] for s in report["skipped"]) == sorted(
        written["kernel"] + written.get("pch", []) + written.get("probe", []) + written["dynamo"]
    )
    groups = {kind: [a.key for a in arts] for kind, arts in read_blob(blob.read_bytes(), blob)}
    assert len(groups["inductor"]) == 2 and len(groups["aot_autograd"]) == 1

    machine = Machine(tmp_path / "machine-d", cold["fake_bin"])
    warm = plain_torch(machine, "--load-mega", str(blob))

    assert warm["digest"] == cold["result"]["digest"]
    counters = warm["torch_counters"]
    assert counters["fxgraph_cache_hit"] == 2 and counters["fxgraph_cache_miss"] == 0
    assert counters["autograd_cache_hit"] == 1 and counters.get("autograd_cache_miss", 0) == 0
    assert compiler_calls(machine.log)  # no kernels in torch's format


@pytest.mark.slow
def test_artifacts_saved_under_compilecache_serve_plain_torch_as_its_own(
    cold: dict[str, Any],  # noqa: F811  (the fixture imported above)
    tmp_path: Path,
) -> None:
    """``save_cache_artifacts()`` under ``compilecache run`` with Dynamo's packages on, in a cold
    process (empty store) and in a warm one (its package from store A, nothing traced): a
    process without compilecache on a new machine that loads either gets torch's 2 FX graph hits
    and its AOTAutograd hit, as from plain torch's own artifacts, and the same result."""
    saved = {}
    store_a = tmp_path / "store-a"  # a copy: this run's own records stay out of store A
    shutil.copytree(cold["store"], store_a)
    for name, store in (("cold", tmp_path / "empty-store"), ("warm", store_a)):
        producer = Machine(tmp_path / f"producer-{name}", cold["fake_bin"])
        blob = tmp_path / f"{name}.bin"
        made = plain_torch(producer, "--save-mega", str(blob), url=str(store))
        assert made["digest"] == cold["result"]["digest"]
        saved[name] = made
        groups = {kind: [a.key for a in arts] for kind, arts in read_blob(blob.read_bytes(), blob)}
        assert len(groups["inductor"]) == 2 and len(groups["aot_autograd"]) == 1, name

        consumer = Machine(tmp_path / f"consumer-{name}", cold["fake_bin"])
        warm = plain_torch(consumer, "--load-mega", str(blob))
        assert warm["digest"] == cold["result"]["digest"]
        counters = warm["torch_counters"]
        assert counters["fxgraph_cache_hit"] == 2 and counters["fxgraph_cache_miss"] == 0, name
        assert counters["autograd_cache_hit"] == 1, name
        assert counters.get("autograd_cache_miss", 0) == 0, name
    # The warm producer was served its package: it traced nothing, and still saved the entries.
    assert saved["warm"]["torch_counters"].get("autograd_cache_miss", 0) == 0
    assert saved["cold"]["torch_counters"]["autograd_cache_miss"] == 1


# -- damaged blobs -------------------------------------------------------------------------------


def fx_pickle(aot_id: str, seconds: float, *lines: str) -> bytes:
    """Stands in for a pickled CompiledFxGraph: the fields import reads, and the one torch reads
    when it loads a blob (``_triton_bundle``)."""
    return pickle.dumps(
        types.SimpleNamespace(
            source_code=f"# AOT ID: ['{aot_id}']\nimport torch\n",
            _fx_graph_cache_debug_lines=list(lines),
            _time_taken_ns=int(seconds * 1e9),
            _triton_bundle=None,
        )
    )


def aot_pickle(fx_keys: list[str], forward_s: float, backward_s: float) -> bytes:
    return pickle.dumps(
        {
            "compiled_fw": {"fx_graph_cache_info": (fx_keys[0], [])},
            "compiled_bw": {"fx_graph_cache_info": (fx_keys[-1], [])},
            "forward_time_taken_ns": int(forward_s * 1e9),
            "backward_time_taken_ns": int(backward_s * 1e9),
        }
    )


FX1, FX2, AOT = "f" + "a" * 51, "f" + "b" * 51, "a" + "c" * 51
LINE = "[" + "d" * 52 + "] "


def sample_blob() -> bytes:
    return write_blob(
        [
            (
                "inductor",
                [
                    (FX1, fx_pickle("0_forward", 2.5, LINE + "cache_key_tag: ")),
                    (FX2, fx_pickle("0_backward", 1.5)),
                ],
            ),
            ("aot_autograd", [(AOT, aot_pickle([FX1, FX2], 3.0, 1.5))]),
            ("autotune", [("ab/cdef.best_config", b'{"XBLOCK": 8}')]),
            ("pgo", [("code_state_x", b"profile")]),
        ]
    )


def test_damaged_torch_blobs_are_refused_and_the_store_is_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = LocalStore(tmp_path / "target")
    good = tmp_path / "good.bin"
    good.write_bytes(sample_blob())
    assert import_blob(good, target).transferred  # the store holds valid entries
    before = {i.key: target.get(i.key) for i in target.scan()}
    data = good.read_bytes()
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0x01
    damaged = {
        "truncated by one byte": (data[:-1], "auto"),
        "truncated at 40%": (data[: len(data) * 4 // 10], "auto"),
        "a byte flipped": (bytes(flipped), "auto"),
        "garbage": (b"\x00\x01garbage" * 50, "auto"),
        "garbage, said to be torch": (b"\x00\x01garbage" * 50, "torch"),
        "empty, said to be torch": (b"", "torch"),
        "empty": (b"", "auto"),
    }
    for what, (blob, fmt) in damaged.items():
        bad = tmp_path / "bad.bin"
        bad.write_bytes(blob)
        if fmt == "torch":
            with pytest.raises(BundleError):
                import_blob(bad, target)
        capsys.readouterr()
        assert main(["import", str(bad), "--format", fmt, "--url", str(target.root)]) == 2, what
        err = capsys.readouterr().err
        assert "compilecache: error:" in err and str(bad) in err, (what, err)
        assert {i.key: target.get(i.key) for i in target.scan()} == before, what


def test_a_blob_overrunning_its_end_is_refused() -> None:
    """A blob whose checksum holds but whose lengths point past its end (torch's own reader would
    loop forever on it)."""
    serializer = pytest.importorskip("torch.utils._appending_byte_serializer")
    writer = serializer.BytesWriter()
    writer.write_uint64(1)  # torch's format version
    writer.write_str("inductor")
    writer.write_uint64(1)
    writer.write_str("fkey")
    writer.write_uint64(1 << 40)  # the content's length: far past the end
    with pytest.raises(BundleError, match="past the end"):
        read_blob(writer.to_bytes(), "crafted.bin")


# -- import and export without compiles ---------------------------------------------------------


def test_blob_import_writes_entries_like_the_integration_and_reports_the_rest(
    tmp_path: Path,
) -> None:
    target = LocalStore(tmp_path / "store")
    blob = tmp_path / "torch.bin"
    blob.write_bytes(sample_blob())
    report = import_blob(blob, target)

    assert report.total == 5 and len(report.transferred) == 3
    reasons = dict(report.skipped)
    assert "autotune" in reasons["autotune/ab/cdef.best_config"]
    assert "profile" in reasons["pgo/code_state_x"]
    found = {i.key: entry.decode(target.get(i.key) or b"") for i in target.scan()}
    assert sorted(found) == sorted([f"torch/fx/{FX1}", f"torch/fx/{FX2}", f"torch/aot/{AOT}"])
    fx = found[f"torch/fx/{FX1}"]
    assert fx.payload == fx_pickle("0_forward", 2.5, LINE + "cache_key_tag: ")
    assert fx.header.framework == "torch" and fx.header.name == "0_forward"
    assert fx.header.compile_time_s == 2.5
    assert fx.header.components == {"cache_key_tag": "d" * 52}
    assert fx.header.extra["remote_key"] == f"pt2:fx-graph-v1::{FX1}:c1"
    assert fx.header.extra["time_taken_ms"] == 2500
    assert fx.header.extra["layer"] == "fx" and fx.header.extra["encoding"] == "pickle"
    assert fx.header.versions["torch"] == TORCH_VERSION
    aot = found[f"torch/aot/{AOT}"].header
    assert aot.extra["remote_key"] == f"pt2:autograd-experimental::{AOT}:c1"
    assert aot.extra["time_taken_ms"] == 4500
    assert aot.compile_time_s == pytest.approx(0.5)  # its own share: 4.5 s less its FX graphs'
    assert aot.extra["source"] == "torch-mega-cache"

    # The torch integration reads the imported entry back as torch wrote it.
    from compilecache.frameworks.torch import integration

    integration.install(Cache(target), Config(url=target.url))
    try:
        value = json.loads(integration.StoreBackend("fx").get(f"pt2:fx-graph-v1::{FX1}:c1"))
    finally:
        integration.uninstall()
    assert value["time_taken_ms"] == 2500

    # Again: nothing is replaced.
    again = import_blob(blob, target)
    assert again.transferred == [] and len(again.present) == 3

    # With a secret, the entries are signed with it.
    signed = LocalStore(tmp_path / "signed")
    assert len(import_blob(blob, signed, signing=Signing(secret=b"k")).transferred) == 3
    assert all(
        entry.decode(signed.get(i.key) or b"", signing=Signing(secret=b"k")).signed
        for i in signed.scan()
    )


def test_blob_import_never_replaces_a_valid_entry_and_hashes_unsafe_keys(tmp_path: Path) -> None:
    target = LocalStore(tmp_path / "store")
    unsafe = "f" + "x" * 300  # longer than a store key may be
    blob = tmp_path / "torch.bin"
    blob.write_bytes(
        write_blob(
            [("inductor", [(FX1, fx_pickle("new", 1.0)), (unsafe, b"u"), (FX1, b"variant")])]
        )
    )
    old = fx_pickle("old", 9.0)
    extra = {"encoding": "pickle", "layer": "fx", "remote_key": f"pt2:fx-graph-v1::{FX1}:c1"}
    header = EntryHeader(framework="torch", key=f"torch/fx/{FX1}", extra=extra)
    assert Cache(target).save(header, old)
    report = import_blob(blob, target)
    assert report.present == [f"torch/fx/{FX1}"]
    assert "same key" in dict(report.skipped)[f"inductor/{FX1}"]
    assert entry.decode(target.get(f"torch/fx/{FX1}") or b"").payload == old
    (hashed,) = report.transferred
    assert hashed.startswith("torch/fx/") and len(hashed) == len("torch/fx/") + 64
    # Exported again, the hashed entry gets its torch key back from the remote key.
    out = tmp_path / "out.bin"
    torch_artifacts.export_blob(target, out, select=None)
    keys = {a.key for _, arts in read_blob(out.read_bytes(), out) for a in arts}
    assert keys == {FX1, unsafe}


def test_export_to_torch_format_is_what_torch_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    store = LocalStore(tmp_path / "store")
    source = tmp_path / "in.bin"
    source.write_bytes(sample_blob())
    assert len(import_blob(source, store).transferred) == 3
    cache = Cache(store)
    kernel = EntryHeader(framework="torch", key="torch/kernel/" + "0" * 64, name="k.so")
    raw_fx = EntryHeader(
        framework="torch", key="torch/fx/fraw", extra={"encoding": "raw", "layer": "fx"}
    )
    assert cache.save(kernel, b"\x7fELF") and cache.save(raw_fx, b"{}")

    out = tmp_path / "out.bin"
    report = cli_json(capsys, "export", str(out), "--format", "torch", "--url", str(store.root))
    assert report["total"] == 5 and report["transferred"] == 3
    skipped = {s["key"]: s["reason"] for s in report["skipped"]}
    assert "kernel" in skipped["torch/kernel/" + "0" * 64]
    assert "encoding 'raw'" in skipped["torch/fx/fraw"]
    original = {(k, a.key): a.content for k, arts in read_blob(sample_blob(), "in") for a in arts}
    exported = {(k, a.key): a.content for k, arts in read_blob(out.read_bytes(), out) for a in arts}
    assert exported == {k: v for k, v in original.items() if k[0] in ("inductor", "aot_autograd")}

    # --name filters; --framework other than torch is an error.
    named = cli_json(
        capsys,
        "export",
        str(out),
        "--format",
        "torch",
        "--name",
        "0_back*",
        "--url",
        str(store.root),
    )
    assert named["transferred"] == 1
    assert [a.key for _, arts in read_blob(out.read_bytes(), out) for a in arts] == [FX2]
    assert main(["export", str(out), "--format", "torch", "--framework", "jax"]) == 2

    # torch itself loads the blob into its local caches.
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    cli_json(capsys, "export", str(out), "--format", "torch", "--url", str(store.root))
    info = torch.compiler.load_cache_artifacts(out.read_bytes())
    assert sorted(info.inductor_artifacts) == [FX1, FX2]
    assert info.aot_autograd_artifacts == [AOT]


def test_sniffing_and_bundle_paths_never_import_torch(tmp_path: Path) -> None:
    """The CLI imports torch only for a torch blob: bundles and sniffing stay fast."""
    blob = tmp_path / "torch.bin"
    blob.write_bytes(sample_blob())
    program = (
        "import sys\n"
        "from compilecache.cli import main\n"
        "from compilecache.tools.torch_artifacts import sniff\n"
        "assert sniff(sys.argv[1]) == 'torch'\n"
        "assert main(['export', sys.argv[2], '--url', sys.argv[3]]) == 0\n"
        "assert sniff(sys.argv[2]) == 'bundle'\n"
        "assert main(['import', sys.argv[2], '--url', sys.argv[4]]) == 0\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    store = LocalStore(tmp_path / "a")
    import_blob(blob, store)
    store.close()
    args = [str(blob), str(tmp_path / "b.ccb"), str(tmp_path / "a"), str(tmp_path / "c")]
    proc = subprocess.run(
        [sys.executable, "-c", program, *args],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert len(layers_of(tmp_path / "c")["fx"]) == 2
