"""Values Dynamo answers while it traces with no guard, or a guard that another process's
equal value passes, for ``tests/test_torch_dynamo.py``; each set at import from ``UNGUARDED``:
an object's ``id()``, a string's ``__hash__()``, a dict's key that equals another's (``1`` and
``True``), a class registered with an ABC in one process only, what a module of the program's
own with a standard library module's name reads, a function's annotation, and an
``inspect.Signature`` made at import. Prints one JSON line: for each function, whether its
compiled result matches eager and how many frames Dynamo traced for it."""

import abc
import inspect
import os
import tabnanny  # the program's own tabnanny.py, first on sys.path

import torch
from eager_check import print_compiled_against_eager

OTHER = os.environ.get("UNGUARDED") == "1"
KEYED = {True: 2.0} if OTHER else {1: 2.0}


class Base(abc.ABC):  # noqa: B024  # an interface: isinstance() only
    pass


class Impl:
    pass


if OTHER:
    Base.register(Impl)
IMPL = Impl()


def defaulted(x, k=3.0 if OTHER else 2.0):  # type: ignore[no-untyped-def]
    return x * k


SIGNATURE = inspect.signature(defaulted)


def annotated(a: 3.0 if OTHER else 2.0):  # type: ignore[no-untyped-def,valid-type]
    return a


def object_id(x: torch.Tensor) -> torch.Tensor:
    return x + id(IMPL) % 1000


def hash_method(x: torch.Tensor) -> torch.Tensor:
    return x + "abc".__hash__() % 1000


def dict_key_type(x: torch.Tensor) -> torch.Tensor:
    return x + len(str(list(KEYED)[0]))  # noqa: RUF015  # the path Dynamo leaves unguarded


def abc_registered(x: torch.Tensor) -> torch.Tensor:
    return x * (3 if isinstance(IMPL, Base) else 2)


def stdlib_named(x: torch.Tensor) -> torch.Tensor:
    return tabnanny.scaled(x)


def annotation(x: torch.Tensor) -> torch.Tensor:
    return x * annotated.__annotations__["a"]


def signature_default(x: torch.Tensor) -> torch.Tensor:
    return x * SIGNATURE.parameters["k"].default


def main() -> None:
    print_compiled_against_eager(
        (
            object_id,
            hash_method,
            dict_key_type,
            abc_registered,
            stdlib_named,
            annotation,
            signature_default,
        )
    )


if __name__ == "__main__":
    main()
