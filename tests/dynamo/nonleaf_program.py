"""A function reading a global tensor that is not a leaf, for ``tests/test_torch_dynamo.py``:
saving its guards (which only caching_precompile does) reads that tensor's ``.grad``, and torch
warns of it. Run from this file, and as ``python -c`` (a ``__main__`` without a file, as a
notebook's). Prints one JSON line: whether the compiled result matches eager, the frames Dynamo
traced, compilecache's ``torch.dynamo.*`` counters and its error count."""

import json

import torch
from torch._dynamo.utils import counters

torch.manual_seed(0)
SCALE = torch.randn(4, requires_grad=True) * 2  # the product of a leaf: not a leaf


def scaled(x: torch.Tensor) -> torch.Tensor:
    return (x * SCALE).sum()


def main() -> None:
    import compilecache

    x = torch.arange(4.0, requires_grad=True)
    compiled = torch.compile(scaled)(x)
    compiled.backward()
    session = compilecache.active()
    stats = session.stats() if session is not None else {}
    ours = {k.removeprefix("torch.dynamo."): v for k, v in stats.items() if "dynamo" in k}
    line = {
        "matches_eager": bool(torch.equal(compiled, scaled(x))),
        "frames": int(counters["frames"]["total"]),
        "ours": ours,
        "errors": stats.get("errors", 0.0),
    }
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
