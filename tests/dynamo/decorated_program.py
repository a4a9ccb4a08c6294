"""A model built as transformers builds theirs, for ``tests/test_torch_dynamo.py``: its
``forward`` is decorated (functools.wraps, from another module) and reads a property whose
getter breaks the graph (Dynamo then compiles the getter as a frame of its own). Prints one
JSON line: the loss's and gradients' digests, the frames Dynamo traced, compilecache's
``torch.dynamo.*`` counters."""

import hashlib
import json

import dynamo_helper
import torch
from torch._dynamo.utils import counters


class Decorated(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(16, 16)

    @property
    def scale(self) -> float:
        torch._dynamo.graph_break()
        return 2.0

    @dynamo_helper.passthrough
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (dynamo_helper.act(self.linear(x)) * self.scale).sum()


def main() -> None:
    import compilecache

    torch.manual_seed(0)
    model = Decorated()
    compiled = torch.compile(model)
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(4))
    loss = compiled(x)
    loss.backward()
    h = hashlib.sha256()
    for t in [loss, *(p.grad for p in model.parameters())]:
        h.update(t.detach().contiguous().numpy().tobytes())
    session = compilecache.active()
    stats = session.stats() if session is not None else {}
    ours = {k.removeprefix("torch.dynamo."): v for k, v in stats.items() if "dynamo" in k}
    line = {"digest": h.hexdigest()[:16], "frames": int(counters["frames"]["total"]), "ours": ours}
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
