"""One process that builds a torch C++ extension under compilecache (issue 20, section 3).

``--kind inline``: ``load_inline`` of a Python module (includes ``torch/extension.h``: a real,
slow build); ``--kind plain``: ``load`` of a small C++ file that includes a header from an include
directory (``is_python_module=False``: a fast build through the same ninja path). Prints one JSON
line: what the extension computed (inline) or the library's path (plain), and the counters.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--work", required=True, help="the sources of the plain extension")
    parser.add_argument("--kind", choices=("inline", "plain"), default="plain")
    parser.add_argument("--cflags", default="")
    parser.add_argument("--fake-torch", default="", help="torch calls itself this version")
    parser.add_argument("--fake-cuda", default="", help="torch says it was built for this CUDA")
    args = parser.parse_args()

    import compilecache

    session = compilecache.enable(args.url)
    import torch

    if args.fake_torch:
        torch.__version__ = type(torch.__version__)(args.fake_torch)
    if args.fake_cuda:
        torch.version.cuda = args.fake_cuda
    from torch.utils.cpp_extension import load, load_inline

    result: dict[str, Any] = {}
    cflags = args.cflags.split()
    if args.kind == "inline":
        module = load_inline(
            "cc_twice",
            cpp_sources="torch::Tensor twice(torch::Tensor x) { return x * 2; }",
            functions=["twice"],
            extra_cflags=cflags,
        )
        result["value"] = module.twice(torch.ones(3)).tolist()
    else:
        path = load(
            "cc_plain",
            sources=[os.path.join(args.work, "plain.cpp")],
            extra_include_paths=[os.path.join(args.work, "include")],
            extra_cflags=cflags,
            is_python_module=False,
        )
        result["library"] = str(path)
    assert session is not None
    session.cache.settle()
    result["stats"] = session.stats()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    sys.exit(main())
