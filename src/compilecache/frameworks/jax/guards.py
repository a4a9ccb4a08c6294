"""Guards of a JAX trace: what a traced function's result depends on besides its arguments'
shapes and dtypes, by value, so that a later process can tell whether tracing again would give
the same program.

A trace is a function of the code that runs and the values that code reads. JAX guards none of
them across processes (its in-memory trace cache trusts the function object), so the guards are
built here, from roots the caller names (the jitted function, its static arguments, the pytree
nodes of its arguments, JAX's configuration), by walking each value:

- Python functions: their code (the digest of the file it came from, for code outside the
  installed packages), defaults, closure cells, attributes, and the globals their code names;
  a module named by code is followed into the attributes that code names.
- Containers, NumPy arrays and scalars, dtypes, enums, numbers and strings: by value; objects:
  their class and their attributes (``__dict__`` and slots), recursively.
- Code of the installed packages and the standard library is trusted as its distribution's
  version (recorded by the caller); its functions' closures and defaults are still walked, since
  a library wrapper (``functools.partial``, ``jax.vmap``) can close over the program's values.

A walk *refuses* what it cannot name or compare: an object without a stable value (a lock, a
file, an unknown C type), a value read from outside the program (the environment, ``sys.argv``,
files, clocks, random state: the modules and builtins that give them), and dynamic lookups in the
program's own modules that no name in the code shows. A refused walk means: trace as always.

The walk is deterministic: no identity, address or hash of an object enters a digest, so two
processes that hold the same values get the same digests.
"""

from __future__ import annotations

import builtins
import dataclasses
import dis
import enum
import functools
import hashlib
import os
import struct
import sys
import sysconfig
import time
import types
import warnings
from collections.abc import Callable, Iterable
from typing import Any

from compilecache.frameworks import hashorder

# Modules whose state is outside the program (environment, arguments, clocks, random state,
# files, sockets, processes): code that names them is not guarded, it is traced.
DENIED_MODULES = frozenset(
    {
        "os",
        "posix",
        "nt",
        "sys",
        "random",
        "_random",
        "time",
        "datetime",
        "_datetime",
        "subprocess",
        "socket",
        "_socket",
        "uuid",
        "secrets",
        "tempfile",
        "io",
        "_io",
        "pathlib",
        "glob",
        "shutil",
        "platform",
        "getpass",
        "signal",
        "threading",
        "_thread",
        "multiprocessing",
        "fileinput",
        "pickle",
        "shelve",
        "sqlite3",
        "urllib",
        "http",
        "numpy.random",
        "importlib",
        "ctypes",
        "_ctypes",
        # The registries of codecs and error handlers, which a program adds to.
        "codecs",
        "_codecs",
    }
)
# Builtins that read outside state or look names up dynamically.
DENIED_BUILTINS = frozenset(
    {
        "open",
        "input",
        "id",
        "hash",
        "eval",
        "exec",
        "compile",
        "globals",
        "locals",
        "vars",
        "__import__",
        "breakpoint",
        "memoryview",
        # The names an object has, which its guard (a digest of the values the code reads)
        # does not compare: an attribute set in one process only changes the answer.
        "dir",
    }
)
# Names that look attributes up by a computed name: a program's module reached by code that
# uses them is guarded whole (every global), since no name in the code says which it reads.
DYNAMIC_NAMES = frozenset({"getattr", "hasattr", "__dict__", "__getattribute__", "import_module"})
# Budgets of one walk: past them it refuses (a guard must cost less than the trace it saves).
MAX_NODES = 200_000
MAX_ARRAY_BYTES = 256 * 1024 * 1024


# Python hashes strings and bytes with a per-process seed unless PYTHONHASHSEED fixes it: a
# set's iteration order can then differ between two processes, and so can a trace that iterates
# one (hashorder says which sets iterate alike everywhere).
HASH_ORDER = hashorder.SEEDED


class Refused(Exception):
    """A value the guards cannot name or compare: the function is traced."""


def _trusted_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths.get(k, "") for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots.update(p for p in sys.path if p.endswith(("site-packages", "dist-packages")))
    # compilecache's own code (an editable install lives outside site-packages).
    roots.add(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    return tuple(sorted(os.path.join(os.path.realpath(r), "") for r in roots if r))


_TRUSTED = _trusted_roots()


@functools.lru_cache(maxsize=4096)
def is_library_file(filename: str) -> bool:
    """Whether code from ``filename`` belongs to the installed packages or the standard library
    (trusted by version), rather than to the program (guarded by its file's digest)."""
    if not filename or filename.startswith("<"):
        return filename.startswith("<frozen ")
    real = os.path.realpath(filename)
    return real.startswith(_TRUSTED)


def is_library_code(code: types.CodeType) -> bool:
    return is_library_file(code.co_filename)


# An installed package's module globals that hold plain values are compared by value: a package
# that computes one at import from the environment or a file traces differently with another.
# JAX's own are left out: its configuration is guarded whole.
_PLAIN = (bool, int, float, complex, str, bytes, type(None))
_OWN_GLOBALS = ("jax", "jaxlib", "compilecache")


# Where installed packages live: a file under one of these is an installed package's.
_INSTALLED = ("/site-packages/", "/dist-packages/")


def installed_rest(filename: str) -> str | None:
    """``filename`` below the installed packages' directory it is in (``"numpy/core/x.py"``),
    ``None`` for a file outside them (the program's, the standard library's)."""
    for marker in _INSTALLED:
        if marker in filename:
            return filename.split(marker, 1)[1]
    return None


def float_text(value: float) -> str:
    """A float by value: its hex form (-0.0 apart from 0.0), and a NaN by its bytes (every
    NaN's hex form is ``nan``, and ``math.copysign`` reads its sign)."""
    return value.hex() if value == value else struct.pack("<d", value).hex()


def library_modules(ran: dict[types.CodeType, dict[str, Any]]) -> list[str]:
    """The installed packages' modules (outside JAX) whose code ran (code -> the globals it
    ran with). The standard library's are left out: trusted by Python's version, and some keep
    a value of their process (``logging._startTime``). So is code of no module's namespace."""
    return _modules_that_ran(
        ran,
        lambda code: installed_rest(code.co_filename) is not None,
        excluded=_OWN_GLOBALS,
    )


def ran_modules(ran: dict[types.CodeType, dict[str, Any]]) -> list[str]:
    """Every module whose code ran, as its namespace (JAX's and the standard library's too:
    what they bind is fingerprinted, see :mod:`.bindings`), the program's own left out (its
    code is guarded by the walk)."""
    return _modules_that_ran(ran, is_library_code, excluded=("compilecache",))


def _modules_that_ran(
    ran: dict[types.CodeType, dict[str, Any]],
    counted: Callable[[types.CodeType], bool],
    *,
    excluded: Iterable[str],
) -> list[str]:
    """The modules whose code (those ``counted``) ran in their own namespace, but those of the
    top-level packages ``excluded``."""
    left_out = set(excluded)
    names: set[str] = set()
    for code, namespace in ran.items():
        if not counted(code):
            continue
        name = namespace.get("__name__")
        if not isinstance(name, str) or name.split(".", 1)[0] in left_out:
            continue
        module = sys.modules.get(name)
        if module is not None and vars(module) is namespace:
            names.add(name)
    return sorted(names)


# Installed modules' file digests, once per process (an installed package edited in place keeps
# its version, not its contents).
_MODULE_FILES: dict[str, str] = {}


def module_file_digest(module_name: str) -> str:
    """The sha256 of an imported module's file (``""`` where it has none to read)."""
    known = _MODULE_FILES.get(module_name)
    if known is None:
        filename = getattr(sys.modules.get(module_name), "__file__", None) or ""
        try:
            known = file_digest(filename) if filename.endswith(".py") else ""
        except Refused:
            known = ""
        _MODULE_FILES[module_name] = known
    return known


def plain_globals(module_name: str) -> tuple[str, ...]:
    """The names of a module's globals that hold numbers, strings or tuples of them."""
    module = sys.modules.get(module_name)
    if module is None:
        return ()
    namespace = vars(module)
    return tuple(
        sorted(
            name
            for name, value in list(namespace.items())
            if not (name.startswith("__") and name.endswith("__")) and _plain(value, 0) is not None
        )
    )


def plain_globals_digest(module_name: str, names: Iterable[str]) -> str:
    """The digest of the values of a module's globals ``names`` (``""`` where the module is not
    imported or one of them is not a plain value now)."""
    module = sys.modules.get(module_name)
    if module is None:
        return ""
    namespace = vars(module)
    h = hashlib.sha256()
    for name in names:
        encoded = _plain(namespace.get(name, _MISSING), 0)
        if encoded is None:
            return ""
        h.update(f"{name}={encoded}\n".encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def _plain_class_attributes(cls: type) -> list[str]:
    """A class's own and inherited attributes that hold numbers, strings or tuples of them."""
    found = []
    for klass in cls.__mro__[:-1]:
        for key, item in sorted(vars(klass).items()):
            encoded = _plain(item, 0)
            if encoded is not None and not key.startswith("__"):
                found.append(f"{klass.__qualname__}.{key}={encoded}")
    return found


def _plain(value: Any, depth: int) -> str | None:
    kind = type(value)
    if kind is float:
        return "f" + float_text(value)
    if kind is complex:
        return f"c{float_text(value.real)},{float_text(value.imag)}"
    if kind in _PLAIN:
        return f"{kind.__name__}{value!r}"
    if kind is tuple and depth < 2:
        parts = [_plain(v, depth + 1) for v in value]
        if all(p is not None for p in parts):
            return "(" + ",".join(p for p in parts if p is not None) + ")"
    return None


# The standard library's modules whose functions and classes depend only on their arguments:
# every other module of the standard library keeps state of its process (warnings' filters,
# logging's levels, decimal's context, locale, the garbage collector, codecs' registry, files
# through os.path, frames through inspect, copy through copyreg's table, weak references through
# the garbage collector, json's default encoder, re's cache of patterns), so a program's code that
# uses one is traced, not guarded.
PURE_STDLIB = frozenset(
    {
        "abc",
        "_abc",
        "bisect",
        "_bisect",
        "builtins",
        "cmath",
        "collections",
        "_collections",
        "_collections_abc",
        "contextlib",
        "dataclasses",
        "enum",
        "fractions",
        "functools",
        "_functools",
        "heapq",
        "_heapq",
        "itertools",
        "keyword",
        "math",
        "numbers",
        "operator",
        "_operator",
        "string",
        "_string",
        "struct",
        "_struct",
        "textwrap",
        "types",
        "typing",
    }
)
# Installed packages (or their modules) that read files, the network or the process's state.
DENIED_PACKAGES = frozenset(
    {
        "numpy.lib._npyio_impl",
        "numpy.lib.npyio",
        "numpy.lib.format",
        "numpy.lib._datasource",
        "numpy._core.memmap",
        "numpy._core.records",
        "numpy.testing",
        "numpy.ctypeslib",
        "absl",
        "pandas",
        "h5py",
        "fsspec",
        "requests",
        "urllib3",
        "httpx",
        "boto3",
        "botocore",
        "tensorflow",
        "datasets",
        "orbax",
        "psutil",
        "omegaconf",
        "hydra",
        "dotenv",
        "tqdm",
        # State of their own that their code reads, outside their module globals: torch's
        # default dtype, generator, threads and tensors; a tokenizer's vocabulary; mpmath's
        # precision; SciPy's special-function error handling.
        "torch",
        "tokenizers",
        "mpmath",
        "scipy.special",
    }
)
# Classes of those modules whose instances are plain values, compared by their attributes
# (a program's parsed arguments).
VALUE_CLASSES = frozenset({"argparse.Namespace"})
# NumPy's functions that read or write files (its C ones name no module of their own).
DENIED_NUMPY_FUNCTIONS = frozenset(
    {"fromfile", "tofile", "load", "save", "savez", "loadtxt", "savetxt", "genfromtxt", "memmap"}
)


def denied_module(name: str) -> bool:
    """Whether a module's state is outside the program: the modules above, the standard
    library's but the pure ones, and installed packages that do I/O."""
    if any(name == d or name.startswith(d + ".") for d in DENIED_MODULES | DENIED_PACKAGES):
        return True
    top = name.split(".", 1)[0]
    return top in sys.stdlib_module_names and top not in PURE_STDLIB


def _has_file(filename: str) -> bool:
    return bool(filename) and not filename.startswith("<") and os.path.isfile(filename)


def code_digest(code: types.CodeType) -> str:
    """A code object by value: its bytecode, constants (nested code by value) and names."""
    h = hashlib.sha256()
    stack = [code]
    while stack:
        current = stack.pop()
        h.update(current.co_code)
        h.update(
            repr(
                (
                    current.co_names,
                    current.co_varnames,
                    current.co_freevars,
                    current.co_cellvars,
                    current.co_flags,
                    current.co_argcount,
                    current.co_posonlyargcount,
                    current.co_kwonlyargcount,
                    current.co_qualname,
                )
            ).encode()
        )
        for const in current.co_consts:
            if isinstance(const, types.CodeType):
                stack.append(const)
                h.update(b"code")
            else:
                h.update(f"{type(const).__name__}:{const!r}".encode())
    return h.hexdigest()


def _process_start() -> float:
    """When this process started (wall clock): a program file changed since then may not be
    the code the process runs."""
    try:
        with open("/proc/self/stat") as handle:
            ticks = int(handle.read().rsplit(")", 1)[1].split()[19])
        # Its age on the clock /proc counts in (since boot), taken from the wall clock now: the
        # boot time /proc/stat gives is whole seconds, up to a second early, and a file written
        # in that second before the process started looked changed while it ran.
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
        return time.time() - max(age, 0.0)
    except (OSError, ValueError, IndexError, AttributeError):
        return time.time()  # no /proc: the module's import, a little later than the start


_STARTED = _process_start()


def file_digest(filename: str) -> str:
    """The sha256 of a program file; raises :class:`Refused` for code without a file, and for
    a file changed since this process started (the code it runs may be the file's former text)."""
    try:
        stat = os.stat(filename)
        seen = (filename, stat.st_ino, stat.st_size, stat.st_mtime_ns)
        known = _DIGESTS.get(seen)
        if known is not None:
            return known
        with open(filename, "rb") as handle:
            changed = os.fstat(handle.fileno()).st_mtime
            data = handle.read()
    except OSError as exc:
        raise Refused(f"its code has no file to compare ({filename})") from exc
    if changed > _STARTED:
        raise Refused(f"{os.path.basename(filename)} changed while this process ran")
    digest = _DIGESTS[seen] = hashlib.sha256(data).hexdigest()
    return digest


# Program files digested in this process, by what their stat says (each file is read once).
_DIGESTS: dict[tuple[str, int, int, int], str] = {}


@functools.lru_cache(maxsize=16384)
def code_reads(code: types.CodeType) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """What one code object (not its nested functions) names: the globals it reads or writes,
    the attributes it reads, and the modules it imports."""
    globals_: set[str] = set()
    attributes: set[str] = set()
    imports: set[str] = set()
    for instruction in dis.get_instructions(code):
        op = instruction.opname
        if op in _GLOBAL_OPS:
            globals_.add(str(instruction.argval))
        elif op in _ATTRIBUTE_OPS:
            attributes.add(str(instruction.argval))
        elif op == "IMPORT_NAME":
            imports.add(str(instruction.argval))
        elif op == "IMPORT_FROM":
            attributes.add(str(instruction.argval))
    return frozenset(globals_), frozenset(attributes), frozenset(imports)


_GLOBAL_OPS = frozenset(
    {"LOAD_GLOBAL", "LOAD_NAME", "STORE_GLOBAL", "DELETE_GLOBAL", "STORE_NAME", "DELETE_NAME"}
)
_ATTRIBUTE_OPS = frozenset(
    {"LOAD_ATTR", "LOAD_METHOD", "STORE_ATTR", "DELETE_ATTR", "LOAD_SUPER_ATTR"}
)


def _floating_point(one: float = 1.0, three: float = 3.0, tiny: float = 5e-324) -> list[str]:
    """The processor's floating-point mode, as Python's own arithmetic sees it (computed from
    arguments, so that nothing is folded at compile time): its rounding direction (a program
    may set it through libm) and whether subnormals are flushed to zero."""
    return [
        (one / three).hex(),
        (-one / three).hex(),
        (tiny * one).hex(),
        (2.2250738585072014e-308 * (one / 2)).hex(),
    ]


def process_state() -> dict[str, Any]:
    """What the interpreter and NumPy keep for the whole process that changes what code
    computes: the interpreter's flags (``-O`` strips asserts), its limit on integer strings,
    the warnings filters (a warning inside a trace can raise), NumPy's floating-point error
    handling (with the function it calls) and print options."""
    state: dict[str, Any] = {
        "flags": tuple(sys.flags),
        "int_max_str_digits": sys.get_int_max_str_digits(),
        "warnings": [repr(f) for f in warnings.filters],
        "floating point": _floating_point(),
    }
    np = sys.modules.get("numpy")
    if np is not None:
        state["numpy errors"] = sorted(np.geterr().items())
        # What np.seterr(...="call") calls, compared as a value (a program's function by its
        # code): an overflow inside a trace raises or calls it.
        state["numpy error call"] = np.geterrcall()
        state["numpy print"] = sorted((k, repr(v)) for k, v in np.get_printoptions().items())
        state["numpy type names"] = sorted((k, str(v)) for k, v in np.sctypeDict.items())
    return state


def denied_builtin(code: types.CodeType, globals_: dict[str, Any]) -> str | None:
    """The builtin that reads outside state which ``code`` names (``None`` when none)."""
    for name in sorted(code_reads(code)[0]):
        if name not in globals_ and name in DENIED_BUILTINS and hasattr(builtins, name):
            return name
    return None


@functools.lru_cache(maxsize=16384)
def builds_sets(code: types.CodeType) -> bool:
    """Whether ``code`` makes a set (a literal, a comprehension, ``set()``/``frozenset()``)."""
    for instruction in dis.get_instructions(code):
        if instruction.opname in ("BUILD_SET", "SET_ADD", "SET_UPDATE"):
            return True
        if instruction.opname in _GLOBAL_OPS and instruction.argval in ("set", "frozenset"):
            return True
    return False


def nested_codes(code: types.CodeType) -> Iterable[types.CodeType]:
    stack = [code]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(c for c in current.co_consts if isinstance(c, types.CodeType))


@dataclasses.dataclass
class Walk:
    """The guards of one trace: a digest per root and per program global read, the program's
    code reached (which must cover every program function the trace runs), its files' digests.

    ``refused`` says why the trace cannot be guarded (``None`` when it can)."""

    digests: dict[str, str] = dataclasses.field(default_factory=dict)
    files: dict[str, str] = dataclasses.field(default_factory=dict)
    codes: set[types.CodeType] = dataclasses.field(default_factory=set)
    # The globals each code was reached with: one code object can be made into functions of
    # other globals (``types.FunctionType(code, namespace)``), each one guarded on its own.
    namespaces: dict[types.CodeType, list[dict[str, Any]]] = dataclasses.field(default_factory=dict)
    refused: str | None = None
    # The program's modules reached, and every name the program's code reached uses.
    _modules: dict[str, types.ModuleType] = dataclasses.field(default_factory=dict)
    _names: set[str] = dataclasses.field(default_factory=set)
    _dynamic: bool = False
    _builtins: set[str] = dataclasses.field(default_factory=set)
    _builtins_done: set[str] = dataclasses.field(default_factory=set)
    _nodes: int = 0
    _array_bytes: int = 0
    _done_globals: set[tuple[str, str]] = dataclasses.field(default_factory=set)
    _pending_codes: list[tuple[types.CodeType, dict[str, Any]]] = dataclasses.field(
        default_factory=list
    )
    _numbers: dict[int, int] = dataclasses.field(default_factory=dict)
    _alive: list[Any] = dataclasses.field(default_factory=list)

    def number(self, value: Any) -> int:
        """``value``'s number in the order this walk first met each object (kept alive)."""
        found = self._numbers.get(id(value))
        if found is None:
            found = self._numbers[id(value)] = len(self._numbers)
            self._alive.append(value)
        return found

    def root(self, path: str, value: Any, *, aliases: bool = True) -> None:
        """Guard ``value`` under ``path`` (its digest, and everything it leads to);
        ``aliases``: whether which of its values are one object is compared too (the program's
        values; not settings, whose objects follow how each was set)."""
        if self.refused is not None:
            return
        try:
            self.digests[path] = _Digest(self, aliases=aliases).of(value)
        except Refused as exc:
            self.refused = f"{path}: {exc}"
        except RecursionError:
            self.refused = f"{path}: nested too deeply to compare"

    def finish(self) -> Walk:
        """Follow the program's code to the globals it names, until nothing new is reached."""
        try:
            while self.refused is None and (
                self._pending_codes
                or self._unread_globals()
                or self._builtins - self._builtins_done
            ):
                while self._pending_codes:
                    code, globals_ = self._pending_codes.pop()
                    self._read_code(code, globals_)
                for name in sorted(self._builtins - self._builtins_done):
                    self._builtins_done.add(name)
                    value = getattr(builtins, name, _MISSING)
                    if value is _MISSING:
                        continue
                    if getattr(value, "__module__", None) == "builtins" or any(
                        value is x for x in (None, Ellipsis, NotImplemented)
                    ):  # Python's own: which one is guarded (a denied one is refused if it runs)
                        self.digests[f"builtin {name}"] = f"builtins.{name}:{type(value).__name__}"
                    else:  # something the program put into builtins: by value
                        self.root(f"builtin {name}", value)
                for module_name, name in self._unread_globals():
                    self._done_globals.add((module_name, name))
                    module = self._modules[module_name]
                    value = vars(module)[name]
                    if _is_program_module(module):
                        self.root(f"global {name} of {module_name}", value)
                    else:
                        self._library_attribute(module_name, name, value)
                    if self.refused is not None:
                        break
        except Refused as exc:
            self.refused = str(exc)
        return self

    def _library_attribute(self, module_name: str, name: str, value: Any) -> None:
        """An attribute of an installed module that the program's code names: its functions
        and classes are trusted with the module's version; data on it (which a program may set)
        is guarded, and a module or function that reads outside state refuses."""
        if isinstance(value, types.ModuleType):
            if denied_module(value.__name__):
                self.refused = f"it reads module {value.__name__} (outside the program's values)"
            else:
                self._modules.setdefault(value.__name__, value)
            return
        if isinstance(value, (types.FunctionType, type)) and not is_library_file(
            getattr(sys.modules.get(getattr(value, "__module__", "") or ""), "__file__", "") or ""
        ):
            # The program's own function or class set on an installed module: guarded as such.
            self.root(f"{module_name}.{name}", value)
            return
        if callable(value):
            owner = getattr(value, "__module__", "") or ""
            if denied_module(owner) or (owner == "builtins" and name in DENIED_BUILTINS):
                self.refused = f"it calls {owner}.{name} (outside the program's values)"
                return
            # Its code is trusted with its package's version, but which function the name holds
            # is guarded: a program may have set another one there (jnp.sin = jnp.cos).
            inner = getattr(value, "__wrapped__", None) or getattr(value, "_fun", None) or value
            parts = [
                type(value).__qualname__,
                str(getattr(inner, "__module__", "")),
                str(getattr(inner, "__qualname__", getattr(inner, "__name__", ""))),
            ]
            if isinstance(value, type):
                # An installed class's attributes that hold plain values, by value: a program
                # may configure the class (``Defaults.scale = 3.0``) before it traces.
                parts += _plain_class_attributes(value)
            self.digests[f"{module_name}.{name}"] = hashlib.sha256(
                "|".join(parts).encode("utf-8", "surrogatepass")
            ).hexdigest()
            return
        if value is None or isinstance(value, (bool, int, float, complex, str, bytes, tuple)):
            self.root(f"{module_name}.{name}", value)

    def digest(self) -> str:
        """One digest of every guard (the variant a stored trace is filed under)."""
        h = hashlib.sha256()
        for path in sorted(self.digests):
            h.update(f"{path}\0{self.digests[path]}\0".encode())
        for filename in sorted(self.files):
            h.update(f"file {filename}\0{self.files[filename]}\0".encode())
        return h.hexdigest()

    def guards(self) -> dict[str, str]:
        """Every guard by what it names, for an explanation of which one changed."""
        named = dict(self.digests)
        named.update((f"code of {_short(f)}", d) for f, d in self.files.items())
        return named

    def _unread_globals(self) -> list[tuple[str, str]]:
        wanted: list[tuple[str, str]] = []
        for module_name, module in list(self._modules.items()):
            namespace = vars(module)
            every = self._dynamic and _is_program_module(module)
            # In a fixed order: the walk numbers the objects it meets in the order it meets them.
            for name in list(namespace) if every else sorted(self._names):
                if name in namespace and (module_name, name) not in self._done_globals:
                    wanted.append((module_name, name))
        return wanted

    def add_code(self, code: types.CodeType, globals_: dict[str, Any] | None) -> None:
        """The program's ``code`` is reached (with the globals it reads names in)."""
        namespace = globals_ if globals_ is not None else {}
        if any(g is namespace for g in self.namespaces.get(code, ())):
            return
        first = code not in self.codes
        for nested in nested_codes(code):
            self.codes.add(nested)
            self.namespaces.setdefault(nested, []).append(namespace)
        filename = code.co_filename
        if first:
            if _has_file(filename) and filename not in self.files:
                self.files[filename] = file_digest(filename)
            # Its code by value too: what runs is the code object, which a program can make
            # from other text under a file's name, or change (``__code__.replace``).
            self.digests[f"code of {code.co_qualname} ({filename})"] = code_digest(code)
        self._pending_codes.append((code, namespace))

    def _read_code(self, code: types.CodeType, globals_: dict[str, Any]) -> None:
        module_name = str(globals_.get("__name__", ""))
        module = sys.modules.get(module_name)
        in_module = False
        if module is not None and vars(module) is globals_:
            in_module = True
            self._modules.setdefault(module_name, module)
        for nested in nested_codes(code):
            # Its constants are numbered among the objects the walk meets: a global that is
            # one of them (`G is "abc"`) is told from an equal one that is not.
            for const in nested.co_consts:
                if type(const) in _NUMBERED_SCALARS or type(const) is tuple:
                    self.number(const)
            if not in_module:  # exec'd code with globals of its own: each one it reads
                for name in sorted(code_reads(nested)[0]):
                    if name in globals_:
                        self.root(f"global {name} of {code.co_qualname}", globals_[name])
            global_names, attributes, imports = code_reads(nested)
            if HASH_ORDER and any(
                isinstance(c, frozenset) and not hashorder.hashes_alike(c) for c in nested.co_consts
            ):
                raise Refused(
                    f"{nested.co_qualname} holds a set of strings: its order follows Python's "
                    "per-process string hashing (PYTHONHASHSEED=0 fixes it)"
                )
            for name in sorted(imports):
                if denied_module(name):
                    raise Refused(
                        f"{nested.co_qualname} imports {name} (outside the program's values)"
                    )
                imported = sys.modules.get(name)
                if imported is None:
                    raise Refused(f"{nested.co_qualname} imports {name}, not imported yet")
                _Digest(self).of(imported)
            if not self._dynamic and not DYNAMIC_NAMES.isdisjoint(global_names | attributes):
                self._dynamic = True
            self._names.update(global_names, attributes)
            for name in global_names:
                if name not in globals_:  # a builtin (or one the program put there): by value
                    self._builtins.add(name)


def value_digest(path: str, value: Any, *, aliases: bool = True) -> str | None:
    """One value's digest as the guards compare it (``None`` where they cannot)."""
    walk = Walk()
    walk.root(path, value, aliases=aliases)
    walk.finish()
    return None if walk.refused is not None else walk.digest()


def structure_digest(treedef: Any) -> str | None:
    """A pytree structure's digest, with its custom nodes' registrations as this process has
    them (``None`` where they cannot be compared). A served trace's output is rebuilt from its
    leaves with this process's registrations: where a field moved, or became static, they must
    be the recording's, or the leaves land in the wrong places."""
    return value_digest("the output's structure", treedef, aliases=False)


_MISSING = object()
_NO_CODE = compile("", "<none>", "exec")


def _is_program_module(module: types.ModuleType) -> bool:
    filename = getattr(module, "__file__", None) or ""
    return bool(filename) and not is_library_file(filename)


def _short(filename: str) -> str:
    return os.path.basename(filename)


# Values whose equal copies can be one object or two (numbered like containers).
_NUMBERED_SCALARS = frozenset({int, str, float, complex, bytes})
# Objects that are one object in every process (a module, a class, a function by its code):
# which other reference holds the same one says nothing.
_STABLE_IDENTITY = (
    types.ModuleType,
    type,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
)


class _Digest:
    """One root's digest: a running sha256 over a deterministic encoding of its value."""

    def __init__(self, walk: Walk, *, aliases: bool = True) -> None:
        self.walk = walk
        # Whether objects are numbered in the order the walk first meets them (so that two
        # globals holding one list differ from two holding equal lists); not inside a set,
        # whose items come in an order of their hashes.
        self.aliases = aliases
        self.h = hashlib.sha256()
        # Each object is encoded as the digest of its own encoding, so that a value shared by two
        # references encodes as two equal values do (sharing follows object identity, which
        # differs between processes). Objects done (kept alive while the walk runs) -> their
        # digest; objects being encoded -> their depth, for a cycle's relative back reference.
        self.done: dict[int, tuple[str, Any]] = {}
        self.active: dict[int, int] = {}
        self.outer: list[Any] = []

    def of(self, value: Any) -> str:
        self.feed(value)
        return self.h.hexdigest()

    def put(self, *parts: object) -> None:
        self.h.update("\x1f".join(str(p) for p in parts).encode("utf-8", "surrogatepass"))
        self.h.update(b"\x1e")

    def feed(self, v: Any) -> None:
        walk = self.walk
        walk._nodes += 1
        if walk._nodes > MAX_NODES:
            raise Refused("too many values to compare")
        t = type(v)
        if self.aliases and t in _NUMBERED_SCALARS:
            # Which equal numbers and strings are one object (interned, cached, a code's
            # constant) can differ between processes, and `is` tells.
            self.put("object", walk.number(v))
        if v is None or t is bool or t is int or t is str or v is Ellipsis or v is NotImplemented:
            self.put(t.__name__, v)
            return
        if t is float:
            self.put("float", float_text(v))
            return
        if t is complex:
            self.put("complex", float_text(v.real), float_text(v.imag))
            return
        if t is bytes:
            self.put("bytes", hashlib.sha256(v).hexdigest())
            return
        if isinstance(v, (int, float, complex, str, bytes)):  # a subclass: its class and value
            self._class(t)
            base: Any = next(b for b in (bool, int, float, complex, str, bytes) if isinstance(v, b))
            self.feed(base(v))
            attributes = getattr(v, "__dict__", None)
            if attributes:
                self.feed(dict(attributes))
            return
        key = id(v)
        if self.aliases and not isinstance(v, _STABLE_IDENTITY):
            self.put("object", walk.number(v))
        done = self.done.get(key)
        if done is not None:
            self.put("node", done[0])
            return
        depth = self.active.get(key)
        if depth is not None:
            self.put("cycle", len(self.outer) - depth)
            return
        self.active[key] = len(self.outer)
        self.outer.append(self.h)
        self.h = hashlib.sha256()
        try:
            self._node(v)
            digest = self.h.hexdigest()
        finally:
            self.h = self.outer.pop()
            del self.active[key]
        self.done[key] = (digest, v)
        self.put("node", digest)

    def _node(self, v: Any) -> None:
        """The encoding of one object (a container, a function, a class, an instance)."""
        t = type(v)
        walk = self.walk
        if isinstance(v, types.ModuleType):
            self._module(v)
        elif isinstance(v, type):
            self._class(v)
        elif isinstance(v, types.FunctionType):
            self._function(v)
        elif isinstance(v, types.MethodType):
            self.put("method")
            self.feed(v.__func__)
            self.feed(v.__self__)
        elif isinstance(v, (types.BuiltinFunctionType, types.BuiltinMethodType)):
            self._builtin(v)
        elif isinstance(v, functools.partial):
            self.put("partial")
            self.feed(v.func)
            self.feed(v.args)
            self.feed(v.keywords)
        elif isinstance(v, enum.Enum):
            self._class(t)
            self.put("enum", v.name)
        elif isinstance(v, (tuple, list)):
            if t not in (tuple, list):
                self._class(t)
            self.put(t.__name__, len(v))
            for item in v:
                self.feed(item)
            self._attributes(v)
        elif isinstance(v, (dict, types.MappingProxyType)):
            self._class(t) if t is not dict else self.put("dict")
            self.put(len(v))
            for key, item in v.items():
                self.feed(key)
                self.feed(item)
            factory = getattr(v, "default_factory", None)
            if factory is not None:
                self.feed(factory)
            self._attributes(v)
        elif isinstance(v, (set, frozenset)):
            if HASH_ORDER and not all(hashorder.hashes_alike(i) for i in v):
                raise Refused(
                    "a set of strings, objects or NaNs: its order follows Python's "
                    "per-process string hashing or the items' addresses"
                )
            if t not in (set, frozenset):
                self._class(t)
            # In the order it iterates: equal sets built in another order can iterate in
            # another (items whose hashes collide), and a trace that iterates one sees it.
            digests = [_Digest(walk, aliases=False).of(item) for item in v]
            self.put(t.__name__, *digests)
            self._attributes(v)
        else:
            self._other(v)

    def _module(self, module: types.ModuleType) -> None:
        name = module.__name__
        self.put("module", name)
        if denied_module(name) or name == "builtins":  # builtins: getattr(builtins, "open")
            raise Refused(f"it reads module {name} (outside the program's values)")
        filename = getattr(module, "__file__", None) or ""
        if filename and not is_library_file(filename):
            self.walk._modules.setdefault(name, module)
            self.walk.files.setdefault(filename, file_digest(filename))
        else:
            # An installed module: the attributes the program's code names are followed (data
            # set on it by the program, or a denied submodule or function reached through it).
            self.walk._modules.setdefault(name, module)

    def _class(self, cls: type) -> None:
        module = getattr(cls, "__module__", "") or ""
        self.put("class", module, getattr(cls, "__qualname__", cls.__name__))
        if denied_module(module) and f"{module}.{cls.__qualname__}" not in VALUE_CLASSES:
            raise Refused(f"it uses {module}.{cls.__qualname__} (outside the program's values)")
        source = sys.modules.get(module)
        filename = getattr(source, "__file__", None) or ""
        if module in ("builtins", "") or (filename and is_library_file(filename)):
            if module not in ("builtins", ""):
                # An installed class: its attributes that hold plain values, by value (a
                # program may configure it before it traces: ``Defaults.scale = 3.0``).
                self.put(*_plain_class_attributes(cls))
            return
        # The program's own class: its methods and class attributes are values it reads.
        for base in cls.__bases__:
            if base is not object:
                self.feed(base)
        for key, item in vars(cls).items():
            if key in ("__dict__", "__weakref__", "__doc__", "__module__", "__qualname__"):
                continue
            self.put("attr", key)
            self.feed(item)

    def _function(self, fn: types.FunctionType) -> None:
        code = fn.__code__
        self.put("function", fn.__module__, fn.__qualname__)
        if not is_library_code(code):
            self.walk.add_code(code, fn.__globals__)
        else:
            module = fn.__module__ or ""
            if denied_module(module):
                raise Refused(f"it calls {module}.{fn.__qualname__} (outside the program's values)")
        self.feed(fn.__defaults__)
        self.feed(fn.__kwdefaults__)
        cells = fn.__closure__ or ()
        for name, cell in zip(code.co_freevars, cells, strict=False):
            self.put("cell", name)
            try:
                contents = cell.cell_contents
            except ValueError:
                self.put("empty")
                continue
            self.feed(contents)
        attributes = getattr(fn, "__dict__", None)
        if attributes:
            self.feed(dict(attributes))

    def _builtin(self, fn: Any) -> None:
        owner = getattr(fn, "__self__", None)
        module = getattr(fn, "__module__", None) or (
            owner.__name__
            if isinstance(owner, types.ModuleType)
            else getattr(type(owner), "__module__", "")
        )
        name = getattr(fn, "__qualname__", getattr(fn, "__name__", "?"))
        self.put("builtin", module, name)
        if denied_module(str(module)) or (module == "builtins" and name in DENIED_BUILTINS):
            raise Refused(f"it calls {module}.{name} (outside the program's values)")
        if owner is not None and not isinstance(owner, types.ModuleType):
            self.feed(owner)

    def _other(self, v: Any) -> None:
        t = type(v)
        np = sys.modules.get("numpy")
        if np is not None:
            if isinstance(v, np.ndarray):
                if t is not np.ndarray:
                    self._class(t)
                self._array(v)
                self._attributes(v)
                return
            if isinstance(v, np.generic):
                self.put("npscalar", v.dtype.str, hashlib.sha256(v.tobytes()).hexdigest())
                return
            if isinstance(v, np.dtype):
                self._dtype(v)
                return
        jax_array = _jax_array_type()
        if jax_array is not None and isinstance(v, jax_array):
            self._jax_array(v)
            return
        if t.__name__ == "PyTreeDef" and (t.__module__ or "").startswith("jaxlib"):
            self._treedef(v)
            return
        special = _special(v)
        if special is not None:
            self.put(*special)
            return
        if type(v).__name__ == "_lru_cache_wrapper" and not is_library_code(
            getattr(getattr(v, "__wrapped__", None), "__code__", _NO_CODE)
        ):
            raise Refused(
                f"{getattr(v, '__qualname__', '?')} is memoised (functools.lru_cache): its cached "
                "results are not compared"
            )
        if hasattr(v, "_fun") and hasattr(v, "_jit_info"):  # a jitted function
            self.put("jit")
            self.feed(v._fun)
            # JAX's own values: which of them are one object follows JAX's caches (a jit
            # traced in this process shares some), not the program.
            aliases, self.aliases = self.aliases, False
            try:
                self.feed(jit_info_fields(v._jit_info))
            finally:
                self.aliases = aliases
            return
        attributes = getattr(v, "__dict__", None)
        slots = [s for c in t.__mro__ for s in getattr(c, "__slots__", ()) if isinstance(s, str)]
        if attributes is None and not slots:
            raise Refused(f"a {t.__module__}.{t.__qualname__} has no value to compare")
        self._class(t)
        # Whether its class is a pytree node (a program may register it in one run only): the
        # trace flattens it, or keeps it whole.
        registry = getattr(sys.modules.get("jax._src.tree_util"), "_registry", {})
        node = registry.get(t)
        self.put("pytree node", node is not None)
        if node is not None:
            self.feed(tuple(node))
        if attributes is not None:
            self.feed(dict(attributes))
        for slot in slots:
            if slot in ("__dict__", "__weakref__"):
                continue
            self.put("slot", slot)
            self.feed(getattr(v, slot, _MISSING if hasattr(v, slot) else None))

    def _treedef(self, treedef: Any) -> None:
        """A pytree structure by value: each node's type, its auxiliary data (its own repr
        abbreviates large data), and the functions that flatten and rebuild a custom node (the
        rebuild runs inside the trace)."""
        registry = getattr(sys.modules.get("jax._src.tree_util"), "_registry", {})
        stack = [treedef]
        while stack:
            node = stack.pop()
            data = node.node_data()
            if data is None:
                self.put("leaf", node.num_leaves)
                continue
            kind, aux = data
            self.put("node")
            self.feed(kind)
            self.feed(aux)
            entry = registry.get(kind)
            if entry is not None:
                self.feed(tuple(entry))
            children = node.children()
            self.put("children", len(children))
            stack.extend(reversed(children))

    def _attributes(self, v: Any) -> None:
        """The attributes a subclass of a container keeps beside its items."""
        attributes = getattr(v, "__dict__", None)
        if attributes:
            self.put("attributes")
            self.feed(dict(attributes))

    def _array(self, a: Any) -> None:
        if a.dtype.hasobject:
            raise Refused("an array of Python objects")
        self.walk._array_bytes += a.nbytes
        if self.walk._array_bytes > MAX_ARRAY_BYTES:
            raise Refused("arrays too large to compare")
        data = a.tobytes() if a.flags.c_contiguous else a.copy(order="C").tobytes()
        # Its layout too: equal values in Fortran order, or a view, answer `flags`,
        # `ravel(order="K")` and `np.shares_memory` otherwise.
        self.put("ndarray", a.shape, a.strides, a.flags.writeable, hashlib.sha256(data).hexdigest())
        self._dtype(a.dtype)
        if isinstance(a.base, sys.modules["numpy"].ndarray):  # a view of another array: which
            self.put("view of")
            self.feed(a.base)
        elif a.base is not None:  # other memory (a buffer, bytes, a JAX array's): its kind
            self.put("view of", type(a.base).__qualname__)

    def _dtype(self, dtype: Any) -> None:
        """A NumPy dtype by value: its kind and size, its fields, and its metadata (dtypes that
        differ in these compare equal)."""
        self.put("dtype", dtype.str, dtype.name, repr(dtype.descr) if dtype.fields else "")
        if dtype.metadata:
            self.feed(dict(dtype.metadata))

    def _jax_array(self, a: Any) -> None:
        np = sys.modules["numpy"]
        try:
            host = np.asarray(a)
        except Exception as exc:  # a tracer, a deleted buffer
            raise Refused(f"a JAX array with no value to compare ({type(exc).__name__})") from exc
        self.put("jaxarray", bool(getattr(a, "weak_type", False)), repr(getattr(a, "sharding", "")))
        self._array(host)


@functools.lru_cache(maxsize=1)
def _jax_array_type() -> type | None:
    module = sys.modules.get("jax")
    return getattr(module, "Array", None) if module is not None else None


def _special(v: Any) -> tuple[str, ...] | None:
    """A digest for the few C types of JAX and NumPy whose text says all of their value."""
    t = type(v)
    module = t.__module__ or ""
    if module.startswith(("jaxlib", "jax")) and t.__name__ in _FAITHFUL_REPRS:
        return ("jaxobj", t.__name__, repr(v))
    if module == "operator" and t.__name__ in ("methodcaller", "attrgetter", "itemgetter"):
        return ("operator", repr(v))
    if module == "ml_dtypes" or (isinstance(v, type) and module.startswith("ml_dtypes")):
        return ("ml_dtypes", repr(v))
    return None


# JAX's types whose repr holds their whole value (devices, shardings, the unspecified marker).
_FAITHFUL_REPRS = frozenset(
    {
        "CpuDevice",
        "GpuDevice",
        "TpuDevice",
        "Device",
        "SingleDeviceSharding",
        "NamedSharding",
        "PositionalSharding",
        "GSPMDSharding",
        "UnspecifiedValue",
        "PartitionSpec",
        "Layout",
        "DeviceLocalLayout",
        "Format",
    }
)


def jit_info_fields(info: Any) -> tuple[Any, ...]:
    """A jit's options as values, without its source location (a path that differs between
    hosts; the function itself is guarded by its code)."""
    fields = getattr(info, "_fields", ())
    skipped = ("fun_sourceinfo", "fun_signature")  # the function's code and defaults say these
    return tuple((f, getattr(info, f)) for f in fields if f not in skipped)
