"""Values the values program's model reads through a module, a class, a dataclass and an
object, set from the environment when this module is imported (the same source, other values
per process; ``OPT`` and ``FLAGS.extra`` only where ``VALUES_OPT`` is set, ``Helper.apply``
another function where ``VALUES_METHOD`` is); the tests also edit it."""

import dataclasses
import os

import torch

SCALE = float(os.environ.get("VALUES_SCALE", "2.0"))
if os.environ.get("VALUES_OPT"):
    OPT = 2.0


class Base(torch.nn.Module):
    GAIN = float(os.environ.get("VALUES_GAIN", "3.0"))


@dataclasses.dataclass
class Options:
    k: float = float(os.environ.get("VALUES_DEFAULT", "1.5"))


class Flags:
    pass


FLAGS = Flags()
if os.environ.get("VALUES_OPT"):
    FLAGS.extra = True


class Helper:
    def apply(self, x: torch.Tensor) -> torch.Tensor:
        return x * 0.5


def _apply_double(self: Helper, x: torch.Tensor) -> torch.Tensor:
    return x * 2.0


if os.environ.get("VALUES_METHOD"):
    Helper.apply = _apply_double  # type: ignore[method-assign]
HELPER = Helper()
