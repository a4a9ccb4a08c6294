"""A model whose forward reads values through a module (``values_settings.SCALE``, and
``OPT`` where it has one), a class attribute of its base class, a dataclass default, whether an
object has an attribute, a method bound at import (``VALUES_METHOD``), a submodule's hook
(``VALUES_HOOK``), environment variables (``VALUES_K`` and ``VALUES_G``, read where
``VALUES_READ_ENV=1``; ``VALUES_G`` through the standard library) and a function whose body is
read from ``VALUES_BODY`` (compiled under this file's name), for
``tests/test_torch_dynamo.py``. One JSON line: whether the compiled output and gradients match
eager on the same code, the frames Dynamo traced and compilecache's ``torch.dynamo.*`` counters.
"""

import json
import os
from pathlib import Path

import torch
import values_settings
from torch._dynamo.utils import counters

# Whether the model reads the environment while traced (VALUES_READ_ENV=1).
READ_ENV = os.environ.get("VALUES_READ_ENV") == "1"
BODY = Path(os.environ.get("VALUES_BODY", "body_a.txt")).read_text()
exec(compile(BODY, __file__, "exec"))  # defines extra(x): another body under the same file name


class Model(values_settings.Base):
    def __init__(self) -> None:
        super().__init__()
        self.l1 = torch.nn.Linear(16, 32)
        self.l2 = torch.nn.Linear(32, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = values_settings.SCALE * self.GAIN * values_settings.Options().k
        scale = scale * getattr(values_settings, "OPT", 1.0)
        if "extra" in values_settings.FLAGS.__dict__:
            scale = scale + 1.0
        if READ_ENV:
            scale = scale * float(os.environ.get("VALUES_K", "1"))
            scale = scale * float(os.getenv("VALUES_G", "1"))
        out = self.l2(torch.relu(self.l1(x)) * scale) + values_settings.HELPER.apply(x)
        return out + extra(x)  # type: ignore[name-defined]  # noqa: F821


def main() -> None:
    import compilecache

    torch.manual_seed(0)
    model = Model()
    if os.environ.get("VALUES_HOOK"):  # a submodule's hook, only where the environment says so
        model.l2.register_forward_hook(lambda module, args, out: out * 10)
    x = torch.randn(4, 16)
    eager = model(x)
    eager.sum().backward()
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    session = compilecache.active()
    before = session.stats() if session is not None else {}
    counters.clear()
    got = torch.compile(model)(x)
    got.sum().backward()
    grads = [p.grad for p in model.parameters()]
    stats = session.stats() if session is not None else {}
    matches = torch.allclose(got, eager, rtol=1e-4, atol=1e-5) and all(
        torch.allclose(g, e, rtol=1e-4, atol=1e-5) for g, e in zip(grads, expected, strict=True)
    )
    print(
        json.dumps(
            {
                "matches_eager": bool(matches),
                "frames": int(counters["frames"]["total"]),
                "ours": {
                    k.removeprefix("torch.dynamo."): v - before.get(k, 0.0)
                    for k, v in stats.items()
                    if k.startswith("torch.dynamo.") and v != before.get(k, 0.0)
                },
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
