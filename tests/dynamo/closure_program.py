"""A compiled closure whose result depends on a global and on two cells of its closure, for
``tests/test_torch_dynamo.py``.

The global ``ACT`` is rebound after the first call; a correct cache then compiles again. Prints
one JSON line: per call, the compiled result and the frames Dynamo traced so far; the eager
results; and compilecache's ``torch.dynamo.*`` counters. ``CLOSURE_FACTOR`` and ``CLOSURE_POST``
(a torch function's name) choose the cells; ``CLOSURE_OFFSET`` the module constant ``OFFSET`` (the
same source, another value); ``CLOSURE_FILTER=globals`` compiles with a guard filter of the
program's own that drops every guard on a global.
"""

import json
import os
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch._dynamo.utils import counters

ACT = torch.tanh
OFFSET = float(os.environ.get("CLOSURE_OFFSET", "0.5"))


def closure(factor: float, post: Callable[[torch.Tensor], torch.Tensor]) -> Callable[..., Any]:
    def step(x: torch.Tensor) -> torch.Tensor:
        return ACT(post(x.sin())).sum() * factor + OFFSET

    return step


def keep_no_global(entries: Sequence[Any]) -> list[bool]:
    return [not entry.is_global for entry in entries]


def main() -> None:
    global ACT
    import compilecache

    factor = float(os.environ.get("CLOSURE_FACTOR", "2"))
    post = getattr(torch, os.environ.get("CLOSURE_POST", "tanh"))
    options = {"guard_filter_fn": keep_no_global} if os.environ.get("CLOSURE_FILTER") else None
    compiled = torch.compile(closure(factor, post), options=options)
    x = torch.randn(4, generator=torch.Generator().manual_seed(0))
    calls, eager = [], []
    for act in (torch.tanh, torch.sigmoid):
        ACT = act
        calls.append([compiled(x).item(), int(counters["frames"]["total"])])
        eager.append(closure(factor, post)(x).item())
    session = compilecache.active()
    stats = session.stats() if session is not None else {}
    ours = {k.removeprefix("torch.dynamo."): v for k, v in stats.items() if "dynamo" in k}
    print(json.dumps({"calls": calls, "eager": eager, "ours": ours}), flush=True)


if __name__ == "__main__":
    main()
