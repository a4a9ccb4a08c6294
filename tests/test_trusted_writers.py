"""Trusted writers (issue 24): entries signed with Ed25519 keys, accepted only from trusted keys.

Real JAX in fresh processes against a local store and a real Redis: a writer with a signing key,
readers with its public key (or another one), entries tampered with the ways an attacker with
write access to the store would (re-signed with their own key, moved to another key, relabelled,
a flipped byte), a reader with no key of its own compiling what nobody wrote, key rotation. The
format-level checks, ``compilecache keygen``, bundles, the unsigned-store warning and the
reports' wording run without JAX.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import xxhash

from compilecache import config, entry, signing
from compilecache.entry import EntryHeader
from compilecache.errors import BundleError, ConfigError, CorruptEntry, ForeignEntry
from compilecache.runtime.cache import Cache
from compilecache.signing import Signing
from compilecache.stores.local import LocalStore
from compilecache.stores.registry import open_url
from compilecache.tools import bundle, doctor
from tests import servers
from tests.conftest import (
    clean_env,
    compiles,
    run_jax_program,
    same_jax_results,
    stored_entries,
)
from tests.servers import RedisServer, namespace
from tests.test_bundle import members

redis_server = servers.redis_server


# -- keys ------------------------------------------------------------------------------------------


class Key:
    """A key pair made by ``compilecache keygen``: the private key's file and the public line."""

    def __init__(self, path: Path) -> None:
        proc = subprocess.run(
            [sys.executable, "-m", "compilecache", "keygen", "--out", str(path)],
            capture_output=True,
            text=True,
            check=True,
        )
        self.path = path
        self.public = proc.stdout.strip()

    @property
    def signing(self) -> Signing:
        return Signing(private_key=signing.read_private(str(self.path)))

    @property
    def raw_public(self) -> bytes:
        return signing.parse_public(self.public)


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, Key]:
    folder = tmp_path / "keys"
    folder.mkdir()
    return {name: Key(folder / f"{name}.pem") for name in ("a", "b", "mallory")}


def trusting(*keys: Key) -> Signing:
    return Signing(trusted=tuple(k.raw_public for k in keys))


def test_keygen_writes_a_private_key_for_its_owner_only_and_never_over_a_file(
    tmp_path: Path,
) -> None:
    key = Key(tmp_path / "writer.pem")
    assert stat.S_IMODE(os.stat(key.path).st_mode) == 0o600
    assert key.public.startswith("ed25519:") and len(signing.parse_public(key.public)) == 32
    assert key.path.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    before = key.path.read_bytes()
    again = subprocess.run(
        [sys.executable, "-m", "compilecache", "keygen", "--out", str(key.path)],
        capture_output=True,
        text=True,
    )
    assert again.returncode == 1 and "exists; not overwritten" in again.stderr
    assert key.path.read_bytes() == before
    # The public key printed is the one of the key written.
    assert key.signing.public_key == key.raw_public


def test_key_settings_are_checked_when_read(tmp_path: Path, keys: dict[str, Key]) -> None:
    good = keys["a"].public
    cfg = config.load(
        {
            "COMPILECACHE_URL": str(tmp_path / "s"),
            "COMPILECACHE_TRUSTED_KEYS": f"{good}, {keys['b'].public}",
        }
    )
    assert cfg.trusted_keys == (keys["a"].raw_public, keys["b"].raw_public)
    assert not cfg.shared_writer
    signer = config.load(
        {
            "COMPILECACHE_URL": str(tmp_path / "s"),
            "COMPILECACHE_SIGNING_KEY_FILE": str(keys["a"].path),
        }
    )
    assert signer.shared_writer and signer.signing is not None
    assert signer.signing.public_key == keys["a"].raw_public
    bad = {
        "COMPILECACHE_TRUSTED_KEYS": "ssh-ed25519 AAAA",
        "COMPILECACHE_SIGNING_KEY_FILE": str(tmp_path / "missing.pem"),
    }
    for name, value in bad.items():
        with pytest.raises(
            ConfigError, match=name.split("_", 1)[1] if "FILE" in name else "ed25519"
        ):
            config.load({"COMPILECACHE_URL": str(tmp_path / "s"), name: value})
    with pytest.raises(ConfigError, match="not 32"):
        config.load({"COMPILECACHE_TRUSTED_KEYS": "ed25519:" + "QUFB"})
    text = tmp_path / "not-a-key.pem"
    text.write_text("hello\n")
    with pytest.raises(ConfigError, match="not an unencrypted PEM private key"):
        config.load({"COMPILECACHE_SIGNING_KEY_FILE": str(text)})


# -- the format: what is accepted and what is not -----------------------------------------------


def _reseal(data: bytes, mutate: Any) -> bytes:
    """Apply ``mutate`` to a copy of the entry's bytes and recompute the checksum (anyone can)."""
    out = bytearray(data)
    mutate(out)
    out[-16:] = xxhash.xxh3_128_digest(bytes(out[:-16]))
    return bytes(out)


def test_only_entries_signed_by_a_trusted_key_are_accepted(keys: dict[str, Key]) -> None:
    header = EntryHeader(framework="jax", key="jax/jit_f-1", name="jit_f")
    data = entry.encode(header, b"executable" * 100, compress=False, signing=keys["a"].signing)
    found = entry.decode(data, signing=trusting(keys["a"]), expect_key="jax/jit_f-1")
    assert found.signed and found.signer == keys["a"].public
    # Rotation: several trusted keys; either one's entries pass.
    assert entry.decode(data, signing=trusting(keys["b"], keys["a"])).payload
    with pytest.raises(ForeignEntry, match="not trusted"):
        entry.decode(data, signing=trusting(keys["b"]))
    # verify: the same checks without the payload (a bundle's trust pass uses it).
    assert entry.verify(data, signing=trusting(keys["a"]), expect_key="jax/jit_f-1") == found.header
    with pytest.raises(ForeignEntry, match="not trusted"):
        entry.verify(data, signing=trusting(keys["b"]))
    with pytest.raises(CorruptEntry, match="holds key"):
        entry.verify(data, signing=trusting(keys["a"]), expect_key="jax/jit_g-1")
    # Unsigned, and HMAC-signed, entries are foreign to a reader that trusts keys.
    for other in (None, Signing(secret=b"fleet secret")):
        unsigned = entry.encode(header, b"executable" * 100, signing=other)
        with pytest.raises(ForeignEntry, match="not signed by a trusted writer"):
            entry.decode(unsigned, signing=trusting(keys["a"]))
    # Re-signed by someone else: foreign, even if they paste a trusted public key in.
    mallory = entry.encode(header, b"evil" * 250, compress=False, signing=keys["mallory"].signing)
    with pytest.raises(ForeignEntry, match="not trusted"):
        entry.decode(mallory, signing=trusting(keys["a"]))
    sig_start = len(mallory) - 16 - 96
    forged = _reseal(
        mallory,
        lambda b: b.__setitem__(slice(sig_start, sig_start + 32), keys["a"].raw_public),
    )
    with pytest.raises(ForeignEntry, match="does not verify"):
        entry.decode(forged, signing=trusting(keys["a"]))
    # Relabelled: the header says another key (and the checksum is redone): the signature
    # covers the header, so it no longer verifies.
    relabelled = _reseal(
        data,
        lambda b: b.__setitem__(
            slice(0, len(b)), bytes(b).replace(b'"key":"jax/jit_f-1"', b'"key":"jax/jit_g-1"')
        ),
    )
    assert relabelled != data
    with pytest.raises(ForeignEntry, match="does not verify"):
        entry.decode(relabelled, signing=trusting(keys["a"]))
    # Moved as it is under another key: the key it holds is not the one it is stored under.
    with pytest.raises(CorruptEntry, match="holds key"):
        entry.decode(data, signing=trusting(keys["a"]), expect_key="jax/jit_g-1")
    # A flipped byte without a new checksum: damage.
    with pytest.raises(CorruptEntry, match="checksum"):
        entry.decode(data[:100] + bytes([data[100] ^ 1]) + data[101:], signing=trusting(keys["a"]))
    # A payload byte flipped with the checksum redone: the signature says so.
    payload_at = data.index(b"executable") + 5
    flipped = _reseal(data, lambda b: b.__setitem__(payload_at, b[payload_at] ^ 1))
    with pytest.raises(ForeignEntry, match="does not verify"):
        entry.decode(flipped, signing=trusting(keys["a"]))


def test_hmac_and_ed25519_together_each_must_pass(keys: dict[str, Key]) -> None:
    both = Signing(secret=b"s", private_key=keys["a"].signing.private_key)
    data = entry.encode(EntryHeader("jax", "jax/k"), b"x" * 700, signing=both)
    assert entry.decode(data, signing=Signing(secret=b"s", trusted=(keys["a"].raw_public,)))
    assert entry.decode(data, signing=Signing(secret=b"s")).signed  # HMAC readers still read it
    assert entry.decode(data, signing=trusting(keys["a"])).signer == keys["a"].public
    with pytest.raises(ForeignEntry):
        entry.decode(data, signing=Signing(secret=b"t", trusted=(keys["a"].raw_public,)))


def test_a_writer_accepts_its_own_entries_and_no_unsigned_ones(
    tmp_path: Path, keys: dict[str, Key]
) -> None:
    store = LocalStore(tmp_path / "s")
    writer = Cache(store, signing=keys["a"].signing)
    assert writer.save(EntryHeader("jax", "jax/mine", "mine"), b"m" * 3000)
    assert Cache(store).save(EntryHeader("jax", "jax/theirs", "theirs"), b"t" * 3000)
    assert writer.load("jax", "jax/mine") is not None
    assert writer.load("jax", "jax/theirs") is None
    assert writer.stats.snapshot()["foreign"] == 1


# -- real processes, real stores -----------------------------------------------------------------


def run(url: str, state: Path, **settings: str) -> tuple[dict[str, Any], list[str]]:
    """jax_program.py in a fresh process: its result and its compilecache warnings."""
    return run_jax_program({"COMPILECACHE_URL": url, "XDG_STATE_HOME": str(state), **settings})


def check_trusted_writers(url: str, tmp_path: Path, keys: dict[str, Key]) -> None:
    a, b, mallory = keys["a"], keys["b"], keys["mallory"]
    state = tmp_path / "state"
    written, _ = run(url, state, COMPILECACHE_SIGNING_KEY_FILE=str(a.path))
    entries = stored_entries(url)
    n = len(compiles(entries))  # the executables; the guarded traces beside them are signed too
    assert written["stats"]["writes"] == n >= 3, written["stats"]
    assert all(entry.decode(d).signer == a.public for d in entries.values())

    # A reader with the writer's public key hits every entry.
    reader, warnings = run(url, state, COMPILECACHE_TRUSTED_KEYS=a.public)
    stats = reader["stats"]
    assert stats["hits"] == n and stats["misses"] == 0 and stats["writes"] == 0, stats
    assert warnings == [] and same_jax_results(reader, written)

    # A reader trusting another key: every entry a foreign miss, all left as they were.
    stranger, warnings = run(url, state, COMPILECACHE_TRUSTED_KEYS=b.public)
    stats = stranger["stats"]
    assert stats["foreign"] == len(entries) and stats["hits"] == 0 and stats["writes"] == 0, stats
    assert len(warnings) == 1 and "COMPILECACHE_TRUSTED_KEYS" in warnings[0], warnings
    assert stored_entries(url) == entries and same_jax_results(stranger, written)

    # Tampered entries: re-signed by mallory, moved to another entry's key, a flipped byte.
    store = open_url(url)
    try:
        first, second, third = sorted(compiles(entries))[:3]
        found = entry.decode(entries[first])
        store.put(first, entry.encode(found.header, found.payload, signing=mallory.signing))
        store.put(second, entries[third])
        damaged = bytearray(entries[third])
        damaged[len(damaged) // 2] ^= 1
        store.put(third, bytes(damaged))
    finally:
        store.close()
    tampered, _ = run(url, state, COMPILECACHE_TRUSTED_KEYS=a.public)
    stats = tampered["stats"]
    assert stats["foreign"] == 1 and stats["corrupt"] == 2, stats
    assert stats["hits"] == n - 3 and stats["writes"] == 0, stats
    assert same_jax_results(tampered, written)
    after = stored_entries(url)
    assert entry.decode(after[first]).signer == mallory.public  # left in place, not replaced
    # A reader writes nothing to the shared store, not even a removal: the damage stays for a
    # writer to replace.
    assert after[second] == entries[third] and after[third] == bytes(damaged)

    # Rotation: the writer's new key b replaces what was removed or damaged; a reader trusting a and b hits
    # every entry (a's and b's), one trusting only b hits b's alone.
    store = open_url(url)
    try:
        store.delete(first)
    finally:
        store.close()
    rotated, _ = run(url, state, COMPILECACHE_SIGNING_KEY_FILE=str(b.path))
    assert rotated["stats"]["writes"] == 3, rotated["stats"]
    stored = stored_entries(url)
    signers = [entry.decode(d).signer for d in compiles(stored).values()]
    assert signers.count(b.public) == 3 and signers.count(a.public) == n - 3
    both, _ = run(url, state, COMPILECACHE_TRUSTED_KEYS=f"{a.public},{b.public}")
    assert both["stats"]["hits"] == n and both["stats"]["misses"] == 0, both["stats"]
    only_b, _ = run(url, state, COMPILECACHE_TRUSTED_KEYS=b.public)
    # The traces are a's still (b's writer found them foreign and left them): foreign to b alone.
    assert only_b["stats"]["hits"] == 3 and only_b["stats"]["foreign"] == len(stored) - 3


@pytest.mark.slow
def test_trusted_writers_on_a_local_store(tmp_path: Path, keys: dict[str, Key]) -> None:
    check_trusted_writers(str(tmp_path / "store"), tmp_path, keys)


@pytest.mark.slow
def test_trusted_writers_on_redis(
    redis_server: RedisServer, tmp_path: Path, keys: dict[str, Key]
) -> None:
    check_trusted_writers(f"{redis_server.url}/{namespace()}", tmp_path, keys)


@pytest.mark.slow
def test_a_reader_without_a_key_leaves_nothing_another_reader_accepts(
    redis_server: RedisServer, tmp_path: Path, keys: dict[str, Key]
) -> None:
    a = keys["a"]
    shared = f"{redis_server.url}/{namespace()}"
    # One shared level: the reader compiles what nobody wrote, and writes nothing at all.
    alone, _ = run(shared, tmp_path / "host1", COMPILECACHE_TRUSTED_KEYS=a.public)
    stats = alone["stats"]
    assert stats["misses"] >= 3 and stats["writes"] == 0 and stats["errors"] == 0, stats
    assert stored_entries(shared) == {}
    explained = subprocess.run(
        [sys.executable, "-m", "compilecache", "explain", "--json"],
        env=clean_env({"COMPILECACHE_URL": shared, "COMPILECACHE_TRUSTED_KEYS": a.public}),
        capture_output=True,
        text=True,
    )
    records = json.loads(explained.stdout)
    assert records and all(r["stored"] is False for r in records), records
    assert all("holds no signing key" in r["reason"] for r in records), records

    # A local level in front: its compiles stay there, signed with its host's key; it hits them
    # on its next run, the shared level gets nothing, and another host's reader misses.
    local1 = tmp_path / "host1-local"
    first, _ = run(f"{local1},{shared}", tmp_path / "host1", COMPILECACHE_TRUSTED_KEYS=a.public)
    n = int(first["stats"]["misses"])
    assert first["stats"]["writes"] == n >= 3, first["stats"]
    assert stored_entries(shared) == {}
    host_key = tmp_path / "host1" / "compilecache" / "host-key.pem"
    assert stat.S_IMODE(os.stat(host_key).st_mode) == 0o600
    again, _ = run(f"{local1},{shared}", tmp_path / "host1", COMPILECACHE_TRUSTED_KEYS=a.public)
    assert again["stats"]["hits"] == n and again["stats"]["misses"] == 0, again["stats"]
    # Those entries, put where a second reader (another host) looks, are not accepted by it.
    local2 = tmp_path / "host2-local"
    planted = LocalStore(local2)
    jax_entries = {k: d for k, d in stored_entries(str(local1)).items() if k.startswith("jax/")}
    for key, data in jax_entries.items():
        planted.put(key, data)
    planted.close()
    other, _ = run(f"{local2},{shared}", tmp_path / "host2", COMPILECACHE_TRUSTED_KEYS=a.public)
    # Every planted entry read is foreign, once: the executables and the traces beside them.
    assert other["stats"]["hits"] == 0 and other["stats"]["misses"] == n, other["stats"]
    assert other["stats"]["foreign"] == len(jax_entries), other["stats"]
    assert same_jax_results(other, first) and stored_entries(shared) == {}


# -- bundles ---------------------------------------------------------------------------------------


def test_a_bundle_from_an_untrusted_writer_is_refused_whole(
    tmp_path: Path, keys: dict[str, Key]
) -> None:
    source = LocalStore(tmp_path / "source")
    writer = Cache(source, signing=keys["a"].signing)
    for i in range(3):
        assert writer.save(EntryHeader("jax", f"jax/jit_f{i}-{i}", f"jit_f{i}"), bytes(900 + i))
    path = tmp_path / "a.ccb"
    assert len(bundle.export_bundle(source, path).transferred) == 3
    records = json.loads(members(path)[0][1])["entries"]
    assert {r["signed_by"] for r in records} == {keys["a"].public}  # export keeps signatures

    trusted = LocalStore(tmp_path / "trusted")
    report = bundle.import_bundle(path, trusted, signing=trusting(keys["b"], keys["a"]))
    assert len(report.transferred) == 3
    assert all(
        entry.decode(trusted.get(k) or b"").signer == keys["a"].public for k in report.transferred
    )

    # One entry of mallory's among a's: nothing at all is imported, and the message says why.
    mixed = Cache(source, signing=keys["mallory"].signing)
    assert mixed.save(EntryHeader("jax", "jax/jit_evil-9", "jit_evil"), bytes(900))
    bad = tmp_path / "mixed.ccb"
    assert len(bundle.export_bundle(source, bad).transferred) == 4
    target = LocalStore(tmp_path / "target")
    with pytest.raises(BundleError, match=r"1 of 4 entries are not signed by a trusted key"):
        bundle.import_bundle(bad, target, signing=trusting(keys["a"]))
    assert list(target.scan()) == []
    cli = subprocess.run(
        [sys.executable, "-m", "compilecache", "import", str(bad), "--url", str(tmp_path / "t2")],
        env=clean_env({"COMPILECACHE_TRUSTED_KEYS": keys["a"].public}),
        capture_output=True,
        text=True,
    )
    assert cli.returncode == 2 and "nothing imported" in cli.stderr, cli.stderr
    assert "Traceback" not in cli.stderr


# -- the warning on a shared store that nothing signs, and the reports ----------------------------


def _run_command(url: str, state: Path, **settings: str) -> subprocess.CompletedProcess[str]:
    env = clean_env({"COMPILECACHE_URL": url, "XDG_STATE_HOME": str(state), **settings})
    # Two Python processes under one run: the warning is the wrapper's, not each process's.
    child = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'pass'], check=True)"
    return subprocess.run(
        [sys.executable, "-m", "compilecache", "run", "--", sys.executable, "-c", child],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_shared_store_without_signing_is_warned_about_once(
    tmp_path: Path, keys: dict[str, Key]
) -> None:
    shared = f"{tmp_path / 'nfs'}?shared=1"
    state = tmp_path / "state"
    first = _run_command(shared, state)
    assert first.returncode == 0, first.stderr
    warned = [line for line in first.stderr.splitlines() if "can run code" in line]
    assert len(warned) == 1, first.stderr
    assert "COMPILECACHE_TRUSTED_KEYS" in warned[0] and "keygen" in warned[0]
    second = _run_command(shared, state)
    assert "can run code" not in second.stderr, second.stderr
    # Another shared store is told about once too; a local one, or signing, never.
    other_state = tmp_path / "other-state"
    for url, settings in (
        (str(tmp_path / "local"), {}),
        (shared, {"COMPILECACHE_TRUSTED_KEYS": keys["a"].public}),
        (shared, {"COMPILECACHE_SIGNING_KEY_FILE": str(keys["a"].path)}),
        (shared, {"COMPILECACHE_SECRET": "fleet key"}),
    ):
        proc = _run_command(url, other_state, **settings)
        assert proc.returncode == 0 and "can run code" not in proc.stderr, (url, proc.stderr)
    redis_like = _run_command(f"{tmp_path / 'l'},{shared}", tmp_path / "third")
    assert redis_like.stderr.count("can run code") == 1


def test_doctor_names_the_unsigned_store_and_a_reader_role(
    tmp_path: Path, keys: dict[str, Key]
) -> None:
    env = {"COMPILECACHE_URL": "redis://cache.example:6379/0"}
    report = doctor.analyze(["true"], [], env)
    titles = [f.title for f in report.findings]
    assert "a shared store without signatures" in titles
    signed = doctor.analyze(
        ["true"], [], {**env, "COMPILECACHE_SIGNING_KEY_FILE": str(keys["a"].path)}
    )
    assert "a shared store without signatures" not in [f.title for f in signed.findings]
    reader = doctor.analyze(["true"], [], {**env, "COMPILECACHE_TRUSTED_KEYS": keys["a"].public})
    found = [f for f in reader.findings if f.title.startswith("this configuration writes nothing")]
    assert len(found) == 1 and "COMPILECACHE_SIGNING_KEY_FILE" in found[0].fix


def test_stats_and_explain_say_why_a_reader_wrote_nothing(
    tmp_path: Path, keys: dict[str, Key]
) -> None:
    url = str(tmp_path / "store")
    LocalStore(url).close()
    env = clean_env({"COMPILECACHE_URL": url, "COMPILECACHE_TRUSTED_KEYS": keys["a"].public})
    proc = subprocess.run(
        [sys.executable, "-m", "compilecache", "stats"], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    # What the store holds, then what this process signs and accepts: its settings.
    line = next(x for x in proc.stdout.splitlines() if "this process:" in x)
    assert "1 trusted key" in line and "writes nothing to shared levels" in line
    cache = Cache(
        LocalStore(url),
        read_only=True,
        read_only_reason=config.READER_REASON,
        signing=trusting(keys["a"]),
    )
    assert not cache.save(EntryHeader("jax", "jax/x", "x", compile_time_s=3.0), b"x")
    assert "holds no signing key" in cache.skip_reason(3.0, "jax/x")
    # A writer that also lists its own public key trusts two keys, not three.
    from compilecache.cli import trust_line

    writer = config.load(
        {
            "COMPILECACHE_URL": url,
            "COMPILECACHE_SIGNING_KEY_FILE": str(keys["a"].path),
            "COMPILECACHE_TRUSTED_KEYS": f"{keys['a'].public},{keys['b'].public}",
        }
    )
    assert "2 trusted keys" in trust_line(writer) and "signs what it writes" in trust_line(writer)


def test_keys_without_the_cryptography_package_are_an_error_at_enable(
    tmp_path: Path, keys: dict[str, Key], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "cryptography.hazmat.primitives.asymmetric", None)
    for name, value in (
        ("COMPILECACHE_TRUSTED_KEYS", keys["a"].public),
        ("COMPILECACHE_SIGNING_KEY_FILE", str(keys["a"].path)),
    ):
        with pytest.raises(ConfigError, match=r"pip install 'compilecache\[signing\]'"):
            config.load({"COMPILECACHE_URL": str(tmp_path / "s"), name: value})


# -- the write plan --------------------------------------------------------------------------------


def test_who_writes_is_decided_once_and_reaches_the_stores_and_the_cache(
    tmp_path: Path, keys: dict[str, Key], monkeypatch: pytest.MonkeyPatch
) -> None:
    from compilecache import session as session_mod
    from compilecache.stores import registry

    a = keys["a"]
    local, shared = tmp_path / "local", f"{tmp_path / 'shared'}?shared=1"  # an NFS mount
    reader = {"COMPILECACHE_TRUSTED_KEYS": a.public, "XDG_STATE_HOME": str(tmp_path / "state")}
    plan = config.WritePlan.of_session
    assert plan(config.load({}, url=str(shared)), False).saves  # nothing trusted: all write
    single = plan(config.load(reader, url=str(shared)), False)
    assert single.reason == config.READER_REASON and single.levels_read_only
    tiers = plan(config.load(reader, url=f"{local},{shared}"), True)
    assert tiers.saves and tiers.shared_read_only and not tiers.levels_read_only
    writer = {**reader, "COMPILECACHE_SIGNING_KEY_FILE": str(a.path)}
    assert not plan(config.load(writer, url=f"{local},{shared}"), True).shared_read_only
    ro = plan(config.load({"COMPILECACHE_READ_ONLY": "1"}, url=str(shared)), False)
    assert ro.levels_read_only and "COMPILECACHE_READ_ONLY" in ro.reason

    # One enable() asks the URL once, and the stores and the cache follow the same plan.
    calls: list[str] = []
    real = registry.has_private_level

    def counted(url: str) -> bool:
        calls.append(url)
        return real(url)

    monkeypatch.setattr(registry, "has_private_level", counted)
    for name, value in reader.items():
        monkeypatch.setenv(name, value)
    # Opening the store alone follows the plan's levels and makes no host key.
    opened = session_mod.open_store(f"{local},{shared}")
    assert [level.read_only for level in opened.levels] == [False, True]
    opened.close()
    assert not (tmp_path / "state").exists()
    calls.clear()
    session = session_mod.enable(f"{local},{shared}", frameworks="jax")
    assert session is not None
    try:
        assert len(calls) == 1
        assert session.plan.shared_read_only and not session.read_only
        first, second = session.cache.store.levels
        assert (first.read_only, second.read_only) == (False, True)
        assert session.cache.signing is session.plan.signing is not None
        assert session.cache.signing.host  # its local entries: signed with this host's key
    finally:
        session_mod.disable()
