"""The README and docs/ describe what exists: every command, variable and page they name is real,
the README stays short, and the docs are written for users (no development history)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from compilecache.cli import build_parser
from tests.conftest import ROOT, clean_env

README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
SRC = ROOT / "src" / "compilecache"


def _commands() -> set[str]:
    parser = build_parser()
    for action in parser._actions:
        if hasattr(action, "choices") and isinstance(action.choices, dict):
            return set(action.choices)
    raise AssertionError("no subcommands")


def test_the_readme_is_the_front_door_under_300_lines() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) < 300, len(lines)
    headings = [line for line in lines if line.startswith("## ")]
    for wanted in ("## Set up", "## Quick start", "## Configuration", "## Troubleshooting"):
        assert wanted in headings, headings


# What development history reads like: issue numbers, sessions, and comparisons with the code of
# another day (which belong in benchmarks/results/, with their git revision).
HISTORY = re.compile(
    r"\bissue \d+|\(issue \d+|\bhalf an hour earlier\b|"
    r"\bearlier the same day\b|\bbefore compilecache (stopped|started)\b",
    re.I,
)
# In the docs, also the authors' sessions (in the code a Session is an object) and what a user
# cannot check ("works as before", "with an earlier version": which?). The code may speak of
# an earlier version of a file format it still reads.
DOCS_HISTORY = re.compile(
    HISTORY.pattern
    + r"|\bthis session\b|\bprevious session\b|said plainly|\b(keeps )?working as before\b"
    + r"|\bwith an earlier version\b",
    re.I,
)
# Notes that live outside this repository (the research notes of its authors).
DANGLING = re.compile(r"\b(jax|torch|anchors|warm-start)\.md\b")


def _docstrings_and_comments(path: Path) -> str:
    """The docstrings and ``#`` comments of a module (what a reader of the code reads)."""
    text = path.read_text()
    tree = ast.parse(text)
    parts = [
        ast.get_docstring(node) or ""
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
    ]
    parts += [line.split("#", 1)[1] for line in text.splitlines() if "#" in line]
    return "\n".join(parts)


def test_no_development_history_in_the_readme_or_docs() -> None:
    for path in [README, *DOCS]:
        found = [m.group(0) for m in DOCS_HISTORY.finditer(path.read_text())]
        assert not found, (path.name, found)


def test_the_code_speaks_in_the_present_and_names_no_note_it_lacks() -> None:
    """Docstrings and comments: no issue numbers or history, no reference to a note that is
    not in the repository."""
    for path in sorted(SRC.rglob("*.py")):
        text = _docstrings_and_comments(path)
        found = [m.group(0) for m in HISTORY.finditer(text)]
        found += [m.group(0) for m in DANGLING.finditer(text)]
        assert not found, (str(path.relative_to(SRC)), found)


def test_every_page_the_readme_links_exists() -> None:
    for link in re.findall(r"\]\((docs/[^)#]+)", README.read_text()):
        assert (ROOT / link).is_file(), link
    for page in DOCS:
        for link in re.findall(r"\]\(([a-z\-]+\.md)", page.read_text()):
            assert (ROOT / "docs" / link).is_file(), (page.name, link)


def test_every_command_the_docs_name_exists() -> None:
    """``compilecache WORD`` in a code span or block names a command (or ``--version``)."""
    known = _commands()
    for path in [README, *DOCS]:
        text = path.read_text()
        blocks = re.findall(r"```[a-z]*\n(.*?)```", text, re.S)
        inline = re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
        code = "\n".join(blocks + inline)
        for word in re.findall(r"(?:^|[\s(])compilecache ([a-z][a-z-]*)", code, re.M):
            assert word in known, (path.name, word)


def test_every_variable_the_readme_names_is_read() -> None:
    source = "\n".join(p.read_text() for p in SRC.rglob("*.py"))
    for variable in set(re.findall(r"COMPILECACHE_[A-Z_]+", README.read_text())):
        assert variable in source, variable


def test_every_command_has_help() -> None:
    for command in sorted(_commands()):
        proc = subprocess.run(
            [sys.executable, "-m", "compilecache", command, "--help"],
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0 and "usage: compilecache" in proc.stdout, command


def test_one_python_floor_everywhere() -> None:
    """The lowest Python is said once and kept everywhere: pip refuses older ones
    (``requires-python``), mypy checks the code as that version and ruff writes for it, the
    classifiers start there, and the README and docs/versions.md name it."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    required = project["project"]["requires-python"]
    match = re.fullmatch(r">=(3)\.(\d+)", required)
    assert match, required
    major, minor = int(match[1]), int(match[2])
    floor = f"{major}.{minor}"
    assert project["tool"]["mypy"]["python_version"] == floor
    assert project["tool"]["ruff"]["target-version"] == f"py{major}{minor}"
    listed = [
        c.rsplit(" :: ", 1)[1]
        for c in project["project"]["classifiers"]
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    ]
    assert listed and min(listed, key=lambda v: int(v.split(".")[1])) == floor, listed
    assert f"Python {floor}+" in README.read_text()
    assert f"Python {floor} or newer" in (ROOT / "docs" / "versions.md").read_text()
    assert sys.version_info >= (major, minor)


def _recipe(target: str) -> list[str]:
    """The commands of a Makefile target, ``$(VENV)`` spelled out."""
    lines = (ROOT / "Makefile").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{target}:"))
    commands = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        commands.append(line.strip().replace("$(VENV)", ".venv"))
    return commands


def test_pre_commit_runs_what_make_lint_runs_and_make_fix_repairs_the_same_tree() -> None:
    config = (ROOT / ".pre-commit-config.yaml").read_text()
    entries = re.findall(r"^\s+entry: (.+)$", config, re.MULTILINE)
    lint = _recipe("lint")
    assert entries == lint, (entries, lint)
    hooks = re.findall(r"^\s+- id: ", config, re.MULTILINE)
    assert len(re.findall(r"^\s+pass_filenames: false$", config, re.MULTILINE)) == len(hooks)
    assert _recipe("fix") == [
        ".venv/bin/ruff check --fix src tests benchmarks",
        ".venv/bin/ruff format src tests benchmarks",
    ]
    assert lint[:2] == [
        ".venv/bin/ruff check src tests benchmarks",
        ".venv/bin/ruff format --check src tests benchmarks",
    ]


def test_contributing_says_which_tests_cover_every_test_file() -> None:
    """The table of CONTRIBUTING.md names every test module, so a new one finds its row."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    missing = [p.name for p in sorted((ROOT / "tests").glob("test_*.py")) if p.name not in text]
    assert missing == []
    assert "## Unreleased" in (ROOT / "CHANGELOG.md").read_text()
