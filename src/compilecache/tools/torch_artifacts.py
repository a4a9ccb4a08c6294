"""torch's own portable cache format: import a ``torch.compiler.save_cache_artifacts()`` blob
into a store, and export a store's torch entries as one.

``compilecache import blob.bin`` writes the blob's ``inductor`` artifacts (compiled FX graphs) as
``torch/fx/<key>`` entries and its ``aot_autograd`` artifacts as ``torch/aot/<key>`` entries, with
headers like the ones the torch integration writes: the payload is torch's pickle, byte for byte.
``compilecache export blob.bin --format torch`` writes the reverse, for
``torch.compiler.load_cache_artifacts()``. The byte format is torch's own
(``torch.compiler._cache``): it is read and written with torch's serializer, never re-implemented.

Limits, by construction of torch's format:

- **No kernels.** On CPU a torch blob holds the generated C++ source but not the compiled
  kernels, so a process that loads one still runs the C++ compiler for every kernel. A
  compilecache bundle (``compilecache export``) carries them as ``torch/kernel/*`` entries.
- **Same flags.** torch hashes its configuration into every key. compilecache sets none of
  torch's flags (see :mod:`compilecache.frameworks.torch`), so a blob made by a plain torch
  process hits under compilecache, and an exported blob in a plain torch process, whenever the
  two processes configure torch alike, as between two plain torch processes.
- **Not carried:** ``autotune`` (keyed by a local file path, not by the remote keys compilecache
  stores autotune results under), ``pgo`` and ``precompile`` artifacts; compilecache's own
  ``torch/autotune`` and ``torch/kernel`` entries are left out of an exported blob. Both are
  reported, with the reason.

The blob does not say which torch or Python made it: imported entries are labelled with the
installed versions. torch's keys include its own version, so entries from another torch are
never looked up (dead weight, never a wrong hit). Names and compile times are read from the
pickles without running them (:mod:`pickletools` only parses); what is not found is left empty.
"""

from __future__ import annotations

import contextlib
import os
import pickletools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from compilecache import atomicfile, entry
from compilecache.entry import EntryHeader
from compilecache.errors import BundleError, ConfigError, CorruptEntry, ForeignEntry
from compilecache.frameworks.torch.payloads import (
    KNOWN_IDS,
    parse_debug_lines,
    store_key,
    torch_key_of,
)
from compilecache.host import HostCheck, cpu_target, torch_versions
from compilecache.host import framework_module as _torch_module
from compilecache.runtime.reader import Reader
from compilecache.runtime.transfer import (
    EntryFilter,
    Progress,
    Report,
    admit,
    nothing_matched,
    peek_entry,
)
from compilecache.signing import Signing
from compilecache.stores.base import Store

Format = Literal["bundle", "torch"]

# torch's artifact type <-> compilecache's layer.
LAYER_OF = {"inductor": "fx", "aot_autograd": "aot"}
TYPE_OF = {layer: kind for kind, layer in LAYER_OF.items()}
SOURCE = "torch-mega-cache"
IMPORTED_NAME = "(imported from torch)"

SKIP_REASONS = {
    "autotune": "torch autotune artifact: keyed by a local file path, not the remote keys "
    "compilecache keeps autotune results under",
    "pgo": "torch profile-guided (dynamic shapes) profile: not a compiled artifact; "
    "compilecache does not store it",
    "precompile": "torch precompile (Dynamo package) artifact: compilecache does not store it",
}
_KERNEL_REASON = (
    "a C++ kernel binary: torch's cache artifacts have no place for it (whoever loads the "
    "blob compiles the kernel again)"
)

# A zstd frame (a compilecache bundle) starts with these bytes.
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
# A torch blob: a 4-byte CRC32, then the u64 format version (1 in torch 2.6 to 2.13).
_TORCH_VERSION_FIELD = (1).to_bytes(8, "big")
_AOT_ID = re.compile(r"# AOT ID: \['([^']{1,100})'\]")
_DEBUG_LINE = re.compile(r"\[[a-z0-9]{20,}\] ")
_TIME_FIELDS = ("_time_taken_ns", "forward_time_taken_ns", "backward_time_taken_ns")
_MEMO_OPS = {"MEMOIZE", "PUT", "BINPUT", "LONG_BINPUT"}


def sniff(path: str | os.PathLike[str]) -> Format:
    """Whether ``path`` holds a compilecache bundle or a torch blob, from its first bytes (torch
    is not imported). BundleError when it is neither, or cannot be read."""
    try:
        with open(path, "rb") as f:
            head = f.read(12)
    except OSError as exc:
        raise BundleError(f"cannot read {path}: {exc}") from exc
    if head.startswith(_ZSTD_MAGIC):
        return "bundle"
    if head[4:12] == _TORCH_VERSION_FIELD:
        return "torch"
    raise BundleError(
        f"{path} is neither a compilecache bundle nor a torch cache-artifacts blob "
        "(empty, truncated or another file? --format says which it is)"
    )


# -- reading and writing torch's format ------------------------------------------------------


def read_blob(data: bytes, path: str | os.PathLike[str]) -> list[tuple[str, list[Any]]]:
    """``(artifact type, [CacheArtifact])`` groups, in the blob's order; BundleError if damaged.

    torch's ``CacheArtifactManager.deserialize`` turns the groups into a dict, keeping only the
    last group of each type (a process that called ``save_cache_artifacts`` twice wrote two), and
    logs failures instead of raising: its pieces are used directly so that every group is kept
    and a damaged blob is an error with a reason."""
    cache = _torch_module("torch.compiler._cache")
    serializer = _torch_module("torch.utils._appending_byte_serializer")
    cache.CacheArtifactManager._ensure_cache_artifacts_registered()

    def read_group(reader: Any) -> Any:
        group = cache._deserialize_single_cache(reader)
        # torch's reader slices past the end silently, and its loop would then never finish.
        if getattr(reader, "_i", 0) > len(getattr(reader, "_data", b"")):
            raise ValueError("an artifact runs past the end of the blob")
        return group

    try:
        groups = serializer.AppendingByteSerializer.to_list(data, deserialize_fn=read_group)
        return [(str(kind), list(artifacts)) for kind, artifacts in groups]
    except Exception as exc:  # torch raises AssertionError, RuntimeError, UnicodeError, ...
        raise BundleError(
            f"{path} is not a readable torch cache-artifacts blob (truncated or damaged?): "
            f"{type(exc).__name__}: {exc}"
        ) from exc


def write_blob(groups: Iterable[tuple[str, list[tuple[str, bytes]]]]) -> bytes:
    """torch's bytes for ``(artifact type, [(key, content)])`` groups."""
    cache = _torch_module("torch.compiler._cache")
    serializer = _torch_module("torch.utils._appending_byte_serializer")
    cache.CacheArtifactManager._ensure_cache_artifacts_registered()
    writer = serializer.AppendingByteSerializer(serialize_fn=cache._serialize_single_cache)
    create = cache.CacheArtifactFactory.create
    writer.extend((kind, [create(kind, k, c) for k, c in items]) for kind, items in groups)
    return bytes(writer.to_bytes())


# -- what a pickle says, read without running it ---------------------------------------------


@dataclass
class _Facts:
    """Strings and compile times found in a pickled FX graph or AOTAutograd entry."""

    strings: list[str] = field(default_factory=list)
    times_ns: dict[str, int] = field(default_factory=dict)

    @property
    def aot_id(self) -> str:
        """``0_forward``: the graph's AOT id, from the first line of its generated code."""
        for s in self.strings:
            if s.startswith("# AOT ID:") and (match := _AOT_ID.match(s)):
                return match[1]
        return ""

    def debug_lines(self) -> list[str]:
        return [s for s in self.strings if _DEBUG_LINE.match(s)]


def _scan(payload: bytes) -> _Facts:
    """The strings of a pickle and the integers stored right after the time field names. Only
    parses (pickletools never imports or calls anything); an unreadable pickle gives less."""
    facts = _Facts()
    wanted: str | None = None
    with contextlib.suppress(Exception):
        for op, arg, _ in pickletools.genops(payload):
            if isinstance(arg, str):
                facts.strings.append(arg)
                wanted = arg if arg in _TIME_FIELDS else None
            elif wanted is not None and op.name not in _MEMO_OPS:
                if isinstance(arg, int) and not isinstance(arg, bool):
                    facts.times_ns.setdefault(wanted, arg)
                wanted = None
    return facts


# -- import --------------------------------------------------------------------------------------


@dataclass
class _Planned:
    """One artifact of the blob, described as the entry it becomes."""

    layer: str
    key: str  # torch's key
    content: bytes
    facts: _Facts
    time_ms: int = 0  # torch's time_taken_ms
    own_ms: int = 0  # without the FX graphs an AOT entry compiled (the integration's count)
    components: dict[str, str] = field(default_factory=dict)
    readable: dict[str, str] = field(default_factory=dict)
    fx_keys: list[str] = field(default_factory=list)  # an AOT entry's FX graphs in the blob

    @property
    def remote_key(self) -> str:
        cache_id, version = KNOWN_IDS[self.layer]
        return f"pt2:{cache_id}::{self.key}:c{version}"


def _plan(artifacts: list[tuple[str, Any]]) -> list[_Planned]:
    planned = [
        _Planned(LAYER_OF[k], str(a.key), bytes(a.content), _scan(a.content)) for k, a in artifacts
    ]
    fx_ms: dict[str, int] = {}
    for p in planned:
        if p.layer == "fx":
            p.time_ms = p.own_ms = p.facts.times_ns.get("_time_taken_ns", 0) // 1_000_000
            p.components, p.readable = parse_debug_lines(p.facts.debug_lines())
            fx_ms.setdefault(p.key, p.time_ms)
    for p in planned:
        if p.layer == "aot":
            # torch's own time_taken_ms for an AOT entry: forward plus backward.
            ns = sum(p.facts.times_ns.get(f, 0) for f in _TIME_FIELDS[1:])
            p.time_ms = ns // 1_000_000
            p.fx_keys = [s for s in dict.fromkeys(p.facts.strings) if s in fx_ms]
            p.own_ms = max(0, p.time_ms - sum(fx_ms[k] for k in p.fx_keys))
    return planned


def _header(p: _Planned) -> EntryHeader:
    """The header the torch integration would have written for this artifact."""
    extra: dict[str, Any] = {
        "encoding": "pickle",
        "time_taken_ms": p.time_ms,
        "time_taken_s": p.time_ms / 1000,
        "layer": p.layer,
        "remote_key": p.remote_key,
        "source": SOURCE,
        # torch's files say nothing of the CPU their graphs were generated for: they are taken
        # as this (importing) host's, whose kind then serves them (docs/fleet.md).
        "cpu": cpu_target(),
    }
    if p.readable:
        extra["readable"] = p.readable
    return EntryHeader(
        framework="torch",
        key=store_key(p.layer, p.remote_key),
        name=(p.facts.aot_id if p.layer == "fx" else "") or IMPORTED_NAME,
        compile_time_s=p.own_ms / 1000,
        versions=torch_versions(),
        components=p.components,
        extra=extra,
    )


def import_blob(
    path: str | os.PathLike[str],
    target: Store,
    *,
    signing: Signing | None = None,
    check: bool = True,
) -> Report:
    """Add the FX graphs and AOTAutograd entries of a torch blob to ``target``.

    The whole blob is read and its checksum verified before anything is written: a damaged blob
    raises BundleError and writes nothing. A valid entry already in ``target`` is never replaced.
    With ``check``, entries built for another host are skipped with the reason (the host
    checks of every import)."""
    source = Path(path)
    try:
        data = source.read_bytes()
    except OSError as exc:
        raise BundleError(f"cannot read {source}: {exc}") from exc
    groups = read_blob(data, source)
    report = Report("import", str(source), target.url)
    kept: list[tuple[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    for kind, artifacts in groups:
        for artifact in artifacts:
            report.total += 1
            label = f"{kind}/{artifact.key}"
            if kind not in LAYER_OF:
                reason = SKIP_REASONS.get(
                    kind, f"torch {kind} artifact: not stored by compilecache"
                )
                report.skipped.append((label, reason))
            elif (kind, artifact.key) in seen:
                # torch keeps several graphs per key (guarded by symbolic shapes); a store key
                # holds one.
                report.skipped.append((label, "another graph under the same key (kept the first)"))
            else:
                seen.add((kind, artifact.key))
                kept.append((kind, artifact))
    planned = _plan(kept)
    host = HostCheck() if check else None
    reader = Reader(signing)
    progress = Progress(len(planned), "importing")
    try:
        for p in planned:
            progress.advance()
            header = _header(p)
            encoded = entry.encode(header, p.content, signing=signing)
            admit(target, header.key, encoded, report, reader=reader, host=host)
    finally:
        progress.close()
    return report


# -- export --------------------------------------------------------------------------------------


def export_blob(
    store: Store,
    path: str | os.PathLike[str],
    *,
    select: EntryFilter | None = None,
    signing: Signing | None = None,
) -> Report:
    """Write the torch FX and AOTAutograd entries of ``store`` that ``select`` matches as a blob
    for ``torch.compiler.load_cache_artifacts()``.

    Entries are verified first (checksum; signature when ``signing`` is given). Kernel and
    autotune entries, and entries not stored as torch's pickle, are left out and reported. The
    file appears complete or not at all."""
    select = select or EntryFilter()
    if select.framework not in (None, "torch"):
        raise ConfigError("a torch blob holds torch entries only: leave out --framework")
    target = atomicfile.target_of(path)  # a missing directory fails before the store is read
    infos = [i for i in store.scan() if i.framework == "torch" and select.matches(i)]
    if not infos:
        raise nothing_matched(store, select, "torch entry")
    report = Report("export", store.url, str(Path(path)), total=len(infos))
    groups: dict[str, list[tuple[str, bytes]]] = {kind: [] for kind in LAYER_OF}
    reader = Reader(signing)
    progress = Progress(len(infos), "reading")
    try:
        for info in infos:
            progress.advance()
            layer = info.key.split("/")[1] if info.key.count("/") >= 2 else ""
            if layer not in TYPE_OF:
                report.skipped.append(
                    (info.key, _KERNEL_REASON if layer == "kernel" else f"a torch {layer} entry")
                )
                continue
            found, reason = _torch_entry(store, info.key, layer, reader)
            if found is None:
                report.skipped.append((info.key, reason))
                continue
            key, payload = found
            groups[TYPE_OF[layer]].append((key, payload))
            report.transferred.append(info.key)
            report.bytes += len(payload)
    finally:
        progress.close()
    if not report.transferred and target.exists():
        raise atomicfile.OutputError(
            f"nothing to export ({report.total} torch entries matched, {len(report.skipped)} "
            f"skipped): {os.fspath(path)} was left as it was"
        )
    blob = write_blob((kind, items) for kind, items in groups.items() if items)
    # Whole or not at all: a full disk is one line and never spoils an existing file.
    atomicfile.write_bytes(path, blob)
    return report


def _torch_entry(
    store: Store, key: str, layer: str, reader: Reader
) -> tuple[tuple[str, bytes] | None, str]:
    """(torch's key, its pickle) of a stored FX or AOT entry, or None and why not."""
    data = peek_entry(store, key)  # never counts a hit, never removes a damaged entry
    if isinstance(data, str):
        return None, data
    try:
        found = reader.decode(data, key)
    except CorruptEntry as exc:
        return None, f"corrupt: {exc}"
    except ForeignEntry as exc:
        return None, f"foreign: {exc}"
    extra = found.header.extra
    if extra.get("encoding") != "pickle":
        return None, f"not stored as torch's pickle (encoding {extra.get('encoding')!r})"
    remote_key = str(extra.get("remote_key", ""))
    torch_key = torch_key_of(remote_key)
    if not remote_key or store_key(layer, remote_key) != key or torch_key == remote_key:
        return None, "no torch key recorded with the entry"
    return (torch_key, found.payload), ""
