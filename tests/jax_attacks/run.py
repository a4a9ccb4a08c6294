#!/usr/bin/env python3
"""The adversarial corpus of guarded JAX traces: programs whose jitted function traces
differently from run to run while its code text, shapes and dtypes stay the same (the
environment, argv, files, globals, interpreter and library state, object identity, ...).

Each attack_NNN_*.py holds a literal ``SPEC = {...}`` (parsed with ast, never imported):
  variants: {name: {"args": [...], "env": {...}, "files": {relpath: text}, "mtime": {relpath:
            epoch}, "delete": [relpath]}}
  order:    the variants' order for the cached runs (default "aababb")
Every variant runs plainly (its expected output) and then, in ``order``, under ``compilecache run``
on one store in one directory; the stdout lines starting with "RESULT" and the exit status must
equal the plain run's. A FAIL where a trace was served is a stale trace. Counters per run say
whether a trace was served, found stale, refused or written.

    python tests/jax_attacks/run.py -j 2            # all of them (about an hour on 2 cores)
    python tests/jax_attacks/run.py 52 113 200      # the attacks whose names hold these
    ATTACK_PY=/path/to/python python tests/jax_attacks/run.py   # another interpreter
"""

from __future__ import annotations

import ast
import concurrent.futures as cf
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

PY = os.environ.get("ATTACK_PY", sys.executable)
HERE = os.path.dirname(os.path.abspath(__file__))
BASE_ENV = {"JAX_PLATFORMS": "cpu", "PYTHONDONTWRITEBYTECODE": "1"}
TIMEOUT = 60


def load_spec(path: str) -> dict:
    tree = ast.parse(open(path).read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "SPEC" for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise ValueError(f"{path}: no SPEC")


def prepare(d: str, prog: str, variant: dict) -> None:
    shutil.copy(prog, os.path.join(d, "prog.py"))
    for rel, text in variant.get("files", {}).items():
        p = os.path.join(d, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as fh:
            fh.write(text)
    # files written just now look "changed while the process ran" to compilecache's newest check: backdate them
    old = time.time() - 30
    for rel in ["prog.py", *variant.get("files", {})]:
        os.utime(os.path.join(d, rel), (old, old))
    for rel, t in variant.get("mtime", {}).items():
        os.utime(os.path.join(d, rel), (t, t))
    for rel in variant.get("delete", []):
        p = os.path.join(d, rel)
        if os.path.isdir(p):
            shutil.rmtree(p)
        elif os.path.exists(p):
            os.remove(p)


def run(cmd: list[str], cwd: str, env_extra: dict) -> tuple[int, list[str], str]:
    env = dict(os.environ)
    for k in list(env):
        if k.startswith(("COMPILECACHE_", "JAX_", "XLA_")):
            del env[k]
    env.update(BASE_ENV)
    env.update(env_extra)
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return 124, [], "TIMEOUT"
    res = [l for l in p.stdout.splitlines() if l.startswith("RESULT")]
    return p.returncode, res, p.stderr


def trace_counters(store: str) -> dict:
    try:
        out = subprocess.run(
            [PY, "-m", "compilecache", "stats", "--url", store, "--json"],
            capture_output=True, text=True, timeout=30,
        ).stdout
        jx = json.loads(out).get("frameworks", {}).get("jax", {})
        return {k: v for k, v in jx.items() if "trace" in k}
    except Exception as exc:  # noqa: BLE001
        return {"error": str(exc)}


def diff(a: dict, b: dict) -> dict:
    return {k: b.get(k, 0) - a.get(k, 0) for k in b if isinstance(b.get(k), (int, float))
            and b.get(k, 0) != a.get(k, 0)}


def attack(prog: str) -> tuple[str, bool, list[str]]:
    name = os.path.basename(prog)[:-3]
    spec = load_spec(prog)
    variants = spec["variants"]
    order = spec.get("order", "aababb")
    lines: list[str] = []
    expected: dict[str, tuple] = {}
    for v, var in variants.items():
        d = tempfile.mkdtemp(prefix=f"{name}-plain-{v}-")
        prepare(d, prog, var)
        rc, res, err = run([PY, "prog.py", *var.get("args", [])], d, var.get("env", {}))
        if rc != 0:
            lines.append(f"  plain {v} rc={rc}: {err.strip().splitlines()[-1:] if err else ''}")
        expected[v] = (rc, res)
        shutil.rmtree(d, ignore_errors=True)
    d = tempfile.mkdtemp(prefix=f"{name}-cached-")
    store = os.path.join(d, "_store")
    ok = True
    before = {}
    for i, v in enumerate(order):
        var = variants[v]
        prepare(d, prog, var)
        env = dict(var.get("env", {}))
        env["COMPILECACHE_URL"] = store
        env["COMPILECACHE_LOG"] = "info"
        rc, res, err = run([PY, "-m", "compilecache", "run", "--", PY, "prog.py", *var.get("args", [])],
                           d, env)
        after = trace_counters(store)
        delta = diff(before, after)
        before = after
        tag = ",".join(f"{k.replace('trace.', '')}+{int(n)}" for k, n in sorted(delta.items())) or "-"
        bad = (rc, res) != expected[v]
        internal = "compilecache" in err and ("Traceback" in err or "rror" in err)
        if bad:
            ok = False
            lines.append(f"  run#{i+1} variant {v}: DIFFERS  expected rc={expected[v][0]} {expected[v][1]}"
                         f"  got rc={rc} {res}  [trace: {tag}]")
            if rc != 0:
                lines.append("     stderr tail: " + " | ".join(err.strip().splitlines()[-4:]))
        else:
            lines.append(f"  run#{i+1} variant {v}: ok {res}  [trace: {tag}]")
        if internal and "Traceback" in err:
            lines.append("     note: traceback in stderr: " + " | ".join(err.strip().splitlines()[-3:]))
    final = trace_counters(store)
    lines.append(f"  counters: {final}")
    # reproduction
    lines.append(f"  repro: cd <dir with prog.py from {os.path.basename(prog)}>; order {order}; "
                 "variants: " + json.dumps({k: {kk: vv for kk, vv in x.items() if kk != 'files'}
                                            for k, x in variants.items()}))
    shutil.rmtree(d, ignore_errors=True)
    return name, ok, lines


def main() -> None:
    args = sys.argv[1:]
    # Without JAX and compilecache every run fails alike, and every attack would "pass".
    check = subprocess.run([PY, "-c", "import jax, compilecache"], capture_output=True, text=True)
    if check.returncode != 0:
        sys.exit(f"{PY} cannot import jax and compilecache (set ATTACK_PY): {check.stderr[-300:]}")
    jobs = 2
    if args[:1] == ["-j"]:
        jobs = int(args[1])
        args = args[2:]
    progs = sorted(
        os.path.join(HERE, f) for f in os.listdir(HERE)
        if f.startswith("attack_") and f.endswith(".py") and (not args or any(a in f for a in args))
    )
    with cf.ThreadPoolExecutor(jobs) as ex:
        futs = [ex.submit(attack, p) for p in progs]
        for fut in futs:
            try:
                name, ok, lines = fut.result()
            except Exception as exc:  # noqa: BLE001
                print(f"ERROR running attack: {exc!r}", flush=True)
                continue
            served = any("served+" in l for l in lines)
            print(f"{name}: {'PASS' if ok else 'FAIL'}{'' if ok else ' (trace served in a differing run)' if any('DIFFERS' in l and 'served+' in l for l in lines) else ''}", flush=True)
            for l in lines:
                print(l, flush=True)


if __name__ == "__main__":
    main()
