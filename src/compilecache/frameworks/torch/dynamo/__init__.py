"""Dynamo's own output from the store: a torch warm start that does not trace the program again.

On by default for the torch releases in :data:`TESTED` (``COMPILECACHE_TORCH_PRECOMPILE=0`` turns
it off; ``=1`` on another release warns that it is left off).
torch's ``caching_precompile`` mode makes Dynamo keep what it produced for a ``torch.compile``'d
function in a ``CompilePackage`` (the transformed bytecode, the serialised guards, the names of
the compiled backends) and look it up when the function is compiled again
(``DynamoCache.load``, before any tracing). torch keeps it in its cache directory, written only
by ``save_cache_artifacts()``. Here ``DynamoCache`` is replaced by :class:`StoreDynamoCache`,
which keeps each package, with its compiled backend, in compilecache's store: keyed, signed,
counted and carried to a fresh host like every other entry. A backend is AOTAutograd's entry in
plain torch's form (torch's mode would bundle it, under a key no other process finds): it names
its FX graphs, which the store serves when the package is installed, and AOTAutograd's cache,
its keys and ``save_cache_artifacts()`` stay exactly plain torch's.

A package is served only where torch's own warm start would compute the same thing:

- **Our key** holds what Dynamo's guards do not see: the function (module, qualified name,
  first line) and the contents of its module's file, what the torch.compile call asked for
  (Inductor's mode and options, ``dynamic``, ``fullgraph``; another backend is not kept), the
  torch, Triton and Python versions, Dynamo's, Inductor's and functorch's configuration, the
  thread count, grad mode, the default dtype and device, and deterministic algorithms.
- **Sources**: the entry lists every module whose code Dynamo traced or inlined, with the
  digest of its file; a package whose files changed is not served (counted ``stale``), and the
  new trace replaces it.
- **Dropped guards**: under ``caching_precompile`` Dynamo drops the guards on object identity
  (ID_MATCH and what derives from it, CLOSURE_MATCH, WEAKREF_ALIVE, DICT_VERSION), which cannot
  be serialised. In the process that traces, they are put back in memory (the frame keeps the
  guards torch builds without the mode; only the saved copy leaves them out). The entry records
  each by what its object is, by name (``torch_dynamo_guards``); a load checks those reached
  from globals and closure cells, and every frame it installs checks all of them on each call.
  A package that dropped a guard that cannot be named (an instance, a dict's version) is not
  stored.
- **Loadable packages only**: before a package is written its guards are built again from their
  saved state (as torch's install does) and every global Dynamo made that its code reads must be
  installed by it where that code looks. Where torch's own mode fails on transformers' models,
  ``torch_dynamo_repairs`` mends it. An install that still fails leaves the package fresh:
  Dynamo traces.
- **Complete packages only**: a package is written once every backend it names was recorded
  (the AOTAutograd entry is recorded at the first backward call), and again after a recompile
  added a backend, so an entry never names a backend it lacks (pytorch#194951).
- torch's switches: ``force_disable_caches``, ``fresh_cache()`` and AOTAutograd's cache
  switched off turn this layer off, as they turn off the graphs it is built on. A program that
  sets ``caching_precompile`` itself keeps torch's own cache: set before torch is imported
  (``TORCH_CACHING_PRECOMPILE``), nothing is hooked; set later (``torch._dynamo.config.patch``,
  as PyTorch's ``test_cache_hot_load_caching_precompile``), the mode is the program's while it
  holds, and torch's own Dynamo cache serves it, hot-loaded artifacts included. The mode
  compilecache turns on is the value :data:`OURS`, which a program's ``True`` replaces and a
  patch's exit restores.

Never raises into torch: a failure is a counted miss (torch then traces as usual).

The modules: ``mode`` (the torch modules hooked, the releases tested, whose the mode is),
``packages`` (:class:`DynamoPackages`: lookups, checks, installs and writes), ``guard_hooks``
(the guards Dynamo drops, seen, put back and saved; the values and checks they are built from,
recorded and compared), ``unguarded`` (what Dynamo reads without a guard, guarded), ``backends`` (AOTAutograd's entries as
package backends, in plain torch's form), ``guards`` (dropped guards named and checked), ``key``
(what the key holds) and ``repairs`` (where torch's own mode fails on real models).
"""

from compilecache.frameworks.torch.dynamo.mode import MODULES, OURS, PACKAGE, TESTED
from compilecache.frameworks.torch.dynamo.packages import DynamoPackages, StoreDynamoCache

__all__ = ["MODULES", "OURS", "PACKAGE", "TESTED", "DynamoPackages", "StoreDynamoCache"]
