"""A module of the test program's own that has a standard library module's name (Dynamo goes by
the name and skips the guards on what its functions read), for ``folded_program.py``."""

import os

SCALE = 3.0 if os.environ.get("UNGUARDED") == "1" else 2.0


def scaled(x):  # type: ignore[no-untyped-def]
    return x * SCALE
