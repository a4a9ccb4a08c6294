"""The package as a newcomer installs it: ``python -m build`` makes a wheel and an sdist, each
installs into a fresh virtual environment, runs ``compilecache --version`` and serves a JAX hit.

The fresh environments install compilecache alone (``--no-deps``) and borrow the frameworks and
dependencies of the test environment through a ``.pth`` file, so that nothing of several
hundred megabytes is downloaded again; what they import of compilecache is the installed copy,
checked below.
"""

from __future__ import annotations

import json
import shutil
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


def _checkout_copy(target: Path) -> Path:
    """The project's tracked files, copied: the build writes nothing into the checkout."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def _run(argv: list[str], **extra: str) -> subprocess.CompletedProcess[str]:
    """``argv`` in a clean environment that imports nothing from the checkout (no PYTHONPATH)."""
    env = clean_env(extra)
    env.pop("PYTHONPATH", None)
    return subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)


def test_the_wheel_and_the_sdist_install_and_serve_a_jax_hit(tmp_path: Path) -> None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("builds from the checkout's tracked files (git ls-files)")
    source = _checkout_copy(tmp_path / "source")
    dist = tmp_path / "dist"
    built = _run([sys.executable, "-m", "build", "--outdir", str(dist), str(source)])
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    wheels, sdists = list(dist.glob("*.whl")), list(dist.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1
    borrowed = "\n".join(site.getsitepackages())
    for artifact in (wheels[0], sdists[0]):
        venv = tmp_path / f"venv-{artifact.suffix}"
        assert _run([sys.executable, "-m", "venv", str(venv)]).returncode == 0
        python = str(venv / "bin" / "python")
        installed = _run([python, "-m", "pip", "install", "--quiet", "--no-deps", str(artifact)])
        assert installed.returncode == 0, installed.stderr[-3000:]
        paths = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
        purelib = _run([python, "-c", paths]).stdout.strip()
        (Path(purelib) / "_borrowed.pth").write_text(borrowed + "\n")
        version = _run([str(venv / "bin" / "compilecache"), "--version"])
        assert version.returncode == 0 and version.stdout.startswith("compilecache "), version
        store = str(tmp_path / f"store-{artifact.suffix}")
        runs = [_run([python, "-c", PROGRAM], COMPILECACHE_URL=store) for _ in range(2)]
        first, second = (json.loads(r.stdout.strip().splitlines()[-1]) for r in runs)
        assert first["file"].startswith(purelib), first["file"]  # the installed copy
        assert first["value"] == second["value"] == 6.0
        assert first["hits"] == 0 and second["hits"] >= 1
