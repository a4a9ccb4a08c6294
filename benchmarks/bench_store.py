"""Get and put latency of one entry: compilecache vs JAX's own cache vs plain file I/O.

For values of 10 KB, 1 MB and 50 MB (random, incompressible bytes), in one process:

- ``raw read`` / ``raw write``: ``open(path).read()`` of a file holding the same bytes, and
  ``open(path, "wb").write()``; ``raw atomic write`` adds the write-to-temporary-then-rename that
  any store safe for concurrent readers needs;
- ``LocalStore``: ``compilecache.stores.local.LocalStore.get`` / ``put`` (file + SQLite index);
- ``Cache``: ``Cache.load`` / ``Cache.save`` over that store: the entry format with its XXH3-128
  checksum, the counters, the never-raise policy. This is the path JAX sees through compilecache
  (the JAX adapter saves with ``compress=False`` because JAX's values are already zstd frames);
- ``Cache, signed``: the same with Ed25519 (issue 24): saved by a trusted writer
  (``COMPILECACHE_SIGNING_KEY_FILE``: a SHA-256 of the entry, signed) and loaded by a reader that
  accepts only its key (``COMPILECACHE_TRUSTED_KEYS``: that SHA-256 again, one verification);
- ``JAX LRUCache``: ``jax._src.lru_cache.LRUCache`` bounded (``max_size`` set: a file lock on
  every call, an ``-atime`` file rewritten on every hit, a directory glob on every put), and, for
  reference, unbounded (JAX's default mode: no lock, no rename).

Every file is in the page cache (they were just written), as on a warm start on one machine.
Variants are interleaved in rotating order for every repetition; medians are reported. Puts write
a new key every time and the entry is removed after the timing, so no directory grows.

    python benchmarks/bench_store.py            # 1000 / 200 / 15 repetitions
    python benchmarks/bench_store.py --quick    # 100 / 20 / 3 repetitions
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import common
from compilecache.entry import EntryHeader
from compilecache.runtime.cache import Cache
from compilecache.signing import Signing
from compilecache.stores.local import LocalStore

NAME = "bench_store"


def new_private_key() -> bytes:
    from cryptography.hazmat.primitives.asymmetric import ed25519

    raw: bytes = ed25519.Ed25519PrivateKey.generate().private_bytes_raw()
    return raw


TARGET_GET_OVER_RAW = 1.5  # for values of 1 MB and more
SIZES = {"10KB": 10 * 1000, "1MB": 1000 * 1000, "50MB": 50 * 1000 * 1000}
REPS_FULL = {"10KB": 1000, "1MB": 200, "50MB": 15}
REPS_QUICK = {"10KB": 100, "1MB": 20, "50MB": 3}

GET_VARIANTS = {
    "raw_read": "raw read (open + read)",
    "local_get": "compilecache LocalStore.get",
    "cache_load": "compilecache Cache.load (what JAX sees)",
    "signed_load": "compilecache Cache.load, Ed25519 signature verified",
    "jax_bounded_get": "JAX LRUCache.get, bounded",
    "jax_unbounded_get": "JAX LRUCache.get, unbounded (default)",
}
PUT_VARIANTS = {
    "raw_write": "raw write (open + write)",
    "raw_atomic_write": "raw atomic write (tmp + rename)",
    "local_put": "compilecache LocalStore.put",
    "cache_save": "compilecache Cache.save (what JAX sees)",
    "signed_save": "compilecache Cache.save, Ed25519-signed",
    "jax_bounded_put": "JAX LRUCache.put, bounded",
    "jax_unbounded_put": "JAX LRUCache.put, unbounded (default)",
}


def _lru_cache_class() -> Any:
    from jax._src import lru_cache

    return lru_cache.LRUCache


def jax_key() -> str:
    """A key shaped like JAX's: ``<module name>-<sha256 hex>``."""
    return f"jit_train_step-{uuid.uuid4().hex}{uuid.uuid4().hex}"


class Setup:
    """The stores under test, in one temporary directory."""

    def __init__(self, root: Path) -> None:
        lru = _lru_cache_class()
        self.raw_dir = root / "raw"
        self.raw_dir.mkdir()
        self.local = LocalStore(root / "local")
        self.cache = Cache(LocalStore(root / "cache"))
        signing = Signing(private_key=new_private_key())
        self.signed_writer = Cache(LocalStore(root / "signed"), signing=signing)
        assert signing.public_key is not None
        self.signed_reader = Cache(
            LocalStore(root / "signed"), signing=Signing(trusted=(signing.public_key,))
        )
        self.jax_bounded = lru(str(root / "jax-bounded"), max_size=100 * 1000**3)
        self.jax_unbounded = lru(str(root / "jax-unbounded"), max_size=-1)

    def close(self) -> None:
        self.local.close()
        self.cache.close()
        self.signed_writer.close()
        self.signed_reader.close()


def _drop_jax_entry(directory: Path, key: str) -> None:
    for suffix in ("-cache", "-atime"):
        (directory / f"{key}{suffix}").unlink(missing_ok=True)


def get_ops(setup: Setup, value: bytes) -> dict[str, Callable[[], object]]:
    """One stored copy of ``value`` per variant, and the call that reads it back."""
    raw_path = setup.raw_dir / "value.bin"
    raw_path.write_bytes(value)
    local_key = "jax/" + jax_key()
    setup.local.put(local_key, value)
    cache_key = "jax/" + jax_key()
    setup.cache.save(EntryHeader("jax", cache_key, "jit_train_step"), value, compress=False)
    signed_key = "jax/" + jax_key()
    header = EntryHeader("jax", signed_key, "jit_train_step")
    assert setup.signed_writer.save(header, value, compress=False)
    bounded_key, unbounded_key = jax_key(), jax_key()
    setup.jax_bounded.put(bounded_key, value)
    setup.jax_unbounded.put(unbounded_key, value)

    def raw_read() -> bytes:
        with open(raw_path, "rb") as f:
            return f.read()

    def cache_load() -> bytes:
        found = setup.cache.load("jax", cache_key)
        assert found is not None
        return found.payload

    def signed_load() -> bytes:
        found = setup.signed_reader.load("jax", signed_key)
        assert found is not None and found.signer
        return found.payload

    ops: dict[str, Callable[[], object]] = {
        "raw_read": raw_read,
        "local_get": lambda: setup.local.get(local_key),
        "cache_load": cache_load,
        "signed_load": signed_load,
        "jax_bounded_get": lambda: setup.jax_bounded.get(bounded_key),
        "jax_unbounded_get": lambda: setup.jax_unbounded.get(unbounded_key),
    }
    for name, op in ops.items():  # every variant must return the very bytes that were stored
        if op() != value:
            raise AssertionError(f"{name} returned other bytes")
    return ops


def timed_put(setup: Setup, variant: str, value: bytes) -> float:
    """Time one put of ``value`` under a new key, then remove the entry (untimed)."""
    key = jax_key()
    if variant == "raw_write":
        path = setup.raw_dir / key

        def op() -> None:
            with open(path, "wb") as f:
                f.write(value)

        elapsed = common.time_once(op)
        path.unlink()
    elif variant == "raw_atomic_write":
        path = setup.raw_dir / key

        def op() -> None:
            tmp = setup.raw_dir / f"{uuid.uuid4().hex}.tmp"
            with open(tmp, "wb") as f:
                f.write(value)
            os.replace(tmp, path)

        elapsed = common.time_once(op)
        path.unlink()
    elif variant == "local_put":
        elapsed = common.time_once(lambda: setup.local.put("jax/" + key, value))
        setup.local.delete("jax/" + key)
    elif variant == "cache_save":
        header = EntryHeader("jax", "jax/" + key, "jit_train_step", compile_time_s=1.0)
        elapsed = common.time_once(lambda: setup.cache.save(header, value, compress=False))
        setup.cache.store.delete("jax/" + key)
    elif variant == "signed_save":
        header = EntryHeader("jax", "jax/" + key, "jit_train_step", compile_time_s=1.0)
        elapsed = common.time_once(lambda: setup.signed_writer.save(header, value, compress=False))
        setup.signed_writer.store.delete("jax/" + key)
    elif variant == "jax_bounded_put":
        elapsed = common.time_once(lambda: setup.jax_bounded.put(key, value))
        _drop_jax_entry(setup.jax_bounded.path, key)
    elif variant == "jax_unbounded_put":
        elapsed = common.time_once(lambda: setup.jax_unbounded.put(key, value))
        _drop_jax_entry(setup.jax_unbounded.path, key)
    else:
        raise ValueError(variant)
    return elapsed


def measure(size_name: str, reps: int, setup: Setup) -> dict[str, Any]:
    value = os.urandom(SIZES[size_name])
    ops = get_ops(setup, value)
    gets: dict[str, list[float]] = {name: [] for name in GET_VARIANTS}
    puts: dict[str, list[float]] = {name: [] for name in PUT_VARIANTS}
    for _, name in common.rotations(list(GET_VARIANTS), reps):
        gets[name].append(common.time_once(ops[name]))
    for _, name in common.rotations(list(PUT_VARIANTS), reps):
        puts[name].append(timed_put(setup, name, value))
    get_med = {name: common.median(times) for name, times in gets.items()}
    put_med = {name: common.median(times) for name, times in puts.items()}
    return {
        "size": size_name,
        "bytes": len(value),
        "reps": reps,
        "get_median_s": get_med,
        "put_median_s": put_med,
        "get_over_raw_read": {n: common.ratio(t, get_med["raw_read"]) for n, t in get_med.items()},
        "put_over_raw_atomic_write": {
            n: common.ratio(t, put_med["raw_atomic_write"]) for n, t in put_med.items()
        },
    }


def _ms(seconds: float) -> float:
    return seconds * 1000.0


def _added_rows(
    op: str, medians: str, variant: str, base: str, blocks: list[dict[str, Any]]
) -> list[list[Any]]:
    """Two table rows for ``variant`` against ``base`` at every size: ms added, then the ratio."""
    pairs = [(b[medians][variant], b[medians][base]) for b in blocks]
    return [
        [f"{op}: ms added", *(_ms(v - b) for v, b in pairs)],
        [f"{op}: ratio", *(common.ratio(v, b) for v, b in pairs)],
    ]


def render(info: dict[str, Any], blocks: list[dict[str, Any]], command: str) -> str:
    sizes = [b["size"] for b in blocks]
    get_rows = [
        [label, *(_ms(b["get_median_s"][name]) for b in blocks),
         *(b["get_over_raw_read"][name] for b in blocks)]
        for name, label in GET_VARIANTS.items()
    ]  # fmt: skip
    put_rows = [
        [label, *(_ms(b["put_median_s"][name]) for b in blocks),
         *(b["put_over_raw_atomic_write"][name] for b in blocks)]
        for name, label in PUT_VARIANTS.items()
    ]  # fmt: skip
    reps = ", ".join(f"{b['reps']} ({b['size']})" for b in blocks)
    verdicts = []
    for b in blocks:
        if b["bytes"] < 1000 * 1000:
            continue
        for name in ("local_get", "cache_load"):
            r = b["get_over_raw_read"][name]
            verdict = "met" if r <= TARGET_GET_OVER_RAW else "MISSED"
            verdicts.append([f"{GET_VARIANTS[name]}, {b['size']}", r, verdict])
    return "\n".join(
        [
            "# Store latency: compilecache vs JAX's LRUCache vs plain file I/O",
            "",
            common.machine_markdown(info),
            "",
            f"Reproduce: `{command}`",
            "",
            "Random (incompressible) values, files in the page cache, variants interleaved; "
            f"medians of {reps} repetitions.",
            "",
            "## get",
            "",
            common.markdown_table(
                ["variant", *(f"{s} ms" for s in sizes), *(f"{s} / raw" for s in sizes)],
                get_rows,
            ),
            "",
            "## put",
            "",
            common.markdown_table(
                ["variant", *(f"{s} ms" for s in sizes), *(f"{s} / raw atomic" for s in sizes)],
                put_rows,
            ),
            "",
            "## Ed25519 signatures (issue 24): signed / unsigned `Cache` (a verification is "
            "one SHA-256 of the entry and one signature check)",
            "",
            common.markdown_table(
                ["", *sizes],
                [
                    *_added_rows("load", "get_median_s", "signed_load", "cache_load", blocks),
                    *_added_rows("save", "put_median_s", "signed_save", "cache_save", blocks),
                ],
            ),
            "",
            f"## Target: our get <= {TARGET_GET_OVER_RAW}x a raw read, for 1 MB and more",
            "",
            common.markdown_table(["get", "ratio to raw read", "target"], verdicts),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--sizes", nargs="+", choices=list(SIZES), help="value sizes")
    parser.add_argument("--dir", help="where to create the stores (default: a temporary dir)")
    common.add_no_write(parser)
    args = parser.parse_args(argv)
    reps = REPS_QUICK if args.quick else REPS_FULL
    info = common.machine_info()
    blocks = []
    with tempfile.TemporaryDirectory(prefix="bench-store-", dir=args.dir) as tmp:
        setup = Setup(Path(tmp))
        try:
            for size_name in args.sizes or list(SIZES):
                common.progress(f"{size_name}: {reps[size_name]} repetitions")
                blocks.append(measure(size_name, reps[size_name], setup))
        finally:
            setup.close()
    command = common.command_line()
    markdown = render(info, blocks, command)
    print(markdown)
    if not args.no_write:
        met = all(
            b["get_over_raw_read"][n] <= TARGET_GET_OVER_RAW
            for b in blocks
            if b["bytes"] >= 1000 * 1000
            for n in ("local_get", "cache_load")
        )
        data = common.results_record(
            NAME,
            info,
            args.quick,
            target={"get_over_raw_read_max_for_1MB_and_more": TARGET_GET_OVER_RAW},
            targets_met=met,
            sizes=blocks,
        )
        common.save_results(NAME, args.quick, data, markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
