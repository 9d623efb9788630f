"""A request body that stalls is answered 408 instead of holding its connection open forever.

uvicorn bounds the time to the first byte of a request line, not a body read: a client that
announces 100 bytes and sends one would keep a handler (and a quota reservation) waiting. Each
body read may wait `seconds` at most; once the body is complete, reads pass straight through, so
a streamed response waiting for the client to disconnect is never cut short.

The deadline is `asyncio.timeout` (the server runs on asyncio): a 64 MiB upload is a thousand
reads or so, and anyio's `fail_after` costs about three times as much per read.
"""

import asyncio
from typing import Any

from litestar.enums import ScopeType
from litestar.types import ASGIApp, Receive, Scope, Send

from pheby.errors import RequestTimeout


class BodyIdleTimeout:
    def __init__(self, app: ASGIApp, seconds: float) -> None:
        self._app = app
        self._seconds = seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP:
            await self._app(scope, receive, send)
            return
        body_done = False

        async def receive_with_deadline() -> Any:
            nonlocal body_done
            if body_done:
                return await receive()
            try:
                async with asyncio.timeout(self._seconds):
                    message = await receive()
            except TimeoutError:
                raise RequestTimeout(f"No request body bytes for {self._seconds:g} seconds") from None
            body_done = message["type"] != "http.request" or not message.get("more_body", False)
            return message

        await self._app(scope, receive_with_deadline, send)
