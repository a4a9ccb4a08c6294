"""The one-line summary ``compilecache run`` prints: hits, misses, writes, errors, time saved.

A module of its own, importing nothing: ``compilecache run`` prints it after every command, and
whatever it imports is paid on every run.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: importing typing costs ~10 ms here
if TYPE_CHECKING:
    from collections.abc import Mapping

# In the spool of ``compilecache run``: ``<pid>.json``, a process's counters reported at its exit,
# and ``<pid>.progress``, its counters so far, kept while it runs (what counts for a process
# killed before its exit report).
PROGRESS_SUFFIX = ".progress"


class Summary:
    """The headline numbers people read. (A plain class, not a dataclass: ``dataclasses`` costs
    ~12 ms of imports.)"""

    __slots__ = (
        "compile_time_saved_s",
        "errors",
        "foreign",
        "hits",
        "misses",
        "unrunnable",
        "writes",
    )

    def __init__(
        self,
        hits: int,
        misses: int,
        writes: int,
        errors: int,
        compile_time_saved_s: float,
        foreign: int = 0,
        unrunnable: int = 0,
    ) -> None:
        self.hits = hits
        self.misses = misses
        self.writes = writes
        self.errors = errors
        self.compile_time_saved_s = compile_time_saved_s
        # Entries signed with another key (COMPILECACHE_SECRET differs): said only when there
        # are.
        self.foreign = foreign
        # Entries built for another kind of host (a CPU this one cannot run): said only when
        # there are.
        self.unrunnable = unrunnable

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Summary):
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in self.__slots__)

    def __hash__(self) -> int:
        return hash(tuple(getattr(self, n) for n in self.__slots__))

    @classmethod
    def of(cls, counters: Mapping[str, float]) -> Summary:
        return cls(
            hits=int(counters.get("hits", 0)),
            misses=int(counters.get("misses", 0)),
            writes=int(counters.get("writes", 0)),
            errors=int(counters.get("errors", 0)),
            # Never negative: a process that waited longer for another's compile than that
            # compile took saved nothing, and lost no more than its wait (wait_time_s).
            compile_time_saved_s=max(0.0, float(counters.get("compile_time_saved_s", 0.0))),
            foreign=int(counters.get("foreign", 0)),
            unrunnable=int(counters.get("unrunnable", 0)),
        )

    def line(self) -> str:
        foreign = f", {self.foreign} signed with another key" if self.foreign else ""
        if self.unrunnable:
            foreign += f", {self.unrunnable} built for another host"
        return (
            f"compilecache: {_count(self.hits, 'hit')}, {_count(self.misses, 'miss', 'misses')}"
            f"{foreign}, {_count(self.writes, 'write')}, {_count(self.errors, 'error')}, "
            f"{self.compile_time_saved_s:.1f}s compile time saved"
        )


def _count(n: int, one: str, many: str = "") -> str:
    """``1 hit``, ``2 hits``."""
    return f"{n} {one}" if n == 1 else f"{n} {many or one + 's'}"
