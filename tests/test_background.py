"""Bookkeeping off the compiling thread: miss explanations run on the cache's background thread,
in order, and are all recorded by the time the session closes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from compilecache.runtime import background, explain, history
from compilecache.runtime.background import Background
from compilecache.runtime.cache import Cache
from compilecache.stats import function_counter
from compilecache.stores.local import LocalStore
from compilecache.stores.memory import MemoryStore
from tests.conftest import clean_env, is_trace, last_json, run_python


def test_work_runs_in_order_off_the_calling_thread() -> None:
    queue = Background()
    seen: list[tuple[int, str]] = []
    for i in range(50):
        queue.add(lambda i=i: seen.append((i, threading.current_thread().name)))
    assert queue.settle(10.0)
    assert [i for i, _ in seen] == list(range(50))
    assert {name for _, name in seen} == {"compilecache-background"}


def test_a_failing_item_does_not_stop_the_others() -> None:
    queue = Background()
    done: list[int] = []

    def fail() -> None:
        raise RuntimeError("boom")

    queue.add(fail)
    queue.add(lambda: done.append(1))
    assert queue.settle(10.0) and done == [1]


def test_settle_drops_what_does_not_finish_in_time() -> None:
    queue = Background()
    gate = threading.Event()
    ran: list[int] = []
    queue.add(gate.wait)
    queue.add(lambda: ran.append(1))
    start = time.monotonic()
    assert not queue.settle(0.2)
    assert time.monotonic() - start < 5
    gate.set()
    assert queue.settle(10.0)
    time.sleep(0.1)
    assert ran == [] and queue.dropped == 1  # dropped, never run late


def test_a_full_queue_drops_instead_of_blocking(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(background, "MAX_QUEUED", 3)
    queue = Background()
    gate = threading.Event()
    queue.add(gate.wait)
    for _ in range(5):
        queue.add(lambda: None)
    assert queue.dropped >= 2
    gate.set()
    assert queue.settle(10.0)


def _hold(queue: Background) -> threading.Event:
    """Queue an item that holds the queue's thread until the returned gate is set; returns once
    the thread runs it, so that what is queued next stays queued."""
    gate, running = threading.Event(), threading.Event()

    def hold() -> None:
        running.set()
        gate.wait()

    queue.add(hold)
    assert running.wait(10.0)
    return gate


def test_a_kept_item_is_never_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """Entry writes are queued with ``keep``: a full queue runs one on the caller's thread, and
    a settle whose deadline passes runs the ones still queued instead of dropping them."""
    monkeypatch.setattr(background, "MAX_QUEUED", 2)
    queue = Background()
    ran: list[str] = []
    gate = _hold(queue)  # the thread holds the gate: the queue itself is empty
    queue.add(lambda: ran.append("queued"), keep=True)
    queue.add(lambda: ran.append("filler"))
    queue.add(lambda: ran.append("full"))  # dropped: the queue is full
    queue.add(lambda: ran.append("inline"), keep=True)  # run here and now
    assert ran == ["inline"] and queue.dropped == 1
    assert not queue.wait_kept(0.2)  # the kept item waits behind the gate
    assert not queue.settle(0.2)
    # The kept item run by settle, on this thread, past its deadline; the other one dropped.
    assert ran == ["inline", "queued"] and queue.dropped == 2
    assert queue.wait_kept(0.1)
    gate.set()
    assert queue.settle(10.0) and queue.dropped == 2


# JAX warns at any fork once it is imported (another test of this worker may have): the child
# here runs only the queue's code and exits with os._exit.
@pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning")
def test_a_forked_child_does_not_run_its_parents_kept_items(tmp_path: Path) -> None:
    """A parent's queued entry write (with its lease) is the parent's to finish: a forked child
    settling its own queue at exit must neither run it nor wait for the parent's thread."""
    queue = Background()
    marker = tmp_path / "ran-in-child"
    parent = os.getpid()
    # Fork while the thread runs its item, outside the queue's lock (a lock held at fork time
    # would stay held in the child).
    gate = _hold(queue)
    queue.add(lambda: marker.touch() if os.getpid() != parent else None, keep=True)
    pid = os.fork()
    if pid == 0:  # the child: settle must return at once, running nothing of the parent's
        start = time.monotonic()
        done = queue.settle(5.0) and queue.wait_kept(5.0)
        os._exit(0 if done and time.monotonic() - start < 2.0 else 1)
    _, status = os.waitpid(pid, 0)
    gate.set()
    assert queue.settle(10.0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert not marker.exists()


def test_wait_kept_waits_for_kept_items_only() -> None:
    queue = Background()
    write_gate, other_gate = threading.Event(), threading.Event()
    written: list[int] = []

    def write() -> None:
        write_gate.wait()
        written.append(1)

    queue.add(write, keep=True)
    queue.add(other_gate.wait)
    threading.Timer(0.2, write_gate.set).start()
    assert queue.wait_kept(10.0) and written == [1]
    assert not queue.settle(0.1)  # the other item still waits on its gate
    other_gate.set()


def test_a_background_explanation_is_counted_at_once_and_recorded_by_settle() -> None:
    store = MemoryStore("memory://background-explain")
    cache = Cache(store)
    gate = threading.Event()
    cache.background.add(gate.wait)  # hold the queue: the explanation must wait its turn
    result = explain.record_miss(
        cache, framework="jax", name="f", key="jax/f-1", components={"a": "1"}, background=True
    )
    assert result is None
    # The counters the run summary shows are there at once; the history record is not yet.
    assert cache.stats.snapshot()[function_counter("jax", "f", "misses")] == 1
    assert history.read(store, history.MISS) == []
    gate.set()
    assert cache.settle()
    (record,) = history.read(store, history.MISS)
    assert record["key"] == "jax/f-1"


# The last miss of a program that exits at once: its explanation is still queued when the
# interpreter exits (slowed here, as on a busy machine).
EXITING_PROGRAM = r"""
import sys, time
import compilecache
from compilecache.runtime import explain
slow = explain.explain
def slowed(*args, **kwargs):
    time.sleep(1.0)
    return slow(*args, **kwargs)
explain.explain = slowed
compilecache.enable(sys.argv[1])
import jax, jax.numpy as jnp, numpy as np
jax.jit(lambda v: jnp.tanh(v) * 2.0)(np.ones(8, np.float32)).block_until_ready()
"""


def test_a_local_session_finishes_its_background_work_at_exit(tmp_path: Path) -> None:
    """On a local disk (no remote level, so no early exit hook), the exit waits for the queued
    explanation and gives the compile's lease up, instead of dropping both with the thread."""
    store = tmp_path / "store"
    proc = subprocess.run(
        [sys.executable, "-c", EXITING_PROGRAM, str(store)],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    local = LocalStore(store)
    # The compile's miss (the trace's first recording is explained beside it, not a miss).
    misses = [r for r in history.read(local, history.MISS) if not is_trace(r["key"])]
    assert [r["name"] for r in misses] == ["jit__lambda"], misses
    assert not any((store / "leases").iterdir())
    runs = history.read(local, history.RUN)
    assert len(runs) == 1 and runs[0]["misses"] == 1


# A compile's entry is written on the background thread: the store's write is held here until
# the program's jit call has returned; a second lookup of the key meanwhile (after
# jax.clear_caches) is served from memory, not compiled again.
WRITE_BEHIND_PROGRAM = r"""
import json, sys, threading
import compilecache
from compilecache.stores import local
released = threading.Event()
seen = []
put_many = local.LocalStore.put_many
def held(self, items):
    # True only when the jit call returned before this write; and what it wrote.
    seen.append([released.wait(60), [key for key, *_ in items]])
    return put_many(self, items)
local.LocalStore.put_many = held
session = compilecache.enable(sys.argv[1])
import jax, jax.numpy as jnp, numpy as np
f = lambda v: jnp.tanh(v) * 3.0
first = np.asarray(jax.jit(f)(np.ones(8, np.float32)))
jax.clear_caches()
again = np.asarray(jax.jit(f)(np.ones(8, np.float32)))
released.set()
stats = session.stats()
print(json.dumps({"seen": seen, "same": bool((first == again).all()), "stats": stats}))
"""


def test_a_jax_compile_returns_before_its_entry_is_written(tmp_path: Path) -> None:
    store = tmp_path / "store"
    proc = run_python(["-c", WRITE_BEHIND_PROGRAM, str(store)], clean_env(), 180)
    result = last_json(proc.stdout)
    # Each write ran after the compile had returned: the executable's, then the guarded trace
    # that names it, once (the second call traced it again before it was written).
    assert all(returned for returned, _ in result["seen"]), result
    written = [key for _, keys in result["seen"] for key in keys]
    assert len([k for k in written if not is_trace(k)]) == 1, written
    assert len([k for k in written if is_trace(k)]) <= 1, written
    assert result["same"]
    stats = result["stats"]
    # One compile, written once; its second lookup was served while the write was held.
    assert stats["misses"] == 1 and stats["hits"] == 1 and stats["writes"] == 1, stats
    entries = [i for i in LocalStore(store).scan("jax/") if not is_trace(i.key)]
    assert len(entries) == 1
    assert not any((store / "leases").iterdir())
