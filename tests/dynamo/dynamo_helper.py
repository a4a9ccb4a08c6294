"""A helper module the program's model calls (the tests edit it between runs)."""

import functools
import os

import torch

# Bound at import from the environment: the same source, another function per run.
ACT = getattr(torch.nn.functional, os.environ.get("PRECOMPILE_ACT", "gelu"))
SCALE = 1.0


def act(x: torch.Tensor) -> torch.Tensor:
    return ACT(x) * SCALE


def passthrough(func):  # type: ignore[no-untyped-def]
    """A decorator as transformers' (functools.wraps): the wrapper's __module__ is the
    decorated function's, its __globals__ this module's; it reads the function's name."""

    @functools.wraps(func)
    def wrapped(*args, **kwargs):  # type: ignore[no-untyped-def]
        if func.__name__ == "forward":
            return func(*args, **kwargs)
        raise TypeError(func.__name__)

    return wrapped
