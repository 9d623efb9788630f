"""Authenticated WebSocket connections and per-account fan-out.

Each connection has a bounded send queue drained by one writer task, so a slow client never
delays the others: a connection whose queue overflows is closed with 1013 (try again later)
and reconnects. An event is encoded once and queued to every connection of its account.
"""

import asyncio
import logging
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable

from pheby.events import Event, encode_event

log = logging.getLogger("pheby.ws")

SEND_QUEUE_FRAMES = 1024
CLOSE_TRY_AGAIN_LATER = 1013

SendText = Callable[[str], Awaitable[None]]
Close = Callable[[int, str], Awaitable[None]]


class Connection:
    """One authenticated socket: a bounded queue of encoded frames and the task that writes them."""

    def __init__(self, account_id: str, send_text: SendText, close: Close, max_frames: int = SEND_QUEUE_FRAMES) -> None:
        self.id = uuid.uuid4().hex
        self.account_id = account_id
        self._send_text = send_text
        self._close = close
        self._queue: asyncio.Queue[str | None] = asyncio.Queue(maxsize=max_frames)
        self._writer: asyncio.Task[None] | None = None
        self.closed = asyncio.Event()

    def start(self) -> None:
        self._writer = asyncio.create_task(self._write_loop(), name=f"ws-writer-{self.id}")

    def send_frame(self, frame: str) -> None:
        """Queue a frame; a full queue means the client can't keep up, so it is dropped (1013)."""
        if self.closed.is_set():
            return
        try:
            self._queue.put_nowait(frame)
        except asyncio.QueueFull:
            log.warning("closing slow WebSocket connection %s: send queue full", self.id)
            self.closed.set()
            asyncio.get_running_loop().create_task(self._close_quietly(CLOSE_TRY_AGAIN_LATER, "send queue overflow"))

    def send(self, event: Event) -> None:
        self.send_frame(encode_event(event).decode())

    async def drain_and_stop(self) -> None:
        """Let queued frames go out, then stop the writer."""
        if self._writer is None:
            return
        if not self.closed.is_set():
            try:
                self._queue.put_nowait(None)
            except asyncio.QueueFull:
                self._writer.cancel()
        try:
            await asyncio.wait_for(asyncio.shield(self._writer), timeout=5)
        except (TimeoutError, asyncio.CancelledError):
            self._writer.cancel()

    async def _write_loop(self) -> None:
        try:
            while True:
                frame = await self._queue.get()
                if frame is None or self.closed.is_set():
                    return
                await self._send_text(frame)
        except Exception:  # noqa: BLE001 - the socket went away; the reader loop sees the disconnect too
            self.closed.set()

    async def _close_quietly(self, code: int, reason: str) -> None:
        if self._writer is not None:
            self._writer.cancel()
        try:
            await self._close(code, reason)
        except Exception:  # noqa: BLE001 - already gone
            log.debug("close of %s failed", self.id)


class Hub:
    """Every live connection, by account."""

    def __init__(self) -> None:
        self._by_account: defaultdict[str, set[Connection]] = defaultdict(set)

    def add(self, connection: Connection) -> None:
        self._by_account[connection.account_id].add(connection)

    def remove(self, connection: Connection) -> None:
        group = self._by_account.get(connection.account_id)
        if group is not None:
            group.discard(connection)
            if not group:
                del self._by_account[connection.account_id]

    def broadcast(self, account_id: str, event: Event) -> None:
        """Send `event` to every connection of `account_id` and to no one else."""
        group = self._by_account.get(account_id)
        if not group:
            return
        frame = encode_event(event).decode()
        for connection in list(group):
            connection.send_frame(frame)

    def connections(self, account_id: str) -> int:
        return len(self._by_account.get(account_id, ()))

    def all_connections(self) -> list[Connection]:
        return [c for group in self._by_account.values() for c in group]
