"""Work that goes on past its caller's cancel (`pheby.cancelling.shielded`): its result reaches a caller still
waiting, and its error, when every caller was cancelled first, is not left for the loop to report."""

import asyncio
import gc
from typing import Any

import pytest

from pheby.cancelling import shielded

pytestmark = pytest.mark.anyio


async def test_work_failing_after_its_caller_was_cancelled_is_not_reported_as_never_retrieved() -> None:
    reported: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    let_fail = asyncio.Event()

    async def work() -> None:
        await let_fail.wait()
        raise OSError("the connection went away")

    try:
        caller = asyncio.create_task(shielded(work()))
        await asyncio.sleep(0)
        caller.cancel()
        await asyncio.gather(caller, return_exceptions=True)
        let_fail.set()
        for _ in range(3):
            await asyncio.sleep(0)
        del caller
        gc.collect()
        assert reported == []
    finally:
        loop.set_exception_handler(None)


async def test_a_caller_still_waiting_gets_the_works_result_or_error() -> None:
    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    async def failure() -> None:
        await asyncio.sleep(0)
        raise OSError("failed")

    assert await shielded(answer()) == 42
    with pytest.raises(OSError, match="failed"):
        await shielded(failure())
