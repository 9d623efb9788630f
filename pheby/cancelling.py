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


def raise_if_cancelled() -> None:
    """Raise `CancelledError` if the running task has been asked to stop. For an `except Exception` around a
    library's await: a cancel that arrived during it may come out as the library's own error."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
