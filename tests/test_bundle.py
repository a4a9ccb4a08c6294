"""Bundles (export / import) and warming from another store.

A real JAX workload exported from one store and imported into an empty one hits on every compile;
truncated or damaged bundles are refused before anything is written; entries that are damaged,
foreign-signed or built for another host are skipped with a reason, and never replace a good
entry."""

from __future__ import annotations

import hashlib
import io
import json
import random
import tarfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import zstandard

from compilecache import entry
from compilecache.cli import main
from compilecache.entry import EntryHeader
from compilecache.errors import BundleError, ConfigError
from compilecache.runtime.cache import Cache
from compilecache.runtime.transfer import EntryFilter, Progress, parse_since
from compilecache.signing import Signing
from compilecache.stores.base import EntryInfo, EntryMeta, Store
from compilecache.stores.local import LocalStore
from compilecache.stores.registry import open_url
from compilecache.tools import bundle
from tests import servers
from tests.conftest import TESTS, clean_env, last_json, run_python
from tests.servers import RedisServer, namespace

redis_server = servers.redis_server
JAXLIB = metadata.version("jaxlib")
PROGRAM = str(TESTS / "jax_program.py")


def jax_header(key: str, name: str = "jit_f", **extra: Any) -> EntryHeader:
    return EntryHeader(
        framework="jax",
        key=key,
        name=name,
        compile_time_s=1.5,
        versions={"jax": JAXLIB, "jaxlib": JAXLIB},
        extra=extra,
    )


def fill(store: Store, n: int, *, size: int = 1000, seed: int = 0, prefix: str = "f") -> None:
    cache = Cache(store)
    rng = random.Random(seed)
    for i in range(n):
        key = f"jax/jit_{prefix}{i}-{i:064x}"
        assert cache.save(jax_header(key, f"jit_{prefix}{i}"), rng.randbytes(size), compress=False)


def contents(store: Store) -> dict[str, bytes]:
    out = {}
    for info in store.scan():
        value = store.get(info.key)
        assert value is not None
        out[info.key] = value
    return out


def members(path: Path) -> list[tuple[str, bytes]]:
    raw = zstandard.ZstdDecompressor().decompress(path.read_bytes(), max_output_size=1 << 30)
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tar:
        return [(m.name, tar.extractfile(m).read()) for m in tar]  # type: ignore[union-attr]


def write_raw_bundle(path: Path, items: list[tuple[str, bytes]]) -> None:
    """A bundle written by hand from (key, entry bytes): the format is a plain zstd'd tar."""
    records: list[dict[str, Any]] = [
        {
            "key": key,
            "file": f"entries/{i:06d}.cce",
            "size": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
        }
        for i, (key, data) in enumerate(items)
    ]
    manifest = {"format": "compilecache-bundle", "version": 1, "entries": records}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        files = [(str(r["file"]), d) for r, (_, d) in zip(records, items, strict=True)]
        for name, data in [("manifest.json", json.dumps(manifest).encode()), *files]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path.write_bytes(zstandard.ZstdCompressor().compress(buf.getvalue()))


# -- a real JAX workload -------------------------------------------------------------------------


@pytest.mark.slow
def test_a_jax_workload_exported_and_imported_hits_every_compile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, target, path = tmp_path / "source", tmp_path / "target", tmp_path / "cache.ccb"
    env = clean_env({"COMPILECACHE_URL": str(source)})
    cold = last_json(run_python([PROGRAM, "before"], env).stdout)
    n = int(cold["stats"]["writes"])
    assert n >= 3

    assert main(["export", "--url", str(source), str(path)]) == 0
    # The compiles, and the job's manifest (the keys the run looked up, in order) where the run
    # kept one: a store of one level keeps it only when the read-ahead asked for it, which JAX
    # 0.4's lookups do not allow.
    store = LocalStore(source)
    manifests = sum(1 for i in store.scan() if i.key.startswith("manifest/"))
    # The guarded traces that name the executables travel with them.
    traces = sum(1 for i in store.scan() if i.key.startswith("jax/trace/"))
    store.close()
    assert manifests <= 1
    total = n + manifests + traces
    moved = f"{n + traces} of {n + traces} entries" + (
        " and 1 of 1 job lookup list" if manifests else ""
    )
    assert moved in capsys.readouterr().out
    listed = members(path)
    assert listed[0][0] == "manifest.json"
    manifest = json.loads(listed[0][1])
    assert len(manifest["entries"]) == total == len(listed) - 1
    assert manifest["frameworks"]["jaxlib"] == JAXLIB
    assert manifest["cpu"]["machine"] and manifest["platform"]["python"]
    assert manifest["device_kinds"] == ["cpu"]
    for record, (name, data) in zip(manifest["entries"], listed[1:], strict=True):
        assert record["file"] == name and record["size"] == len(data)
        assert record["sha256"] == hashlib.sha256(data).hexdigest()
        if record["framework"] != "manifest":
            assert record["backend"] == "cpu" and record["framework"] == "jax"
    assert sum(r["framework"] == "jax" for r in manifest["entries"]) == n + traces

    assert main(["import", "--url", str(target), str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["transferred"] == n + traces and report["skipped"] == []
    assert report["job_lookup_lists"]["transferred"] == manifests

    warm = last_json(
        run_python([PROGRAM, "before"], clean_env({"COMPILECACHE_URL": str(target)})).stdout
    )
    assert warm["stats"]["misses"] == 0 and warm["stats"]["hits"] == n
    assert warm["stats"].get("jax.trace.served", 0) == traces
    assert all(warm[k] == cold[k] for k in ("step", "other", "grad_sum"))

    # Importing again changes nothing: every entry is already there, and valid.
    assert main(["import", "--url", str(target), str(path), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["transferred"] == 0 and again["already_present"] == n + traces


# -- damaged bundles -------------------------------------------------------------------------------


def test_truncated_or_damaged_bundles_are_refused_and_nothing_is_lost(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = LocalStore(tmp_path / "source")
    fill(source, 12, size=40_000)  # random payloads: a bundle of several zstd blocks
    path = tmp_path / "good.ccb"
    assert bundle.export_bundle(source, path).transferred
    target = LocalStore(tmp_path / "target")
    fill(target, 4, size=500, seed=7)  # the same first four keys, other (valid) contents
    fill(target, 3, size=500, seed=8, prefix="other")
    before = contents(target)

    good = path.read_bytes()
    damaged: dict[str, bytes] = {
        "truncated at 10%": good[: len(good) // 10],
        "truncated at 60%": good[: len(good) * 6 // 10],
        "truncated by one byte": good[:-1],
        "empty": b"",
        "not a bundle": b"hello, world\n" * 100,
    }
    for where in (0.05, 0.5, 0.95):
        flipped = bytearray(good)
        flipped[int(len(good) * where)] ^= 0x40
        damaged[f"byte flipped at {where:.0%}"] = bytes(flipped)
    items = [(k, v) for k, v in contents(source).items()]
    write_raw_bundle(tmp_path / "listed.ccb", items)
    data = (tmp_path / "listed.ccb").read_bytes()
    # A well-formed archive whose manifest lists an entry that is not in it.
    write_raw_bundle(tmp_path / "short.ccb", items[:3])
    raw = zstandard.ZstdDecompressor().decompress(
        (tmp_path / "short.ccb").read_bytes(), max_output_size=1 << 30
    )
    records = json.loads(members(tmp_path / "short.ccb")[0][1])
    records["entries"].append({**records["entries"][0], "key": "jax/x", "file": "entries/9.cce"})
    buf = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(raw)) as old, tarfile.open(fileobj=buf, mode="w") as tar:
        for m in old:
            body = old.extractfile(m).read()  # type: ignore[union-attr]
            if m.name == "manifest.json":
                body = json.dumps(records).encode()
            info = tarfile.TarInfo(m.name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    damaged["an entry listed but missing"] = zstandard.ZstdCompressor().compress(buf.getvalue())
    assert data  # the hand-written bundle itself is fine:
    assert len(bundle.verify_bundle(tmp_path / "listed.ccb").records) == len(items)

    for what, blob in damaged.items():
        bad = tmp_path / "bad.ccb"
        bad.write_bytes(blob)
        with pytest.raises(BundleError):
            bundle.import_bundle(bad, target)
        assert main(["import", "--url", str(target.root), str(bad)]) == 2, what
        err = capsys.readouterr().err
        assert "compilecache: error:" in err and str(bad) in err, (what, err)
        assert contents(target) == before, what
    assert main(["import", "--url", str(target.root), str(tmp_path / "absent.ccb")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_unusable_entries_are_skipped_with_reasons_and_never_replace_good_ones(
    tmp_path: Path,
) -> None:
    def encoded(key: str, **extra: Any) -> bytes:
        return entry.encode(jax_header(key, **extra), random.randbytes(3000), compress=False)

    good = encoded("jax/jit_new-1")
    kept_key = "jax/jit_kept-2"
    damaged = bytearray(encoded(kept_key))
    damaged[-100] ^= 0xFF  # a payload byte: checksum mismatch
    old_jaxlib = entry.encode(
        EntryHeader(framework="jax", key="jax/jit_old-3", versions={"jaxlib": "0.0.1"}), b"x"
    )
    other_cpu = encoded("jax/jit_cpu-4", cpu={"machine": "x86_64", "features": ["avx9000"]})
    other_arch = encoded("jax/jit_arch-5", cpu={"machine": "riscv128", "features": []})
    gpu = encoded(
        "jax/jit_gpu-6",
        readable={"backend version": "cuda 12040", "accelerator_config": "8 x NVIDIA H100"},
    )
    torch_old = entry.encode(
        EntryHeader(framework="torch", key="torch/fx/abc", versions={"torch": "1.0.0"}), b"t"
    )
    path = tmp_path / "mixed.ccb"
    write_raw_bundle(
        path,
        [
            ("jax/jit_new-1", good),
            (kept_key, bytes(damaged)),
            ("jax/jit_old-3", old_jaxlib),
            ("jax/jit_cpu-4", other_cpu),
            ("jax/jit_arch-5", other_arch),
            ("jax/jit_gpu-6", gpu),
            ("torch/fx/abc", torch_old),
            ("jax/jit_renamed-7", good),  # the entry inside holds another key
        ],
    )
    target = LocalStore(tmp_path / "target")
    valid = encoded(kept_key)
    target.put(kept_key, valid, EntryMeta("jax", "jit_kept"))

    report = bundle.import_bundle(path, target)
    reasons = dict(report.skipped)
    assert report.transferred == ["jax/jit_new-1"]
    assert "checksum" in reasons[kept_key]
    assert "jaxlib 0.0.1" in reasons["jax/jit_old-3"]
    assert "avx9000" in reasons["jax/jit_cpu-4"]
    assert "riscv128" in reasons["jax/jit_arch-5"]
    assert "gpu" in reasons["jax/jit_gpu-6"]
    assert "torch 1.0.0" in reasons["torch/fx/abc"]
    assert "holds key" in reasons["jax/jit_renamed-7"]
    assert target.get(kept_key) == valid  # the good entry stayed
    assert target.get("jax/jit_new-1") == good

    # --no-check imports what was only built elsewhere; damaged entries stay out.
    unchecked = LocalStore(tmp_path / "unchecked")
    report = bundle.import_bundle(path, unchecked, check=False)
    imported = ["jax/jit_new-1", "jax/jit_old-3", "jax/jit_cpu-4", "jax/jit_arch-5"]
    assert sorted(report.transferred) == sorted([*imported, "jax/jit_gpu-6", "torch/fx/abc"])
    assert {k for k, _ in report.skipped} == {kept_key, "jax/jit_renamed-7"}


def test_signatures_are_checked_on_import(tmp_path: Path) -> None:
    source = LocalStore(tmp_path / "source")
    signer = Cache(source, signing=Signing(secret=b"key-a"))
    for i in range(3):
        signer.save(jax_header(f"jax/jit_s{i}-{i}"), bytes(100 + i), compress=False)
    path = tmp_path / "signed.ccb"
    report = bundle.export_bundle(source, path, signing=Signing(secret=b"key-a"))
    assert len(report.transferred) == 3
    assert all(r["signed"] for r in json.loads(members(path)[0][1])["entries"])

    same = bundle.import_bundle(path, LocalStore(tmp_path / "a"), signing=Signing(secret=b"key-a"))
    assert len(same.transferred) == 3
    foreign = bundle.import_bundle(
        path, LocalStore(tmp_path / "b"), signing=Signing(secret=b"key-b")
    )
    assert not foreign.transferred
    assert all("signature" in reason for _, reason in foreign.skipped)
    # Exporting with another key leaves out what that key did not sign.
    refused = bundle.export_bundle(source, tmp_path / "x.ccb", signing=Signing(secret=b"key-b"))
    assert not refused.transferred and len(refused.skipped) == 3


# -- filters, warm, progress -----------------------------------------------------------------------


def test_export_filters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = LocalStore(tmp_path / "s")
    fill(store, 3, prefix="train_step")
    fill(store, 2, prefix="eval")
    Cache(store).save(EntryHeader(framework="torch", key="torch/fx/k1", name="forward"), b"t" * 100)
    path = tmp_path / "b.ccb"

    def exported(*flags: str, to: Path = path) -> set[str]:
        assert main(["export", "--url", str(store.root), str(to), "--json", *flags]) == 0
        capsys.readouterr()
        return {r["key"] for r in json.loads(members(to)[0][1])["entries"]}

    assert len(exported()) == 6
    assert exported("--framework", "torch") == {"torch/fx/k1"}
    assert len(exported("--name", "jit_train_step*")) == 3
    assert len(exported("--framework", "jax", "--name", "jit_eval1")) == 1
    assert len(exported("--since", "1h")) == 6
    # Nothing matched: nothing is written, and the status says so.
    none = tmp_path / "none.ccb"
    args = ["export", "--url", str(store.root), str(none), "--since", "2999-01-01"]
    assert main(args) == 2
    assert "nothing written" in capsys.readouterr().err and not none.exists()

    now = time.time()
    info = EntryInfo("jax/k", 1, created=now - 10 * 86400, accessed=now - 3 * 86400)
    assert not EntryFilter(since=parse_since("2d", now)).matches(info)
    assert EntryFilter(since=parse_since("4d", now)).matches(info)
    with pytest.raises(ConfigError, match="--since"):
        parse_since("last tuesday")


def test_warm_copies_matching_entries_into_the_local_level(
    tmp_path: Path, redis_server: RedisServer, capsys: pytest.CaptureFixture[str]
) -> None:
    remote_url = f"{redis_server.url}/{namespace()}"
    remote = open_url(remote_url)
    fill(remote, 4, prefix="model")
    fill(remote, 2, prefix="tool")
    local = tmp_path / "local"
    url = f"{local},{remote_url}"
    args = ["warm", "--url", url, "--from", remote_url, "--name", "jit_model*", "--json"]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["transferred"] == 4 and report["target"] == str(local)
    copied = contents(LocalStore(local))
    assert len(copied) == 4 and all("jit_model" in k for k in copied)
    assert all(copied[k] == remote.get(k) for k in copied)
    # Warming again copies nothing; without a filter, the rest.
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["already_present"] == 4
    assert main(["warm", "--url", str(local), "--from", remote_url]) == 0
    assert "copied into" in capsys.readouterr().out and len(contents(LocalStore(local))) == 6
    remote.close()


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_only_on_a_terminal() -> None:
    term = _Terminal()
    bar = Progress(3, "importing", term)
    for _ in range(3):
        bar.advance()
    bar.close()
    text = term.getvalue()
    assert "\rimporting" in text and "3/3" in text and "100%" in text and text.endswith("\n")
    piped = io.StringIO()
    quiet = Progress(3, "importing", piped)
    quiet.advance()
    quiet.close()
    assert piped.getvalue() == ""
