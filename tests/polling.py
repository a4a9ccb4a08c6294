"""Waiting in tests by polling a condition against a deadline, never by a fixed sleep."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(condition: Callable[[], T], timeout: float = 5.0, interval: float = 0.02) -> T:
    """``condition()``'s first true value, polled every ``interval`` seconds; its last (false)
    value once ``timeout`` seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)
