"""Facts about this host, and whether an entry made on another host can run here.

One place for what the integrations record with each entry and what bundles check on import:

- the CPU: its first ``/proc/cpuinfo`` block, the ISA features a compiler targets
  (:func:`cpu_target`), and what ``-march=native`` resolves from (:func:`native_cpu`);
- framework and Python versions (:func:`jax_versions`, :func:`torch_versions`), and the versions
  of installed distributions (:func:`installed_version`);
- one comparison of versions, used on both sides (:func:`same_version`): an entry records
  ``torch.__version__`` (``2.15.0+cu132`` on the standard wheels) while the host's distribution
  says ``2.15.0``;
- :class:`HostCheck`: whether an entry can run here, and why not.

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


@functools.cache
def cpu_target() -> dict[str, Any]:
    """This host's CPU architecture and ISA features: what a CPU executable may rely on (XLA and
    Inductor compile for the host CPU, and neither cache key says which one)."""
    return {"machine": platform.machine(), "features": isa_features(read_cpuinfo(whole=True))}


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


class HostCheck:
    """Whether an entry can run on this host; the reason when it cannot."""

    def __init__(self, fallback_cpu: Mapping[str, Any] | None = None) -> None:
        self.fallback_cpu = fallback_cpu
        self._jax_devices: dict[str, set[str]] | None = None

    def reason(self, header: EntryHeader) -> str | None:
        if header.framework == "jax":
            return self._jax(header)
        if header.framework == "torch":
            return self._torch(header)
        if header.framework == "triton":
            return self._triton(header)
        return None

    def _jax(self, header: EntryHeader) -> str | None:
        problem = version_problem(header, "jaxlib", "jax")
        if problem:
            return problem
        backend, kinds = entry_backend(header)
        if backend and backend != "cpu":
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
        return self._cpu(header)

    def _torch(self, header: EntryHeader) -> str | None:
        problem = version_problem(header, "torch", "torch")
        if problem:
            return problem
        python = header.versions.get("python", "")
        here = platform.python_version()
        if python and python.split(".")[:2] != here.split(".")[:2]:
            return f"built under Python {python}; this is Python {here}"
        return self._cpu(header)

    def _triton(self, header: EntryHeader) -> str | None:
        # A kernel's target is in Triton's key; a launcher .so is also built for this Python.
        problem = version_problem(header, "triton", "triton")
        if problem or header.extra.get("layer") != "file":
            return problem
        python = header.versions.get("python", "")
        here = platform.python_version()
        if python and python.split(".")[:2] != here.split(".")[:2]:
            return f"built under Python {python}; this is Python {here}"
        return None

    def _cpu(self, header: EntryHeader) -> str | None:
        cpu = header.extra.get("cpu") or self.fallback_cpu
        if not isinstance(cpu, Mapping):
            return None
        local = cpu_target()
        machine = str(cpu.get("machine") or "")
        if machine and machine != local["machine"]:
            return f"compiled on {machine}; this host is {local['machine']}"
        needed = {str(f) for f in cpu.get("features") or ()}
        have = set(local["features"])
        lacking = sorted(needed - have) if have else []
        if lacking:
            shown = ", ".join(lacking[:6]) + (", ..." if len(lacking) > 6 else "")
            return f"compiled for a CPU with {shown}, which this CPU lacks"
        return None

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
