"""Guarded JAX traces: a warm start serves a jitted function's stored trace only where tracing
again would give the same program, and otherwise traces, counts and explains.

The corpus (tests/jax_trace_program.py) holds functions that trace differently from run to run
with the same code, shapes and dtypes. Each run is a fresh process under ``compilecache run`` on
one store, and must print exactly what the same program prints without compilecache.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import JAX_TRACES, TESTS, clean_env, stored_entries

pytest.importorskip("jax")

PROGRAM = TESTS / "jax_trace_program.py"
HELPER_A = "import jax.numpy as jnp\n\n\ndef transform(x):\n    return jnp.sin(x) + 1.0\n"
# The same size as HELPER_A, one character changed: a file compared by size and time would pass.
HELPER_B = HELPER_A.replace("+ 1.0", "+ 2.0")
# An installed package's module (trusted by its version) that reads a global from the
# environment at import; LIBRARY_B is it edited in place (the same size and modification time).
LIBRARY = (
    "import os\n\nSCALE = float(os.environ.get('TRACE_LIBRARY', '1.5'))\n\n\n"
    "def scaled(x):\n    return x * SCALE\n"
)
LIBRARY_B = LIBRARY.replace("x * SCALE", "x / SCALE")
EDITED_LIBRARY = "edited library"  # the helper argument of the variant that edits LIBRARY


def _program(
    program: Path, store: Path | None, *args: str, env: dict[str, str] | None = None
) -> tuple[dict[str, Any], dict[str, Any], str, str]:
    """Run ``program`` plain (``store`` None) or under ``compilecache run`` (served traces are on
    by default):
    what it printed (its results, its trace counters) and its stdout and stderr."""
    extra = dict(env or {})
    command = [sys.executable, str(program), *args]
    if store is not None:
        extra["COMPILECACHE_URL"] = str(store)
        command = [sys.executable, "-m", "compilecache", "run", "--", *command]
    proc = subprocess.run(
        command, env=clean_env(extra), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = json.loads(proc.stdout.strip().splitlines()[-1])
    return printed["output"], printed["traces"], proc.stdout, proc.stderr


def _run(
    tmp: Path, store: Path | None, *args: str, env: dict[str, str] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The corpus program's output, and (under compilecache) its process's trace counters."""
    output, traces, _, _ = _program(PROGRAM, store, str(tmp / "helper"), *args, env=env)
    return output, traces


def _helper(tmp: Path, text: str) -> None:
    """Write the program's helper module (``text``) and its installed module (LIBRARY; for the
    variant ``EDITED_LIBRARY``, LIBRARY_B beside HELPER_A)."""
    helper = tmp / "helper"
    (helper / "site-packages").mkdir(parents=True, exist_ok=True)
    library = LIBRARY_B if text == EDITED_LIBRARY else LIBRARY
    _same_time(helper / "site-packages" / "trace_library.py", library)
    _same_time(helper / "trace_helper.py", HELPER_A if text == EDITED_LIBRARY else text)


def _same_time(path: Path, text: str) -> None:
    stat = path.stat() if path.exists() else None
    path.write_text(text)
    if stat is not None:  # the same modification time: only the contents tell the edit
        import os

        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


# Each variant changes one value the program reads from outside, against the base run.
VARIANTS: dict[str, tuple[tuple[str, ...], dict[str, str], str]] = {
    "argv closure": (("--scale", "3.0"), {}, HELPER_A),
    "env global": ((), {"TRACE_OFFSET": "4.0"}, HELPER_A),
    "edited helper": ((), {}, HELPER_B),
    "numpy constant": ((), {"TRACE_TABLE": "0.25"}, HELPER_A),
    "default argument": ((), {"TRACE_POWER": "3"}, HELPER_A),
    "static field": (("--static-field", "5"), {}, HELPER_A),
    "jax config": ((), {"JAX_ENABLE_X64": "1"}, HELPER_A),
    "installed module global": ((), {"TRACE_LIBRARY": "2.5"}, HELPER_A),
    "edited installed module": ((), {}, EDITED_LIBRARY),
}


def test_each_variant_gets_plain_jaxs_output_in_fresh_processes(tmp_path: Path) -> None:
    """a, a, then each variant b and a again, on one store: every run prints what plain JAX
    prints for its variant; the base's second run is served its traces, and a variant retraces
    only what it changes."""
    store = tmp_path / "store"
    _helper(tmp_path, HELPER_A)
    plain_a, _ = _run(tmp_path, None)
    cold, traces = _run(tmp_path, store)
    assert cold == plain_a
    functions = len(plain_a) - 1  # the dtype line is not a function
    assert traces.get("jax.trace.writes", 0) >= functions, traces
    warm, traces = _run(tmp_path, store)
    assert warm == plain_a
    assert traces.get("jax.trace.served", 0) >= functions, traces
    every = traces["jax.trace.served"]  # the program's functions and JAX's own jitted helpers
    assert not traces.get("jax.trace.stale") and not traces.get("jax.trace.refused"), traces
    for name, (args, env, helper) in VARIANTS.items():
        _helper(tmp_path, helper)
        plain_b, _ = _run(tmp_path, None, *args, env=env)
        assert plain_b != plain_a, f"{name}: the variant does not change the output"
        cached_b, traces = _run(tmp_path, store, *args, env=env)
        assert cached_b == plain_b, f"{name}: a stale trace was served"
        # What the variant changes is traced again (stale, or a new signature: x64's avals).
        assert traces.get("jax.trace.served", 0) < every, (name, traces)
        _helper(tmp_path, HELPER_A)
        again, traces = _run(tmp_path, store)
        assert again == plain_a, f"{name}: the base run after it got another output"
        assert traces.get("jax.trace.served", 0) == every, (name, traces)
    # explain says, for each function traced again, which read kept its trace from being served.
    explained = subprocess.run(
        [sys.executable, "-m", "compilecache", "explain", "--limit", "500", "--url", str(store)],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert "global OFFSET of __main__" in explained
    assert "code of trace_helper.py" in explained
    assert "static argument 1" in explained
    assert "its closure cell scale" in explained and "its default arguments" in explained
    assert "a global of the installed module trace_library differs" in explained
    assert "the installed module trace_library's file differs" in explained


API_PROGRAM = TESTS / "jax_trace_api_program.py"


def _api(store: Path | None, *args: str) -> tuple[dict[str, Any], dict[str, Any], str, str]:
    return _program(API_PROGRAM, store, *args)


def test_jax_apis_work_as_jax_on_a_warm_start_served_its_traces(tmp_path: Path) -> None:
    """.lower(), .trace(), .eval_shape(), AOT compile, jit under grad, vmap and scan, and
    donation give plain JAX's results after a served first call. Python that runs at trace time
    does not run for a served function (a print), as within one process; a trace that changes a
    value it reads (a list it appends to) is never served, so that runs every time."""
    store = tmp_path / "store"
    plain, _, plain_out, _ = _api(None)
    assert plain["traced"] == ["step"] and "tracing printed" in plain_out
    cold, _, _, _ = _api(store)
    assert cold == plain
    warm, traces, warm_out, _ = _api(store)
    assert traces.get("jax.trace.served", 0) >= 3, traces
    assert traces.get("jax.trace.refused", 0) >= 1, traces  # step: it appends to TRACED
    assert warm == plain
    assert "tracing printed" not in warm_out


def test_jax_log_compiles_sees_every_trace(tmp_path: Path) -> None:
    """jax_log_compiles asks to see tracing and compiling: nothing is served, JAX logs as
    without compilecache."""
    store = tmp_path / "store"
    _api(store, "--log-compiles")
    warm, traces, _, stderr = _api(store, "--log-compiles")
    assert not traces.get("jax.trace.served"), traces
    assert "Finished tracing step for jit" in stderr and "Compiling jit(step)" in stderr
    plain, _, _, _ = _api(None, "--log-compiles")
    assert warm == plain


def test_precompile_0_serves_and_records_no_trace(tmp_path: Path) -> None:
    """COMPILECACHE_JAX_PRECOMPILE=0 turns the default off: no trace entry is written, and a warm
    start traces every function again (and still gets plain JAX's results)."""
    store = tmp_path / "store"
    off = {"COMPILECACHE_JAX_PRECOMPILE": "0"}
    plain, _, _, _ = _api(None)
    _program(API_PROGRAM, store, env=off)
    warm, traces, warm_out, _ = _program(API_PROGRAM, store, env=off)
    assert warm == plain
    assert not traces, traces  # no trace counted: none served, refused or written
    assert "tracing printed" in warm_out
    keys = list(stored_entries(str(store)))
    assert any(k.startswith("jax/") for k in keys), keys
    assert not [k for k in keys if k.startswith("jax/trace/")], keys


@pytest.mark.parametrize(
    ("version", "setting", "expected"),
    [
        ("0.10.2", None, True),
        ("0.10.2", True, True),
        ("0.10.2", False, False),
        ("0.11.0", None, False),
        ("0.11.0", True, None),
        ("0.11.0", False, False),
    ],
)
def test_traces_are_on_by_default_for_the_tested_releases(
    version: str, setting: bool | None, expected: bool | None
) -> None:
    """Unset: on for the JAX releases they were tested on, quietly off for others; ``1``: on
    (another release: served, and said once); ``0``: off."""
    from compilecache.frameworks.jax.integration import traces_wanted

    assert traces_wanted(version, setting) is expected


def test_trace_entries_are_records_counted_apart() -> None:
    """A trace entry's key is a record's (entry.RECORD_PREFIXES: the levels count it among no
    hits, misses or writes) and an internal entry's (``ls``, ``stats``, ``explain``)."""
    from compilecache import entry, frameworks
    from compilecache.frameworks.jax import traces

    assert entry.is_record(traces.PREFIX + "signature")
    assert frameworks.is_internal(traces.PREFIX + "signature")


@pytest.mark.parametrize("damage", ["flipped", "foreign"])
def test_a_bad_executable_behind_a_served_trace_is_counted_once(
    tmp_path: Path, damage: str
) -> None:
    """A trace whose executable is damaged (or signed with another key) is not served: the
    trace runs, and the executable's lookup counts it once (a probe before the trace counts
    nothing), as without traces."""
    from compilecache import entry
    from compilecache.frameworks.jax.adapter import store_key
    from compilecache.signing import Signing
    from compilecache.stores.local import LocalStore

    store = tmp_path / "store"
    secret = {"COMPILECACHE_SECRET": "ours"}
    plain, _, _, _ = _api(None)
    _program(API_PROGRAM, store, env=secret)
    local = LocalStore(store)
    try:
        trace = next(i.key for i in local.scan(JAX_TRACES))
        data = local.get(trace)
        assert data is not None
        executable = store_key(entry.decode(data).header.extra["executable"])
        stored = local.get(executable)
        assert stored is not None
        if damage == "flipped":
            bad = bytearray(stored)
            bad[len(bad) // 2] ^= 1
            local.put(executable, bytes(bad))
        else:
            found = entry.decode(stored)
            other = Signing(secret=b"theirs")
            local.put(executable, entry.encode(found.header, found.payload, signing=other))
        before = local.counters.read() if local.counters is not None else {}
    finally:
        local.close()
    warm, traces, _, _ = _program(API_PROGRAM, store, env=secret)
    assert warm == plain
    assert traces.get("jax.trace.stale", 0) >= 1, traces
    local = LocalStore(store)
    try:
        after = local.counters.read() if local.counters is not None else {}
    finally:
        local.close()
    counted = {k: after.get(k, 0) - before.get(k, 0) for k in ("misses", "corrupt", "foreign")}
    kind = "corrupt" if damage == "flipped" else "foreign"
    assert counted["misses"] == 1 and counted[kind] == 1, counted


PATCH_PROGRAM = TESTS / "jax_trace_patch_program.py"


def test_what_jax_looks_up_by_name_changed_by_the_program_is_traced_again(
    tmp_path: Path,
) -> None:
    """A served trace skips what JAX's own code would look up: a process that registers its own
    lowering rule for a primitive, or rebinds a JAX function (``lax.mul = lax.add``), traces
    again and gets plain JAX's results; a program's own lowering rule (it runs when the trace
    is lowered, and reads what no guard covers) keeps the trace from being recorded."""
    store = tmp_path / "store"
    _program(PATCH_PROGRAM, store)
    served, traces, _, _ = _program(PATCH_PROGRAM, store)
    assert traces.get("jax.trace.served", 0) >= 3, traces  # and JAX's own jitted helpers
    patched = {"PATCH": "1"}
    plain, _, _, _ = _program(PATCH_PROGRAM, None, env=patched)
    assert plain["sine"] != served["sine"] and plain["tripled"] != served["tripled"]
    cached, traces, _, _ = _program(PATCH_PROGRAM, store, env=patched)
    assert cached == plain
    assert traces.get("jax.trace.stale", 0) >= 2, traces
    own = {"OWN_RULE": "1", "FACTOR": "3.0"}
    _program(PATCH_PROGRAM, store, env={**own, "FACTOR": "2.0"})
    plain, _, _, _ = _program(PATCH_PROGRAM, None, env=own)
    cached, traces, _, _ = _program(PATCH_PROGRAM, store, env=own)
    assert cached == plain
    assert traces.get("jax.trace.refused", 0) >= 1, traces


STATE_PROGRAM = TESTS / "jax_trace_state_program.py"


def test_state_a_trace_rests_on_beside_the_values_it_reads_is_traced_again(
    tmp_path: Path,
) -> None:
    """Answers that equal values do not fix: a class's subclasses, a module's names, an array's
    layout, NumPy's error callback, how an output's dataclass is registered as a pytree, a
    codec looked up by name and an XLA pass registered with jaxlib. A process in the other
    situation gets plain JAX's results, and the first situation is still served where the
    guards can tell them apart."""
    store = tmp_path / "store"
    other = {"SITUATION": "B"}
    first, _, _, _ = _program(STATE_PROGRAM, store)
    expected, _, _, _ = _program(STATE_PROGRAM, None, env=other)
    for name, value in expected.items():
        if name == "doubled" and "register_hlo_module_transformation" not in dir_extend_xla():
            continue  # a jaxlib without compiler passes
        if name == "pair":  # the same plainly: a stale trace would swap its fields
            assert value == first[name] == [0.0, 1.0, 2.0]
            continue
        assert value != first[name], name  # the situation changes every answer
    cached, _, _, _ = _program(STATE_PROGRAM, store, env=other)
    assert cached == expected
    again, traces, _, _ = _program(STATE_PROGRAM, store)
    assert again == first
    # The layout, the error callback and the output's registration are compared, so the first
    # situation's traces of them are served again (the others are never recorded).
    assert traces.get("jax.trace.served", 0) >= 4, traces


def dir_extend_xla() -> list[str]:
    try:
        from jax.extend import xla
    except ImportError:
        return []
    return dir(xla)
