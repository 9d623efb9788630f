"""A small Pheby protocol client on the `websockets` library, for end-to-end tests.

Every frame received is kept in `frames`, so tests can wait for one event while others arrive,
and scan everything a client saw. A packed append delta (`delta_packed`) is kept as the
`message.delta` it stands for (`PackedStreams`), and as it came in `raw`.
"""

import asyncio
import itertools
import json
from collections.abc import Callable
from typing import Any, Self

from websockets.asyncio.client import ClientConnection, connect

Frame = dict[str, Any]
_ids = itertools.count(1)


class PackedStreams:
    """What a client granted `delta_packed` does with its frames (docs/protocol-extensions.md): a whole
    `message.delta` carrying `stream` names the message, and `["d", stream, offset, append]` is an
    append delta of it, here given back as that `message.delta` (with `"packed": True`). A stream no
    whole delta named is a server's error: KeyError."""

    def __init__(self) -> None:
        self._messages: dict[int, tuple[str, str]] = {}

    def frame(self, decoded: Any) -> Frame:
        if isinstance(decoded, list):
            tag, stream, offset, append = decoded
            assert tag == "d", decoded
            conversation_id, message_id = self._messages[stream]
            return {
                "type": "message.delta",
                "conversation_id": conversation_id,
                "message_id": message_id,
                "offset": offset,
                "append": append,
                "packed": True,
            }
        if decoded.get("type") == "message.delta" and "stream" in decoded:
            self._messages[decoded["stream"]] = (decoded["conversation_id"], decoded["message_id"])
        frame: Frame = decoded
        return frame


class PhebyClient:
    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.streams = PackedStreams()
        self.frames: list[Frame] = []
        self.raw: list[str | bytes] = []  # each frame as it came, for byte-for-byte checks
        self._cursor = 0
        self._arrived = asyncio.Condition()
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def connect(
        cls, url: str, secret: str | None = None, *, features: list[str] | None = None, **kwargs: Any
    ) -> Self:
        """Connect; with a secret, also say hello (asking for `features`, if given) and wait for `ready`."""
        client = cls(await connect(url, max_size=None, **kwargs))
        if secret is not None:
            asked = {} if features is None else {"features": features}
            await client.send("hello", secret=secret, protocol_version=1, **asked)
            await client.expect("ready")
        return client

    async def _read(self) -> None:
        try:
            async for raw in self.ws:
                async with self._arrived:
                    self.raw.append(raw)
                    self.frames.append(self.streams.frame(json.loads(raw)))
                    self._arrived.notify_all()
        except Exception:
            pass
        finally:
            async with self._arrived:
                self._arrived.notify_all()

    async def send(self, type_: str, **fields: Any) -> str:
        request_id = fields.pop("request_id", None) or f"r{next(_ids)}"
        await self.ws.send(json.dumps({"type": type_, "request_id": request_id, **fields}))
        return request_id

    async def send_raw(self, data: str | bytes) -> None:
        await self.ws.send(data)

    async def wait_for(self, match: Callable[[Frame], bool], timeout: float = 10.0) -> Frame:
        """The next frame (after the last one matched) that satisfies `match`."""

        def find() -> Frame | None:
            for index in range(self._cursor, len(self.frames)):
                if match(self.frames[index]):
                    self._cursor = index + 1
                    return self.frames[index]
            return None

        async def wait() -> Frame:
            async with self._arrived:
                while (found := find()) is None:
                    if self._reader.done():
                        raise AssertionError(f"connection closed; frames: {self.frames[-5:]}")
                    await self._arrived.wait()
                return found

        return await asyncio.wait_for(wait(), timeout)

    async def expect(self, type_: str, timeout: float = 10.0, **fields: Any) -> Frame:
        return await self.wait_for(
            lambda f: f.get("type") == type_ and all(f.get(k) == v for k, v in fields.items()), timeout
        )

    async def request(self, type_: str, reply: str, timeout: float = 10.0, **fields: Any) -> Frame:
        """Send and wait for the reply (or an error) carrying the same request_id."""
        request_id = await self.send(type_, **fields)
        return await self.wait_for(
            lambda f: f.get("request_id") == request_id and f.get("type") in (reply, "error"), timeout
        )

    async def arrived(self, type_: str, timeout: float = 10.0, **fields: Any) -> Frame:
        """A matching frame received at any time, already or from now on: for events whose order with the
        ones awaited before is not defined (a run's next events may reach the stream before the answer
        to an approval's POST returns, so they may be broadcast before `approval.resolved`)."""
        already = self.seen(type_, **fields)
        return already[0] if already else await self.expect(type_, timeout, **fields)

    def seen(self, type_: str, **fields: Any) -> list[Frame]:
        return [f for f in self.frames if f.get("type") == type_ and all(f.get(k) == v for k, v in fields.items())]

    async def close(self) -> None:
        await self.ws.close()
        await asyncio.wait_for(self._reader, 5)

    async def closed(self, timeout: float = 5.0) -> int | None:
        """Wait for the server to close; the close code."""
        await asyncio.wait_for(self._reader, timeout)
        return self.ws.close_code

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
