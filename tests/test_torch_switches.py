"""torch's own cache switches mean under compilecache what they mean without it.

Real torch compiles in fresh processes:

- every combination of the FX graph cache, the AOTAutograd cache, their remote switches and
  ``strict_autograd_cache`` (and force-disable, and ``standalone_compile`` saved and loaded in
  both formats) compiles the same graph plain, under compilecache on a fresh store, and under
  compilecache on a store that already holds the graph: nothing raises that plain torch does not
  raise, the results are the same, a fresh store changes none of torch's counters, and the warm
  store serves a layer only where torch's switches leave it on;
- the environment variables users set globally (``TORCHINDUCTOR_FORCE_DISABLE_CACHES=1``,
  ``TORCHINDUCTOR_FX_GRAPH_CACHE=0``, ``TORCHINDUCTOR_AUTOGRAD_CACHE=0``) under ``compilecache
  run`` on a new machine give plain torch's counters and C++ compiler runs, and say why;
- ``fresh_cache()`` is cold and leaves nothing in the store; after ``clear()`` the store serves
  only what the process wrote again;
- a program's own remote backend (a ``backend_override_cls``, or torch's Redis backend on a real
  Redis server) is used, set before or after ``enable()``.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TESTS, clean_env, last_json, run_python
from tests.test_torch import compiler_calls, fake_compilers

torch = pytest.importorskip("torch")

PROGRAM = str(TESTS / "torch_switches_program.py")
FX_COUNTERS = ("inductor.fxgraph_cache_hit", "inductor.fxgraph_cache_miss")
AOT_COUNTERS = ("aot_autograd.autograd_cache_hit", "aot_autograd.autograd_cache_miss")


def combinations() -> list[dict[str, Any]]:
    """The cross product of the local and remote switches of both layers and strict mode, then
    force-disable and standalone_compile (saved and loaded, binary and unpacked)."""
    combos: list[dict[str, Any]] = []
    for fx, aot, fx_remote, aot_remote, strict in itertools.product(
        (True, False), (True, False), (None, False), (None, False), (False, True)
    ):
        combo: dict[str, Any] = {"fx": fx, "aot": aot, "strict": strict}
        if fx_remote is not None:
            combo["fx_remote"] = fx_remote
        if aot_remote is not None:
            combo["aot_remote"] = aot_remote
        combos.append(combo)
    combos.append({"force": True, "strict": True})
    for standalone in ("binary", "unpacked"):
        combos.append({"standalone": standalone})
        combos.append({"standalone": standalone, "fx_remote": False, "strict": True})
        combos.append({"standalone": standalone, "aot": False})
        combos.append({"standalone": standalone, "force": True})
    return combos


def served(combo: dict[str, Any]) -> tuple[bool, bool]:
    """Whether torch's switches leave compilecache's FX and AOTAutograd layers on."""
    fx = combo.get("fx", True) and "fx_remote" not in combo and not combo.get("force")
    aot = fx and combo.get("aot", True) and "aot_remote" not in combo
    return fx, aot


def run_program(spec: dict[str, Any]) -> subprocess.Popen[str]:
    env = clean_env()
    for name in list(env):
        if name.startswith(("TORCHINDUCTOR_", "TORCH_COMPILE")):
            del env[name]
    return subprocess.Popen(
        [sys.executable, PROGRAM, json.dumps(spec)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def outcomes(proc: subprocess.Popen[str], count: int) -> list[dict[str, Any]]:
    out, err = proc.communicate(timeout=1200)
    assert proc.returncode == 0, err[-4000:]
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert len(lines) == count, err[-4000:]
    return lines


def populate(store: Path, tmp: Path) -> None:
    """A store holding the graph (torch.compile and standalone_compile, torch's defaults)."""
    program = (
        "import sys, torch, compilecache\n"
        f"sys.path.insert(0, {str(TESTS)!r})\n"
        "import torch_switches_program as p\n"
        "from pathlib import Path\n"
        f"compilecache.enable({str(store)!r}, frameworks=('torch',))\n"
        f"p.compile_once(torch, {{}}, Path({str(tmp / 'a')!r}))\n"
        f"p.compile_once(torch, {{'standalone': 'binary'}}, Path({str(tmp / 'b')!r}))\n"
    )
    env = clean_env({"TORCHINDUCTOR_CACHE_DIR": str(tmp / "inductor")})
    run_python(["-c", program], env, timeout=600)


@pytest.mark.slow
def test_every_combination_of_torch_cache_switches_behaves_as_plain_torch(tmp_path: Path) -> None:
    combos = combinations()
    warm_store = tmp_path / "warm-store"
    plain = run_program({"root": str(tmp_path / "plain"), "store": None, "combos": combos})
    populate(warm_store, tmp_path / "populate")
    plain_out = outcomes(plain, len(combos))
    fresh = run_program({"root": str(tmp_path / "fresh"), "store": "", "combos": combos})
    warm = run_program({"root": str(tmp_path / "warm"), "store": str(warm_store), "combos": combos})
    fresh_out, warm_out = outcomes(fresh, len(combos)), outcomes(warm, len(combos))

    served_somewhere = False
    for combo, p, f, w in zip(combos, plain_out, fresh_out, warm_out, strict=True):
        label = json.dumps(combo)
        # Nothing raises under compilecache where plain torch does not, and the other way round.
        assert f["error"] == p["error"] and w["error"] == p["error"], (label, p, f, w)
        assert f["result"] == p["result"] and w["result"] == p["result"], label
        # A fresh store serves nothing: torch counts exactly what it counts alone.
        assert f["torch"] == p["torch"], (label, p["torch"], f["torch"])
        fx_on, aot_on = served(combo)
        fx_hits = w["ours"].get("torch.fx.hits", 0)
        aot_hits = w["ours"].get("torch.aot.hits", 0)
        if not fx_on:
            assert fx_hits == 0, (label, w["ours"])
            assert [w["torch"][c] for c in FX_COUNTERS] == [p["torch"][c] for c in FX_COUNTERS]
        if not aot_on:
            assert aot_hits == 0, (label, w["ours"])
            assert [w["torch"][c] for c in AOT_COUNTERS] == [p["torch"][c] for c in AOT_COUNTERS]
        if combo.get("force"):
            # Force-disable: nothing at all is read or written for torch.
            assert not any(k.endswith(("hits", "misses", "writes")) for k in w["ours"]), w["ours"]
            assert not any(k.endswith(("hits", "misses", "writes")) for k in f["ours"]), f["ours"]
        if fx_on and not combo.get("standalone"):
            # A store that holds the graph serves it where torch's switches allow: the FX graphs
            # always, the AOTAutograd entry where functorch's config (hashed whole into its key)
            # is the one the store was filled with.
            # Served from the FX graphs, or from what holds them: the AOTAutograd entry, which
            # torch bundles with its graphs while Dynamo's packages are on (the default), or a
            # package (none here: torch cannot name a function defined inside another).
            package_hits = w["ours"].get("torch.dynamo.hits", 0)
            assert fx_hits > 0 or aot_hits > 0 or package_hits > 0, (label, w["ours"])
            if aot_on and not combo.get("strict"):
                assert aot_hits == 1 and w["torch"]["aot_autograd.autograd_cache_hit"] == 1, label
                served_somewhere = True
    assert served_somewhere


# -- the environment variables users set globally --------------------------------------------

STEP = ["-m", "compilecache.workloads.torch_step", "--model", "tiny"]


def machine_env(root: Path, fake_bin: Path, extra: dict[str, str]) -> dict[str, str]:
    """A new machine: empty torch directories, a C++ compiler that logs its calls."""
    for sub in ("inductor", "tmp"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    env = clean_env(
        {
            "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"),
            "TMPDIR": str(root / "tmp"),
            "PATH": f"{fake_bin}{os.pathsep}{os.environ.get('PATH', '')}",
            "FAKE_CXX_LOG": str(root / "compiler.log"),
            "FAKE_CXX_ALLOW": "1",
        }
    )
    for name in list(env):
        if name.startswith("TORCHINDUCTOR_") and name != "TORCHINDUCTOR_CACHE_DIR":
            del env[name]
    env.update(extra)
    return env


def under_run(env: dict[str, str], store: Path) -> tuple[dict[str, Any], str]:
    env = {**env, "COMPILECACHE_URL": str(store)}
    proc = run_python(["-m", "compilecache", "run", "--", sys.executable, *STEP], env, 600)
    return last_json(proc.stdout), proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("variable", "value", "words"),
    [
        ("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1", "force_disable_caches"),
        ("TORCHINDUCTOR_FX_GRAPH_CACHE", "0", "FX graph cache is off"),
        ("TORCHINDUCTOR_AUTOGRAD_CACHE", "0", "AOTAutograd cache is off"),
    ],
)
def test_torch_variables_mean_the_same_on_a_new_machine(
    variable: str, value: str, words: str, tmp_path: Path
) -> None:
    fake_bin = fake_compilers(tmp_path / "bin")
    store = tmp_path / "store"
    setting = {variable: value}
    procs: dict[str, Any] = {}

    def plain() -> None:
        env = machine_env(tmp_path / "plain", fake_bin, setting)
        procs["plain"] = last_json(run_python(STEP, env, 600).stdout)

    thread = threading.Thread(target=plain)
    thread.start()
    under_run(machine_env(tmp_path / "a", fake_bin, setting), store)
    second, stderr = under_run(machine_env(tmp_path / "b", fake_bin, setting), store)
    thread.join()
    alone = procs["plain"]
    # The second machine under compilecache counts what plain torch counts on a new machine,
    # for every layer the variable turns off (with only AOTAutograd off, FX graphs are served).
    counters, plain_counters = second["torch_counters"], alone["torch_counters"]
    if variable == "TORCHINDUCTOR_AUTOGRAD_CACHE":
        counters = {k: v for k, v in counters.items() if "autograd" in k}
        plain_counters = {k: v for k, v in plain_counters.items() if "autograd" in k}
        assert second["torch_counters"].get("fxgraph_cache_hit", 0) > 0
    assert counters == plain_counters
    assert second["digest"] == alone["digest"]
    calls_b = compiler_calls(tmp_path / "b" / "compiler.log")
    calls_plain = compiler_calls(tmp_path / "plain" / "compiler.log")
    if variable == "TORCHINDUCTOR_FORCE_DISABLE_CACHES":
        # Kernels, headers and probes are not served either: the compiler runs as often.
        assert len(calls_b) == len(calls_plain) > 0
        entries = [p for p in (store / "entries").rglob("*") if p.is_file()]
        assert entries == [], "force-disabled compiles wrote to the store"
    else:
        assert len(calls_b) < len(calls_plain)  # kernels still travel: torch reuses them too
    # The run says why, and so does explain (the store keeps the reason beside the misses).
    assert any(words in line for line in stderr.splitlines() if line.startswith("compilecache:"))
    explained = subprocess.run(
        [sys.executable, "-m", "compilecache", "explain", "--url", str(store)],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert words in explained.stdout, explained.stdout + explained.stderr


# -- fresh_cache(), clear() and the program's own backends, in one process each ----------------

FRESH_AND_CLEAR = r"""
import json, os, sys
import compilecache, torch
from torch._dynamo.utils import counters
from torch._inductor.utils import fresh_cache
from torch._inductor.codecache import FxGraphCache
from torch._functorch._aot_autograd.autograd_cache import AOTAutogradCache

root, store = sys.argv[1], sys.argv[2]
session = compilecache.enable(store, frameworks=("torch",))

def machine(name):
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(root, name)
    torch._dynamo.reset()
    torch._inductor.utils.clear_caches()
    counters.clear()

def matmul(x, w):
    return x @ w

def step():
    torch.manual_seed(0)
    w = torch.randn(8, 8, requires_grad=True)
    before = session.stats().get("torch.dynamo.hits", 0)
    out = torch.compile(matmul)(torch.randn(4, 8), w)
    out.sum().backward()
    seen = {k: counters[g][k] for g, k in (
        ("inductor", "fxgraph_cache_hit"), ("inductor", "fxgraph_cache_miss"),
        ("aot_autograd", "autograd_cache_hit"), ("aot_autograd", "autograd_cache_miss"))}
    seen["package_hits"] = session.stats().get("torch.dynamo.hits", 0) - before
    return seen, dict(session.stats())

def delta(after, before):
    return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}

report = {}
machine("a"); report["populate"] = step()[0]
entries = sorted(i.key for i in session.store.scan())
machine("b")
before = dict(session.stats())
with fresh_cache():
    torch._dynamo.reset()
    counters.clear()
    seen, after = step()
    report["fresh_mode"] = torch._dynamo.config.caching_precompile
report["mode"] = torch._dynamo.config.caching_precompile
report["fresh"] = [seen, delta(after, before)]
report["fresh_left"] = sorted(i.key for i in session.store.scan()) == entries
machine("c"); report["after_fresh"] = step()[0]
FxGraphCache.clear(); AOTAutogradCache.clear()
machine("d"); report["after_clear"] = step()[0]
machine("e"); report["written_again"] = step()[0]
print(json.dumps(report))
"""


@pytest.mark.slow
@pytest.mark.parametrize("packages", ["on", "off"])
def test_fresh_cache_is_cold_and_clear_serves_only_what_is_written_again(
    tmp_path: Path, packages: str
) -> None:
    """Inside ``fresh_cache()`` and after the caches' ``clear()``, a compile is cold; Dynamo's
    packages (on by default) hold the compiled graphs, so they follow the same switches."""
    env = clean_env({"COMPILECACHE_TORCH_PRECOMPILE": "1" if packages == "on" else "0"})
    script = tmp_path / "fresh_and_clear.py"  # a file: a package names its function's module
    script.write_text(FRESH_AND_CLEAR)
    proc = run_python([str(script), str(tmp_path), str(tmp_path / "store")], env, 600)
    report = last_json(proc.stdout)
    cold = {
        "fxgraph_cache_hit": 0,
        "fxgraph_cache_miss": 2,
        "autograd_cache_hit": 0,
        "autograd_cache_miss": 1,
        "package_hits": 0,
    }
    warm = {
        "fxgraph_cache_hit": 2,
        "fxgraph_cache_miss": 0,
        "autograd_cache_hit": 1,
        "autograd_cache_miss": 0,
        "package_hits": 0,
    }
    if packages == "on":
        # The package is served: its backend, plain torch's AOTAutograd entry, loads its
        # graphs from the FX graph cache; the AOTAutograd entry itself is not looked up.
        warm = {**warm, "autograd_cache_hit": 0, "package_hits": 1}
    assert report["populate"] == cold
    fresh_torch, fresh_ours = report["fresh"]
    assert fresh_torch == cold  # a new machine, inside fresh_cache(): cold, as torch alone
    assert not any(k.endswith(("hits", "writes")) for k in fresh_ours), fresh_ours
    assert report["fresh_left"]  # nothing was written inside it
    # Dynamo's package mode stays as it is inside it (a torch.compile made outside and run
    # inside would fail in torch were it turned off there); nothing is served or written.
    # compilecache's mode is the value 1 (a program's own True is told apart): true for torch.
    assert bool(report["mode"]) is bool(report["fresh_mode"]) is (packages == "on")
    assert report["after_fresh"] == warm  # outside it, the store serves again
    assert report["after_clear"] == cold  # clear(): cold, though the store holds the graph
    assert report["written_again"] == warm  # what this process wrote after the clear


OWN_BACKEND = r"""
import json, os, sys
import compilecache, torch
from torch._dynamo.utils import counters
when, store = sys.argv[1], sys.argv[2]
import torch._inductor.remote_cache as remote

calls = []

class Mine:
    data = {}
    def get(self, key):
        calls.append(("get", key.split("::")[0]))
        return Mine.data.get(key)
    def put(self, key, value):
        calls.append(("put", key.split("::")[0]))
        Mine.data[key] = value

torch._inductor.config.fx_graph_remote_cache = True
torch._functorch.config.enable_remote_autograd_cache = True
if when == "before":
    remote.RemoteFxGraphCache.backend_override_cls = Mine
    remote.RemoteAOTAutogradCache.backend_override_cls = Mine
session = compilecache.enable(store, frameworks=("torch",))
# A first compile: AOTAutograd builds its (memoised) remote cache.
torch.compile(lambda x: x.sin())(torch.randn(4))
if when == "after":
    remote.RemoteFxGraphCache.backend_override_cls = Mine
    remote.RemoteAOTAutogradCache.backend_override_cls = Mine
calls.clear()
torch._dynamo.reset()
w = torch.randn(8, 8, requires_grad=True)
torch.compile(lambda x, w: x @ w)(torch.randn(4, 8), w).sum().backward()
keys = sorted(i.key.split("/")[1] for i in session.store.scan() if i.key.startswith("torch/"))
print(json.dumps({"calls": sorted(set(map(tuple, calls))), "layers": sorted(set(keys))}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("when", ["before", "after"])
def test_program_backend_set_before_or_after_enable_is_used(when: str, tmp_path: Path) -> None:
    env = clean_env({"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")})
    proc = run_python(["-c", OWN_BACKEND, when, str(tmp_path / "store")], env, 600)
    report = last_json(proc.stdout)
    calls = {tuple(c) for c in report["calls"]}
    assert ("put", "pt2:fx-graph-v1") in calls
    assert ("put", "pt2:autograd-experimental") in calls
    # compilecache stepped aside for the graphs and AOTAutograd entries the program's backend
    # holds (kernels still travel: torch has no switch for them).
    if when == "before":
        assert "fx" not in report["layers"] and "aot" not in report["layers"]
    assert "kernel" in report["layers"] or "probe" in report["layers"]


@pytest.mark.slow
def test_torch_redis_remote_cache_the_program_turned_on_is_not_replaced(tmp_path: Path) -> None:
    """``TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE=1`` is torch's own Redis remote cache: under
    compilecache the graphs go to that Redis server, not to compilecache's store."""
    redis = pytest.importorskip("redis")
    from tests.servers import HOST, running_redis

    with running_redis(tmp_path / "redis") as server:
        env = clean_env(
            {
                "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
                "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "1",
                "TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE": "1",
                "TORCHINDUCTOR_REDIS_HOST": HOST,
                "TORCHINDUCTOR_REDIS_PORT": str(server.port),
                "COMPILECACHE_URL": str(tmp_path / "store"),
            }
        )
        proc = run_python(["-m", "compilecache", "run", "--", sys.executable, *STEP], env, 600)
        client = redis.Redis(host=HOST, port=server.port)
        keys = [k.decode() for k in client.keys("pt2:*")]
    assert any(k.startswith("pt2:fx-graph-v1::") for k in keys), keys
    assert any(k.startswith("pt2:autograd-experimental::") for k in keys), keys
    listed = subprocess.run(
        [sys.executable, "-m", "compilecache", "ls", "--json", "--url", str(tmp_path / "store")],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    stored = [e["key"] for e in json.loads(listed.stdout)]
    assert stored and not any(k.startswith(("torch/fx/", "torch/aot/")) for k in stored), stored
    assert "the program set fx_graph_remote_cache=True" in proc.stderr


EVICTED_FX = r"""
import json, os, sys
import compilecache, torch
from torch._dynamo.utils import counters

root, store = sys.argv[1], sys.argv[2]

def machine(name):
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(root, name)
    torch._dynamo.reset()
    torch._inductor.utils.clear_caches()
    counters.clear()

def matmul(x, w):
    return x @ w

def step():
    torch.manual_seed(0)
    w = torch.randn(8, 8, requires_grad=True)
    before = session.stats().get("torch.dynamo.hits", 0)
    out = torch.compile(matmul)(torch.randn(4, 8), w)
    out.sum().backward()
    return float(out.sum()), float(w.grad.sum())

session = compilecache.enable(store, frameworks=("torch",))
# strict in both runs: functorch hashes its whole config into the AOTAutograd key.
torch._functorch.config.strict_autograd_cache = True
machine("a"); first = step()
session.stats()  # waits for the compile's writes (the background thread's)
# A bounded store evicted the FX graphs; the AOTAutograd entry that names them is still there.
evicted = [i.key for i in session.store.scan() if i.key.startswith("torch/fx/")]
for key in evicted:
    session.store.delete(key)
machine("b"); second = step()
stats = session.stats()
print(json.dumps({
    "same": first == second, "evicted": len(evicted),
    "aot_hit": counters["aot_autograd"]["autograd_cache_hit"],
    "incomplete": stats.get("torch.aot.incomplete", 0),
}))
"""


@pytest.mark.slow
def test_aot_entry_whose_fx_graphs_are_gone_is_a_miss_not_an_error(tmp_path: Path) -> None:
    """Under ``strict_autograd_cache`` torch raises when an AOTAutograd hit's FX graphs are
    missing; a store that evicted them (or never had them) serves the AOTAutograd entry only
    with its graphs: a clean miss, and a compile."""
    proc = run_python(["-c", EVICTED_FX, str(tmp_path), str(tmp_path / "store")], clean_env(), 600)
    report = last_json(proc.stdout)
    assert report["evicted"] == 2 and report["same"]
    assert report["aot_hit"] == 0 and report["incomplete"] == 1
