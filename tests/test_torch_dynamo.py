"""Dynamo's packages from the store (on by default; ``COMPILECACHE_TORCH_PRECOMPILE``): a warm
start that does not trace again, and traces whenever what it depends on may have changed.

Real torch compiles in fresh processes (``tests/dynamo/model_program.py``, copied with
its helper module into a temporary directory so a test can edit it). Every run is a new machine:
its own empty ``TORCHINDUCTOR_CACHE_DIR``; only the store is shared.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import shutil
import socket
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from compilecache import entry, runner
from compilecache.frameworks.torch import dynamo as torch_dynamo
from compilecache.frameworks.torch.dynamo import guards, repairs
from compilecache.frameworks.torch.dynamo import key as torch_dynamo_key
from compilecache.frameworks.torch.dynamo import packages as dynamo_packages
from compilecache.stores.local import LocalStore
from tests.conftest import TESTS, clean_env

torch = pytest.importorskip("torch")

SOURCE = TESTS / "dynamo"


def program_dir(tmp_path: Path) -> Path:
    where = tmp_path / "program"
    shutil.copytree(SOURCE, where)
    return where


def run(
    where: Path,
    machine: str,
    store: str | None,
    *,
    precompile: bool | None = True,
    program: str = "model_program.py",
    stderr: list[str] | None = None,
    inline: str | None = None,
    **env: str,
) -> list[dict[str, Any]]:
    """One process on a new machine (``program``, or ``python -c inline``); the JSON line
    printed per batch size (what it wrote to stderr goes into ``stderr`` when given)."""
    base = clean_env({"TORCHINDUCTOR_CACHE_DIR": str(where / "machines" / machine), **env})
    if store is not None:
        base["COMPILECACHE_URL"] = store
        if precompile is not None:  # None: unset, the default (on for the tested torch)
            base["COMPILECACHE_TORCH_PRECOMPILE"] = "1" if precompile else "0"
        base = runner.child_environment(base)
    proc = subprocess.run(
        [sys.executable, program] if inline is None else [sys.executable, "-c", inline],
        cwd=where,
        env=base,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    if stderr is not None:
        stderr.append(proc.stderr)
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def dynamo_entries(store: Path) -> list[str]:
    return [info.key for info in LocalStore(store).scan(torch_dynamo_key.PREFIX)]


@pytest.mark.slow
def test_a_new_machine_runs_the_stored_package_as_torch_own_warm_start(tmp_path: Path) -> None:
    """The first step on a new machine traces nothing and computes, bit for bit, what torch's
    own warm start computes; a new shape compiles, and both are kept for the next machine."""
    where = program_dir(tmp_path)
    store = str(tmp_path / "store")
    (cold,) = run(where, "a", store)
    assert cold["frames"] == 1 and cold["ours"] == {"misses": 1.0, "writes": 1.0}
    assert len(dynamo_entries(tmp_path / "store")) == 1
    # torch's own warm start: plain torch on the first machine's cache directory.
    (own,) = run(where, "a", None)
    assert own["frames"] == 1  # torch traces again (its caches hold the graph, not Dynamo's work)
    first, second = run(where, "b", store, PRECOMPILE_SHAPES="8,16")
    assert first["frames"] == 0 and first["ours"] == {"hits": 1.0}
    assert (first["loss"], first["grads"]) == (own["loss"], own["grads"])
    assert second["frames"] == 1 and second["matches_eager"]  # a new shape: traced, then kept
    again = run(where, "c", store, PRECOMPILE_SHAPES="8,16")
    assert [r["frames"] for r in again] == [0, 0]  # both shapes, no "Backend not found"
    assert [(r["loss"], r["grads"]) for r in again] == [
        (first["loss"], first["grads"]),
        (second["loss"], second["grads"]),
    ]
    # On by default; COMPILECACHE_TORCH_PRECOMPILE=0 turns it off: the same store, traced.
    (default,) = run(where, "d", store, precompile=None)
    assert default["frames"] == 0 and default["ours"] == {"hits": 1.0}
    (plain,) = run(where, "d2", store, precompile=False)
    assert plain["frames"] == 1 and plain["ours"] == {}


@pytest.mark.slow
def test_a_remote_store_alone_serves_a_package_install_from_one_read(tmp_path: Path) -> None:
    """With one Redis and no local level, what a served package's install looks up (its
    AOTAutograd entry, FX graphs, kernels, compiler probes) is read in one batch with it, not one
    round trip per lookup: every hit after the package's own is one read ahead, counted once, as
    a hit of that level, and the results are torch's bit for bit; nor is the store asked again
    about the kernels it served. A local store alone reads nothing
    ahead (its lookups are no round trips)."""
    from tests.servers import running_redis

    where = program_dir(tmp_path)
    with running_redis(tmp_path / "redis") as server:
        url = server.url
        (cold,) = run(where, "a", url)
        assert cold["frames"] == 1 and cold["ours"] == {"misses": 1.0, "writes": 1.0}
        (warm,) = run(where, "b", url)
    assert warm["frames"] == 0 and warm["ours"] == {"hits": 1.0}
    assert (warm["loss"], warm["grads"]) == (cold["loss"], cold["grads"])
    ((level,),) = [list(warm["levels"].values())]
    assert level["misses"] == 0
    # Read on their own: Inductor's template bundle (at torch.compile's import of Inductor,
    # before the package is looked up) and the package; read ahead with it: everything else.
    assert level["hits"] >= 6
    assert level["prefetched"] == level["hits"] - 2
    # The kernels it fetched are not asked about again (each was a round trip at exit).
    assert cold["kernels_asked"] == 0 and warm["kernels_asked"] == 0
    local = str(tmp_path / "store")
    run(where, "c", local)
    (warm_local,) = run(where, "d", local)
    assert warm_local["frames"] == 0 and warm_local["loss"] == cold["loss"]
    ((level,),) = [list(warm_local["levels"].values())]
    assert level["hits"] >= 6 and level["prefetched"] == 0


@pytest.mark.slow
def test_what_the_guards_do_not_see_makes_it_trace_again(tmp_path: Path) -> None:
    """A global bound to another function at import, an Inductor setting changed in code or
    passed to torch.compile, another backend, and one line edited in a helper module the model
    calls: each run traces and computes the new result."""
    where = program_dir(tmp_path)
    store = str(tmp_path / "store")
    (cold,) = run(where, "a", store)
    # ACT = getattr(F, env): the same source, another builtin (a guard torch drops).
    (relu,) = run(where, "b", store, PRECOMPILE_ACT="relu")
    assert relu["frames"] == 1 and relu["ours"] == {"stale": 1.0, "writes": 1.0}
    assert relu["matches_eager"]
    assert relu["loss"] != cold["loss"]
    (config,) = run(where, "c", store, PRECOMPILE_ACT="relu", PRECOMPILE_EPILOGUE="0")
    assert config["frames"] == 1 and config["ours"] == {"misses": 1.0, "writes": 1.0}
    # The same setting as torch.compile's option, and another backend (torch's own mode serves
    # them the package Inductor compiled with other settings): traced; another backend is
    # neither looked up nor stored.
    options = json.dumps({"options": {"epilogue_fusion": False}})
    (option,) = run(where, "c2", store, PRECOMPILE_ACT="relu", PRECOMPILE_COMPILE=options)
    assert option["frames"] == 1 and option["ours"] == {"misses": 1.0, "writes": 1.0}
    eager = json.dumps({"backend": "aot_eager"})
    (backend,) = run(where, "c3", store, PRECOMPILE_ACT="relu", PRECOMPILE_COMPILE=eager)
    assert backend["frames"] == 1 and backend["ours"] == {} and backend["matches_eager"]
    helper = where / "dynamo_helper.py"
    helper.write_text(helper.read_text().replace("SCALE = 1.0", "SCALE = 2.0"))
    (edited,) = run(where, "d", store, PRECOMPILE_ACT="relu")
    assert edited["frames"] == 1 and edited["ours"] == {"stale": 1.0, "writes": 1.0}
    assert edited["matches_eager"] and edited["loss"] != relu["loss"]
    (warm,) = run(where, "e", store, PRECOMPILE_ACT="relu")
    assert warm["frames"] == 0 and warm["loss"] == edited["loss"]
    said = subprocess.run(
        [sys.executable, "-m", "compilecache", "explain", "--json"],
        env=clean_env({"COMPILECACHE_URL": store}),
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    json.loads(said)
    assert "Dynamo's stored package was not used" in said
    assert "ACT is another object" in said and "the source of dynamo_helper changed" in said
    assert "Inductor's configuration changed" in said


@pytest.mark.slow
def test_a_value_read_through_a_module_or_a_class_that_changed_makes_it_trace_again(
    tmp_path: Path,
) -> None:
    """torch saves a package's guards with the objects they read, but a module or a class by
    name, so a guard on a value reached through one is built again at load from today's value
    and always holds. A module constant, a base class's attribute and a dataclass default, each
    set from the environment at import (one source, another value), an edit of the module that
    defines them, a function body compiled from another file under the program's name, an
    attribute a module or an object has only where the environment says so, a method bound at
    import, a submodule's hook, and environment variables read while traced, set or unset: each
    traces on a new machine where it differs,
    and computes what eager computes."""
    where = program_dir(tmp_path)
    store = str(tmp_path / "store")
    program = "values_program.py"
    (cold,) = run(where, "a", store, program=program)
    assert cold["frames"] == 1 and cold["matches_eager"]
    (warm,) = run(where, "b", store, program=program)
    assert warm["frames"] == 0 and warm["matches_eager"] and warm["ours"] == {"hits": 1.0}
    for variable in ("VALUES_SCALE", "VALUES_GAIN", "VALUES_DEFAULT"):
        (changed,) = run(where, variable, store, program=program, **{variable: "5.0"})
        assert changed["frames"] == 1 and changed["matches_eager"], variable
        assert changed["ours"] == {"stale": 1.0, "writes": 1.0}, variable
    (back,) = run(where, "back", store, program=program)
    assert back["frames"] == 1 and back["matches_eager"]
    settings = where / "values_settings.py"
    settings.write_text(settings.read_text() + "\n# edited\n")
    (edited,) = run(where, "edited", store, program=program)
    assert edited["frames"] == 1 and edited["ours"] == {"stale": 1.0, "writes": 1.0}
    (body,) = run(where, "body", store, program=program, VALUES_BODY="body_b.txt")
    assert body["frames"] == 1 and body["matches_eager"]
    (again,) = run(where, "again", store, program=program, VALUES_BODY="body_b.txt")
    assert again["frames"] == 0 and again["matches_eager"] and again["ours"] == {"hits": 1.0}
    # A method bound at import to another function, and back; a hook on a submodule (torch's
    # default leaves modules' hooks unguarded); a module attribute and an object attribute that
    # exist only where the environment says so.
    b = {"program": program, "VALUES_BODY": "body_b.txt"}
    (method,) = run(where, "method", store, **b, VALUES_METHOD="1")
    assert method["frames"] == 1 and method["matches_eager"] and method["ours"]["stale"] == 1.0
    (unbound,) = run(where, "unbound", store, **b)
    assert unbound["frames"] == 1 and unbound["ours"]["stale"] == 1.0
    (hook,) = run(where, "hook", store, **b, VALUES_HOOK="1")
    assert hook["frames"] == 1 and hook["matches_eager"]
    (opt,) = run(where, "opt", store, **b, VALUES_OPT="1")
    assert opt["frames"] == 1 and opt["matches_eager"]
    # An environment variable read while traced: its value, or that it is unset, is guarded.
    reads = {"program": program, "VALUES_READ_ENV": "1"}
    (unset,) = run(where, "unset", store, **reads)
    assert unset["frames"] == 1 and unset["matches_eager"] and unset["ours"]["writes"] == 1.0
    (unset_again,) = run(where, "unset_again", store, **reads)
    assert unset_again["frames"] == 0 and unset_again["ours"] == {"hits": 1.0}
    for name, k in (("set", "3"), ("set_again", "3"), ("other", "2")):
        (env,) = run(where, name, store, **reads, VALUES_K=k)
        assert env["matches_eager"], name
        assert env["frames"] == (0 if name == "set_again" else 1), name
    # Read by the standard library (os.getenv): Dynamo guards none of what its functions read.
    (getenv,) = run(where, "getenv", store, **reads, VALUES_G="5")
    assert getenv["frames"] == 1 and getenv["matches_eager"]


@pytest.mark.slow
def test_a_damaged_entry_or_a_store_that_is_down_falls_back_to_tracing(tmp_path: Path) -> None:
    where = program_dir(tmp_path)
    store = tmp_path / "store"
    (cold,) = run(where, "a", str(store))
    (key,) = dynamo_entries(store)
    path = LocalStore(store).path_of(key)
    size = path.stat().st_size
    data = bytearray(path.read_bytes())
    data[-100:] = bytes(100)  # the payload's last bytes zeroed: the checksum fails
    path.write_bytes(bytes(data))
    (damaged,) = run(where, "b", str(store))
    assert damaged["frames"] == 1 and damaged["matches_eager"]
    assert (damaged["loss"], damaged["grads"]) == (cold["loss"], cold["grads"])
    # Written again whole, not grown (pytorch#195911: a failed load made the artifact grow).
    (again,) = dynamo_entries(store)
    assert again == key and path.stat().st_size < 1.2 * size
    (warm,) = run(where, "c", str(store))
    assert warm["frames"] == 0 and warm["loss"] == cold["loss"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    (down,) = run(where, "d", f"redis://127.0.0.1:{closed}?timeout=0.5s")
    assert down["frames"] == 1 and down["loss"] == cold["loss"]
    # A model class defined in a function: torch 2.13 raises a TypeError into the program in
    # this mode (its guards cannot be saved). The compile goes on (2.13: nothing is stored).
    (local,) = run(where, "e", str(store), PRECOMPILE_LOCAL_CLASS="1")
    assert local["frames"] == 1 and local["matches_eager"] and local["loss"] == cold["loss"]
    assert "errors" not in local["ours"]
    if torch.__version__.startswith("2.13."):
        assert local["ours"].get("unverifiable") == 1.0


@pytest.mark.slow
def test_a_global_rebound_or_another_closure_cell_compiles_again(tmp_path: Path) -> None:
    """The guards torch drops under caching_precompile are put back: a global rebound during
    the run compiles again, in the process that traced and in one that loaded the package; a
    cell holding another function or another number, or a module constant with another value,
    is refused or guarded. A guard filter of the program's own still decides what it drops."""
    where = program_dir(tmp_path)
    store = str(tmp_path / "store")

    def closure(machine: str, **env: str) -> dict[str, Any]:
        (line,) = run(where, machine, store, program="closure_program.py", **env)
        return line

    traced = closure("a")
    # Each call computes what eager computes; the rebound global made Dynamo compile again.
    assert [value for value, _ in traced["calls"]] == pytest.approx(traced["eager"])
    assert [frames for _, frames in traced["calls"]] == [1, 2]
    # The package holds the first frame only: its second frame was for another ACT.
    assert traced["ours"] == {"misses": 1.0, "writes": 1.0, "unverifiable": 1.0}
    loaded = closure("b")
    assert [frames for _, frames in loaded["calls"]] == [0, 1]  # loaded, then compiled again
    assert [value for value, _ in loaded["calls"]] == pytest.approx(loaded["eager"])
    assert loaded["ours"]["hits"] == 1.0
    # Another function in a cell: the package is refused. Another number: its guard fails.
    relu = closure("c", CLOSURE_POST="relu")
    assert relu["ours"]["stale"] == 1.0 and relu["calls"][0][1] == 1
    assert [value for value, _ in relu["calls"]] == pytest.approx(relu["eager"])
    tripled = closure("d", CLOSURE_FACTOR="3")
    assert [value for value, _ in tripled["calls"]] == pytest.approx(tripled["eager"])
    assert tripled["calls"][0][1] == 1 and tripled["eager"] != traced["eager"]
    # A module constant read by the code, another value from the same source: its guard fails.
    shifted = closure("g", CLOSURE_OFFSET="1.5")
    assert [value for value, _ in shifted["calls"]] == pytest.approx(shifted["eager"])
    assert shifted["calls"][0][1] == 1 and shifted["eager"] != traced["eager"]
    # The program's own filter drops the guards on globals: torch then keeps serving the first
    # graph after ACT is rebound, and so does the process that traces under compilecache. Its
    # package is not stored (another program may not filter).
    (own,) = run(where, "e", None, program="closure_program.py", CLOSURE_FILTER="globals")
    other = str(tmp_path / "other-store")
    (ours,) = run(where, "f", other, program="closure_program.py", CLOSURE_FILTER="globals")
    assert own["calls"][1][1] == 1 and own["calls"][1][0] != pytest.approx(own["eager"][1])
    assert ours["calls"] == own["calls"] and ours["ours"]["unverifiable"] == 1.0
    assert dynamo_entries(tmp_path / "other-store") == []


@pytest.mark.slow
def test_a_decorated_forward_whose_property_breaks_the_graph_starts_without_tracing(
    tmp_path: Path,
) -> None:
    """transformers' models made torch's own mode fail where this one is built as they are:
    a getter torch cannot name (PackageError), a wrapped function its guards read saved as
    missing, the imports and graphs of a decorated forward installed where its code does not
    look (NameError). On a new machine it now runs every frame from the package."""
    where = program_dir(tmp_path)
    store = str(tmp_path / "store")
    (own,) = run(where, "own", None, program="decorated_program.py")
    (cold,) = run(where, "a", store, program="decorated_program.py")
    # Written once its first frame is complete, and again, whole, with each frame after it.
    assert cold["frames"] > 1 and cold["ours"]["misses"] == 1.0 and cold["ours"]["writes"] >= 1
    (warm,) = run(where, "b", store, program="decorated_program.py")
    assert warm["frames"] == 0 and warm["ours"] == {"hits": 1.0}
    assert warm["digest"] == cold["digest"] == own["digest"]


@pytest.mark.slow
def test_a_function_of_numpy_arrays_compiles_as_in_plain_torch(tmp_path: Path) -> None:
    """torch's caching_precompile mode builds each guard twice and compared a NumPy input's two
    tensor views with ``==``, raising into the program (InternalTorchDynamoError, torch's own
    cache test ``test_numpy_round_cache_hit``). Under compilecache it computes what plain torch
    computes, in a cold process and a warm one."""
    where = program_dir(tmp_path)
    store = str(tmp_path / "store")
    (own,) = run(where, "own", None, program="numpy_program.py")
    (cold,) = run(where, "a", store, program="numpy_program.py")
    (warm,) = run(where, "b", store, program="numpy_program.py")
    assert own["result"] == [[[1.0, 3.0], [-4.0, 4.0]], [[2.0, 4.0], [-2.0, 6.0]]]
    assert cold["result"] == warm["result"] == own["result"]
    assert "errors" not in cold["ours"] and "errors" not in warm["ours"]


@pytest.mark.slow
def test_a_function_without_a_source_file_is_traced_quietly_and_saving_guards_says_nothing(
    tmp_path: Path,
) -> None:
    """Saving a guard on a tensor that is not a leaf reads its ``.grad``, and torch warns of it:
    the saving is the mode compilecache turns on, so the program's stderr says nothing of it
    (the package is stored and served). A function of ``python -c`` (a notebook's cell alike)
    has no source file to key its package by: traced on every machine, with no warning and no
    error counted."""
    where = program_dir(tmp_path)
    store = str(tmp_path / "store")
    said: list[str] = []
    (cold,) = run(where, "a", store, program="nonleaf_program.py", stderr=said)
    (warm,) = run(where, "b", store, program="nonleaf_program.py", stderr=said)
    assert cold["matches_eager"] and warm["matches_eager"]
    assert cold["frames"] == 1 and warm["frames"] == 0 and warm["ours"]["hits"] == 1.0
    inline = "exec(open('nonleaf_program.py').read())"
    for machine in ("c", "d"):
        (line,) = run(where, machine, store, inline=inline, stderr=said)
        assert line["matches_eager"] and line["frames"] == 1
        assert line["errors"] == 0.0 and "errors" not in line["ours"]
        assert "hits" not in line["ours"]
    for stderr in said:
        assert "Warning" not in stderr and "Dynamo package" not in stderr, stderr[-3000:]


@pytest.mark.slow
def test_values_dynamo_does_not_guard_or_guards_with_equality_make_it_trace_again(
    tmp_path: Path,
) -> None:
    """A name a program put into builtins (read with no guard), a float zero's sign (torch
    checks ``== 0.0``; a global's, a module attribute's), a dataclass default factory made for a
    value, an optional module imported or not (``"m" in sys.modules``), an environment variable
    read after a graph break, a set of strings looped over (its order: the hash seed's), a set
    of numbers built in another order (looped over, or a set made from it: checked by its
    order), a float zero as a dict key, the recursion limit: each
    set at import from the environment. Another machine with the other values computes what
    eager computes (the variable missing there: the package's install is taken out, its resume
    function's entry too, not left to call a graph that is gone); the same values again are
    served where they can be checked."""
    where = program_dir(tmp_path)
    store = str(tmp_path / "store")
    program = "unguarded_program.py"
    seeded = {"PYTHONHASHSEED": "random"}  # Python's default, whatever the suite's is
    (first,) = run(where, "a", store, program=program, **seeded)
    (same,) = run(where, "b", store, program=program, **seeded)
    (other,) = run(where, "c", store, program=program, UNGUARDED="1", **seeded)
    # Again: the other process traced again and wrote its trace beside the first one's; one
    # entry must not serve either with the other's set order.
    (other_again,) = run(where, "g", store, program=program, UNGUARDED="1", **seeded)
    # Python hashing strings without a seed: a set's order is the same in every such process.
    (unseeded,) = run(where, "e", store, program=program, PYTHONHASHSEED="0")
    (unseeded_again,) = run(where, "f", store, program=program, PYTHONHASHSEED="0")
    (back,) = run(where, "d", store, program=program, **seeded)
    for line in (first, same, other, other_again, unseeded, unseeded_again, back):
        assert all(fn["matches_eager"] for fn in line.values()), line
    assert same["signed_zero"]["frames"] == same["module_zero"]["frames"] == 0, same
    assert same["default_factory"]["frames"] == 0, same
    assert same["from_builtins"]["frames"] == same["imported"]["frames"] == 1, same
    assert same["after_a_break"]["frames"] == 0, same
    assert same["set_order"]["frames"] == 1, same  # each process its own order: not stored
    assert same["int_set_order"]["frames"] == 1, same  # a global set's order: its process's
    assert same["derived_set_order"]["frames"] == 0, same  # checked: the same order is served
    assert same["recursion_limit"]["frames"] == 1, same  # folded with no guard: not stored
    assert unseeded_again["set_order"]["frames"] == 0, unseeded_again
    assert back["set_order"]["frames"] == 1, back  # not served what PYTHONHASHSEED=0 stored
    # Traced again: the function's frame, and after the break its resume function's.
    assert other.pop("after_a_break")["frames"] == 2, other
    assert all(fn["frames"] == 1 for fn in other.values()), other


@pytest.mark.slow
def test_answers_dynamo_folds_or_checks_by_equality_are_not_served_to_another_process(
    tmp_path: Path,
) -> None:
    """An object's ``id()`` and a string's ``__hash__()`` (another in every process: never
    stored), a dict's key that only equals the other's (``1``, ``True``), a class registered
    with an ABC in one process only, what a module of the program's own that shares a standard
    library module's name reads, a function's annotation and an ``inspect.Signature`` made at
    import (not stored): each set at import from the environment. Another process with the
    other values computes what eager computes; the same values are served where they are
    checked."""
    where = program_dir(tmp_path)
    store = str(tmp_path / "store")
    program = "folded_program.py"
    seeded = {"PYTHONHASHSEED": "random"}
    (first,) = run(where, "a", store, program=program, **seeded)
    (same,) = run(where, "b", store, program=program, **seeded)
    (other,) = run(where, "c", store, program=program, UNGUARDED="1", **seeded)
    for line in (first, same, other):
        assert all(fn["matches_eager"] for fn in line.values()), line
    for served in ("dict_key_type", "abc_registered", "stdlib_named"):
        assert same[served]["frames"] == 0, same
    # (A function's annotation is not stored where Dynamo reads it unguarded, torch 2.13, and
    # served where torch guards it; either way the other process traces it again.)
    for refused in ("object_id", "hash_method", "signature_default"):
        assert same[refused]["frames"] == 1, (refused, same)
    assert all(fn["frames"] == 1 for fn in other.values()), other


@pytest.mark.slow
def test_a_package_torch_cannot_install_is_traced_instead(tmp_path: Path) -> None:
    """An entry whose guards torch fails to build again (here: their saved state unreadable)
    is an error counted once; Dynamo traces, the program computes what it computed."""
    where = program_dir(tmp_path)
    store = tmp_path / "store"
    (cold,) = run(where, "a", str(store))
    (key,) = dynamo_entries(store)
    local = LocalStore(store)
    stored = entry.decode(local.get(key))
    package = pickle.loads(stored.payload)
    code = package["entry"].dynamo.codes[0]
    code.guarded_codes[0] = dataclasses.replace(code.guarded_codes[0], guards_state=b"torn")
    local.put(key, entry.encode(stored.header, pickle.dumps(package)))
    (broken,) = run(where, "b", str(store))
    assert broken["frames"] == 1 and broken["ours"]["errors"] == 1.0
    assert (broken["loss"], broken["grads"]) == (cold["loss"], cold["grads"])


@pytest.mark.slow
def test_a_package_whose_graphs_left_the_store_is_traced_with_one_plain_warning(
    tmp_path: Path,
) -> None:
    """A package loads its compiled graphs from the store's FX graph entries; with those gone
    (evicted, pruned) torch cannot install it: the frame is traced and compiled again, the
    program computes what it computed, one warning says why in words, and the next process is
    served again."""
    where = program_dir(tmp_path)
    store = tmp_path / "store"
    (cold,) = run(where, "a", str(store))
    local = LocalStore(store)
    graphs = [info.key for info in local.scan("torch/fx/")]
    assert graphs
    for key in graphs:
        local.delete(key)
    said: list[str] = []
    (evicted,) = run(where, "b", str(store), stderr=said)
    assert evicted["frames"] == 1 and evicted["matches_eager"]
    assert (evicted["loss"], evicted["grads"]) == (cold["loss"], cold["grads"])
    warnings = [line for line in said[0].splitlines() if "could not be installed" in line]
    assert len(warnings) == 1, said[0][-3000:]
    assert "a compiled graph it needs is not in the cache" in warnings[0]
    (again,) = run(where, "c", str(store))  # the frame was stored again, with its graphs
    assert again["frames"] == 0 and again["loss"] == cold["loss"]


# -- the checks' parts, without compiling -------------------------------------------------------


def test_why_a_package_was_not_installed_is_said_in_words() -> None:
    """torch raises its FXGraphCacheMiss without a message; other exceptions keep theirs, and
    one whose message cannot be made is named (the warning never raises into torch)."""
    from torch._functorch._aot_autograd.autograd_cache import FXGraphCacheMiss

    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no message")

    reason = dynamo_packages._install_reason
    assert reason(FXGraphCacheMiss()) == "a compiled graph it needs is not in the cache"
    assert reason(RuntimeError("guards torn")) == "RuntimeError: guards torn"
    assert reason(KeyError()) == "KeyError"
    assert reason(Unprintable()) == "Unprintable"


def test_the_values_guards_are_built_from_compare_by_value_and_order() -> None:
    """What a package records of each value its guards were built from tells apart what a trace
    can depend on: a float's bits, an enum member's value, a dtype, a set's iteration order, a
    dataclass's defaults; a tensor by its dtype and sizes, not compared where its sizes are
    symbols; an object without a name is not compared."""
    import dataclasses
    import enum

    fp = guards.fingerprint
    assert fp(0.0) != fp(-0.0) and fp(float("nan")) != fp(-float("nan")) and fp(2.0) != fp(3.0)
    assert fp(1) != fp(True) and fp((1, 2.0)) != fp([1, 2.0])
    assert fp(torch.float32) != fp(torch.float64) and fp(torch.device("cpu")) == "torch.device cpu"
    assert fp(torch.zeros(2, 3)) == fp(torch.ones(2, 3)) != fp(torch.zeros(3, 2))
    assert fp(object()) is None and fp([1, object()]) is None
    ordered = ["a", "b", "c", "d"]
    first, second = set(), set()
    for name in ordered:
        first.add(name)
    for name in reversed(ordered):
        second.add(name)
    assert (fp(first) == fp(second)) == (list(first) == list(second))

    class Heads(enum.IntEnum):
        SCALE = 1

    class Other(enum.IntEnum):
        SCALE = 2

    Other.__qualname__ = Heads.__qualname__  # the same class, by name, in another process
    assert guards.identity(Heads.SCALE) != guards.identity(Other.SCALE)

    def options(k: float) -> type:
        @dataclasses.dataclass
        class Options:
            k: float = 0.0

        Options.__dataclass_fields__["k"].default = k
        return Options

    assert guards.identity(options(1.5)) == guards.identity(options(1.5))
    assert guards.identity(options(1.5)) != guards.identity(options(4.5))
    recorded = {"<code>": "c", "L['x']": fp(torch.zeros(2)), "G['s'].SCALE": fp(2.0)}
    assert (
        guards.values_match(recorded, {"<code>": "c", "L['x']": None, "G['s'].SCALE": fp(2.0)})
        == ""
    )
    assert guards.values_match(recorded, {"<code>": "c"}) == ""  # not read at load: not compared
    # Read at load but not in this build: another build's values (another entry of the frame).
    assert "K" in guards.values_match(recorded, {"<code>": "c", "G['env'][b'K']": fp(b"3")})
    assert guards.values_match(recorded, {"<code>": "c", "G['f']": None}) == ""
    assert "SCALE" in guards.values_match(recorded, {"G['s'].SCALE": fp(3.0)})
    assert "<code>" in guards.values_match(recorded, {"<code>": "other"})


def test_globals_are_named_the_same_in_every_process() -> None:
    assert guards.identity(json) == "module json"
    assert guards.identity(len) == "builtin builtins.len"
    assert guards.identity(super) == "type builtins.super"
    assert guards.identity(Path) == "type pathlib.Path"

    def f(x: int) -> int:
        return x + 1

    def g(x: int) -> int:
        return x + 2

    assert guards.identity(f).startswith("function tests.test_torch_dynamo.")
    assert guards.identity(f) != guards.identity(g)
    with pytest.raises(guards.Unverifiable):
        guards.identity(object())
    with pytest.raises(guards.Unverifiable):
        guards.identity([].append)  # a bound method: its object is not named


def test_a_guard_source_is_looked_up_in_globals_and_closure_cells_only() -> None:
    module = types.SimpleNamespace(act=len, table={"k": [iter]})
    scope: dict[str, Any] = {"helper": module, "__builtins_dict___0": {"iter": iter}}
    assert guards.resolve("G['helper'].act", scope) is len
    assert guards.resolve("G['__builtins_dict___0']['iter']", scope) is iter
    assert guards.resolve("type(G['helper'])", scope) is types.SimpleNamespace
    assert guards.resolve("dict.__getitem__(G['helper'].table, 'k')[0]", scope) is iter
    assert guards.resolve("func.act", scope, {"func": module}) is len
    for bad in ("L['self'].x", "args[0]", "G['helper'] or 1", "G['helper'].act + 1"):
        with pytest.raises(guards.Unverifiable):
            guards.resolve(bad, scope)
    with pytest.raises(guards.Unverifiable):
        guards.resolve("__import__('os')", scope)  # no builtins beyond the listed


def test_configuration_is_digested_the_same_whatever_the_set_order() -> None:
    one = {"b": {"x", "y", "z"}, "a": [frozenset({3, 1, 2})]}
    other = {"a": [frozenset({2, 3, 1})], "b": {"z", "y", "x"}}
    assert guards.canonical(one) == guards.canonical(other)


@pytest.mark.parametrize("asked", [False, True])
def test_another_torch_release_keeps_no_packages_and_warns_only_when_asked(
    asked: bool, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """On by default only where the tests ran: elsewhere nothing is hooked, quietly unless
    COMPILECACHE_TORCH_PRECOMPILE=1 asked for it."""
    from compilecache.patches import Patches
    from compilecache.runtime.cache import Cache
    from compilecache.stores.memory import MemoryStore

    monkeypatch.setattr(torch, "__version__", "2.99.0")
    package = types.SimpleNamespace(DynamoCache=object())
    packages = torch_dynamo.DynamoPackages(Cache(MemoryStore()), Patches(), lambda: "", asked=asked)
    with caplog.at_level("WARNING", logger="compilecache"):
        packages.apply(torch_dynamo.PACKAGE, package)
    assert not packages.enabled and package.DynamoCache.__class__ is object
    warned = [r.getMessage() for r in caplog.records if "2.99.0" in r.getMessage()]
    assert len(warned) == int(asked), warned


def test_a_loaded_package_moves_dynamo_name_counter_past_its_names() -> None:
    transform = pytest.importorskip("torch._dynamo.bytecode_transformation")
    saved = transform._unique_id_counter
    try:
        repairs.advance_unique_ids(b"..__resume_at_16_41..__builtins_dict___7..")
        assert transform.unique_id("__builtins_dict__") == "__builtins_dict___42"
    finally:
        transform._unique_id_counter = saved


def test_a_package_whose_code_reads_a_global_it_does_not_install_is_refused() -> None:
    def wrapped(*args: Any) -> Any:  # a decorator's wrapper: its globals are this module's
        return args

    def code(*names: str) -> Any:
        return types.SimpleNamespace(co_names=names, co_consts=())

    def entry(module: str, reads: Any, **fields: Any) -> Any:
        guarded = types.SimpleNamespace(dynamo_code=reads)
        defaults = {"import_sources": {}, "backend_ids": [], "function_names": []}
        return types.SimpleNamespace(
            python_module=module,
            guarded_codes=[guarded],
            install_to_global=bool(fields.get("function_names")),
            **{**defaults, **fields},
        )

    resume = types.CodeType.replace(wrapped.__code__, co_name="resume")
    reads = code("__compiled_fn_1_x", "__resume_at_4_2", "len", "__builtins_dict___0")
    nested = types.SimpleNamespace(co_names=(), co_consts=(code("___module_collections_1_c0"),))
    package = types.SimpleNamespace(
        _innermost_fn=wrapped,
        _codes={
            wrapped.__code__: entry("models", reads, backend_ids=["__compiled_fn_1_x"]),
            resume: entry(__name__, nested, function_names=["__resume_at_4_2"]),
        },
    )
    # Its own graph and imports are installed where its code looks (its __globals__); the
    # resume function's code reads a module global that nothing installs.
    assert repairs.unprovided_global(package) == (
        "its code reads ___module_collections_1_c0, which torch does not save"
    )
    package._codes[resume].import_sources["___module_collections_1_c0"] = "collections"
    assert repairs.unprovided_global(package) == ""
    # The resume function installed into another module than the one the code reads.
    package._codes[resume].python_module = "elsewhere"
    assert "__resume_at_4_2" in repairs.unprovided_global(package)


def test_a_wrapped_function_is_saved_by_the_path_to_it_and_a_getter_by_its_property() -> None:
    import functools

    def inner(x: int) -> int:
        return x

    outer = functools.wraps(inner)(lambda x: inner(x))
    module = types.ModuleType("fake_models")
    module.inner = outer  # type: ignore[attr-defined]
    inner.__module__ = outer.__module__ = "fake_models"
    inner.__qualname__ = outer.__qualname__ = "inner"
    sys.modules["fake_models"] = module
    try:
        assert repairs.wrapped_path(inner) == ("fake_models", "inner", 1)
        assert repairs.unwrapped("fake_models", "inner", 1) is inner
        assert repairs.wrapped_path(lambda: 0) is None
    finally:
        del sys.modules["fake_models"]

    class Model:
        @property
        def loss(self) -> int:
            return 1

    getter = Model.__dict__["loss"].fget.__code__
    owner = types.ModuleType("owner")
    owner.Model = Model  # type: ignore[attr-defined]
    Model.__qualname__ = "Model"
    getter = getter.replace(co_qualname="Model.loss")
    Model.__dict__["loss"].fget.__code__ = getter
    assert repairs.property_accessor(owner, getter) == "fget.__code__"
    assert repairs.property_accessor(owner, inner.__code__) is None


def test_a_loaded_frame_checks_its_dropped_guards_on_every_call() -> None:
    """The check put back into a loaded frame's guard manager: true while each source names
    the object recorded (by name: a first call compares names, later ones identity), false
    once a global is rebound or an argument's class has another method."""
    scope: dict[str, Any] = {"helper": types.SimpleNamespace(act=len)}
    named = {
        "G['helper'].act": guards.identity(len),
        "type(self).__mro__[0].keys": guards.identity(dict.keys),
    }
    matched = {("f:1", "G['helper'].act"): len}  # checked at load
    check, parts = guards.DroppedGuards({"f:1": (scope, named)}, matched).for_frame(
        types.SimpleNamespace(co_qualname="f", co_firstlineno=1)
    ) or (None, [])
    assert check is not None and len(parts) == 2
    assert check({"self": {}}) and check({"self": {"a": 1}})
    assert not check({"self": []})  # list.keys: no such attribute, compile again

    class Keys(dict):  # type: ignore[type-arg]
        def keys(self) -> Any:
            return []

    assert not check({"self": Keys()})
    scope["helper"].act = sorted
    assert not check({"self": {}})
    scope["helper"].act = len
    assert check({"self": {}})
    other = types.SimpleNamespace(co_qualname="g", co_firstlineno=1)
    assert guards.DroppedGuards({}, {}).for_frame(other) is None


GUARD_BUILDERS = r"""
import json
import torch
import torch._dynamo.guards as guards
builder = guards.GuardBuilder
print(json.dumps({
    "hooked": hasattr(builder.get, "__wrapped__"),
    "replaced": sorted(
        name for name, value in vars(builder).items()
        if name.isupper() and callable(value) and value.__module__ != guards.__name__
    ),
}))
"""


def test_the_guard_builders_torch_saves_packages_with_are_torchs_own(tmp_path: Path) -> None:
    """torch saves each guard of a package with its builder method (``GuardBuilder.EQUALS_MATCH``
    and the like) and pickles it by name: a builder compilecache replaced made every package
    holding such a guard unsaveable (Llama's and Qwen2's lost theirs). Under compilecache the
    builders are torch's own; the guard hooks go elsewhere."""
    env = runner.child_environment(clean_env({"COMPILECACHE_URL": str(tmp_path / "store")}))
    proc = subprocess.run(
        [sys.executable, "-c", GUARD_BUILDERS], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    found = json.loads(proc.stdout.splitlines()[-1])
    assert found["hooked"], "compilecache's guard hooks are not in place: nothing was checked"
    assert found["replaced"] == []
