"""Triton's key components in words: how a change of each is said by ``explain``; registered
with :mod:`compilecache.runtime.explain` when this module is imported."""

from __future__ import annotations

from compilecache.runtime.explain import (
    Vocabulary,
    changed,
    option_flags,
    register_vocabulary,
    versions,
)

FRAMEWORK = "triton"

TRITON = register_vocabulary(
    FRAMEWORK,
    Vocabulary(
        labels={
            "source": "the kernel's source",
            "triton": "Triton (its version or compiler sources)",
            "backend": "target",
            "options": "compile options",
            "env": "Triton's environment variables",
        },
        describe={
            "source": lambda b, a, c: (
                "the kernel's source changed (or a function it calls, a global it reads, its "
                "signature or constants)"
            ),
            "triton": lambda b, a, c: (
                f"Triton's compiler sources changed (version {a} both times)"
                if b == a and a is not None
                else versions("Triton")(b, a, c)
            ),
            "backend": changed("target"),
            "options": option_flags("compile options"),
            "env": changed("Triton's environment variables"),
        },
        prefix="triton: ",
        order=("source", "triton", "backend", "options", "env"),
        identity=("source",),
    ),
)
