"""Stopping a long-lived asyncio task: cancel it and wait until it has ended; work that goes on past its
caller's cancel."""

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import Any, TypeVar

T = TypeVar("T")


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


async def shielded(work: Awaitable[T]) -> T:
    """`asyncio.shield(work)`, whose error, should the work fail after every caller was cancelled, is taken
    here: never left for the loop to log as "never retrieved" whenever the task is collected."""
    task = asyncio.ensure_future(work)
    task.add_done_callback(_taken)
    return await asyncio.shield(task)


def _taken(task: "asyncio.Future[Any]") -> None:
    if not task.cancelled():
        task.exception()
