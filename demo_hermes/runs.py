"""Runs as the 0.19.0 gateway keeps them: an in-memory status, one buffered event stream, pending prompts.

Stream semantics follow ``api_server.py``: events are queued from the moment the run is created (a
late subscriber gets everything), a stream has a single consumer and no resume (once its response
ends the queue is gone), and the end is marked by the ``: stream closed`` comment. The 0.22-era
stream (numbered events, replay, several subscribers) is ``demo_hermes.replay.ReplayRun``.
"""

import asyncio
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = ["TERMINAL_STATUSES", "PendingClarify", "Run", "RunRegistry", "sse_frame"]

TERMINAL_STATUSES: Final = frozenset({"completed", "failed", "cancelled", "interrupted"})
RUN_STATUS_TTL: Final = 3600.0  # seconds a finished run's status stays readable (_RUN_STATUS_TTL)
RUN_STREAM_TTL: Final = 300.0  # seconds an unsubscribed stream buffer survives (_RUN_STREAM_TTL)
STREAM_CLOSED: Final = b": stream closed\n\n"
KEEPALIVE: Final = b": keepalive\n\n"

# Text deltas do not bump a run's updated_at / last_event in 0.19.0; tool, approval and end events do.
_QUIET_EVENTS: Final = frozenset({"message.delta", "reasoning.available"})


def sse_frame(payload: dict[str, Any]) -> bytes:
    """One event as Hermes writes it: a single ``data:`` line of ``json.dumps`` output, then a blank line."""
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


@dataclass
class PendingClarify:
    clarify_id: str
    future: "asyncio.Future[str | None]"


@dataclass
class Run:
    run_id: str
    session_id: str
    model: str
    created_at: float = field(default_factory=time.time)
    status: str = "queued"
    updated_at: float = field(default_factory=time.time)
    last_event: str | None = None
    output: str | None = None
    usage: dict[str, int] | None = None
    error: str | None = None
    finished_at: float | None = None
    task: "asyncio.Task[None] | None" = None
    pending_approvals: "list[asyncio.Future[str]]" = field(default_factory=list)
    pending_clarify: PendingClarify | None = None
    pending_steer: list[str] = field(default_factory=list)  # accepted steer texts the agent has not read yet
    requested: dict[str, Any] = field(default_factory=dict)  # model/provider/model_options as the request sent them
    _queue: "asyncio.Queue[bytes | None]" = field(default_factory=asyncio.Queue)
    _stream: str = "unclaimed"  # unclaimed → claimed → closed

    @property
    def finished(self) -> bool:
        return self.status in TERMINAL_STATUSES

    # --- events -----------------------------------------------------------------------------------

    def emit(self, name: str, fields: dict[str, Any]) -> None:
        self.emit_payload({"event": name, "run_id": self.run_id, "timestamp": time.time(), **fields})

    def emit_payload(self, payload: dict[str, Any]) -> None:
        """Queue an event payload (already in Hermes's key order) for the run's one subscriber."""
        if payload["event"] not in _QUIET_EVENTS:
            self.updated_at = payload["timestamp"]
            self.last_event = payload["event"]
        self._publish(payload)

    def finish(self, status: str) -> None:
        self.status = status
        self.finished_at = time.time()
        self.updated_at = self.finished_at
        self._publish(None)

    def _publish(self, payload: dict[str, Any] | None) -> None:
        """Hand an event (None: the end) to the stream: 0.19.0 keeps one queue for one subscriber."""
        if self._stream != "closed":
            self._queue.put_nowait(None if payload is None else sse_frame(payload))

    def set_status(self, status: str, last_event: str | None = None) -> None:
        self.status = status
        self.updated_at = time.time()
        if last_event is not None:
            self.last_event = last_event

    # --- the single consumer ----------------------------------------------------------------------

    def claim_stream(self, last_event_id: str | None = None) -> "asyncio.Queue[bytes | None] | None":
        """Hand the event queue to its one subscriber; None if it was already taken or dropped.

        0.19.0 ignores ``Last-Event-ID``: it has nothing to resume from.
        """
        if self._stream != "unclaimed":
            return None
        self._stream = "claimed"
        return self._queue

    def close_stream(self, queue: "asyncio.Queue[bytes | None] | None" = None) -> None:
        """The subscriber's response ended (or the sweep came): later events are dropped, as in 0.19.0."""
        self._stream = "closed"
        self._queue = asyncio.Queue()

    @property
    def stream_unclaimed(self) -> bool:
        return self._stream == "unclaimed"

    # --- prompts the run waits on -----------------------------------------------------------------

    def resolve_approvals(self, choice: str, *, resolve_all: bool) -> int:
        """Answer the oldest pending approval (FIFO), or all of them. Returns how many were resolved."""
        waiting = [future for future in self.pending_approvals if not future.done()]
        chosen = waiting if resolve_all else waiting[:1]
        for future in chosen:
            future.set_result(choice)
        return len(chosen)

    def status_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "object": "hermes.run",
            "run_id": self.run_id,
            "status": self.status,
            "updated_at": self.updated_at,
            "created_at": self.created_at,
            "session_id": self.session_id,
            "model": self.model,
        }
        if self.error is not None:
            body["error"] = self.error
        body["last_event"] = self.last_event
        if self.output is not None:
            body["output"] = self.output
        if self.usage is not None:
            body["usage"] = self.usage
        return body


class RunRegistry:
    def __init__(self, make_run: Callable[..., Run] = Run) -> None:
        self._runs: dict[str, Run] = {}
        self._make_run = make_run  # Run (0.19.0's stream) or a ReplayRun factory (0.22-era)
        self._admitted: dict[str, tuple[str, str]] = {}  # Idempotency-Key → (request fingerprint, run id)

    def create(self, *, session_id: str | None, model: str) -> Run:
        self._sweep()
        run_id = f"run_{secrets.token_hex(16)}"
        run = self._make_run(run_id=run_id, session_id=session_id or run_id, model=model)
        self._runs[run_id] = run
        return run

    def get(self, run_id: str) -> Run | None:
        return self._runs.get(run_id)

    def admitted(self, idempotency_key: str) -> tuple[str, str] | None:
        """(fingerprint, run id) of the run made for this key (``runs_idempotency``), or None."""
        return self._admitted.get(idempotency_key)

    def admit(self, idempotency_key: str, fingerprint: str, run_id: str) -> None:
        self._admitted[idempotency_key] = (fingerprint, run_id)

    def active(self) -> list[Run]:
        return [run for run in self._runs.values() if not run.finished]

    def _sweep(self) -> None:
        now = time.time()
        for run_id, run in list(self._runs.items()):
            if run.finished_at is None:
                continue
            if now - run.finished_at > RUN_STATUS_TTL:
                del self._runs[run_id]
            elif run.stream_unclaimed and now - run.finished_at > RUN_STREAM_TTL:
                run.close_stream()
