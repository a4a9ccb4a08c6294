"""torch's source hashes (``torch_key``, ``triton_key``) answered from the store: the installed
state a key stands for (a package directory with its wheel's ``RECORD``, built here file by file),
what makes a package unkeyable, and the hooks on a stand-in for torch's ``prefetchable_cache``.
The real-torch processes are in ``tests/test_torch_warm.py``."""

from __future__ import annotations

import base64
import hashlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from compilecache.frameworks.torch import sources as torch_sources
from compilecache.frameworks.torch.probes import ProbeCache
from compilecache.runtime.cache import Cache
from compilecache.stores.memory import MemoryStore
from tests.polling import wait_until

pytest.importorskip("torch")


def wheel(site: Path, name: str = "pkg", files: dict[str, bytes] | None = None) -> Path:
    """Install ``files`` of package ``name`` under ``site`` as pip does: the files, then RECORD."""
    files = files or {"__init__.py": b"x = 1\n", "sub/__init__.py": b"", "sub/mod.py": b"y = 2\n"}
    rows = []
    for rel, data in files.items():
        path = site / name / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{name}/{rel},sha256={digest},{len(data)}")
    info = site / f"{name}-1.0.dist-info"
    info.mkdir()
    time.sleep(0.01)  # RECORD is written last (and ctimes are not all equal on every filesystem)
    (info / "RECORD").write_text("\n".join([*rows, f"{info.name}/RECORD,,"]) + "\n")
    return site / name


def later(change: Callable[[], Any]) -> None:
    """Change the package after its RECORD was written."""
    time.sleep(0.01)
    change()


def test_an_installed_package_has_a_stable_key_that_follows_its_record(tmp_path: Path) -> None:
    first = torch_sources.installed(str(wheel(tmp_path / "a")))
    again = torch_sources.installed(str(tmp_path / "a" / "pkg"))
    assert first is not None and first == again and first.distribution == "pkg-1.0"
    # The same wheel installed elsewhere (another machine): the same key.
    assert torch_sources.installed(str(wheel(tmp_path / "b"))) == first
    other = torch_sources.installed(str(wheel(tmp_path / "c", files={"__init__.py": b"x = 3\n"})))
    assert other is not None and other.record_sha256 != first.record_sha256


@pytest.mark.parametrize("change", ["edit", "same_size_edit", "add", "remove", "no_record", "two"])
def test_a_package_changed_after_install_gets_no_key(tmp_path: Path, change: str) -> None:
    package = wheel(tmp_path)
    module = package / "sub" / "mod.py"
    if change == "edit":
        later(lambda: module.write_bytes(b"y = 22\n"))
    elif change == "same_size_edit":
        later(lambda: module.write_bytes(b"y = 3\n"))  # ctime moves on
    elif change == "add":
        later(lambda: (package / "sub" / "extra.py").write_bytes(b"z = 1\n"))
    elif change == "remove":
        later(lambda: (package / "sub" / "mod.py").unlink())
    elif change == "no_record":
        (tmp_path / "pkg-1.0.dist-info" / "RECORD").unlink()
    else:  # a stale dist-info beside the live one: which one describes the files?
        (tmp_path / "pkg-0.9.dist-info").mkdir()
    assert torch_sources.installed(str(package)) is None


def installed_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A site directory with stand-in ``torch`` and ``triton`` wheels, where the hooks find them."""
    site = tmp_path / "site"
    wheel(site, "torch")
    wheel(site, "triton")
    packages_in(site, monkeypatch)
    return site


def packages_in(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the hooks find the packages ``torch`` and ``triton`` under ``site``."""
    monkeypatch.setattr(
        torch_sources.importlib.util,
        "find_spec",
        lambda name: type("Spec", (), {"submodule_search_locations": [str(site / name)]})(),
    )


class Prefetchable:
    """A stand-in for torch's ``prefetchable_cache``: counts its computations."""

    def __init__(self, value: Any) -> None:
        self.value = value
        self.computed = 0
        self.cached: Any = None
        self.lock = threading.Lock()

    def __call__(self) -> Any:
        if self.cached is None:
            self.computed += 1
            self.cached = self.value
        return self.cached

    def set(self, value: Any) -> None:
        if self.cached is not None:
            raise RuntimeError("prefetchable_cache value already set")
        self.cached = value

    def clear(self) -> None:
        self.cached = None


class Codecache:
    def __init__(self, torch_key: Any, triton_key: Any) -> None:
        self.torch_key = torch_key
        self.triton_key = triton_key


def hooks_on(store: MemoryStore, module: Codecache) -> tuple[torch_sources.SourceKeyHooks, Cache]:
    cache = Cache(store)
    hooks = torch_sources.SourceKeyHooks(ProbeCache(cache))
    hooks.install(module)
    return hooks, cache


def test_answers_come_from_the_store_on_the_second_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    installed_site(tmp_path, monkeypatch)
    store, digest = MemoryStore(f"memory://{tmp_path.name}"), hashlib.sha256(b"sources").digest()
    first = Codecache(Prefetchable(digest), Prefetchable("triton-3.8-abc"))
    _, cache = hooks_on(store, first)
    assert first.torch_key() == digest and first.triton_key() == "triton-3.8-abc"
    assert cache.stats.snapshot()["torch.source_key_misses"] == 2
    assert first.torch_key.__wrapped__.computed == 1  # torch computed it, once
    # A second process (a new machine with the same wheels): no computation at all.
    second = Codecache(Prefetchable(digest), Prefetchable("triton-3.8-abc"))
    originals = {"torch_key": second.torch_key, "triton_key": second.triton_key}
    hooks2, cache2 = hooks_on(store, second)
    assert second.torch_key() == digest and second.triton_key() == "triton-3.8-abc"
    assert cache2.stats.snapshot()["torch.source_key_hits"] == 2
    assert originals["torch_key"].computed == 0 and originals["triton_key"].computed == 0
    # torch's own cache got the answer too, for callers holding torch's function.
    assert originals["torch_key"].cached == digest
    # torch clears its answer (a fresh cache): the next call answers through the key again (the
    # process's probe memo: the same key, the same answer), still without torch hashing.
    second.torch_key.clear()
    assert originals["torch_key"].cached is None
    assert second.torch_key() == digest
    assert originals["torch_key"].computed == 0
    assert originals["torch_key"].cached == digest  # handed to torch's cache again
    assert hooks2.live() == {"sources.torch_key": True, "sources.triton_key": True}
    hooks2.uninstall()
    assert second.torch_key is originals["torch_key"]
    assert second.triton_key is originals["triton_key"]


def test_another_torch_or_a_changed_package_computes_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    site = installed_site(tmp_path, monkeypatch)
    store, digest = MemoryStore(f"memory://{tmp_path.name}"), hashlib.sha256(b"sources").digest()
    hooks_on(store, module := Codecache(Prefetchable(digest), Prefetchable(None)))
    module.torch_key()
    # Another torch version string: a miss, computed again.
    monkeypatch.setattr(torch, "__version__", type(torch.__version__)("9.9.9"))
    again = Codecache(Prefetchable(digest), Prefetchable(None))
    _, cache = hooks_on(store, again)
    again.torch_key()
    assert again.torch_key.__wrapped__.computed == 1
    assert cache.stats.snapshot()["torch.source_key_misses"] == 1
    monkeypatch.undo()
    packages_in(site, monkeypatch)
    # An edited torch file: no key at all, torch computes, nothing is stored or counted.
    time.sleep(0.01)
    (site / "torch" / "sub" / "mod.py").write_bytes(b"y = 9\n")
    edited = Codecache(Prefetchable(digest), Prefetchable(None))
    _, cache = hooks_on(store, edited)
    edited.torch_key()
    assert edited.torch_key.__wrapped__.computed == 1
    assert "torch.source_key_hits" not in cache.stats.snapshot()
    assert "torch.source_key_misses" not in cache.stats.snapshot()


def test_a_bad_stored_answer_is_a_miss_and_the_real_torch_is_keyed(tmp_path: Path) -> None:
    """A stored torch_key that is not a SHA-256 digest is not returned; the installed torch of
    this venv (a pip wheel) can be keyed."""
    with pytest.raises(ValueError):
        torch_sources._bytes_in(base64.b64encode(b"short").decode())
    import torch

    key = torch_sources.source_key("torch_key", "torch")
    if key is None:  # an editable or system torch: nothing to key, torch computes
        assert torch_sources.installed(os.path.dirname(torch.__file__)) is None
    else:
        assert key.store_key.startswith("torch/probe/source/")
        assert key.readable["package"].startswith("torch-")


# -- compiled kernel templates (torch_templates) --------------------------------------------------


def test_kernel_templates_compile_once_and_render_as_torch_does(tmp_path: Path) -> None:
    import jinja2
    import torch._inductor.codegen.common as common

    from compilecache.frameworks.torch import templates as torch_templates

    source = "def {{ name }}():\n    {{ body | indent_except_first(1) }}\n"
    expected = common.KernelTemplate._template_from_string(source).render(
        name="kernel", body="a = 1\nreturn a"
    )
    store = MemoryStore(f"memory://{tmp_path.name}")
    rendered, counters = [], []
    for _ in range(2):  # two processes
        cache = Cache(store)
        hooks = torch_templates.TemplateHooks(ProbeCache(cache))
        hooks.install(common)
        try:
            assert hooks.live() == {"templates.KernelTemplate._template_from_string": True}
            template = common.KernelTemplate._template_from_string(source)
            rendered.append(template.render(name="kernel", body="a = 1\nreturn a"))
            # A source Jinja cannot compile: torch's own detailed error, nothing stored.
            with pytest.raises(jinja2.TemplateSyntaxError):
                common.KernelTemplate._template_from_string("{% if %}")
        finally:
            hooks.uninstall()
        counters.append(cache.stats.snapshot())
    assert rendered == [expected, expected]
    assert counters[0]["torch.template_misses"] == 2 and "torch.template_hits" not in counters[0]
    assert counters[1]["torch.template_hits"] == 1
    assert (
        "__wrapped__"
        not in common.KernelTemplate.__dict__["_template_from_string"].__func__.__dict__
    )
    # One entry holds them all (one read on a cold start, not one per template), under a key of
    # Jinja's, torch's and Python's versions: another Jinja is another bundle.
    probes = [k for k in store.scan("torch/probe/template/")]
    assert len(probes) == 1
    key = torch_templates.bundle_key(jinja2.__version__)
    assert probes[0].key == key.store_key
    assert torch_templates.bundle_key("0.0").digest != key.digest


def test_a_grown_template_bundle_is_stored_after_the_burst(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without waiting for the hooks' removal (a program that never ends cleanly)."""
    import jinja2

    from compilecache.frameworks.torch import templates as torch_templates

    monkeypatch.setattr(torch_templates, "SAVE_AFTER_S", 0.05)
    store = MemoryStore(f"memory://{tmp_path.name}")
    bundle = torch_templates.TemplateBundle(
        ProbeCache(Cache(store)), torch_templates.bundle_key(jinja2.__version__)
    )
    env = jinja2.Environment()
    for source in ("{{ a }}", "{{ b }}", "{{ c }}"):
        bundle.code(source, lambda source=source: env.compile(source))
    assert wait_until(lambda: store.stat(bundle.key.store_key) is not None)
    again = torch_templates.TemplateBundle(ProbeCache(Cache(store)), bundle.key)
    code = again.code("{{ b }}", lambda: pytest.fail("compiled again"))
    assert env.template_class.from_code(env, code, env.make_globals(None), None).render(b=7) == "7"
