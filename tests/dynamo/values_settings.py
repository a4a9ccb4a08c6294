"""Values the values program's model reads through a module, a class and a dataclass, set from
the environment when this module is imported (the same source, other values per process); the
tests also edit it. None of its code is traced."""

import dataclasses
import os

import torch

SCALE = float(os.environ.get("VALUES_SCALE", "2.0"))


class Base(torch.nn.Module):
    GAIN = float(os.environ.get("VALUES_GAIN", "3.0"))


@dataclasses.dataclass
class Options:
    k: float = float(os.environ.get("VALUES_DEFAULT", "1.5"))
