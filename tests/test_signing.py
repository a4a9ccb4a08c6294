"""Signed entries: with COMPILECACHE_SECRET every entry is signed at write, and a reader rejects
unsigned, tampered and foreign-signed entries: a counted miss, one warning, and the program still
completes with correct results.

An intact entry whose signature does not verify (unsigned, signed with another key, or re-sealed
after tampering: without the key these cannot be told apart) is ``foreign`` (issue 11, item 3):
it is left in place and not replaced, since it may be valid for the clients that hold its key.
Damage the checksum catches is ``corrupt`` and removed, as before. An empty secret is an error."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import xxhash

from compilecache import config, entry
from compilecache.entry import EntryHeader
from compilecache.errors import ConfigError, CorruptEntry, ForeignEntry
from compilecache.runtime.cache import Cache
from compilecache.signing import Signing
from compilecache.stores.local import LocalStore
from tests.conftest import (
    clean_env,
    compiles,
    last_json,
    run_jax_program,
    run_python,
    same_jax_results,
    stored_entries,
)

SECRET = "team-cache-key-1"
OTHER = b"somebody-elses-key"


def flip_payload_byte(data: bytes) -> bytes:
    """Change one payload byte and recompute the checksum: only the signature can tell."""
    _, _, _, header_len, stored_len = entry._PREFIX.unpack_from(data)
    assert stored_len > 0
    start = entry._PREFIX.size + header_len
    out = bytearray(data)
    out[start + stored_len // 2] ^= 0x01
    out[-16:] = xxhash.xxh3_128_digest(bytes(out[:-16]))
    return bytes(out)


def resign_with_another_key(data: bytes) -> bytes:
    found = entry.decode(data)
    compress = found.header.compression == "zstd"
    return entry.encode(
        found.header, found.payload, compress=compress, signing=Signing(secret=OTHER)
    )


def strip_signature(data: bytes) -> bytes:
    found = entry.decode(data)
    compress = found.header.compression == "zstd"
    return entry.encode(
        found.header, found.payload, compress=compress, signing=Signing(secret=None)
    )


VARIANTS: dict[str, Callable[[bytes], bytes]] = {
    "payload byte flipped": flip_payload_byte,
    "signed with another key": resign_with_another_key,
    "signature stripped": strip_signature,
}


def test_every_variant_still_passes_the_checksum() -> None:
    """So the rejections below are the signature's work, not the checksum's."""
    # Uncompressed, as JAX entries are (JAX compresses its executables itself).
    data = entry.encode(
        EntryHeader(framework="jax", key="jax/k"),
        b"x" * 4000,
        compress=False,
        signing=Signing(secret=SECRET.encode()),
    )
    for tamper in VARIANTS.values():
        entry.decode(tamper(data))  # no secret: checksum and frame are fine
        # Intact, so foreign rather than corrupt (it was CorruptEntry before issue 11).
        with pytest.raises(ForeignEntry):
            entry.decode(tamper(data), signing=Signing(secret=SECRET.encode()))
    # Damage the checksum sees stays corruption, whoever signed the entry.
    with pytest.raises(CorruptEntry):
        entry.decode(data[:-1] + bytes([data[-1] ^ 1]), signing=Signing(secret=SECRET.encode()))


def test_the_cache_layer_rejects_each_variant_once_warned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = LocalStore(tmp_path)
    writer = Cache(store, signing=Signing(secret=SECRET.encode()))
    reader = Cache(store, signing=Signing(secret=SECRET.encode()))
    keys = []
    for i, (name, tamper) in enumerate(VARIANTS.items()):
        key = f"jax/jit_f{i}-{i:04d}"
        assert writer.save(EntryHeader(framework="jax", key=key, name=name), bytes(3000))
        store.put(key, tamper(store.get(key) or b""))
        keys.append(key)
    before = {key: store.path_of(key).read_bytes() for key in keys}
    with caplog.at_level(logging.WARNING, logger="compilecache"):
        for key in keys:
            assert reader.load("jax", key) is None
    stats = reader.stats.snapshot()
    assert stats["foreign"] == 3 and stats["misses"] == 3 and stats["hits"] == 0
    assert stats["corrupt"] == 0
    assert len(caplog.records) == 1
    assert "COMPILECACHE_SECRET" in caplog.records[0].getMessage()
    # Rejected entries stay where they are and are not replaced by this process (before issue
    # 11 they were removed and replaced: one misconfigured host emptied a fleet's cache).
    for i, key in enumerate(keys):
        assert not reader.save(EntryHeader(framework="jax", key=key, name=str(i)), bytes(3000))
    assert {key: store.path_of(key).read_bytes() for key in keys} == before
    assert reader.stats.snapshot()["writes"] == 0


# -- real JAX in fresh processes ----------------------------------------------------------------


def run(store: Path, secret: str | None) -> tuple[dict[str, Any], list[str]]:
    extra = {"COMPILECACHE_URL": str(store)}
    if secret is not None:
        extra["COMPILECACHE_SECRET"] = secret
    return run_jax_program(extra)


def entries(store: Path) -> dict[str, bytes]:
    return stored_entries(str(store))


@pytest.mark.slow
def test_tampered_entries_are_rejected_and_results_stay_correct(tmp_path: Path) -> None:
    store = tmp_path / "signed"
    cold, _ = run(store, SECRET)
    written = entries(store)
    n = len(compiles(written))  # the executables; the guarded traces beside them are signed too
    assert cold["stats"]["writes"] == n >= 3
    for data in written.values():
        assert entry.decode(data, signing=Signing(secret=SECRET.encode())).signed

    warm, warnings = run(store, SECRET)  # signed by our key: every lookup hits
    assert warm["stats"]["hits"] == n and warm["stats"]["misses"] == 0
    assert warnings == []

    # Tamper with every entry, each with one of the three variants in turn.
    s = LocalStore(store)
    variants = list(VARIANTS.values())
    for i, (key, data) in enumerate(sorted(written.items())):
        s.put(key, variants[i % len(variants)](data))
    s.close()
    planted = entries(store)
    tampered, warnings = run(store, SECRET)
    stats = tampered["stats"]
    # Intact frames whose signature does not verify: foreign (traces too), and the executables'
    # lookups misses (corrupt before issue 11).
    assert stats["foreign"] == len(written) and stats["misses"] == n
    assert stats["hits"] == 0 and stats["errors"] == 0 and stats["corrupt"] == 0
    assert stats["writes"] == 0
    assert len(warnings) == 1 and "COMPILECACHE_SECRET" in warnings[0], warnings
    assert same_jax_results(tampered, cold)
    # Left in place, not replaced (before issue 11: replaced by entries signed with our key).
    assert entries(store) == planted
    for data in planted.values():
        with pytest.raises(ForeignEntry):
            entry.decode(data, signing=Signing(secret=SECRET.encode()))


@pytest.mark.slow
def test_entries_of_a_writer_without_the_secret_are_rejected(tmp_path: Path) -> None:
    store = tmp_path / "unsigned"
    cold, _ = run(store, None)
    unsigned = entries(store)
    n = len(compiles(unsigned))  # the executables, without the guarded traces beside them
    assert n >= 3 and not any(entry.decode(d).signed for d in unsigned.values())
    signed_reader, warnings = run(store, SECRET)
    stats = signed_reader["stats"]
    assert stats["foreign"] == len(unsigned) and stats["misses"] == n and stats["hits"] == 0
    assert stats["corrupt"] == 0 and stats["writes"] == 0
    assert len(warnings) == 1 and "not signed" in warnings[0], warnings
    assert same_jax_results(signed_reader, cold)
    assert entries(store) == unsigned  # left for the clients without a secret


# -- real torch.compile in fresh processes -----------------------------------------------------


def run_torch(store: Path, secret: str, machine: Path) -> tuple[dict[str, Any], list[str]]:
    """The tiny torch workload on a fresh machine (empty Inductor cache directory and TMPDIR)."""
    from tests.test_torch import PROGRAM as TORCH_PROGRAM

    (machine / "inductor").mkdir(parents=True)
    (machine / "tmp").mkdir()
    env = clean_env(
        {
            "COMPILECACHE_SECRET": secret,
            "TORCHINDUCTOR_CACHE_DIR": str(machine / "inductor"),
            "TMPDIR": str(machine / "tmp"),
        }
    )
    proc = run_python(["-c", TORCH_PROGRAM, str(store), "tiny", ""], env, timeout=420)
    ours = [line for line in proc.stderr.splitlines() if line.startswith("compilecache:")]
    result: dict[str, Any] = last_json(proc.stdout)
    return result, ours


@pytest.mark.slow
def test_tampered_torch_entries_are_rejected_and_results_stay_correct(tmp_path: Path) -> None:
    """Every torch entry (FX graphs, AOTAutograd, C++ kernels) tampered with one of the three
    variants: each is rejected, torch compiles again, and the outputs and gradients match."""
    pytest.importorskip("torch")
    store = tmp_path / "signed"
    cold, _ = run_torch(store, SECRET, tmp_path / "a")
    written = entries(store)
    layers = {key.split("/")[1] for key in written}
    assert {"fx", "aot", "kernel"} <= layers, layers
    assert all(
        entry.decode(d, signing=Signing(secret=SECRET.encode())).signed for d in written.values()
    )

    s = LocalStore(store)
    variants = list(VARIANTS.values())
    for i, (key, data) in enumerate(sorted(written.items())):
        s.put(key, variants[i % len(variants)](data))
    s.close()
    planted = entries(store)
    tampered, warnings = run_torch(store, SECRET, tmp_path / "b")
    stats = tampered["stats"]
    # Intact frames whose signature does not verify: foreign (corrupt before issue 11).
    assert stats["torch.foreign"] >= len(layers) and stats.get("torch.hits", 0) == 0, stats
    assert stats["errors"] == 0 and stats["corrupt"] == 0, stats
    assert len(warnings) == 1 and "COMPILECACHE_SECRET" in warnings[0], warnings
    assert tampered["digest"] == cold["digest"]
    assert {k: v for k, v in entries(store).items() if k in planted} == planted


# -- an empty secret is an error, not a key ---------------------------------------------------


@pytest.mark.parametrize("value", ["", "   ", "\n"])
def test_an_empty_secret_is_an_error_at_enable(
    value: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import compilecache

    monkeypatch.setenv("COMPILECACHE_URL", str(tmp_path / "store"))
    monkeypatch.setenv("COMPILECACHE_SECRET", value)
    with pytest.raises(ConfigError, match="COMPILECACHE_SECRET"):
        compilecache.enable()
    assert compilecache.active() is None


@pytest.mark.parametrize("content", [b"", b"\n", b"  \n\t"])
def test_an_empty_secret_file_is_an_error_at_enable(
    content: bytes, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import compilecache

    key_file = tmp_path / "key"
    key_file.write_bytes(content)
    monkeypatch.setenv("COMPILECACHE_URL", str(tmp_path / "store"))
    monkeypatch.setenv("COMPILECACHE_SECRET_FILE", str(key_file))
    with pytest.raises(ConfigError, match="COMPILECACHE_SECRET_FILE"):
        compilecache.enable()
    assert compilecache.active() is None


def test_secrets_that_are_keys() -> None:
    assert config.load({}).secret is None
    assert config.load({"COMPILECACHE_SECRET": "k"}).secret == b"k"


def test_secret_file_is_read_and_stripped(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_bytes(b"team-key\n")
    assert config.load({"COMPILECACHE_SECRET_FILE": str(key_file)}).secret == b"team-key"
    with pytest.raises(ConfigError, match="cannot read"):
        config.load({"COMPILECACHE_SECRET_FILE": str(tmp_path / "missing")})
