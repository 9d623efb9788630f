"""Stopping a long-lived asyncio task: cancel it and wait until it has ended."""

import asyncio
import contextlib
from typing import Any


async def cancel_and_wait(task: "asyncio.Task[Any] | None") -> None:
    """Cancel `task` (None: nothing to stop) and wait for it to end; its cancellation is not raised here."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
