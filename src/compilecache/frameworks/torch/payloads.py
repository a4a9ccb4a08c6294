"""torch's remote-cache keys and payloads as compilecache stores them: the store key of a
remote key, the debug lines torch computes with a key, the FX graphs an AOTAutograd entry names,
torch's JSON wrapper taken off, what an entry took to compile, and the graph's name.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import pickle
import pickletools
import re
from typing import Any

from compilecache.host import framework_module as _private

# The cache ids torch 2.6-2.13 uses in its remote keys ("pt2:<id>::<key>:c<version>"); with these
# the store key is readable, anything else is hashed whole (a new id never meets an old entry).
KNOWN_IDS = {"fx": ("fx-graph-v1", "1"), "aot": ("autograd-experimental", "1")}

_REMOTE_KEY = re.compile(r"^pt2:(?P<id>.*)::(?P<key>.+):c(?P<version>[0-9]+)$")

SAFE_KEY = re.compile(r"^[A-Za-z0-9_.\-]{1,200}$")

# An FX graph's key as torch prints it ("f" and 51 base32 characters), found in an AOTAutograd
# entry's pickle.
_FX_KEY = re.compile(r"^f[a-z0-9]{40,60}$")

_MAX_READABLE = 300


def store_key(layer: str, remote_key: str) -> str:
    """``pt2:fx-graph-v1::<key>:c1`` -> ``torch/fx/<key>``; other shapes hash the whole key."""
    match = _REMOTE_KEY.match(remote_key)
    if match is not None and KNOWN_IDS.get(layer) == (match["id"], match["version"]):
        key = match["key"]
        if SAFE_KEY.match(key):
            return f"torch/{layer}/{key}"
    return f"torch/{layer}/{hashlib.sha256(remote_key.encode()).hexdigest()}"


def torch_key_of(remote_key: str) -> str:
    """The key torch computed (``fxyz...``) inside a remote key."""
    match = _REMOTE_KEY.match(remote_key)
    return match["key"] if match is not None else remote_key


def parse_debug_lines(lines: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """``[hash] attr: value`` lines -> ({attr: hash}, {attr: value, truncated})."""
    components: dict[str, str] = {}
    readable: dict[str, str] = {}
    for line in lines:
        if not line.startswith("["):
            continue
        digest, sep, rest = line[1:].partition("] ")
        if not sep:
            continue
        attr, _, value = rest.partition(": ")
        components[attr] = digest
        readable[attr] = value if len(value) <= _MAX_READABLE else value[:_MAX_READABLE] + "..."
    return components, readable


def fx_keys_in(payload: bytes) -> list[str]:
    """The FX graph keys an AOTAutograd entry's pickle names (its forward and backward), read
    with :mod:`pickletools` without running the pickle; ``[]`` when none is found."""
    keys: list[str] = []
    with contextlib.suppress(Exception):
        for _op, arg, _pos in pickletools.genops(payload):
            if isinstance(arg, str) and _FX_KEY.match(arg) and arg not in keys:
                keys.append(arg)
    return keys


def time_taken_s(payload: bytes) -> float:
    """What an FX graph or AOTAutograd entry took to compile, as torch recorded it in the entry
    (``_time_taken_ns``, or the forward and backward times); 0 where it does not say."""
    try:
        entry = pickle.loads(payload)
        nanoseconds = getattr(entry, "_time_taken_ns", None)
        if nanoseconds is None:
            nanoseconds = getattr(entry, "forward_time_taken_ns", 0) + getattr(
                entry, "backward_time_taken_ns", 0
            )
        return max(0.0, float(nanoseconds or 0) / 1e9)
    except Exception:
        return 0.0


def unwrap(data: bytes, *, pickled: bool) -> tuple[bytes, dict[str, Any], float]:
    """torch's ``{"data": base64(pickle), "time_taken_ms": N}`` -> (pickle, extra, seconds).

    Anything else (autotune's JSON, a format a later torch may use) is stored as it came.
    """
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return bytes(data), {"encoding": "raw"}, 0.0
    if pickled and isinstance(value, dict) and isinstance(value.get("data"), str):
        taken_ms = value.get("time_taken_ms", 0)
        taken_ms = int(taken_ms) if isinstance(taken_ms, (int, float)) else 0
        try:
            payload = base64.b64decode(value["data"], validate=True)
        except ValueError:
            return bytes(data), {"encoding": "raw"}, taken_ms / 1000
        return payload, {"encoding": "pickle", "time_taken_ms": taken_ms}, taken_ms / 1000
    taken = value.get("time_taken_ms", 0) if isinstance(value, dict) else 0
    seconds = float(taken) / 1000 if isinstance(taken, (int, float)) else 0.0
    return bytes(data), {"encoding": "raw"}, seconds


def graph_name(layer: str) -> str:
    """What torch knows of the graph being compiled: the traced function's qualified name, and
    for ``fx`` the AOT graph (``MLP.forward:0_forward``). Empty outside a Dynamo compile."""
    if layer not in ("fx", "aot"):
        return ""
    try:
        guards = _private("torch._guards")
        context = guards.TracingContext.try_get()
        if context is None:
            return ""
        code = getattr(context, "traced_code", None) or []
        name = ""
        if code:
            name = str(getattr(code[0], "co_qualname", "") or getattr(code[0], "co_name", ""))
            name = name.replace(".<locals>.", ".").rsplit("<locals>.", 1)[-1]
        graph = getattr(context, "aot_graph_name", None)
        if layer == "fx" and graph:
            graph_name = str(graph[0] if isinstance(graph, (list, tuple)) else graph)
            name = f"{name}:{graph_name}" if name else graph_name
        if not name:
            compile_id = guards.CompileContext.current_compile_id()
            name = f"compile {compile_id}" if compile_id is not None else ""
        return name[:200]
    except Exception:
        return ""
