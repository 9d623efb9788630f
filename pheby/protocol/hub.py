"""Authenticated WebSocket connections and per-account fan-out, with their bounds.

Each connection has a send queue bounded in bytes (and frames) drained by one writer task, so a
slow client never delays the others: a connection that owes more than its bound is closed with
1013 (try again later) and reconnects. An event is encoded once and queued to every connection of
its account. The hub caps the sockets of one account and of the whole server.

Each connection remembers the credential it was authenticated with (the stored token's id and
expiry; none for the owner secret), so a revoked credential's sockets can be found and closed
(see `pheby.revocation`): they get an `unauthorized` error, then a 1008 close.
"""

import asyncio
import logging
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable

from pheby.errors import RateLimited
from pheby.protocol.frames import Event, encode_event, error_event

log = logging.getLogger("pheby.ws")

SEND_QUEUE_FRAMES = 1024
SEND_QUEUE_BYTES = 8 * 1024 * 1024
MAX_CONNECTIONS_PER_ACCOUNT = 32
MAX_SOCKETS = 10_000
CLOSE_POLICY_VIOLATION = 1008
CLOSE_TRY_AGAIN_LATER = 1013
REVOKED_SEND_SECONDS = 2.0  # how long the `unauthorized` frame may take before the close goes anyway

SendText = Callable[[str], Awaitable[None]]
Close = Callable[[int, str], Awaitable[None]]
Listener = Callable[[str, Event], None]


def utf8_size(frame: str) -> int:
    """The frame's size on the wire; `isascii` is O(1), so the common case costs no encoding."""
    return len(frame) if frame.isascii() else len(frame.encode())


class Connection:
    """One authenticated socket: a bounded queue of encoded frames and the task that writes them.

    `token_id` and `expires_at` describe the credential the socket said hello with (None for the
    owner secret, which is not a stored token and never expires), `judged_at` when it was checked.
    """

    def __init__(
        self,
        account_id: str,
        send_text: SendText,
        close: Close,
        *,
        max_frames: int = SEND_QUEUE_FRAMES,
        max_bytes: int = SEND_QUEUE_BYTES,
        token_id: str | None = None,
        expires_at: float | None = None,
        judged_at: float = 0.0,
    ) -> None:
        self.id = uuid.uuid4().hex
        self.account_id = account_id
        self.token_id = token_id
        self.expires_at = expires_at
        self.judged_at = judged_at  # when its credential was checked (`pheby.auth.Principal.judged_at`)
        self._send_text = send_text
        self._close = close
        self._queue: asyncio.Queue[tuple[str, int] | None] = asyncio.Queue(maxsize=max_frames)
        self._max_bytes = max_bytes
        self._owed_bytes = 0  # queued frames plus the one being written
        self._writer: asyncio.Task[None] | None = None
        self._closing: asyncio.Task[None] | None = None
        self.closed = asyncio.Event()
        # Set once the credential is revoked: the socket's messages are no longer handled.
        self.revoked = False
        # Whether the client is in front of its user: from hello on, until it says otherwise
        # (`presence.set`); an account with none in the foreground is reached by Web Push.
        self.foreground = True

    def start(self) -> None:
        self._writer = asyncio.create_task(self._write_loop(), name=f"ws-writer-{self.id}")

    def send_frame(self, frame: str, size: int | None = None) -> None:
        """Queue a frame; past the bound the client can't keep up, so it is dropped (1013).

        One frame larger than the bound may still go out when nothing else is owed.
        """
        if self.closed.is_set():
            return
        size = utf8_size(frame) if size is None else size
        if self._owed_bytes and self._owed_bytes + size > self._max_bytes:
            self._overflow("bytes owed past the bound")
            return
        try:
            self._queue.put_nowait((frame, size))
        except asyncio.QueueFull:
            self._overflow("send queue full")
            return
        self._owed_bytes += size

    def send(self, event: Event) -> None:
        encoded = encode_event(event)
        self.send_frame(encoded.decode(), len(encoded))

    def revoke(self, message: str) -> None:
        """The credential stopped working: an `unauthorized` error, then a 1008 close; queued frames are dropped."""
        self.revoked = True
        if self.closed.is_set():
            return
        frame = encode_event(error_event("unauthorized", message)).decode()
        self._begin_close(CLOSE_POLICY_VIOLATION, "unauthorized", frame)

    async def drain_and_stop(self) -> None:
        """Let queued frames go out, then stop the writer (and let a close under way finish)."""
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
        if self._closing is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._closing), timeout=REVOKED_SEND_SECONDS + 5)
            except (TimeoutError, asyncio.CancelledError):
                self._closing.cancel()

    async def _write_loop(self) -> None:
        try:
            while True:
                item = await self._queue.get()
                if item is None or self.closed.is_set():
                    return
                frame, size = item
                await self._send_text(frame)
                self._owed_bytes -= size
        except Exception:  # noqa: BLE001 - the socket went away; the reader loop sees the disconnect too
            self.closed.set()

    def _overflow(self, why: str) -> None:
        log.warning("closing slow WebSocket connection %s: %s", self.id, why)
        self._begin_close(CLOSE_TRY_AGAIN_LATER, "send queue overflow")

    def _begin_close(self, code: int, reason: str, last_frame: str | None = None) -> None:
        self.closed.set()
        self._closing = asyncio.get_running_loop().create_task(
            self._close_quietly(code, reason, last_frame), name=f"ws-close-{self.id}"
        )

    async def _close_quietly(self, code: int, reason: str, last_frame: str | None) -> None:
        if self._writer is not None:
            self._writer.cancel()
            await asyncio.gather(self._writer, return_exceptions=True)
        try:
            if last_frame is not None:
                await asyncio.wait_for(self._send_text(last_frame), timeout=REVOKED_SEND_SECONDS)
        except Exception:  # noqa: BLE001 - a peer that doesn't read gets the close anyway
            log.debug("last frame to %s not sent", self.id)
        try:
            await self._close(code, reason)
        except Exception:  # noqa: BLE001 - already gone
            log.debug("close of %s failed", self.id)


class Hub:
    """Every live connection, by account, and the count of open sockets (said hello or not)."""

    def __init__(self, max_sockets: int = MAX_SOCKETS, max_per_account: int = MAX_CONNECTIONS_PER_ACCOUNT) -> None:
        self._by_account: defaultdict[str, set[Connection]] = defaultdict(set)
        self._max_sockets = max_sockets
        self._max_per_account = max_per_account
        self._sockets = 0
        self._listeners: list[Listener] = []

    def claim_socket(self) -> bool:
        """Count a new socket in; False (and not counted) when the server already holds its cap."""
        if self._sockets >= self._max_sockets:
            return False
        self._sockets += 1
        return True

    def release_socket(self) -> None:
        self._sockets -= 1

    def add(self, connection: Connection) -> None:
        """Register an authenticated connection; `RateLimited` when its account already holds its cap."""
        if self.connections(connection.account_id) >= self._max_per_account:
            raise RateLimited(
                f"An account may hold at most {self._max_per_account} connections; close one and try again"
            )
        self._by_account[connection.account_id].add(connection)

    def remove(self, connection: Connection) -> None:
        group = self._by_account.get(connection.account_id)
        if group is not None:
            group.discard(connection)
            if not group:
                del self._by_account[connection.account_id]

    def listen(self, listener: Listener) -> None:
        """Have `listener(account_id, event)` see every event broadcast (connected clients or not), after
        it is queued; it must not block (`pheby.push` queues its notices)."""
        self._listeners.append(listener)

    def broadcast(self, account_id: str, event: Event) -> None:
        """Send `event` to every connection of `account_id` and to no one else."""
        group = self._by_account.get(account_id)
        if group:
            encoded = encode_event(event)
            frame, size = encoded.decode(), len(encoded)
            for connection in list(group):
                connection.send_frame(frame, size)
        for listener in self._listeners:
            listener(account_id, event)

    def in_foreground(self, account_id: str) -> bool:
        """Whether any connection of the account is in front of its user."""
        return any(c.foreground and not c.closed.is_set() for c in self._by_account.get(account_id, ()))

    def delta_held_for(self, message_id: str) -> float:
        """Seconds a `message.delta` of the message broadcast now would be held back before it reaches
        the clients (this hub sends every event at once; `CoalescingHub` holds deltas back)."""
        return 0.0

    def send_held_delta(self, message_id: str) -> None:
        """Send the message's held-back delta now, its window about to end (`CoalescingHub`; nothing here)."""

    def connections(self, account_id: str) -> int:
        return len(self._by_account.get(account_id, ()))

    def of_account(self, account_id: str) -> list[Connection]:
        return list(self._by_account.get(account_id, ()))

    def all_connections(self) -> list[Connection]:
        return [c for group in self._by_account.values() for c in group]
