"""Facts about this host, and whether an entry made on another host can run here.

One place for what the integrations record with each entry and what bundles check on import:

- the CPU: its first ``/proc/cpuinfo`` block, the ISA features a compiler targets
  (:func:`cpu_target`), and what ``-march=native`` resolves from (:func:`native_cpu`);
- framework and Python versions (:func:`jax_versions`, :func:`torch_versions`), and the versions
  of installed distributions (:func:`installed_version`);
- one comparison of versions, used on both sides (:func:`same_version`): an entry records
  ``torch.__version__`` (``2.15.0+cu132`` on the standard wheels) while the host's distribution
  says ``2.15.0``;
- :class:`HostCheck`: whether an entry can run here, and why not: on every read of the live
  path (``HostCheck(live=True)``: only what the frameworks' keys leave out) and on bundle import
  (everything an entry records).

Two rules for the CPU (:func:`cpu_problem`), one per kind of program. XLA compiles a JAX
executable for every ISA feature of the host, so it runs on any CPU that has those features: a
host with more features is served (``SUPERSET``). Inductor generates its C++ for the vector ISA it
picks from a few features (``cpu_vec_isa.py``: AVX2, AVX-512 and its extensions, AMX, NEON, SVE),
so a torch graph is served only where Inductor would pick the same ISA and write the same code
(``SAME_VECTORS``).

Ground layer: the standard library and the entry format only. Frameworks are imported late, by
the functions that need them, and only once the caller has them (the integrations) or asks for
devices (:meth:`HostCheck.jax_devices`).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import platform
import re
import sys
import threading
from collections.abc import Mapping
from typing import Any

from compilecache.entry import EntryHeader

# The CPU features compilers target (x86 flags of /proc/cpuinfo); on other architectures every
# listed feature counts.
_X86_ISA = re.compile(
    r"(sse\w*|ssse3|avx\w*|fma\w*|f16c|bmi\d|popcnt|abm|lzcnt|movbe|amx\w*|adx|sha_ni|aes|"
    r"pclmulqdq|vpclmulqdq|gfni|vaes|xop|cx16)"
)
# CPU properties that -march=native derives code generation from (x86 and Arm spellings).
_NATIVE_FIELDS = (
    "vendor_id",
    "cpu family",
    "model",
    "flags",
    "CPU implementer",
    "CPU architecture",
    "CPU variant",
    "CPU part",
    "Features",
)
_READABLE_CPU_FIELDS = ("model name", "vendor_id", "cpu family", "model", "CPU part")
GPU_PLATFORMS = frozenset({"gpu", "cuda", "rocm"})


# -- the CPU -------------------------------------------------------------------------------------


def read_cpuinfo(path: str = "/proc/cpuinfo", *, whole: bool = False) -> dict[str, str]:
    """The first processor block of ``/proc/cpuinfo`` (empty where there is none); with
    ``whole``, the first value of each field in the whole file (old Arm kernels list
    ``Features`` after the processor blocks)."""
    fields: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    if fields and not whole:
                        break
                    continue
                name, sep, value = line.partition(":")
                if sep:
                    fields.setdefault(name.strip(), value.strip())
    except OSError:
        pass
    return fields


def isa_features(info: Mapping[str, str]) -> list[str]:
    """The ISA features of a ``/proc/cpuinfo`` block that compiled code may rely on: the x86
    ``flags`` compilers target, or every Arm ``Features`` entry."""
    if "flags" in info:
        return sorted({f for f in info["flags"].split() if _X86_ISA.fullmatch(f)})
    if "Features" in info:
        return sorted(set(info["Features"].split()))
    return []


# The features Inductor picks its vector ISA and its compiler flags from (torch's
# ``cpu_vec_isa.py``: ``-mavx2 -mfma -mf16c``, the AVX-512 set with VNNI and BF16, AMX; NEON and
# SVE on Arm): two hosts that share these generate the same C++ for a graph.
_INDUCTOR_VECTOR_FEATURES = frozenset(
    {
        "avx2",
        "fma",
        "f16c",
        "avx512f",
        "avx512cd",
        "avx512dq",
        "avx512bw",
        "avx512vl",
        "avx512_vnni",
        "avx512_bf16",
        "amx_tile",
        "amx_bf16",
        "amx_int8",
        "amx_fp16",
        "asimd",
        "sve",
        "sve2",
        "bf16",
        "i8mm",
        "svebf16",
        "svei8mm",
    }
)
# Where Linux says the SVE vector length (bytes) its processes get: code generated for one length
# computes wrong results at another, and /proc/cpuinfo does not say it.
_SVE_LENGTH = "/proc/sys/abi/sve_default_vector_length"
# The two CPU rules (see the module's docstring).
SUPERSET = "superset"
SAME_VECTORS = "same-vectors"


def _sve_vector_bits() -> int:
    try:
        with open(_SVE_LENGTH, encoding="ascii") as f:
            return int(f.read().split()[0]) * 8
    except (OSError, ValueError, IndexError):
        return 0


@functools.cache
def cpu_target() -> dict[str, Any]:
    """This host's CPU architecture and ISA features: what a CPU executable may rely on (XLA and
    Inductor compile for the host CPU, and neither cache key says which one). Read once per
    process."""
    target: dict[str, Any] = {
        "machine": platform.machine(),
        "features": isa_features(read_cpuinfo(whole=True)),
    }
    sve_bits = _sve_vector_bits()
    if sve_bits:
        target["sve_bits"] = sve_bits
    return target


def describe_cpu(target: Mapping[str, Any] | None) -> str:
    """One short line for a recorded CPU target: its machine and the vector features that tell
    CPU generations apart (``x86_64 avx2 fma avx512f ...``); ``""`` for none."""
    if not isinstance(target, Mapping):
        return ""
    features = [str(f) for f in target.get("features") or ()]
    vectors = [f for f in features if f in _INDUCTOR_VECTOR_FEATURES]
    sve = f" sve{target['sve_bits']}" if target.get("sve_bits") else ""
    return f"{target.get('machine') or '?'} {' '.join(vectors) or 'no vector extensions'}{sve}"


# The vector levels a label names, highest first: the feature that marks each.
_LEVELS = (("amx_tile", "amx"), ("avx512f", "avx512"), ("avx2", "avx2"), ("sve", "sve"))


def cpu_label(target: Mapping[str, Any] | None) -> str:
    """A short label for a recorded CPU target, for a column: its machine, its highest vector
    level and its kind (``x86_64 avx512 3f2a1c``: hosts with the same label are one kind);
    ``-`` for none."""
    if not isinstance(target, Mapping):
        return "-"
    features = {str(f) for f in target.get("features") or ()}
    level = next((name for flag, name in _LEVELS if flag in features), "")
    return " ".join(
        p for p in (str(target.get("machine") or "?"), level, host_kind(target)[:6]) if p
    )


def host_kind(target: Mapping[str, Any]) -> str:
    """A short digest of a CPU target: hosts of one kind share it (the name of their own entries
    where another kind's entry holds a key, see :mod:`compilecache.runtime.cache`)."""
    features = sorted(str(f) for f in target.get("features") or ())
    text = f"{target.get('machine')}|{' '.join(features)}|{target.get('sve_bits', 0)}"
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _listed(features: list[str]) -> str:
    return ", ".join(features[:6]) + (", ..." if len(features) > 6 else "")


def cpu_problem(recorded: Mapping[str, Any], local: Mapping[str, Any], rule: str) -> str | None:
    """Why code compiled for the CPU ``recorded`` may not be served on the CPU ``local``
    (``None`` when it may), under ``rule``: :data:`SUPERSET` (JAX) or :data:`SAME_VECTORS`
    (torch's Inductor). Another architecture, an SVE vector length of its own, or a feature
    the code relies on that this CPU lacks is always a refusal; so is a host whose features are
    unknown for code that relies on some (when in doubt, miss)."""
    machine = str(recorded.get("machine") or "")
    here = str(local.get("machine") or "")
    if machine and machine != here:
        return f"compiled on {machine}; this host is {here}"
    needed = {str(f) for f in recorded.get("features") or ()}
    have = {str(f) for f in local.get("features") or ()}
    if rule == SAME_VECTORS:
        needed &= _INDUCTOR_VECTOR_FEATURES
        have &= _INDUCTOR_VECTOR_FEATURES
    lacking = sorted(needed - have)
    if lacking and not local.get("features"):
        return f"compiled for a CPU with {_listed(lacking)}; this host's CPU features are unknown"
    if lacking:
        return f"compiled for a CPU with {_listed(lacking)}, which this CPU lacks"
    if rule == SAME_VECTORS and have - needed:
        more = _listed(sorted(have - needed))
        return f"compiled for a CPU without {more}; Inductor writes other code for this CPU"
    bits, bits_here = int(recorded.get("sve_bits") or 0), int(local.get("sve_bits") or 0)
    if bits != bits_here and (bits or rule == SAME_VECTORS):
        return f"compiled for {bits or 'no'} SVE bits; this CPU has {bits_here or 'none'}"
    return None


_native_lock = threading.Lock()
_native: tuple[str, str] | None = None


def native_cpu() -> tuple[str, str]:
    """(digest, readable) of what ``-march=native`` resolves from on this CPU."""
    global _native
    with _native_lock:
        if _native is None:
            info = read_cpuinfo()
            parts = [f"machine={platform.machine()}"]
            for name in _NATIVE_FIELDS:
                if name in info:
                    value = info[name]
                    if name in ("flags", "Features"):
                        value = " ".join(sorted(set(value.split())))
                    parts.append(f"{name}={value}")
            if len(parts) == 1:
                # No /proc/cpuinfo (macOS, containers that hide it): the best we can say.
                parts.append(f"processor={platform.processor()}")
            digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()
            readable = (
                ", ".join(f"{n}={info[n]}" for n in _READABLE_CPU_FIELDS if n in info)
                or platform.processor()
            )
            _native = (digest, f"{platform.machine()} {readable}".strip())
        return _native


# -- versions ------------------------------------------------------------------------------------


def framework_module(name: str) -> Any:
    """A framework module, typed ``Any``: the integrations reach private APIs through it and
    guard each use (at install time, or where it is called)."""
    return importlib.import_module(name)


def python_version() -> str:
    """``3.11.7``: the Python entries were built under (``Python.h``, pickles, bytecode)."""
    return sys.version.split()[0]


def jax_versions() -> dict[str, str]:
    """What a JAX entry records: jax, jaxlib and Python (JAX must be importable)."""
    jax, jaxlib = framework_module("jax"), framework_module("jaxlib")
    return {
        "jax": str(jax.__version__),
        "jaxlib": str(jaxlib.__version__),
        "python": python_version(),
    }


def torch_versions() -> dict[str, str]:
    """What a torch entry records: torch (``__version__``, with its local label such as
    ``+cu132``), its git revision, and Python (torch must be importable)."""
    torch = framework_module("torch")
    return {
        "torch": str(torch.__version__),
        "git": str(getattr(getattr(torch, "version", None), "git_version", "")),
        "python": python_version(),
    }


def installed_version(distribution: str) -> str | None:
    """The installed version of ``distribution`` from its metadata (nothing is imported), or
    ``None`` when it is not installed."""
    from importlib import metadata  # late: a local-only cache never needs it

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def installed_frameworks() -> dict[str, str]:
    """The framework distributions installed here and their versions (for bundle manifests)."""
    return {
        name: version
        for name in ("jax", "jaxlib", "torch", "triton")
        if (version := installed_version(name)) is not None
    }


def split_version(version: str) -> tuple[str, str]:
    """``2.15.0+cu132`` -> (``2.15.0``, ``cu132``): the public version and the local label
    (PEP 440), both normalised to lower case without surrounding spaces."""
    public, _, local = version.strip().lower().partition("+")
    return public.strip(), local.strip()


def same_version(recorded: str, installed: str) -> bool:
    """Whether an entry built under ``recorded`` is for the ``installed`` version.

    One rule for both sides, whichever spelling each has: the public versions must be equal;
    local labels (``+cpu``, ``+cu132``) are compared only when both sides have one. A module's
    ``__version__`` carries the label of its build while the standard wheels' metadata does not
    (``torch.__version__`` is ``2.15.0+cu132``, the distribution ``2.15.0``), so a label missing
    on one side says nothing. Builds that differ only in their label still compute keys of their
    own (torch hashes its build into every key), so admitting one is dead weight at worst, never a
    wrong hit."""
    public_a, local_a = split_version(recorded)
    public_b, local_b = split_version(installed)
    if public_a != public_b:
        return False
    return not (local_a and local_b) or local_a == local_b


# -- can an entry run here -----------------------------------------------------------------------


def entry_backend(header: EntryHeader) -> tuple[str, set[str]]:
    """The backend platform (``cpu``, ``gpu``, ``tpu``) and device kinds a JAX entry was
    compiled for, from the readable key components recorded with it."""
    readable = header.extra.get("readable")
    if not isinstance(readable, dict):
        return "", set()
    backend = str(readable.get("backend version", "")).split()
    name = backend[0].lower() if backend else ""
    # "8 x NVIDIA H100 80GB HBM3", or "4 x cpu (1 used)".
    accel = re.sub(r"\s*\(\d+ used\)$", "", str(readable.get("accelerator_config", "")))
    kinds = {k.strip() for k in accel.partition(" x ")[2].split(",") if k.strip()}
    return ("gpu" if name in GPU_PLATFORMS else name), kinds


def version_problem(header: EntryHeader, package: str, framework: str) -> str | None:
    """Why an entry built against ``package`` cannot run here: it is missing, or another version."""
    local = installed_version(package)
    if local is None:
        return f"{framework} is not installed here"
    built = header.versions.get(package)
    if built and not same_version(built, local):
        return f"built with {package} {built}; this host has {package} {local}"
    return None


# torch's layers whose code is generated for the CPU and whose keys do not say which: the FX
# graph (its C++ source), the AOTAutograd entry (its graphs, bundled or named) and the Dynamo
# package (both, and the backends' output code).
TORCH_CPU_LAYERS = frozenset({"fx", "aot", "dynamo"})


# Why an entry of such a layer that records no CPU is refused: written by a compilecache that did
# not record one. Not another host's entry: this host's compile replaces it.
NO_CPU_TARGET = "records no CPU target (written before compilecache recorded one)"
# Distinct CPU targets a HostCheck remembers its answer for (a fleet has a few kinds of host).
_MAX_ANSWERS = 256


def _python_problem(header: EntryHeader) -> str | None:
    """Why an entry built under another Python (major.minor) cannot run here: pickled code and
    extension modules are built for one."""
    python = header.versions.get("python", "")
    here = platform.python_version()
    if python and python.split(".")[:2] != here.split(".")[:2]:
        return f"built under Python {python}; this is Python {here}"
    return None


class HostCheck:
    """Whether an entry can run on this host; the reason when it cannot.

    ``live``: the check of every read on the live path, where the entry was found under the key
    this process computed. It checks only what the frameworks' keys leave out (the CPU, Python
    where a layer depends on it): framework versions and accelerators are in those keys, so they
    are not looked up again. Without ``live`` (bundle import, copies between stores), everything
    an entry records is checked. Host facts are read once per process; a check then costs a few
    set operations."""

    def __init__(
        self, fallback_cpu: Mapping[str, Any] | None = None, *, live: bool = False
    ) -> None:
        self.fallback_cpu = fallback_cpu
        self.live = live
        self._jax_devices: dict[str, set[str]] | None = None
        self._answers: dict[tuple[Any, ...], str | None] = {}

    def reason(self, header: EntryHeader) -> str | None:
        if header.framework == "jax":
            return self._jax(header)
        if header.framework == "torch":
            return self._torch(header)
        if header.framework == "triton":
            return self._triton(header)
        return None

    def _jax(self, header: EntryHeader) -> str | None:
        problem = None if self.live else version_problem(header, "jaxlib", "jax")
        if problem:
            return problem
        backend, kinds = entry_backend(header)
        if backend and backend != "cpu":
            # The key holds the platform and the device kinds (accelerator_config).
            return None if self.live else self._jax_accelerator(backend, kinds)
        return self._cpu(header, SUPERSET)

    def _jax_accelerator(self, backend: str, kinds: set[str]) -> str | None:
        devices = self.jax_devices()
        if backend not in devices:
            have = ", ".join(sorted(devices)) or "none"
            return f"compiled for {backend}; this host has no {backend} device ({have})"
        missing = kinds - devices[backend]
        if missing:
            return (
                f"compiled for {', '.join(sorted(missing))}; this host has "
                f"{', '.join(sorted(devices[backend]))}"
            )
        return None

    def _torch(self, header: EntryHeader) -> str | None:
        problem = None if self.live else version_problem(header, "torch", "torch")
        if problem:
            return problem
        problem = _python_problem(header)
        if problem:
            return problem
        if header.extra.get("layer") in TORCH_CPU_LAYERS:
            return self._cpu(header, SAME_VECTORS, required=self.live)
        # Kernels, headers, probes and extensions hold the CPU in their keys; autotune records
        # are GPU timings keyed by the device.
        return None if self.live else self._cpu(header, SAME_VECTORS)

    def _triton(self, header: EntryHeader) -> str | None:
        # A kernel's target is in Triton's key; a launcher .so is also built for this Python
        # (which its key holds, with the machine).
        problem = None if self.live else version_problem(header, "triton", "triton")
        if problem or header.extra.get("layer") != "file":
            return problem
        return _python_problem(header)

    def _cpu(self, header: EntryHeader, rule: str, *, required: bool = False) -> str | None:
        cpu = header.extra.get("cpu") or self.fallback_cpu
        if not isinstance(cpu, Mapping):
            # An entry of a layer whose code depends on the CPU must say which CPU.
            return NO_CPU_TARGET if required else None
        # The answer for a recorded CPU, once per process: entries of one host kind record the
        # same target, and a read then costs a dictionary lookup.
        try:
            memo_key = (
                rule,
                str(cpu.get("machine")),
                tuple(cpu.get("features") or ()),
                cpu.get("sve_bits"),
            )
        except TypeError:  # a malformed record: judged afresh, as any other
            return cpu_problem(cpu, cpu_target(), rule)
        if memo_key not in self._answers:
            if len(self._answers) > _MAX_ANSWERS:
                self._answers.clear()
            self._answers[memo_key] = cpu_problem(cpu, cpu_target(), rule)
        return self._answers[memo_key]

    def jax_devices(self) -> dict[str, set[str]]:
        """Platform -> device kinds JAX sees here (initialises its backends once, on demand)."""
        if self._jax_devices is None:
            # Late on purpose: only bundles holding accelerator entries initialise JAX.
            jax = framework_module("jax")
            found: dict[str, set[str]] = {}
            for name in ("cpu", "gpu", "tpu"):
                try:
                    devices = jax.devices(name)
                except RuntimeError:
                    continue
                for d in devices:
                    plat = "gpu" if d.platform in GPU_PLATFORMS else str(d.platform)
                    found.setdefault(plat, set()).add(str(d.device_kind))
            self._jax_devices = found
        return self._jax_devices
