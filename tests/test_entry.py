"""The entry format: round trips; damage of any kind is a CorruptEntry, an intact entry signed with
another key (or unsigned, with a key) is a ForeignEntry, and nothing else is ever raised."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import struct

import pytest
import xxhash
import zstandard
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from compilecache import entry
from compilecache.entry import MAGIC, Entry, EntryHeader, decode, encode, read_header
from compilecache.errors import CorruptEntry, ForeignEntry
from compilecache.signing import Signing

_PREFIX = struct.Struct(">8sHHIQ")
_FUZZ = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _header(**changes: object) -> EntryHeader:
    fields: dict[str, object] = {
        "framework": "jax",
        "key": "jax/jit_f-0123abcd",
        "name": "jit_f",
        "created": 1_700_000_000.5,
        "compile_time_s": 12.5,
        "versions": {"jax": "0.4.30", "jaxlib": "0.4.30"},
        "components": {"hlo": "abc", "flags": "def"},
        "extra": {"device": "cpu", "n": 3},
    }
    fields.update(changes)
    return EntryHeader(**fields)  # type: ignore[arg-type]


def _frame(
    header_raw: bytes,
    stored: bytes,
    *,
    flags: int = 0,
    sig: bytes = b"",
    version: int = entry.FORMAT_VERSION,
    magic: bytes = MAGIC,
) -> bytes:
    """Assemble an entry by hand, with a correct checksum over whatever it is given."""
    body = (
        _PREFIX.pack(magic, version, flags, len(header_raw), len(stored))
        + header_raw
        + stored
        + struct.pack(">H", len(sig))
        + sig
    )
    return body + xxhash.xxh3_128_digest(body)


def _reseal(data: bytes) -> bytes:
    """Recompute the checksum of a (modified) entry, as a careless or hostile writer would."""
    return data[:-16] + xxhash.xxh3_128_digest(data[:-16])


def _assert_valid_or_corrupt(data: bytes, secret: bytes | None = None) -> Entry | None:
    """decode either succeeds consistently or raises CorruptEntry; nothing else is allowed."""
    try:
        found = decode(data, signing=Signing(secret=secret))
    except CorruptEntry:
        return None
    assert isinstance(found, Entry)
    assert len(found.payload) == found.header.payload_size
    return found


# -- round trips -----------------------------------------------------------------------------


def test_roundtrip_uncompressed() -> None:
    payload = b"small payload"
    data = encode(_header(), payload)
    found = decode(data)
    assert found.payload == payload
    assert found.header.compression == "none"
    assert found.header.payload_size == len(payload)
    assert found.header.key == "jax/jit_f-0123abcd"
    assert found.header.framework == "jax"
    assert found.header.compile_time_s == 12.5
    assert found.header.versions == {"jax": "0.4.30", "jaxlib": "0.4.30"}
    assert found.header.components == {"hlo": "abc", "flags": "def"}
    assert found.header.extra == {"device": "cpu", "n": 3}
    assert found.signed is False
    assert data.startswith(MAGIC)
    assert payload in data  # stored as is


def test_roundtrip_compressed() -> None:
    payload = b"compile me " * 10_000
    data = encode(_header(), payload)
    assert len(data) < len(payload) // 10
    found = decode(data)
    assert found.payload == payload
    assert found.header.compression == "zstd"
    assert found.header.payload_size == len(payload)


@pytest.mark.parametrize("compress", [True, False])
def test_roundtrip_forced_compression(compress: bool) -> None:
    for payload in (b"", b"x", os.urandom(5000), b"\0" * 100_000):
        found = decode(encode(_header(), payload, compress=compress))
        assert found.payload == payload
        assert found.header.compression == ("zstd" if compress else "none")


def test_already_zstd_payload_is_kept_as_is() -> None:
    payload = zstandard.ZstdCompressor().compress(b"abc" * 10_000)
    assert len(payload) >= 0  # a real zstd frame, starting with the zstd magic
    data = encode(_header(), payload)
    found = decode(data)
    assert found.header.compression == "none"
    assert found.payload == payload
    assert payload in data  # not compressed a second time


def test_roundtrip_signed() -> None:
    payload = os.urandom(2000)
    data = encode(_header(), payload, signing=Signing(secret=b"s3cret"))
    found = decode(data, signing=Signing(secret=b"s3cret"))
    assert found.payload == payload
    assert found.signed is True
    # Without a secret the checksum alone still validates a signed entry.
    assert decode(data).payload == payload


@settings(max_examples=100, deadline=None)
@given(
    payload=st.binary(max_size=4096)
    | st.builds(lambda n, b: b * n, st.integers(0, 5000), st.binary(min_size=1, max_size=8)),
    compress=st.sampled_from([None, True, False]),
    secret=st.none() | st.binary(min_size=1, max_size=64),
    key=st.text(max_size=50),
    name=st.text(max_size=20),
)
def test_roundtrip_property(
    payload: bytes, compress: bool | None, secret: bytes | None, key: str, name: str
) -> None:
    header = _header(key=key, name=name)
    found = decode(
        encode(header, payload, compress=compress, signing=Signing(secret=secret)),
        signing=Signing(secret=secret),
    )
    assert found.payload == payload
    assert found.header.key == key
    assert found.header.name == name
    assert found.signed is (secret is not None)


# -- damage ----------------------------------------------------------------------------------


@_FUZZ
@given(st.binary(max_size=2048))
def test_decode_of_random_bytes_is_corrupt(data: bytes) -> None:
    with pytest.raises(CorruptEntry):
        decode(data)
    with pytest.raises(CorruptEntry):
        decode(data, signing=Signing(secret=b"k"))
    with pytest.raises(CorruptEntry):
        read_header(data)


@_FUZZ
@given(st.binary(max_size=2048))
def test_decode_of_random_bytes_after_magic_is_corrupt(tail: bytes) -> None:
    with pytest.raises(CorruptEntry):
        decode(MAGIC + tail)
    with pytest.raises(CorruptEntry):
        decode(MAGIC + b"\x00\x01" + tail)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
_HEADER_FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "framework": _JSON,
        "key": _JSON,
        "name": _JSON,
        "created": _JSON | st.integers(min_value=10**300, max_value=10**320),
        "compile_time_s": _JSON,
        "payload_size": _JSON | st.integers(-10, 10**20) | st.just(float("inf")),
        "compression": st.sampled_from(["none", "zstd", "lz4"]) | _JSON,
        "versions": _JSON,
        "components": _JSON,
        "extra": _JSON,
    },
)


@_FUZZ
@given(
    fields=_HEADER_FIELDS,
    stored=st.binary(max_size=512)
    | st.builds(lambda b: zstandard.ZstdCompressor().compress(b), st.binary(max_size=512)),
    flags=st.integers(0, 3),
    sig=st.binary(max_size=40),
)
def test_decode_of_well_framed_garbage_never_raises_anything_else(
    fields: dict[str, object], stored: bytes, flags: int, sig: bytes
) -> None:
    """Frames with a correct checksum but arbitrary JSON headers and payloads."""
    header_raw = json.dumps(fields).encode()
    data = _frame(header_raw, stored, flags=flags, sig=sig)
    _assert_valid_or_corrupt(data)
    with pytest.raises((CorruptEntry, ForeignEntry)):
        decode(data, signing=Signing(secret=b"another key"))
    with pytest.raises(CorruptEntry):
        decode(data, expect_key="\x00 a key no header holds")
    with contextlib.suppress(CorruptEntry):
        read_header(data)


@pytest.mark.parametrize(
    "header_raw",
    [
        b"[" * 100_000 + b"]" * 100_000,  # nesting deep enough to exhaust the recursion limit
        b'{"framework": "jax", "key": "k", "extra": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b'{"framework": "jax", "key": "k", "created": 1' + b"0" * 400 + b"}",  # float overflow
        b'{"framework": "jax", "key": "k", "payload_size": 1e999}',  # int(inf)
        b'{"framework": "jax", "key": "k", "payload_size": NaN}',
        b'{"framework": "jax", "key": "k", "payload_size": 1' + b"0" * 5000 + b"}",
        b'{"framework": "jax", "key": "k", "versions": "ab"}',
        b'{"framework": "jax", "key": "k", "versions": 3}',
        b'{"framework": "jax", "key": "k", "payload_size": -1}',
        b'{"framework": "jax", "key": "k", "compression": "lz4"}',
        b'{"framework": "jax"}',
        b"\xff\xfe\x00garbage",
        b"",
        b"null",
    ],
)
def test_hostile_headers_are_corrupt(header_raw: bytes) -> None:
    data = _frame(header_raw, b"payload")
    with pytest.raises(CorruptEntry):
        decode(data)
    with pytest.raises(CorruptEntry):
        read_header(data)


def _lying_frame(content: bytes, declared: int) -> bytes:
    """A zstd frame of ``content`` whose frame header declares ``declared`` bytes of output."""
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(content)
    descriptor = frame[4]
    assert descriptor & 0xE3 == 0  # no content size, no single segment, no dictionary id
    # Set a 8-byte content size field; it follows the window descriptor byte.
    return (
        frame[:4]
        + bytes([descriptor | 0xC0])
        + frame[5:6]
        + struct.pack("<Q", declared)
        + frame[6:]
    )


def test_zstd_frame_claiming_a_huge_size_is_corrupt() -> None:
    """A checksummed entry whose zstd frame lies about its size must not allocate that size."""
    honest = _lying_frame(b"y" * 1000, 1000)
    assert zstandard.frame_content_size(honest) == 1000
    header = _header(payload_size=1000, compression="zstd").to_json()
    assert decode(_frame(header, honest, flags=entry.FLAG_ZSTD)).payload == b"y" * 1000
    huge = 1 << 45  # 32 TiB
    for declared, claimed in ((huge, huge), (huge, 1000), (1000, huge), (10**9, 10**9)):
        header = _header(payload_size=claimed, compression="zstd").to_json()
        data = _frame(header, _lying_frame(b"y" * 1000, declared), flags=entry.FLAG_ZSTD)
        with pytest.raises(CorruptEntry):
            decode(data)
    # A frame without a content size, whose header claims more or less than it holds.
    unsized = zstandard.ZstdCompressor(write_content_size=False).compress(b"y" * 1000)
    header = _header(payload_size=1000, compression="zstd").to_json()
    assert decode(_frame(header, unsized, flags=entry.FLAG_ZSTD)).payload == b"y" * 1000
    for claimed in (0, 999, 1001, huge):
        header = _header(payload_size=claimed, compression="zstd").to_json()
        with pytest.raises(CorruptEntry):
            decode(_frame(header, unsized, flags=entry.FLAG_ZSTD))


def test_zstd_bomb_beyond_the_declared_size_is_corrupt() -> None:
    bomb = zstandard.ZstdCompressor(write_content_size=False).compress(b"\0" * 50_000_000)
    assert len(bomb) < 10_000
    header = _header(payload_size=1000, compression="zstd").to_json()
    with pytest.raises(CorruptEntry):
        decode(_frame(header, bomb, flags=entry.FLAG_ZSTD))


def _valid_entries() -> st.SearchStrategy[tuple[bytes, bytes, bytes | None]]:
    """(encoded entry, payload, secret) for a variety of payloads and options."""
    return st.builds(
        lambda payload, compress, secret: (
            encode(_header(), payload, compress=compress, signing=Signing(secret=secret)),
            payload,
            secret,
        ),
        st.binary(max_size=600) | st.builds(lambda n: b"ab" * n, st.integers(0, 2000)),
        st.sampled_from([None, True, False]),
        st.none() | st.just(b"secret key"),
    )


@st.composite
def _mutations(draw: st.DrawFn) -> tuple[bytes, bytes, bytes | None]:
    """A valid entry and a damaged copy of it."""
    data, _payload, secret = draw(_valid_entries())
    kind = draw(st.sampled_from(["truncate", "flip", "append", "splice", "graft", "resize"]))
    if kind == "truncate":
        mutated = data[: draw(st.integers(0, len(data) - 1))]
    elif kind == "flip":
        offset = draw(st.integers(0, len(data) - 1))
        bit = draw(st.integers(0, 7))
        mutated = data[:offset] + bytes([data[offset] ^ (1 << bit)]) + data[offset + 1 :]
    elif kind == "append":
        mutated = data + draw(st.binary(min_size=1, max_size=64))
    elif kind == "splice":
        start = draw(st.integers(0, len(data)))
        end = draw(st.integers(start, len(data)))
        mutated = data[:start] + draw(st.binary(max_size=64)) + data[end:]
    elif kind == "graft":
        other, _, _ = draw(_valid_entries())
        mutated = (
            data[: draw(st.integers(0, len(data)))] + other[draw(st.integers(0, len(other))) :]
        )
        assume(mutated != other)
    else:  # remove or duplicate a slice in the middle
        start = draw(st.integers(0, len(data) - 1))
        end = draw(st.integers(start + 1, len(data)))
        mutated = data[:start] + data[end:] if draw(st.booleans()) else data[:end] + data[start:]
    assume(mutated != data)
    return data, mutated, secret


@_FUZZ
@given(_mutations())
def test_damaged_entry_is_corrupt(case: tuple[bytes, bytes, bytes | None]) -> None:
    _original, mutated, secret = case
    with pytest.raises(CorruptEntry):
        decode(mutated, signing=Signing(secret=secret))
    with pytest.raises(CorruptEntry):
        decode(mutated)


@_FUZZ
@given(_mutations())
def test_damaged_then_resealed_entry_is_corrupt_or_consistent(
    case: tuple[bytes, bytes, bytes | None],
) -> None:
    """With the checksum recomputed, decode still raises only CorruptEntry (or is consistent)."""
    original, mutated, secret = case
    if len(mutated) < 16:
        return
    resealed = _reseal(mutated)
    if resealed == original:  # only the checksum itself was damaged
        assert decode(resealed, signing=Signing(secret=secret)).payload == decode(original).payload
        return
    _assert_valid_or_corrupt(resealed)
    if secret is not None:
        # Without the key nobody can forge a valid signature, whatever else they change: damage
        # the frame shows is corrupt, an intact frame with a wrong signature is foreign.
        with pytest.raises((CorruptEntry, ForeignEntry)):
            decode(resealed, signing=Signing(secret=secret))


# -- signatures ------------------------------------------------------------------------------


def test_signed_entry_rejects_another_secret() -> None:
    data = encode(_header(), b"payload" * 100, signing=Signing(secret=b"right"))
    with pytest.raises(ForeignEntry, match="signature"):
        decode(data, signing=Signing(secret=b"wrong"))


def test_unsigned_entry_is_rejected_with_a_secret() -> None:
    data = encode(_header(), b"payload" * 100)
    assert decode(data).signed is False
    with pytest.raises(ForeignEntry, match="not signed"):
        decode(data, signing=Signing(secret=b"key"))


def _strip_signature(data: bytes) -> bytes:
    header_len, stored_len = _PREFIX.unpack_from(data)[3:]
    payload_end = _PREFIX.size + header_len + stored_len
    (sig_len,) = struct.unpack_from(">H", data, payload_end)
    assert sig_len == 32
    return _reseal(data[:payload_end] + b"\x00\x00" + b"\0" * 16)


def test_stripped_signature_is_rejected() -> None:
    data = encode(_header(), b"payload" * 100, signing=Signing(secret=b"key"))
    stripped = _strip_signature(data)
    assert decode(stripped).signed is False  # the frame itself is intact
    with pytest.raises(ForeignEntry):
        decode(stripped, signing=Signing(secret=b"key"))


def test_forged_payload_with_resealed_checksum_is_rejected() -> None:
    """Someone without the key swaps the payload and recomputes the checksum."""
    payload = b"A" * 700
    data = encode(_header(), payload, compress=False, signing=Signing(secret=b"key"))
    forged = _reseal(data.replace(payload, b"B" * 700))
    assert decode(forged).payload == b"B" * 700  # checksum alone cannot tell
    with pytest.raises(ForeignEntry, match="signature"):
        decode(forged, signing=Signing(secret=b"key"))


def test_signature_covers_the_header() -> None:
    data = encode(_header(key="jax/a"), b"p" * 700, compress=False, signing=Signing(secret=b"key"))
    forged = _reseal(data.replace(b'"key":"jax/a"', b'"key":"jax/b"'))
    assert decode(forged).header.key == "jax/b"
    with pytest.raises(ForeignEntry):
        decode(forged, signing=Signing(secret=b"key"))
    # Stored under the key it now names or not, it is never served.
    with pytest.raises(CorruptEntry, match="holds key"):
        decode(forged, signing=Signing(secret=b"key"), expect_key="jax/a")


def test_a_foreign_entry_is_not_a_corrupt_one() -> None:
    """Callers remove corrupt entries and leave foreign ones alone: the two must not overlap."""
    assert not issubclass(ForeignEntry, CorruptEntry)
    assert not issubclass(CorruptEntry, ForeignEntry)
    data = encode(_header(), b"p" * 2000, signing=Signing(secret=b"theirs"))
    try:
        decode(data, signing=Signing(secret=b"ours"))
    except ForeignEntry as exc:
        assert not isinstance(exc, CorruptEntry)
    else:
        raise AssertionError("a foreign entry was accepted")


def test_damage_to_a_foreign_entry_is_corruption() -> None:
    """The checksum is checked first: a damaged entry is corrupt whoever signed it."""
    data = bytearray(
        encode(_header(), b"p" * 2000, compress=False, signing=Signing(secret=b"theirs"))
    )
    data[len(data) // 2] ^= 0x01
    with pytest.raises(CorruptEntry, match="checksum"):
        decode(bytes(data), signing=Signing(secret=b"ours"))


# -- the expected key ------------------------------------------------------------------------


def test_expect_key_accepts_the_key_the_entry_holds() -> None:
    data = encode(_header(key="jax/a"), b"p" * 700, signing=Signing(secret=b"key"))
    assert decode(data, expect_key="jax/a").header.key == "jax/a"
    assert decode(data, signing=Signing(secret=b"key"), expect_key="jax/a").payload == b"p" * 700


def test_expect_key_rejects_another_key_as_corrupt() -> None:
    data = encode(_header(key="jax/a"), b"p" * 700)
    with pytest.raises(CorruptEntry, match=r"entry holds key 'jax/a', not 'jax/b'"):
        decode(data, expect_key="jax/b")


def test_a_misplaced_foreign_entry_is_corrupt_not_foreign() -> None:
    """An entry under a key it does not hold is wrong for every reader, whoever signed it."""
    data = encode(_header(key="jax/a"), b"p" * 700, signing=Signing(secret=b"theirs"))
    with pytest.raises(CorruptEntry, match="holds key"):
        decode(data, signing=Signing(secret=b"ours"), expect_key="jax/b")
    unsigned = encode(_header(key="jax/a"), b"p" * 700)
    with pytest.raises(CorruptEntry, match="holds key"):
        decode(unsigned, signing=Signing(secret=b"ours"), expect_key="jax/b")


def test_signature_is_a_real_hmac() -> None:
    data = encode(_header(), b"payload", compress=False, signing=Signing(secret=b"key"))
    header_len, stored_len = _PREFIX.unpack_from(data)[3:]
    signed_end = _PREFIX.size + header_len + stored_len
    expected = hmac.new(b"key", data[:signed_end], hashlib.sha256).digest()
    assert data[signed_end + 2 : signed_end + 34] == expected


# -- read_header -----------------------------------------------------------------------------


def test_read_header_does_not_verify_the_checksum() -> None:
    data = bytearray(encode(_header(name="listed"), b"q" * 5000, compress=False))
    data[-1] ^= 0xFF  # damage the checksum only
    header = read_header(bytes(data))
    assert header.name == "listed"
    assert header.key == "jax/jit_f-0123abcd"
    assert header.payload_size == 5000
    with pytest.raises(CorruptEntry, match="checksum"):
        decode(bytes(data))


def test_read_header_still_checks_the_frame() -> None:
    data = encode(_header(), b"q" * 100)
    with pytest.raises(CorruptEntry):
        read_header(data[:-1])
    with pytest.raises(CorruptEntry):
        read_header(b"X" + data[1:])


def test_other_versions_and_flags_are_corrupt() -> None:
    header_raw = _header(payload_size=3).to_json()
    assert decode(_frame(header_raw, b"abc")).payload == b"abc"
    with pytest.raises(CorruptEntry, match="version"):
        decode(_frame(header_raw, b"abc", version=2))
    with pytest.raises(CorruptEntry):
        decode(_frame(header_raw, b"abc", flags=4))
    with pytest.raises(CorruptEntry):
        decode(_frame(header_raw, b"abc", flags=entry.FLAG_ZSTD))  # header says "none"
    with pytest.raises(CorruptEntry, match="magic"):
        decode(_frame(header_raw, b"abc", magic=b"\x89CCE\n\n\x1a\n"))


def test_the_header_json_is_what_asdict_gives_without_copying() -> None:
    """to_json writes the fields as they are (no deep copy); the bytes are those of asdict, a
    dataclass inside ``extra`` included, so entries written before and after read the same."""
    import dataclasses
    import json

    @dataclasses.dataclass
    class Point:
        x: int
        y: tuple[int, int]

    header = entry.EntryHeader(
        "jax",
        "jax/k-1",
        "k",
        created=1.5,
        compile_time_s=0.25,
        versions={"jax": "0.10.2"},
        components={"computation": "ab"},
        extra={"readable": {"XLA flags": "--a"}, "point": Point(1, (2, 3)), "none": None},
    )
    expected = json.dumps(dataclasses.asdict(header), sort_keys=True, separators=(",", ":"))
    assert header.to_json() == expected.encode()
    with pytest.raises(TypeError, match="set is not JSON serializable"):
        dataclasses.replace(header, extra={"bad": {1}}).to_json()
