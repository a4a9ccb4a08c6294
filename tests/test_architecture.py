"""The import structure of ``src/compilecache``: no import loops, and no upward imports.

Every ``import`` of a compilecache module is read from the source (module level, inside
functions and under ``TYPE_CHECKING`` alike: a lazy import is still a dependency), and each
module is placed in a layer. A module may import its own layer or lower ones, never a higher
one, and no set of modules may import each other in a circle. The layers are those
docs/how-it-works.md describes ("Layout").
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "compilecache"

# Bottom up. A module is in the layer of the longest prefix that names it.
LAYERS: list[tuple[str, ...]] = [
    # ground: exceptions, signatures, configuration, the entry format, counters, host facts,
    # output files
    (
        "errors",
        "signing",
        "config",
        "entry",
        "summary",
        "stats",
        "host",
        "atomicfile",
        "_importhook",
        "patches",
    ),
    # storage: bytes in, bytes out (bottom to top inside the folder)
    ("stores.base",),
    (
        "stores.frame",
        "stores.leasefile",
        "stores.writebehind",
        "stores.coldstreak",
        "stores.fleetledger",
        "stores.obstorefs",
        "stores.resp",
    ),
    ("stores.local", "stores.sharedfs", "stores.redis", "stores.objectstore", "stores.memory"),
    ("stores.guarded", "stores.readonly"),
    ("stores.tiered",),
    ("stores.registry", "stores"),
    # the runtime the integrations call
    (
        "runtime.singleflight",
        "runtime.history",
        "runtime.manifest",
        "runtime.transfer",
        "runtime.background",
        "runtime.keys",
        "runtime.fileset",
    ),
    ("runtime.cache",),
    ("runtime.explain", "runtime.dircache", "runtime"),
    # framework integrations
    ("frameworks",),
    # enabling a process, running a command under it
    ("runner", "unsigned"),
    ("session",),
    # tools that inspect and move entries, and the workloads of the demo and benchmarks
    ("tools", "workloads"),
    # the front doors
    ("cli", "command", "__init__", "__main__", "_bootstrap"),
]


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> int:
    best, best_len = -1, -1
    for index, names in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > best_len:
                best, best_len = index, len(name)
    assert best >= 0, f"{module} is in no layer: add it to LAYERS (and to docs/how-it-works.md)"
    return best


def imports_of(path: Path) -> Iterator[str]:
    """The compilecache modules ``path`` imports (names resolved to modules of the package)."""
    tree = ast.parse(path.read_text(), str(path))
    here = module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("compilecache."):
                    yield alias.name.removeprefix("compilecache.")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join([*base, *(node.module.split(".") if node.module else [])])
            elif node.module and node.module.startswith("compilecache"):
                target = node.module.removeprefix("compilecache").lstrip(".")
            else:
                continue
            for alias in node.names:
                candidate = f"{target}.{alias.name}" if target else alias.name
                yield candidate if _is_module(candidate) else target


def _is_module(name: str) -> bool:
    if not name:
        return False
    path = PACKAGE.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = module_name(path)
        edges[module] = {m for m in imports_of(path) if m and m != module}
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges.get(node, ()):
            if nxt not in edges:
                continue
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_the_graph_is_read() -> None:
    edges = graph()
    assert "runtime.cache" in edges["frameworks.jax"]
    assert "stores.base" in edges["stores.local"]
    assert len(edges) > 30


def test_no_import_loops() -> None:
    assert cycles(graph()) == []


def test_no_upward_imports() -> None:
    edges = graph()
    upward = [
        f"{module} (layer {layer_of(module)}) imports {target} (layer {layer_of(target)})"
        for module, targets in edges.items()
        for target in sorted(targets)
        if target in edges and layer_of(target) > layer_of(module)
    ]
    assert upward == []


def test_a_loop_would_be_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
