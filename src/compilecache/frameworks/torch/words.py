"""torch's key components in words (FX graphs, AOTAutograd, kernels, extensions): how a change
of each is said by ``explain``; registered with :mod:`compilecache.runtime.explain` when this
module is imported."""

from __future__ import annotations

from collections.abc import Callable

from compilecache.runtime.explain import (
    Vocabulary,
    changed,
    option_flags,
    register_vocabulary,
    short,
    versions,
)

FRAMEWORK = "torch"


def _config_value(what: str) -> Callable[[str, str | None, str | None], str]:
    def describe(name: str, before: str | None, after: str | None) -> str:
        if before is None or after is None:
            return f"{what} {name} changed"
        return f"{what} {name} {short(before)} -> {short(after)}"

    return describe


TORCH = register_vocabulary(
    FRAMEWORK,
    Vocabulary(
        labels={
            "cpp_runtime_thread_count": "thread count",
            "torch_version": "torch version (a hash of its sources)",
            "system_info": "system (device, driver and compiler versions)",
            "gm": "the graph",
            "fx_kwargs": "compile arguments",
            "deterministic_algorithms_settings": "deterministic algorithm settings",
            "cuda_matmul_settings": "CUDA matmul settings",
            "post_grad_custom_pre_pass": "custom pre-grad pass",
            "post_grad_custom_post_pass": "custom post-grad pass",
            # Dynamo's packages (frameworks/torch/dynamo/)
            "function": "the compiled function",
            "compile_call": "torch.compile's arguments (backend options, mode, dynamic)",
            "threads": "thread count",
            "module_source": "the compiled function's source file",
            "dynamo_config": "Dynamo's configuration",
            "inductor_config": "Inductor's configuration",
            "functorch_config": "functorch's configuration",
            "compiler_config": "torch.compiler's configuration",
            "grad_enabled": "grad mode",
            "default_dtype": "the default dtype",
            "default_device": "the default device",
            "deterministic": "deterministic algorithms",
        },
        describe={
            "cpp_runtime_thread_count": versions("thread count"),
            "torch_version": lambda b, a, c: "torch changed (another build or version)",
            "gm": lambda b, a, c: "the graph changed (the function body or what it calls)",
            # C++ extensions (frameworks/torch/extensions.py)
            "flags": option_flags("extension build flags"),
            "sources": lambda b, a, c: f"extension sources changed ({a or '?'})",
            "compiler": changed("compiler"),
            "cuda": changed("CUDA version"),
            "module_source": lambda b, a, c: "the compiled function's source file changed",
            "compile_call": changed("torch.compile's arguments"),
            "threads": versions("thread count"),
            "dynamo_config": changed("Dynamo's configuration"),
            "inductor_config": changed("Inductor's configuration"),
            "functorch_config": changed("functorch's configuration"),
            "compiler_config": changed("torch.compiler's configuration"),
        },
        prefixed=(
            ("inductor_config[", _config_value("inductor config")),
            ("inductor_config_comms[", _config_value("inductor comms config")),
            ("functorch_config[", _config_value("functorch config")),
            ("fx_kwargs[", _config_value("compile argument")),
            ("example_inputs[", _config_value("input")),
        ),
        prefix="torch: ",
        order=("gm", "torch_version", "system_info"),
        identity=("gm",),
    ),
)
