"""The guards of a JAX trace (frameworks/jax/guards.py): values compared by value, the same in
every process, and what cannot be compared refused."""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from compilecache.frameworks.jax import guards
from tests.conftest import clean_env


def digest(value: Any) -> str:
    walk = guards.Walk()
    walk.root("value", value)
    walk.finish()
    assert walk.refused is None, walk.refused
    return walk.digest()


def refused(value: Any) -> str:
    walk = guards.Walk()
    walk.root("value", value)
    walk.finish()
    assert walk.refused is not None
    return walk.refused


class Colour(enum.Enum):
    RED = 1
    BLUE = 2


class MyInt(int):
    pass


@dataclasses.dataclass(frozen=True)
class Config:
    width: int
    names: tuple[str, ...] = ("a",)


def test_values_are_compared_by_value() -> None:
    assert digest(1) != digest(True) != digest(1.0)
    assert digest(0.0) != digest(-0.0)
    nan = float("nan")  # a NaN's sign, which math.copysign reads, by its bytes
    assert digest(nan) != digest(-nan)
    assert digest(complex(nan, 0.0)) != digest(complex(-nan, 0.0))
    assert digest(complex(0.0, nan)) != digest(complex(0.0, -nan))
    assert guards._plain(complex(nan, 1.0), 0) != guards._plain(complex(-nan, 1.0), 0)
    assert guards._plain(-nan, 0) != guards._plain(nan, 0)
    assert digest(MyInt(2)) != digest(MyInt(3)) and digest(MyInt(2)) != digest(2)
    assert digest(Colour.RED) != digest(Colour.BLUE)
    assert digest(Config(1)) == digest(Config(1)) != digest(Config(2))
    assert digest(np.arange(3.0)) != digest(np.arange(3.0) + 1)
    assert digest(np.float32(1)) != digest(np.float64(1))
    assert digest({"a": 1, "b": 2}) != digest({"b": 2, "a": 1})  # iteration order is kept
    assert digest({1, 2, 3}) == digest({3, 2, 1})
    assert digest(functools.partial(max, 1)) != digest(functools.partial(max, 2))


def test_closures_and_defaults_are_part_of_a_function() -> None:
    def make(scale: float) -> Any:
        def f(x: float, power: int = 2) -> float:
            return x**power * scale

        return f

    assert digest(make(1.0)) == digest(make(1.0)) != digest(make(2.0))
    g = make(1.0)
    before = digest(g)
    g.__defaults__ = (3,)
    assert digest(g) != before


SCALE = 5.0


def _scaled(x: float) -> float:
    return x * SCALE


def test_one_code_made_into_functions_of_other_globals_is_guarded_in_each() -> None:
    import types

    def copy_with(scale: float) -> Any:
        return types.FunctionType(_scaled.__code__, {"SCALE": scale})

    # The copy's globals are read too, though its code was reached first through _scaled.
    assert digest([_scaled, copy_with(2.0)]) != digest([_scaled, copy_with(3.0)])
    walk = guards.Walk()
    walk.root("value", [_scaled, copy_with(2.0)])
    walk.finish()
    namespaces = walk.namespaces[_scaled.__code__]
    assert len(namespaces) == 2 and namespaces[0] is globals()


def test_cycles_and_shared_values_are_encoded_without_addresses() -> None:
    a: list[Any] = [1]
    a.append(a)
    assert digest(a) == digest(a)
    shared = [1, 2]
    assert digest([shared, shared]) != digest([[1, 2], [3]])


def test_what_reads_outside_the_program_or_has_no_value_is_refused() -> None:
    import random
    import threading

    assert "os" in refused(os)
    assert "random" in refused(random.Random(0))
    assert "no value" in refused(threading.Lock())

    @functools.cache
    def memo() -> int:
        return 1

    assert "memoised" in refused(memo)
    assert "too many" in refused(list(range(guards.MAX_NODES + 10)))
    if guards.HASH_ORDER:  # a set of strings iterates in another order in another process
        assert "per-process string hashing" in refused({"a", "b"})
        assert "per-process string hashing" in refused({(1, "a"), (2, "b")})
        # A NaN hashes by its address, so its place in a set follows the process too.
        assert "per-process string hashing" in refused({1.0, float("nan")})
    # Numbers, and tuples of them, hash alike everywhere: such a set is compared in its order.
    assert digest({(1, 2), (3, 4)}) == digest({(3, 4), (1, 2)})
    assert digest({(1, 2), (3, 4)}) != digest({(1, 2), (3, 5)})


# Globals a function reads: the walk meets them in an order of its own, and numbers the objects
# it meets (which globals hold one object), so that order must not follow string hashing.
ALIAS_A, ALIAS_B, ALIAS_C = [1.0], [2.0], Config(1)


def reads_globals() -> tuple[Any, ...]:
    return ALIAS_A, ALIAS_B, ALIAS_C, SCALE


def test_digests_are_the_same_in_every_process(tmp_path: Path) -> None:
    """No identity, address or string hash (randomised per process) enters a digest."""
    program = (
        "import json, sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from tests.test_jax_guards import Config, Colour, digest, reads_globals\n"
        "value = {'cfg': Config(3, ('x', 'y')), 'set': {3, 1, 2}, 'c': Colour.RED,\n"
        "         'f': [1.5, None, b'z'], 'frozen': frozenset({2.5, 1.5}), 'names': ('p', 'q'),\n"
        "         'reads': reads_globals}\n"
        "print(json.dumps(digest(value)))\n"
    )
    root = str(Path(__file__).resolve().parents[1])
    seen = set()
    for seed in ("1", "2", "random"):
        proc = subprocess.run(
            [sys.executable, "-c", program, root],
            env=clean_env({"PYTHONHASHSEED": seed}),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        seen.add(json.loads(proc.stdout))
    assert len(seen) == 1


def test_a_program_file_is_compared_by_its_contents(tmp_path: Path) -> None:
    source = tmp_path / "prog_module.py"
    source.write_text("X = 1\n")
    old = int((guards._STARTED - 100) * 1e9)  # written before this process started
    os.utime(source, ns=(old, old))
    first = guards.file_digest(str(source))
    source.write_text("X = 2\n")  # the same size and time: only the contents differ
    os.utime(source, ns=(old, old))
    guards._DIGESTS.clear()  # as in a new process (one process digests each file once)
    assert guards.file_digest(str(source)) != first
    source.write_text("X = 3\n")  # changed now: the process may run its former text
    with pytest.raises(guards.Refused, match="changed while this process ran"):
        guards.file_digest(str(source))


def test_a_file_written_just_before_the_process_started_is_not_taken_as_changed_since(
    tmp_path: Path,
) -> None:
    """A program file changed after its process started is refused (the code running may be
    its former text); one written just before the start is not. The start used to come from
    the boot time /proc/stat gives in whole seconds: up to a second early, so that a file a
    test (or a job script) wrote in that second before starting the process was refused."""
    program = tmp_path / "written.py"
    program.write_text("X = 1\n")
    time.sleep(0.3)
    check = (
        "import json, sys, time\n"
        "from compilecache.frameworks.jax import guards\n"
        "print(json.dumps({'start': guards._STARTED, 'now': time.time(),\n"
        "                  'digest': guards.file_digest(sys.argv[1])}))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", check, str(program)],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(proc.stdout.splitlines()[-1])
    assert program.stat().st_mtime < found["start"] <= found["now"]
    assert len(found["digest"]) == 64


def test_arrays_are_compared_with_their_layout_and_what_they_view() -> None:
    grid = np.arange(4.0, dtype=np.float32).reshape(2, 2)
    assert digest(np.asfortranarray(grid)) != digest(grid.copy())
    base = np.arange(4.0, dtype=np.float32)
    assert digest(base[:2]) != digest(base[:2].copy())
    # Memory that is not an array's (bytes, a JAX array's buffer) is named by its kind, not
    # refused: a global JAX array is compared through such a view.
    assert digest(np.frombuffer(b"\0" * 8, dtype=np.float32)) == digest(
        np.frombuffer(b"\0" * 8, dtype=np.float32)
    )
    assert digest(np.asarray(memoryview(bytearray(8)).cast("f"))) is not None
