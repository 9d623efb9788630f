"""Waiting, bounded, for a server's state (looked at from a test, never changed) to come about."""

import asyncio
import time
from collections.abc import Callable


async def until(condition: Callable[[], bool], what: str, timeout: float = 10.0, interval: float = 0.02) -> None:
    """Return once `condition()` holds; fail with `what` (what never came about) after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(interval)
