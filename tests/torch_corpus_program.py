"""The ways people call ``torch.compile``, each run once; prints one JSON line of outcomes.

Usage: python torch_corpus_program.py [CASE ...]   (no CASE: every case)

Each case compiles and calls something small on the CPU and records its outcome: the values it
returned (rounded, so that the same program compares equal) or the type of the exception it
raised. ``tests/test_torch_corpus.py`` runs this plainly and under ``compilecache run``, cold
and warm, in fresh processes, and compares the outcomes: compilecache must change none.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Any

import torch

torch.manual_seed(0)
X = torch.linspace(-2.0, 2.0, 12).reshape(3, 4)
Y = torch.linspace(0.5, 3.0, 12).reshape(3, 4)


def values(result: Any) -> Any:
    """A tensor (or a structure of them) as rounded lists."""
    if isinstance(result, torch.Tensor):
        return [round(float(v), 5) for v in result.detach().reshape(-1).tolist()]
    if isinstance(result, (list, tuple)):
        return [values(r) for r in result]
    return result


def scaled(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.sin(x) * scale


class Holder:
    def __init__(self) -> None:
        self.weight = torch.linspace(0.1, 1.2, 4)

    def method(self, x: torch.Tensor) -> torch.Tensor:
        return (x * self.weight).tanh()

    @staticmethod
    def static(x: torch.Tensor) -> torch.Tensor:
        return x.abs() + 2

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x * 3 + self.weight


class Decorated:
    @torch.compile
    def method(self, x: torch.Tensor) -> torch.Tensor:
        return x.exp() - 1


B = torch.tensor([1, 2])


@torch.compile
class ClassDecorated(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.isin(x, B)


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.a = torch.nn.Linear(4, 8)
        self.b = torch.nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


@torch.compile
def inner(x: torch.Tensor) -> torch.Tensor:
    return x * x


@torch.compile
def outer(x: torch.Tensor) -> torch.Tensor:
    return inner(x) + 1


@torch.compiler.disable
def not_compiled(x: torch.Tensor) -> torch.Tensor:
    return x + 100


def with_disabled(x: torch.Tensor) -> torch.Tensor:
    return not_compiled(x * 2) - 1


def with_break(x: torch.Tensor) -> torch.Tensor:
    y = x.sin()
    torch._dynamo.graph_break()
    return y.cos()


def custom_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    return gm.forward


def case_function() -> Any:
    return torch.compile(lambda x: torch.sin(x) * 2 + x)(X)


def case_named_function() -> Any:
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (x * y).sum(dim=1)

    return torch.compile(f)(X, Y)


def case_bound_method() -> Any:
    return torch.compile(Holder().method)(X)


def case_decorated_method() -> Any:
    return Decorated().method(X)


def case_staticmethod() -> Any:
    return torch.compile(Holder.static)(X)


def case_partial() -> Any:
    return torch.compile(functools.partial(scaled, scale=3.0))(X)


def case_class_decorator() -> Any:
    return ClassDecorated()(torch.arange(3))


def case_callable_object() -> Any:
    return torch.compile(Holder())(X)


def case_module() -> Any:
    return torch.compile(Net())(X)


def case_module_compile() -> Any:
    net = Net()
    net.compile()
    return net(X)


def case_builtin() -> Any:
    return torch.compile(torch.add)(X, Y)


def case_torch_function() -> Any:
    return torch.compile(torch.nn.functional.gelu)(X)


def case_nested() -> Any:
    return outer(X)


def case_fullgraph() -> Any:
    return torch.compile(lambda x: x.relu() * 3, fullgraph=True)(X)


def case_fullgraph_break() -> Any:
    return torch.compile(with_break, fullgraph=True)(X)


def case_dynamic() -> Any:
    f = torch.compile(lambda x: x.sum(0) * 2, dynamic=True)
    return [f(X), f(torch.ones(5, 4))]


def case_recompile() -> Any:
    f = torch.compile(lambda x: (x + 1).mean(1))
    return [f(X), f(torch.ones(2, 6)), f(torch.ones(7, 3))]


def case_mode_reduce_overhead() -> Any:
    return torch.compile(lambda x: x * 2 - 1, mode="reduce-overhead")(X)


def case_options() -> Any:
    return torch.compile(lambda x: x.exp().sum(1), options={"epilogue_fusion": False})(X)


def case_backend_eager() -> Any:
    return torch.compile(lambda x: x.sin(), backend="eager")(X)


def case_backend_aot_eager() -> Any:
    return torch.compile(lambda x: x.cos(), backend="aot_eager")(X)


def case_backend_custom() -> Any:
    return torch.compile(lambda x: x.tan(), backend=custom_backend)(X)


def case_disable() -> Any:
    return torch.compile(with_disabled)(X)


def case_graph_break() -> Any:
    return torch.compile(with_break)(X)


def case_backward() -> Any:
    net = Net()
    loss = torch.compile(net)(X).pow(2).mean()
    loss.backward()
    return [loss, net.a.weight.grad]


CASES = {
    name.removeprefix("case_"): fn
    for name, fn in sorted(globals().items())
    if name.startswith("case_")
}


def main(names: list[str]) -> None:
    outcomes: dict[str, Any] = {}
    for name in names or sorted(CASES):
        try:
            outcomes[name] = {"ok": True, "values": values(CASES[name]())}
        except Exception as exc:  # the outcome is the exception's type, as plain torch raised it
            outcomes[name] = {"ok": False, "error": type(exc).__name__}
    print(json.dumps(outcomes, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1:])
