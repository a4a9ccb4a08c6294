"""The import structure of ``src/compilecache``: no import loops, and no upward imports; and
the shape of the storage interface: a narrow ``Store``, capabilities as objects, no caller that
probes a store for its type.

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
        "units",
        "signing",
        "config",
        "entry",
        "run_summary",
        "stats",
        "host",
        "redaction",
        "variables",
        "atomicfile",
        "_importhook",
        "patches",
    ),
    # storage: bytes in, bytes out (bottom to top inside the folder)
    ("stores.capabilities",),
    ("stores.base",),
    (
        "stores.frame",
        "stores.leasefile",
        "stores.tiers.writebehind",
        "stores.tiers.coldstreak",
        "stores.tiers.counters",
        "stores.obstorefs",
        "stores.resp",
    ),
    ("stores.local", "stores.sharedfs", "stores.redis", "stores.objectstore", "stores.memory"),
    ("stores.guarded", "stores.readonly"),
    ("stores.tiers",),
    ("stores.registry", "stores"),
    # the runtime the integrations call
    ("runtime.reader",),
    (
        "runtime.singleflight",
        "runtime.history",
        "runtime.prefetch",
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
    ("runner", "unsigned_warning"),
    ("session",),
    # tools that inspect and move entries, and the workloads of the demo and benchmarks
    ("tools", "workloads"),
    # the front doors
    ("cli", "entrypoint", "__init__", "__main__", "_bootstrap"),
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
    assert "runtime.cache" in edges["frameworks.jax.integration"]
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


# -- the storage interface ---------------------------------------------------------------------

# What a Store is: the five byte operations, close, and the conveniences defaulted on them.
STORE_METHODS = {
    "get",
    "put",
    "delete",
    "stat",
    "scan",
    "close",
    "peek",
    "head",
    "get_with_meta",
    "get_many",
    "put_new",
    "put_many",
}
# What a Store may have besides: facts, and capability objects (None where it lacks one).
STORE_ATTRIBUTES = {"url", "read_only", "scans_cheaply", "counters", "history", "leases", "health"}
STORE_CLASSES = {"Store", "Tiered", "Guarded", "ReadOnly", "StoreWrapper", "LocalStore"}


def _class(module: str, name: str) -> ast.ClassDef:
    tree = ast.parse((PACKAGE / module).read_text())
    found = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == name]
    assert found, f"{name} not in {module}"
    return found[0]


def _public_methods(node: ast.ClassDef) -> set[str]:
    return {
        n.name for n in node.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")
    }


def test_store_is_bytes_and_capabilities_are_objects() -> None:
    store = _class("stores/base.py", "Store")
    assert _public_methods(store) == STORE_METHODS
    declared = {
        n.target.id
        for n in store.body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    }
    assert declared == STORE_ATTRIBUTES


def test_the_wrapper_base_forwards_bytes_and_takes_over_the_objects() -> None:
    wrapper = _public_methods(_class("stores/base.py", "StoreWrapper"))
    assert wrapper <= STORE_METHODS - {"put_new", "put_many"}


def test_each_capability_has_one_interface() -> None:
    """Counters, history and leases are defined once, as classes of stores/capabilities.py; a
    backend's are classes of its own module implementing those, never methods of the store."""
    names = {"add_stats", "read_stats", "zero_stats", "add_history", "read_history"}
    names |= {"acquire_lease", "claim_lease", "supports_leases", "keeps_stats", "keeps_history"}
    defined = [
        f"{path.relative_to(PACKAGE)}:{node.name}"
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef) and node.name in names
    ]
    assert defined == []


def test_no_caller_probes_a_store_for_its_type() -> None:
    """Outside stores/, nothing asks ``isinstance(x, <a store class>)``: callers ask for a
    capability (``store.leases is not None``) instead."""
    probes = []
    for path in PACKAGE.rglob("*.py"):
        if path.is_relative_to(PACKAGE / "stores"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "isinstance"
                and len(node.args) == 2
            ):
                classes = node.args[1]
                elements = classes.elts if isinstance(classes, ast.Tuple) else [classes]
                named = {e.id for e in elements if isinstance(e, ast.Name)}
                if named & STORE_CLASSES:
                    probes.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert probes == []


def test_entries_are_decoded_only_by_the_reader() -> None:
    """Stored bytes become an entry in one place, which holds the trust policy (the key check,
    the accepted signers): a new tool cannot read an entry and forget it."""
    calls = []
    for path in PACKAGE.rglob("*.py"):
        if path in (PACKAGE / "runtime" / "reader.py", PACKAGE / "entry.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in ("decode", "verify")
                and isinstance(node.value, ast.Name)
                and node.value.id == "entry"
            ):
                calls.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert calls == []


def test_integrations_are_handed_the_configuration() -> None:
    """The integrations get the session's Config at install: none loads it again (config.py is
    the one reader of compilecache's variables), and none reads a COMPILECACHE_ variable."""
    found = []
    for path in (PACKAGE / "frameworks").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            loads = (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "load"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id in ("config", "config_mod")
            )
            reads = (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("get", "getenv")
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and str(node.args[0].value).startswith("COMPILECACHE_")
            )
            if loads or reads:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert found == []


def test_framework_words_live_with_their_framework() -> None:
    """runtime/explain.py is the mechanism only: it names no framework. Each framework's words
    live in frameworks/<name>/words.py, and JAX's name exactly the steps the integration hashes."""
    frameworks = {"jax", "torch", "triton", "xla"}
    named = [
        f"explain.py:{node.lineno}"
        for node in ast.walk(ast.parse((PACKAGE / "runtime" / "explain.py").read_text()))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and (node.value in frameworks or node.value.split("/")[0] in frameworks)
    ]
    assert named == []

    from compilecache.frameworks.jax import key as jax_key
    from compilecache.frameworks.jax import words as jax_words
    from compilecache.runtime import explain

    assert tuple(jax_words.JAX.labels) == jax_words.STEPS == jax_key.LAYOUTS[0]
    assert set(jax_words.JAX.describe) == set(jax_words.STEPS)
    assert explain.vocabulary("jax") is jax_words.JAX


# -- the framework contract ------------------------------------------------------------------


def test_every_framework_is_held_to_the_contract() -> None:
    """Each framework's face assigns its ``integration`` module to ``FrameworkHooks`` under
    ``TYPE_CHECKING`` (mypy checks the signatures there), and the modules keep it at run time."""
    import importlib

    from compilecache import frameworks

    for name, (_trigger, face) in frameworks.INTEGRATIONS.items():
        source = (PACKAGE / "frameworks" / name / "__init__.py").read_text()
        held = [
            node
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.AnnAssign)
            and isinstance(node.annotation, ast.Name)
            and node.annotation.id == "FrameworkHooks"
            and isinstance(node.value, ast.Name)
            and node.value.id == "integration"
        ]
        assert held, f"frameworks/{name}/__init__.py does not hold its integration to the contract"
        for module in (face, f"{face}.integration"):
            assert isinstance(importlib.import_module(module), frameworks.FrameworkHooks), module
