"""``compilecache doctor``: a real JAX program with planted problems, and the analysis rules."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from compilecache import runner
from compilecache.frameworks.facts import JaxFacts, ProcessFacts, TorchFacts
from compilecache.frameworks.jax.adapter import MARKER_DIR
from compilecache.tools import doctor
from compilecache.tools.doctor import RunResult
from tests.conftest import clean_env

# Planted: a host callback (never stored), a compile option holding a fresh temporary path
# (a key that moves every run), a function compiled after the program sets JAX's own minimum
# compile time (never stored, and a pitfall); and one healthy function.
PROGRAM = """
import tempfile
import jax, jax.numpy as jnp

@jax.jit
def with_callback(x):
    jax.debug.print("sum={s}", s=x.sum())
    return x * 2

@jax.jit
def healthy(x):
    return jnp.sin(x) * 2

def scaled(x):
    return x + 7

with_path = jax.jit(
    scaled, compiler_options={"xla_gpu_per_fusion_autotune_cache_dir": tempfile.mkdtemp()}
)

@jax.jit
def late(x):
    return jnp.cos(x) - 1

x = jnp.ones(4)
with_callback(x); healthy(x); with_path(x)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 5.0)
late(x)
"""


def run_doctor(
    script: Path, *options: str, env: dict[str, str] | None = None, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    """``compilecache doctor [OPTIONS] -- python SCRIPT`` in a fresh process."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "compilecache",
            "doctor",
            *options,
            "--",
            sys.executable,
            str(script),
        ],
        env=clean_env() if env is None else env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.slow
def test_doctor_finds_planted_problems(tmp_path: Path) -> None:
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    proc = run_doctor(script, "--json")
    assert proc.returncode == 1, proc.stderr  # problems found
    report = json.loads(proc.stdout)
    findings = {(f["kind"], f["name"]): f for f in report["findings"]}

    unstable = findings[("unstable", "jit_scaled")]
    assert unstable["components"] == ["compile_options"]
    assert "xla_gpu_per_fusion_autotune_cache_dir=/tmp/" in unstable["detail"]
    assert "compiler_options" in unstable["fix"]

    callback = findings[("not_stored", "jit_with_callback")]
    assert "host callbacks" in callback["title"] and callback["fix"]
    late = findings[("not_stored", "jit_late")]
    assert "jax_persistent_cache_min_compile_time_secs=5" in late["title"]

    pitfalls = [f for f in report["findings"] if f["kind"] == "pitfall"]
    assert any("jax_persistent_cache_min_compile_time_secs=5" in f["title"] for f in pitfalls)

    # The healthy function and the host-callback one keep their keys: neither is "unstable".
    assert ("unstable", "jit_healthy") not in findings
    assert ("unstable", "jit_with_callback") not in findings
    assert "jit_healthy" in report["stable"]
    assert [r["returncode"] for r in report["runs"]] == [0, 0]
    assert report["runs"][1]["hits"] >= 1


@pytest.mark.slow
def test_doctor_counts_compiles_not_trace_explanations(tmp_path: Path) -> None:
    """A function whose JAX trace is not kept (it reads ``os`` while tracing) traces every
    start, and its executable still hits: the trace's explanation is no compile, and no
    "never stored" finding."""
    script = tmp_path / "traced.py"
    script.write_text(
        "import os\nimport jax, jax.numpy as jnp\n\n\n@jax.jit\ndef scaled(x):\n"
        '    return x * float(os.environ.get("SCALE", "2"))\n\n\nprint(scaled(jnp.ones(3)))\n'
    )
    proc = run_doctor(script, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["findings"] == [], report["findings"]
    first, second = report["runs"]
    assert second["misses"] == 0 and second["hits"] == first["misses"] == first["stored"] >= 1


@pytest.mark.slow
def test_doctor_text_on_a_healthy_program(tmp_path: Path) -> None:
    script = tmp_path / "ok.py"
    script.write_text("import jax, jax.numpy as jnp\nprint(jax.jit(jnp.sin)(1.0))\n")
    proc = run_doctor(script)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "No problems found" in proc.stdout
    assert "run 2: exit 0" in proc.stdout


def test_doctor_reports_a_failing_command(tmp_path: Path) -> None:
    report = doctor.doctor(
        [sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"], env=clean_env()
    )
    # Run 1 failed: reported, and the command is not run a second time.
    (failed,) = [f for f in report.findings if f.kind == "failed"]
    assert "status 3" in failed.title and "boom" in failed.detail
    assert len(report.runs) == 1
    assert not report.ok


def test_doctor_without_a_command(capsys: pytest.CaptureFixture[str]) -> None:
    from compilecache.cli import main

    assert main(["doctor"]) == 2


# -- analysis rules on recorded runs -----------------------------------------------------------


def _miss(name: str, key: str, components: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {
        "event": "miss",
        "framework": extra.pop("framework", "jax"),
        "name": name,
        "key": key,
        "components": components,
        "readable": extra.pop("readable", {}),
        "stored": extra.pop("stored", True),
        "reason": extra.pop("reason", ""),
        "compile_time_s": 0.5,
    }


def _jax_facts(**overrides: Any) -> ProcessFacts:
    jax = {
        "version": "0.10.2",
        "hooked": True,
        "marker": MARKER_DIR,
        "cache_dir": MARKER_DIR,
        "min_compile_time_secs": 0.0,
        "enable_xla_caches": "none",
    }
    return ProcessFacts.from_json({"pid": 1, "jax": {**jax, **overrides}})


def test_custom_hook_with_a_pid_is_unstable() -> None:
    comps = {"computation": "c", "custom_hook": "h1"}
    first = RunResult(
        0, events=[_miss("jit_f", "jax/jit_f-1", comps, readable={"custom_hook": "101"})]
    )
    second = RunResult(
        0,
        events=[
            _miss(
                "jit_f",
                "jax/jit_f-2",
                {**comps, "custom_hook": "h2"},
                readable={"custom_hook": "202"},
            )
        ],
    )
    report = doctor.analyze(["prog"], [first, second], {})
    (finding,) = report.findings
    assert finding.kind == "unstable" and finding.components == ("custom_hook",)
    assert "custom_hook() changed: 101 -> 202" in finding.detail
    assert "custom_hook()" in finding.fix


def test_function_compiled_only_in_the_second_run() -> None:
    second = RunResult(0, events=[_miss("jit_new", "jax/jit_new-1", {"computation": "c"})])
    (finding,) = doctor.analyze(["p"], [RunResult(0), second], {}).findings
    assert finding.kind == "unstable" and "second run only" in finding.title


def test_read_only_and_min_time_reasons_have_fixes() -> None:
    events = [
        _miss("jit_a", "jax/jit_a-1", {}, stored=False, reason="the store is read-only (X)"),
        _miss(
            "jit_b",
            "jax/jit_b-1",
            {},
            stored=False,
            reason="compiled in 0.01s, below COMPILECACHE_MIN_COMPILE_TIME=2s",
        ),
    ]
    report = doctor.analyze(
        ["p"], [RunResult(0, events=events), RunResult(0)], {"COMPILECACHE_MIN_COMPILE_TIME": "2s"}
    )
    fixes = {f.name: f.fix for f in report.findings if f.kind == "not_stored"}
    assert "COMPILECACHE_READ_ONLY" in fixes["jit_a"]
    assert "Lower COMPILECACHE_MIN_COMPILE_TIME (now 2s)" in fixes["jit_b"]


def test_jax_pitfalls() -> None:
    facts = [
        _jax_facts(enable_xla_caches="xla_gpu_per_fusion_autotune_cache_dir"),
        _jax_facts(min_compile_time_secs=60.0),
        _jax_facts(hooked=False),
    ]
    said = "the program set jax_compilation_cache_dir=/home/me/jax-cache: compilecache serves it"
    events = [{"event": "setting", "framework": "jax", "setting": said}]
    report = doctor.analyze(["p"], [RunResult(0, facts=facts, events=events), RunResult(0)], {})
    titles = [f.title for f in report.findings]
    # XLA's cache paths no longer reach the key under compilecache (frameworks/jax/xla.py).
    assert not any("the cache directory is part of every key" in t for t in titles)
    assert any("jax_persistent_cache_min_compile_time_secs=60" in t for t in titles)
    assert [f.detail for f in report.findings if f.kind == "advice" and f.detail == said]
    assert any("ran without compilecache" in t for t in titles)
    # Fixed upstream in 0.11: no directory pitfall there.
    newer = [_jax_facts(version="0.11.0", enable_xla_caches="all")]
    assert not doctor.analyze(["p"], [RunResult(0, facts=newer)], {}).findings


def test_torch_pitfalls() -> None:
    facts = [ProcessFacts(torch=TorchFacts("2.13.0", num_threads=2, precompile_headers=True))]
    report = doctor.analyze(
        ["p"], [RunResult(0, facts=facts)], {"TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS": "0"}
    )
    by_title = {f.title: f for f in report.findings}
    assert (
        "unset TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS"
        in by_title["TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS=0 is set"].fix
    )
    assert by_title["OMP_NUM_THREADS is not set"].fix.startswith("export OMP_NUM_THREADS=2")
    pinned = facts
    assert not doctor.analyze(
        ["p"], [RunResult(0, facts=pinned)], {"OMP_NUM_THREADS": "2"}
    ).findings
    varying = [ProcessFacts(torch=TorchFacts("2.13.0", num_threads=n)) for n in (1, 4)]
    report = doctor.analyze(["p"], [RunResult(0, facts=varying)], {"OMP_NUM_THREADS": "4"})
    assert [f.title for f in report.findings] == [
        "torch thread counts differ between processes: [1, 4]"
    ]


def test_facts_come_back_from_the_spool_as_the_records_written() -> None:
    """The facts a process writes at exit are read back field by field; a line from another
    version (a field missing, another type, an unknown framework) gives defaults, not errors."""
    jax = JaxFacts("0.10.2", hooked=True, min_compile_time_secs=2.0, settings={"a": "1"})
    written = ProcessFacts(7, "3.11.7", jax=jax, torch=TorchFacts("2.13.0", num_threads=3))
    line = json.loads(json.dumps({"facts": written.to_json()}))
    assert ProcessFacts.from_json(line["facts"]) == written
    odd = {"pid": "x", "jax": {"version": "0.9", "hooked": "yes", "min_compile_time_secs": 1}}
    read = ProcessFacts.from_json({**odd, "torch": [], "mxnet": {}})
    assert read.pid == 0 and read.torch is None
    assert read.jax == JaxFacts("0.9", hooked=False, min_compile_time_secs=1.0)
    assert ProcessFacts.from_json(None) == ProcessFacts()


def test_the_spool_leaves_out_the_explanations_of_trace_records(tmp_path: Path) -> None:
    """A JAX trace traced again, or not kept, is explained beside the misses, keyed by its
    record: not a compile, so not one of the run's misses."""
    spool = tmp_path / "spool"
    spool.mkdir()
    events = [
        _miss("jit_f", "jax/jit_f-1", {}),
        _miss("f", "jax/trace/refused/f", {}, stored=False, reason="its trace is not kept"),
        _miss("f", "jax/trace/0123", {}),
    ]
    (spool / "1.events.jsonl").write_text(
        "".join(json.dumps({"event": "miss", **e}) + "\n" for e in events)
    )
    read, _ = doctor.read_spool(spool)
    assert [e["key"] for e in read] == ["jax/jit_f-1"]
    report = doctor.analyze(["p"], [RunResult(0, events=read), RunResult(0)], {})
    assert report.findings == [] and report.runs[0].count("miss") == 1


def test_facts_of_a_real_process_name_its_frameworks(tmp_path: Path) -> None:
    """A process under compilecache that imported JAX leaves JAX's facts in the run spool."""
    program = "import jax, jax.numpy as jnp\nprint(jax.jit(lambda x: x + 1)(jnp.ones(2)))\n"
    spool = tmp_path / "spool"
    spool.mkdir()
    env = runner.child_environment(clean_env(), str(spool), {"COMPILECACHE_URL": str(tmp_path)})
    done = subprocess.run(
        [sys.executable, "-c", program],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    _, facts = doctor.read_spool(spool)
    (fact,) = facts
    assert fact.jax is not None and fact.jax.hooked and fact.jax.version
    assert fact.torch is None and fact.errors == {}


def test_disabled_is_reported() -> None:
    report = doctor.analyze(["p"], [RunResult(0), RunResult(0)], {"COMPILECACHE_DISABLE": "1"})
    assert [f.title for f in report.findings] == [
        "compilecache is disabled (COMPILECACHE_DISABLE=1)"
    ]


# A torch program whose key moves every run: torch hashes cache_key_tag into FX and AOTAutograd
# keys, and here it holds a fresh temporary path.
TORCH_PROGRAM = """
import tempfile, torch
torch.compiler.config.cache_key_tag = tempfile.mkdtemp()
f = torch.compile(lambda x: (x.sin() * 2).sum())
print(float(f(torch.arange(8.0))))
"""


@pytest.mark.slow
def test_doctor_finds_an_unstable_torch_key(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    script = tmp_path / "prog.py"
    script.write_text(TORCH_PROGRAM)
    env = clean_env()
    env.pop("OMP_NUM_THREADS", None)
    proc = run_doctor(script, "--json", env=env, timeout=420)
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    unstable = [f for f in report["findings"] if f["kind"] == "unstable"]
    # The AOTAutograd entry and its FX graph, each with the component that moved.
    assert len(unstable) >= 2, report["findings"]
    for finding in unstable:
        assert finding["components"] == ["cache_key_tag"], finding
        assert "cache_key_tag changed: /tmp" in finding["detail"], finding
    advice = [f for f in report["findings"] if f["kind"] == "advice"]
    assert any("OMP_NUM_THREADS" in f["detail"] + f.get("fix", "") for f in advice), advice


STABLE_TORCH_PROGRAM = """
import torch
f = torch.compile(lambda x: (x.cos() * 3).sum())
print(float(f(torch.arange(8.0))))
"""


@pytest.mark.slow
def test_doctor_compares_torch_keys_on_fresh_directories_and_advice_is_not_a_failure(
    tmp_path: Path,
) -> None:
    """Each run gets empty Inductor and Triton directories, so the second run is answered by
    the store (torch's own directory would answer it otherwise, and nothing be compared); a
    program whose keys are stable passes, with OMP_NUM_THREADS unset given only as advice."""
    pytest.importorskip("torch")
    script = tmp_path / "prog.py"
    script.write_text(STABLE_TORCH_PROGRAM)
    env = clean_env({"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "shared-inductor")})
    env.pop("OMP_NUM_THREADS", None)
    proc = run_doctor(script, "--json", env=env, timeout=420)
    report = json.loads(proc.stdout)
    assert proc.returncode == 0, report["findings"]
    first, second = report["runs"]
    assert first["misses"] > 0 and second["hits"] > 0 and second["misses"] == 0, report["runs"]
    kinds = {f["kind"] for f in report["findings"]}
    assert kinds == {"advice"}, report["findings"]
    assert not (tmp_path / "shared-inductor").exists()  # the runs never used the user's
