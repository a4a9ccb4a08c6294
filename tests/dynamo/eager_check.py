"""What the test programs print: each function compiled and run once in this process."""

import json
from collections.abc import Callable, Iterable

import torch
from torch._dynamo.utils import counters


def print_compiled_against_eager(
    functions: Iterable[Callable[[torch.Tensor], torch.Tensor]],
) -> None:
    """Print one JSON line: for each function, whether its compiled result on a small tensor
    matches eager and how many frames Dynamo traced for it (0: served from the store)."""
    x = torch.arange(1.0, 5.0)
    line = {}
    for fn in functions:
        counters.clear()
        compiled = torch.compile(fn)(x)
        line[fn.__name__] = {
            "matches_eager": bool(torch.equal(compiled, fn(x))),
            "frames": int(counters["frames"]["total"]),
        }
    print(json.dumps(line), flush=True)
