"""Values Dynamo reads with no guard, or a guard too weak to tell two processes apart, for
``tests/test_torch_dynamo.py``; each set at import from ``UNGUARDED``: a name put into builtins,
a float zero's sign (a global's, a module attribute's), a dataclass field's default factory made by a function for a value, and
whether an optional module was imported, and an environment variable read after a graph break
(set where traced, missing where loaded), the order of a set of strings (the process's hash
seed) and of a set of numbers built in another order (looped over, or a set made from it), a float zero as a dict's key, and the
recursion limit (which Dynamo folds into a constant). Prints one JSON line: for each function, whether its
compiled result matches eager and how many frames Dynamo traced for it."""

import builtins
import dataclasses
import math
import os
import sys

import torch
from eager_check import print_compiled_against_eager

OTHER = os.environ.get("UNGUARDED") == "1"
builtins.UNGUARDED_SCALE = 3.0 if OTHER else 2.0  # type: ignore[attr-defined]
OFFSET = -0.0 if OTHER else 0.0
if not OTHER:
    import optional_module  # noqa: F401
INTS: set[int] = set()
for number in (8, 0) if OTHER else (0, 8):  # equal sets; 0 and 8 share a slot: another order
    INTS.add(number)
ZERO_KEYS = {OFFSET: "key"}
if OTHER:
    sys.setrecursionlimit(5000)
if OTHER:  # set where the trace is made, missing where it is loaded
    os.environ.pop("UNGUARDED_RESUME", None)
else:
    os.environ["UNGUARDED_RESUME"] = "3"


def factory_of(value: float):  # type: ignore[no-untyped-def]
    def factory() -> list[float]:
        return [value]

    return factory


@dataclasses.dataclass
class Settings:
    scales: list = dataclasses.field(default_factory=factory_of(3.0 if OTHER else 2.0))


class Shifted(torch.nn.Module):
    """A module holding a float zero, as transformers' attention holds its dropout."""

    def __init__(self) -> None:
        super().__init__()
        self.shift = OFFSET

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 1.0 / (x * self.shift)


MODULE = Shifted()


def from_builtins(x: torch.Tensor) -> torch.Tensor:
    return x * UNGUARDED_SCALE  # type: ignore[name-defined]  # noqa: F821


def signed_zero(x: torch.Tensor) -> torch.Tensor:
    return 1.0 / (x * OFFSET)


def default_factory(x: torch.Tensor) -> torch.Tensor:
    return x * Settings().scales[0]


def imported(x: torch.Tensor) -> torch.Tensor:
    return x * 3 if "optional_module" in sys.modules else x * 2


def module_zero(x: torch.Tensor) -> torch.Tensor:
    return MODULE(x)


def after_a_break(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    torch._dynamo.graph_break()  # the rest is a resume function's frame, in the same package
    return y * float(os.environ.get("UNGUARDED_RESUME", "2"))


def set_order(x: torch.Tensor) -> torch.Tensor:
    for name in {"alpha", "beta", "gamma", "delta", "epsilon", "zeta"}:  # a constant frozenset
        x = x * 2 + len(name)
    return x


def recursion_limit(x: torch.Tensor) -> torch.Tensor:
    return x * 3 if sys.getrecursionlimit() > 4000 else x * 2  # Dynamo folds the call


def int_set_order(x: torch.Tensor) -> torch.Tensor:
    for number in INTS:
        x = x * 2 + number
    return x


def derived_set_order(x: torch.Tensor) -> torch.Tensor:
    for number in INTS | {1}:  # a set made from the global's, in the global's order
        x = x * 2 + number
    return x


def dict_zero_key(x: torch.Tensor) -> torch.Tensor:
    for key in ZERO_KEYS:
        x = x * math.copysign(1.0, key)
    return x


def main() -> None:
    print_compiled_against_eager(
        (
            from_builtins,
            signed_zero,
            module_zero,
            default_factory,
            imported,
            after_a_break,
            set_order,
            recursion_limit,
            int_set_order,
            derived_set_order,
            dict_zero_key,
        )
    )


if __name__ == "__main__":
    main()
