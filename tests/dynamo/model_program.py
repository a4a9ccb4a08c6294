"""A small model compiled with torch.compile, for ``tests/test_torch_dynamo.py``.

Run under ``compilecache run`` (or plain) with this directory as the working directory. For each
batch size in ``PRECOMPILE_SHAPES`` (default ``8``) it runs one forward and backward, and prints
one JSON line: the bytes of the loss and of the gradients (hex digests), whether the compiled
loss matches eager, torch's Dynamo counters (frames traced, its own Dynamo cache),
compilecache's ``torch.dynamo.*`` counters, its store levels' counters (since the start) and how
many kernel keys the store was asked whether it holds (``stat``).
``PRECOMPILE_EPILOGUE=0`` changes an Inductor setting in code; ``PRECOMPILE_LOCAL_CLASS=1``
compiles a model whose class is defined in a function; ``PRECOMPILE_COMPILE`` (JSON) holds more
arguments of ``torch.compile`` (``backend``, ``options``, ``dynamic``).
"""

import hashlib
import json
import os

import dynamo_helper
import torch
from torch._dynamo.utils import counters

if os.environ.get("PRECOMPILE_EPILOGUE") == "0":
    torch._inductor.config.epilogue_fusion = False


class Block(torch.nn.Module):
    def __init__(self, width: int = 32, depth: int = 2) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = dynamo_helper.act(layer(x))
        return x.sum()


def digest(tensors: list[torch.Tensor]) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def main() -> None:
    import compilecache

    torch.manual_seed(0)
    model = Block()
    if os.environ.get("PRECOMPILE_LOCAL_CLASS") == "1":
        # A class defined in a function: torch cannot save its guards for another process.

        class LocalBlock(Block):
            pass

        torch.manual_seed(0)
        model = LocalBlock()
    session = compilecache.active()
    before = session.stats() if session is not None else {}
    asked: list[str] = []  # the kernel keys whose presence the store was asked about
    if session is not None:
        stat = session.store.stat

        def counted_stat(key: str) -> object:
            if key.startswith("torch/kernel/"):
                asked.append(key)
            return stat(key)

        session.store.stat = counted_stat  # type: ignore[method-assign]
    counters.clear()
    # With a Dynamo package stored for Block.forward, it is loaded here, before any call.
    compiled = torch.compile(model, **json.loads(os.environ.get("PRECOMPILE_COMPILE", "{}")))
    for batch in [int(b) for b in os.environ.get("PRECOMPILE_SHAPES", "8").split(",")]:
        x = torch.randn(batch, 32, generator=torch.Generator().manual_seed(batch))
        model.zero_grad()
        loss = compiled(x)
        loss.backward()
        grads = [p.grad for p in model.parameters()]
        with torch.no_grad():
            eager = model(x)
        if session is not None:
            session.cache.settle()  # the background's work for this step, done
        stats = session.stats() if session is not None else {}
        print(
            json.dumps(
                {
                    "batch": batch,
                    "loss": digest([loss]),
                    "grads": digest(grads),
                    "matches_eager": bool(torch.allclose(loss, eager, rtol=1e-4, atol=1e-4)),
                    "frames": int(counters["frames"]["total"]),
                    "torch_dynamo_cache": dict(counters["dynamo_cache"]),
                    # The store's levels: lookups answered from a batch read ahead (prefetched).
                    "levels": session.store.level_stats() if session is not None else {},
                    "kernels_asked": len(asked),
                    "ours": {
                        k.removeprefix("torch.dynamo."): v - before.get(k, 0.0)
                        for k, v in stats.items()
                        if k.startswith("torch.dynamo.") and v != before.get(k, 0.0)
                    },
                }
            ),
            flush=True,
        )
        before = stats
        counters.clear()


if __name__ == "__main__":
    main()
