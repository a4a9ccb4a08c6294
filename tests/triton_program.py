"""One process that compiles a Triton kernel for a CUDA target on the CPU (no GPU needed).

Triton cross-compiles here with its bundled ``ptxas``. Arguments (``--help``) choose the target,
a variant of the kernel's source, a Triton that calls itself another version, and whether to
enable compilecache in-process (``--url``) or leave it to ``compilecache run``. Prints one JSON
line: the cubin's SHA-256, the kernel's name, the autotune timings read or written, and the
session's counters.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from typing import Any

KERNEL = """
import triton
import triton.language as tl


@triton.jit
def scaled_add(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    value = tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask)
    tl.store(out + offs, value{variant}, mask=mask)
"""


def counting_manager() -> Any:
    """A user's own cache manager (``TRITON_CACHE_MANAGER``): Triton's file cache that logs
    each file it is given to ``$COUNT_PUTS``."""
    from triton.runtime.cache import FileCacheManager

    class Counting(FileCacheManager):  # type: ignore[misc]
        def put(self, data: Any, filename: str, binary: bool = True) -> str:
            with open(os.environ["COUNT_PUTS"], "a") as f:
                f.write(filename + "\n")
            return str(super().put(data, filename, binary=binary))

    return Counting


def __getattr__(name: str) -> Any:  # TRITON_CACHE_MANAGER=tests.triton_program:Counting
    if name == "Counting":
        return counting_manager()
    raise AttributeError(name)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="", help="enable compilecache here with this store")
    parser.add_argument("--work", required=True, help="a directory for the kernel's module")
    parser.add_argument("--arch", type=int, default=80)
    parser.add_argument("--variant", default="", help="appended to the stored value")
    parser.add_argument("--fake-version", default="", help="Triton calls itself this version")
    parser.add_argument("--autotune", default="", help="also look up timings under this key")
    args = parser.parse_args()

    session = None
    if args.url:
        import compilecache

        session = compilecache.enable(args.url)
    import triton

    if args.fake_version:
        import triton.runtime.cache as runtime_cache

        runtime_cache.__version__ = args.fake_version  # what triton_key() starts with
        runtime_cache.triton_key.cache_clear()
    from triton.backends.compiler import GPUTarget

    os.makedirs(args.work, exist_ok=True)
    with open(os.path.join(args.work, "user_kernels.py"), "w") as f:
        f.write(KERNEL.format(variant=args.variant))
    sys.path.insert(0, args.work)
    import user_kernels

    signature = {"x": "*fp32", "y": "*fp32", "out": "*fp32", "n": "i32"}
    source = triton.compiler.ASTSource(
        fn=user_kernels.scaled_add, signature=signature, constexprs={"BLOCK": 128}
    )
    kernel = triton.compile(source, target=GPUTarget("cuda", args.arch, 32))
    result: dict[str, Any] = {
        "cubin": hashlib.sha256(kernel.asm["cubin"]).hexdigest(),
        # ptxas names its temporary input in the cubin: two compiles differ there, not here.
        "ptx": hashlib.sha256(kernel.asm["ptx"].encode()).hexdigest(),
        "name": kernel.metadata.name,
    }
    if args.autotune:
        # What triton.runtime.autotuner.Autotuner.check_disk_cache does with its manager
        # (its benchmarks need a GPU; the timings here stand in for them).
        from triton.runtime.cache import get_cache_manager

        manager = get_cache_manager(hashlib.sha256(args.autotune.encode()).hexdigest())
        path = manager.get_file("scaled_add.autotune.json")
        if path is None:
            timings = {"key": [1024], "configs_timings": [[{"BLOCK": 128}, [0.5]]]}
            manager.put(json.dumps(timings), "scaled_add.autotune.json", binary=False)
            result["autotune"] = "benchmarked"
        else:
            with open(path) as f:
                result["autotune"] = json.load(f)["configs_timings"]
    import compilecache.session

    session = compilecache.session.active()
    if session is not None:
        session.cache.settle()
        result["stats"] = session.stats()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
