"""torch miss explanations from real compiles: an Inductor config value and the thread count.

A copy of the shared cold store (``tests.test_torch.cold``: the tiny MLP compiled once) meets one
change per run, each on a fresh "machine" (empty Inductor cache directory and TMPDIR, so torch's
own local cache cannot answer): ``cpp.simdlen`` set to 256, then ``OMP_NUM_THREADS=1``. Every FX
and AOTAutograd graph misses, and ``compilecache explain`` must name the change with its before
and after values, for each graph, against the nearest stored entry of the same name.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from compilecache.cli import main
from tests.conftest import clean_env, last_json, run_python
from tests.test_torch import cold  # noqa: F401  (the shared cold compile, a fixture)

pytest.importorskip("torch")

WORKLOAD = "compilecache.workloads.torch_step"


def run_changed(store: Path, args: list[str], env: dict[str, str]) -> dict[str, Any]:
    """The tiny workload under ``compilecache run`` on a fresh machine, with one change."""
    full_env = clean_env({"COMPILECACHE_URL": str(store), **env})
    command = ["-m", "compilecache", "run", "--", sys.executable, "-m", WORKLOAD]
    command += ["--model", "tiny", "--fresh-dirs", *args]
    proc = run_python(command, full_env, timeout=420)
    result: dict[str, Any] = last_json(proc.stdout)
    result["stderr"] = proc.stderr
    return result


def explained(store: Path, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    capsys.readouterr()
    assert main(["explain", "--url", str(store), "--json", "--limit", "100"]) == 0
    records: list[dict[str, Any]] = json.loads(capsys.readouterr().out)
    return records


@pytest.fixture(scope="module")
def changed(
    cold: dict[str, Any],  # noqa: F811  (the fixture imported above)
    tmp_path_factory: pytest.TempPathFactory,
    worker_id: str,
) -> dict[str, Any]:
    """A copy of the cold store after a simdlen run and then a one-thread run.

    Under pytest-xdist the workers share it, like ``cold``: the first one runs the two changed
    compiles under a file lock, the others read its result.
    """
    from filelock import FileLock  # a dependency of torch

    if worker_id == "master":
        root = tmp_path_factory.mktemp("torch-explain")
    else:
        root = tmp_path_factory.getbasetemp().parent / "torch-explain"
    store = root / "store"
    done = root / "result.json"
    with FileLock(f"{root}.lock"):
        if not done.exists():
            shutil.copytree(cold["store"], store)
            before = explained_records(store)
            simd = run_changed(store, ["--config", "cpp.simdlen=256"], {})
            after_simd = explained_records(store)
            threads = run_changed(store, [], {"OMP_NUM_THREADS": "1"})
            after_threads = explained_records(store)
            result = {
                "cold": cold["result"],
                "before": before,
                "simd": simd,
                "threads": threads,
                # Graph misses only: a run on another compiler also explains its ISA probe
                # and compiler-check misses (torch/probe/...), each against its own stored answer.
                "simd_records": after_simd[: len(after_simd) - len(before)],
                "thread_records": after_threads[: len(after_threads) - len(after_simd)],
            }
            done.write_text(json.dumps(result))
        loaded: dict[str, Any] = json.loads(done.read_text())
    return {**loaded, "store": store}


PROBES_AND_PACKAGES = ("torch/probe/", "torch/dynamo/")


def explained_records(store: Path) -> list[dict[str, Any]]:
    """The store's miss history, newest first (what ``explain --json`` prints)."""
    from compilecache.runtime import history
    from compilecache.stores.local import LocalStore

    s = LocalStore(store)
    try:
        return list(history.read(s, history.MISS))
    finally:
        s.close()


def graphs(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The graphs' records: not the probes', nor Dynamo's package's (see :func:`package`)."""
    return [r for r in records if not str(r.get("key", "")).startswith(PROBES_AND_PACKAGES)]


def package(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The one record of the model's Dynamo package (its own key, its own components)."""
    (found,) = [r for r in records if str(r.get("key", "")).startswith("torch/dynamo/")]
    return found


def graph_names(records: list[dict[str, Any]]) -> set[str]:
    return {str(r["name"]) for r in records}


def test_inductor_config_change_is_explained_for_every_graph(changed: dict[str, Any]) -> None:
    simd = changed["simd"]
    assert simd["digest"] == changed["cold"]["digest"] or simd["loss"] == pytest.approx(
        changed["cold"]["loss"], rel=1e-5
    )
    # The model's Dynamo package: its key holds Inductor's configuration as a digest.
    texts = [d["text"] for d in package(changed["simd_records"])["differences"]]
    assert texts == ["torch: Inductor's configuration changed"], texts
    records = graphs(changed["simd_records"])
    # The forward and backward FX graphs and the AOTAutograd entry of the MLP.
    assert len(records) >= 3, records
    assert graph_names(records) <= graph_names(changed["before"]), "names must match the cold run"
    for record in records:
        assert record["nearest"], record
        texts = [d["text"] for d in record["differences"]]
        assert texts == ["torch: inductor config cpp.simdlen None -> 256"], record
        assert record["summary"].endswith("torch: inductor config cpp.simdlen None -> 256")
        (difference,) = record["differences"]
        assert (difference["before"], difference["after"]) == ("None", "256")
        assert record["stored"] is True


def test_thread_count_change_is_explained_for_every_graph(changed: dict[str, Any]) -> None:
    cold_threads = changed["cold"].get("threads") or changed["simd"]["threads"]
    if cold_threads == 1:
        pytest.skip("this machine runs torch with one thread: nothing to change")
    assert changed["threads"]["threads"] == 1
    expected = f"torch: thread count {cold_threads} -> 1"
    texts = [d["text"] for d in package(changed["thread_records"])["differences"]]
    assert expected in texts, texts
    records = graphs(changed["thread_records"])
    assert len(records) >= 3, records
    for record in records:
        texts = [d["text"] for d in record["differences"]]
        # Nearest: the cold run's entry (one difference), not the simdlen run's (two).
        assert texts == [expected], record
        assert record["summary"].endswith(expected)


def test_explain_prints_the_torch_reasons(
    changed: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["explain", "--url", str(changed["store"])]) == 0
    out = capsys.readouterr().out
    assert "torch: inductor config cpp.simdlen None -> 256" in out
    assert "torch: thread count" in out
    assert "new function: no earlier entry of that name" in out  # the cold run's misses
    records = explained(changed["store"], capsys)
    assert any("thread count" in r["summary"] for r in records)
