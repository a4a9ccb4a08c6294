"""Patches: every attribute compilecache replaces is seen as in place, and put back on undo."""

from __future__ import annotations

import types
from typing import Any

import pytest

from compilecache.patches import Patches


class ConfigModule(types.ModuleType):
    """A module that keeps its values in a dict of its own, as torch's config modules do."""

    def __init__(self) -> None:
        super().__init__("fake_config")
        object.__setattr__(self, "_config", {"flag": False})

    def __getattr__(self, name: str) -> Any:
        try:
            return self._config[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self._config[name] = value

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{name} cannot be deleted")


def test_a_config_module_value_is_live_and_put_back() -> None:
    config = ConfigModule()
    patches = Patches()
    patches.replace(config, "flag", True, label="flag")
    assert config.flag is True and patches.live() == {"flag": True}
    patches.undo()
    assert config.flag is False


def test_torch_config_flag_is_live_and_put_back() -> None:
    config: Any = pytest.importorskip("torch._dynamo.config")
    before = config.caching_precompile
    patches = Patches()
    patches.replace(config, "caching_precompile", not before, label="precompile")
    assert patches.live() == {"precompile": True}
    patches.undo()
    assert config.caching_precompile is before


def test_a_plain_module_attribute_added_is_removed_again() -> None:
    module = types.ModuleType("plain")
    patches = Patches()
    patches.replace(module, "added", 1)
    assert module.added == 1 and all(patches.live().values())
    patches.undo()
    assert not hasattr(module, "added")
