"""The JAX key steps across releases (issue 11, item 16).

JAX 0.4.30, the oldest release the ``jax`` extra admits, builds its cache key in seven steps
(no ``IgnoreCallbacks``, ``_hash_computation(hash, module)``, the backend hashed inside
``_hash_accelerator_config(hash, devices, backend)``); 0.10 in eight. The steps are chosen from
the helpers' signatures and checked against the real key. Unit tests run the choice against
stand-ins of both layouts; the real-process test runs on whichever JAX is installed, and
``make compat`` runs it on 0.4.30 and on the newest JAX.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from compilecache import entry
from compilecache.frameworks.jax import key as jax_key
from compilecache.runtime import history
from compilecache.stores.local import LocalStore
from tests.conftest import clean_env

EIGHT = [
    "computation",
    "jax_lib version",
    "backend version",
    "XLA flags",
    "compile_options",
    "accelerator_config",
    "compression",
    "custom_hook",
]
SEVEN = [name for name in EIGHT if name != "backend version"]


# -- stand-ins for jax._src.cache_key of two releases --------------------------------------------


def _common(version: str) -> dict[str, Any]:
    def hash_platform(h: Any, backend: Any) -> None:
        h.update(f"{backend.platform} {backend.platform_version}".encode())

    def hash_xla_flags(h: Any, extra_flag_prefixes: list[str]) -> None:
        h.update(b"flags:" + ",".join(extra_flag_prefixes).encode())

    def hash_options(h: Any, options: Any, strip_device_assignment: bool = False) -> None:
        h.update(f"options:{options}:{strip_device_assignment}".encode())

    return {
        "jaxlib_version_str": version,
        "_hash_platform": hash_platform,
        "_hash_xla_flags": hash_xla_flags,
        "get_flag_prefixes": lambda: ["--xla"],
        "_hash_serialized_compile_options": hash_options,
        "_hash_string": lambda h, s: h.update(s.encode()),
        "custom_hook": lambda: "hook",
        "xla_flags_to_exclude_from_cache_key": [],
    }


def _ck_0_4_30() -> SimpleNamespace:
    """0.4.30's cache_key: seven steps, the helpers' old signatures."""

    def hash_computation(h: Any, module: Any) -> None:
        h.update(b"module:" + module)

    def hash_accelerator_config(h: Any, accelerators: Any, backend: Any) -> None:
        h.update(b"topology:" + backend.platform.encode())

    ck = SimpleNamespace(
        **_common("0.4.30"),
        _hash_computation=hash_computation,
        _hash_accelerator_config=hash_accelerator_config,
    )

    def get(module: Any, devices: Any, options: Any, backend: Any, compression: str) -> str:
        h = hashlib.sha256()
        ck._hash_computation(h, module)
        h.update(ck.jaxlib_version_str.encode("utf-8"))
        ck._hash_xla_flags(h, ck.get_flag_prefixes())
        ck._hash_serialized_compile_options(h, options, strip_device_assignment=False)
        ck._hash_accelerator_config(h, devices, backend)
        ck._hash_string(h, compression)
        ck._hash_string(h, ck.custom_hook())
        return "jit_f-" + h.hexdigest()

    ck.get = get
    return ck


def _ck_0_10() -> SimpleNamespace:
    """0.10's cache_key: eight steps, with ignore_callbacks and a platform step."""

    def hash_computation(h: Any, module: Any, ignore_callbacks: Any) -> None:
        h.update(b"module:" + module + str(ignore_callbacks).encode())

    def hash_accelerator_config(h: Any, accelerators: Any) -> None:
        h.update(b"topology")

    ck = SimpleNamespace(
        **_common("0.10.2"),
        _hash_computation=hash_computation,
        _hash_accelerator_config=hash_accelerator_config,
        IgnoreCallbacks=SimpleNamespace(NO="NO"),
    )

    def get(
        module: Any, devices: Any, options: Any, backend: Any, compression: str, ignore: Any
    ) -> str:
        h = hashlib.sha256()
        ck._hash_computation(h, module, ignore)
        h.update(ck.jaxlib_version_str.encode("utf-8"))
        ck._hash_platform(h, backend)
        ck._hash_xla_flags(h, ck.get_flag_prefixes())
        ck._hash_serialized_compile_options(h, options, strip_device_assignment=False)
        ck._hash_accelerator_config(h, devices)
        ck._hash_string(h, compression)
        ck._hash_string(h, ck.custom_hook())
        return "jit_f-" + h.hexdigest()

    ck.get = get
    return ck


BACKEND = SimpleNamespace(platform="cpu", platform_version="cpu 1")
DEVICES = SimpleNamespace(flat=[SimpleNamespace(device_kind="cpu", id=0, process_index=0)])


def _use(monkeypatch: pytest.MonkeyPatch, ck: SimpleNamespace) -> None:
    real = jax_key._private
    monkeypatch.setattr(
        jax_key, "_private", lambda name: ck if name == "jax._src.cache_key" else real(name)
    )


def test_the_0_4_30_layout_is_chosen_and_verified(monkeypatch: pytest.MonkeyPatch) -> None:
    ck = _ck_0_4_30()
    _use(monkeypatch, ck)
    key = ck.get(b"f", DEVICES, "opts", BACKEND, "zstandard")
    hashes, readable, verified = jax_key.key_components(
        key, b"f", DEVICES, "opts", BACKEND, None, "zstandard"
    )
    assert verified is True
    assert list(hashes) == SEVEN
    assert hashes["computation"] == hashlib.sha256(b"module:f").hexdigest()
    assert hashes["accelerator_config"] == hashlib.sha256(b"topology:cpu").hexdigest()
    # The backend is still said in words (bundles read it to tell CPU entries from GPU ones).
    assert readable["backend version"] == "cpu cpu 1"


def test_the_0_10_layout_is_chosen_and_verified(monkeypatch: pytest.MonkeyPatch) -> None:
    ck = _ck_0_10()
    _use(monkeypatch, ck)
    key = ck.get(b"f", DEVICES, "opts", BACKEND, "zstandard", "NO")
    hashes, _, verified = jax_key.key_components(
        key, b"f", DEVICES, "opts", BACKEND, "NO", "zstandard"
    )
    assert verified is True
    assert list(hashes) == EIGHT
    assert hashes["computation"] == hashlib.sha256(b"module:fNO").hexdigest()


def test_a_key_no_layout_reproduces_is_recorded_unverified(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _use(monkeypatch, _ck_0_10())
    hashes, _, verified = jax_key.key_components(
        "jit_f-" + "0" * 64, b"f", DEVICES, "opts", BACKEND, "NO", "zstandard"
    )
    assert verified is False
    assert list(hashes) == EIGHT  # this JAX's own layout, as it would have been


def test_a_step_that_fails_leaves_out_that_component_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ck = _ck_0_4_30()

    def broken(h: Any, *args: Any) -> None:
        raise RuntimeError("moved in this release")

    key = ck.get(b"f", DEVICES, "opts", BACKEND, "zstandard")
    ck._hash_xla_flags = broken
    _use(monkeypatch, ck)
    hashes, _, verified = jax_key.key_components(
        key, b"f", DEVICES, "opts", BACKEND, None, "zstandard"
    )
    assert verified is False
    assert "XLA flags" not in hashes and "computation" in hashes


# -- the installed JAX, in real processes --------------------------------------------------------

PROGRAM = """
import os
import compilecache
compilecache.enable()
import jax, jax.numpy as jnp

def f(x):
    if os.environ.get("BODY") == "2":
        return jnp.cos(x) * 3.0
    return jnp.sin(x) * 3.0

print(float(jax.jit(f)(jnp.arange(8, dtype=jnp.float32)).sum()))
"""


def jax_version() -> tuple[int, ...]:
    """The installed JAX release as numbers (0.4.30 -> (0, 4, 30))."""
    return tuple(int(p) for p in metadata.version("jax").split(".")[:3] if p.isdigit())


def _run(script: Path, store: Path, **extra: str) -> None:
    env = clean_env({"COMPILECACHE_URL": str(store), **extra})
    env.pop("XLA_FLAGS", None)
    proc = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.slow
def test_a_miss_records_verified_components_and_is_explained(tmp_path: Path) -> None:
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    store = tmp_path / "store"
    _run(script, store)
    s = LocalStore(store)
    try:
        headers = [entry.decode(s.get(i.key) or b"").header for i in s.scan()]
    finally:
        s.close()
    mine = [h for h in headers if h.name == "jit_f"]
    assert len(mine) == 1
    header = mine[0]
    assert header.extra["components_verified"] is True, header.extra
    version = jax_version()
    if version <= (0, 4, 30):
        assert set(header.components) == set(SEVEN)
    elif version >= (0, 10):
        assert set(header.components) == set(EIGHT)
    else:  # releases in between were not run: one of the two
        assert set(header.components) in (set(SEVEN), set(EIGHT))
    assert header.extra["readable"]["backend version"].startswith("cpu")

    _run(script, store, BODY="2")
    s = LocalStore(store)
    try:
        records = [r for r in history.read(s, history.MISS) if r.get("name") == "jit_f"]
    finally:
        s.close()
    assert [d["component"] for d in records[0]["differences"]] == ["computation"]
    assert records[0]["summary"].startswith("jit_f: the function body changed")
