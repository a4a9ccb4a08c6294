"""JAX's key components in words: the steps of ``jax._src.cache_key.get`` and how a change of
each is said by ``explain`` (the vocabulary is registered with :mod:`compilecache.runtime.explain`
when this module is imported). ``STEPS`` is the one list of the steps' names: JAX's key tap
(``frameworks/jax/key.py``) hashes and records them under these names."""

from __future__ import annotations

import re

from compilecache.runtime.explain import (
    Vocabulary,
    changed,
    flag_changes,
    register_vocabulary,
    short,
    versions,
)

FRAMEWORK = "jax"
# The steps of cache_key.get, in its order (JAX 0.4.31 and later; 0.4.30 lacks "backend version").
STEPS = (
    "computation",
    "jax_lib version",
    "backend version",
    "XLA flags",
    "compile_options",
    "accelerator_config",
    "compression",
    "custom_hook",
)


def _jax_flags(before: str | None, after: str | None, _changed: frozenset[str]) -> str:
    if before is None or after is None:
        return "XLA flags changed"
    changes = flag_changes(before, after)
    return f"XLA flags changed: {changes}" if changes else "XLA flags changed"


# "4 x cpu (1 used)", in a multi-process job "process 1 of 2, local device ids [1]: 2 x cpu".
_JAX_DEVICES = re.compile(
    r"^\s*(?:process (\d+) of (\d+), local device ids \[([^\]]*)\]: )?"
    r"(\d+) x (.+?)(?: \(\d+ used\))?$"
)


def _jax_devices(before: str | None, after: str | None, _changed: frozenset[str]) -> str:
    old = _JAX_DEVICES.match(before or "")
    new = _JAX_DEVICES.match(after or "")
    if old and new:
        if old[5] != new[5]:
            return f"device topology changed: {old[4]} x {old[5]} -> {new[4]} x {new[5]}"
        kind = new[5].upper() if len(new[5]) <= 4 else new[5]
        if old[4] != new[4]:
            return f"device topology changed: {old[4]} -> {new[4]} {kind} devices"
        return _jax_process(old, new, f"the same {new[4]} {kind} devices")
    return f"device topology changed: {short(before)} -> {short(after)}"


def _jax_process(old: re.Match[str], new: re.Match[str], same: str) -> str:
    """The devices agree: the topology fingerprint follows the process of a multi-process job,
    so name the process index or the local devices that differ."""
    if old[2] != new[2]:
        where = f"this is process {new[1]}, local device ids [{new[3]}]; " if new[1] else ""
        return f"processes changed: {old[2] or 1} -> {new[2] or 1} ({where}{same})"
    if old[1] != new[1]:
        return (
            f"process index changed: {old[1]} -> {new[1]} of {new[2]} "
            f"(local device ids [{old[3]}] -> [{new[3]}]; {same})"
        )
    if old[3] != new[3]:
        return (
            f"local device ids changed: [{old[3]}] -> [{new[3]}] "
            f"(process {new[1]} of {new[2]}; {same})"
        )
    return f"device topology fingerprint changed ({same})"


def _jax_compile_options(before: str | None, after: str | None, changed: frozenset[str]) -> str:
    # The readable value holds the jit(compiler_options=...) overrides only.
    overrides = flag_changes(before, after) if before is not None and after is not None else ""
    if overrides:
        return f"compile options changed: {overrides}"
    if "XLA flags" in changed:
        return "compile options changed (the XLA flags are part of them)"
    if "accelerator_config" in changed:
        return "compile options changed (they follow the devices)"
    return (
        "compile options changed (the device assignment, or a path or rank inside the build "
        "options)"
    )


JAX = register_vocabulary(
    FRAMEWORK,
    Vocabulary(
        labels={
            "computation": "the function body",
            "jax_lib version": "jaxlib version",
            "backend version": "backend",
            "XLA flags": "XLA flags",
            "compile_options": "compile options",
            "accelerator_config": "device topology",
            "compression": "compression",
            "custom_hook": "jax._src.cache_key.custom_hook()",
        },
        describe={
            "computation": lambda b, a, c: (
                "the function body changed (or its argument shapes, dtypes or static arguments)"
            ),
            "jax_lib version": versions("jaxlib"),
            "backend version": changed("backend"),
            "XLA flags": _jax_flags,
            "compile_options": _jax_compile_options,
            "accelerator_config": _jax_devices,
            "compression": changed("compression"),
            "custom_hook": changed("jax._src.cache_key.custom_hook()"),
        },
        order=(
            "computation",
            "jax_lib version",
            "backend version",
            "XLA flags",
            "accelerator_config",
            "custom_hook",
            "compression",
            "compile_options",
        ),
        identity=("computation",),
        # jax/jit_step-<hash>: every entry of jit_step starts with jax/jit_step-
        function_prefix=lambda key: f"{key.rsplit('-', 1)[0]}-",
    ),
)
