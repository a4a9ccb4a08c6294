"""The package as a newcomer installs it: ``python -m build`` makes a wheel and an sdist, each
installs into a fresh virtual environment, runs ``compilecache --version`` and serves a JAX hit.

The fresh environments install compilecache alone (``--no-deps``) and borrow the frameworks and
dependencies of the test environment through a ``.pth`` file, so that nothing of several
hundred megabytes is downloaded again; what they import of compilecache is the installed copy,
checked below.
"""

from __future__ import annotations

import json
import site
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, clean_env

pytest.importorskip("build")
pytest.importorskip("jax")

PROGRAM = (
    "import json, compilecache, jax\n"
    "session = compilecache.enable()\n"
    "print(json.dumps({'file': compilecache.__file__, 'value': float(jax.jit(lambda x: x * 3)(2.0)),"
    " 'hits': session.stats()['hits']}))\n"
)


def test_the_wheel_and_the_sdist_install_and_serve_a_jax_hit(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
        env=clean_env(),
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    wheels, sdists = list(dist.glob("*.whl")), list(dist.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1
    borrowed = "\n".join(site.getsitepackages())
    for artifact in (wheels[0], sdists[0]):
        venv = tmp_path / f"venv-{artifact.suffix}"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        python = venv / "bin" / "python"
        installed = subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--no-deps", str(artifact)],
            capture_output=True,
            text=True,
            timeout=600,
            env=clean_env(),
        )
        assert installed.returncode == 0, installed.stderr[-3000:]
        purelib = subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        (Path(purelib) / "_borrowed.pth").write_text(borrowed + "\n")
        version = subprocess.run(
            [str(venv / "bin" / "compilecache"), "--version"], capture_output=True, text=True
        )
        assert version.returncode == 0 and version.stdout.startswith("compilecache "), version
        env = clean_env({"COMPILECACHE_URL": str(tmp_path / f"store-{artifact.suffix}")})
        runs = [
            subprocess.run(
                [str(python), "-c", PROGRAM], capture_output=True, text=True, env=env, timeout=300
            )
            for _ in range(2)
        ]
        first, second = (json.loads(r.stdout.strip().splitlines()[-1]) for r in runs)
        assert first["file"].startswith(purelib), first["file"]  # the installed copy
        assert first["value"] == second["value"] == 6.0
        assert first["hits"] == 0 and second["hits"] >= 1
