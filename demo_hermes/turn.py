"""One agent turn: what the scripted demo agent can see and do.

A turn either belongs to a run (``POST /v1/runs``): it streams events to the run's subscriber and
waits for humans on approvals and clarifications; or to a cron execution: it streams nothing, and
nobody is there to answer (approvals are denied, as Hermes does for cron by default).
Either way every message lands in the session transcript like Hermes writes it.
"""

import asyncio
import contextlib
import json
import re
import secrets
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from demo_hermes.runs import PendingClarify, Run
from demo_hermes.sessions import SessionRecord, SessionStore

__all__ = ["HOLD_SECONDS", "Holds", "ToolCall", "Turn", "TurnSettings", "chunk_text"]

_WORDS = re.compile(r"\S+\s*|\s+")


def chunk_text(text: str, minimum: int = 3) -> list[str]:
    """Split text into word-sized deltas (at least ``minimum`` when the text allows) that join back exactly."""
    chunks = _WORDS.findall(text)
    if len(chunks) >= minimum or len(text) < minimum:
        return chunks or [text]
    size = -(-len(text) // minimum)
    return [text[i : i + size] for i in range(0, len(text), size)]


HOLD_SECONDS = 10.0  # the longest a held stream waits for its cue
_HOLD_POLL_SECONDS = 0.005


class Holds:
    """Cues for streams held at a point of their text (``/demo chunks`` with a ``<hold>`` piece), so that
    a test can see what came before the point before anything after it is written. Each ``release()``,
    from any thread, lets one hold go on: the one waiting, or the next. A hold waits ``HOLD_SECONDS`` at
    most, and a cancelled one takes no release."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._released = 0  # releases no hold has taken yet

    def release(self) -> None:
        with self._lock:
            self._released += 1

    async def wait(self) -> None:
        """Return once released, or after ``HOLD_SECONDS`` without a release."""
        deadline = time.monotonic() + HOLD_SECONDS
        while time.monotonic() < deadline:
            with self._lock:
                if self._released:
                    self._released -= 1
                    return
            await asyncio.sleep(_HOLD_POLL_SECONDS)


@dataclass(frozen=True)
class TurnSettings:
    """What the turn knows about its surroundings, fixed when it starts (Hermes reads config per run)."""

    model: str
    provider: str
    reasoning_effort: str
    approval_timeout: float
    media_dir: Path
    delta_delay: float


@dataclass
class ToolCall:
    id: str
    name: str
    args: dict[str, Any]
    started: float = field(default_factory=time.monotonic)
    error: bool = False
    result: str = ""


class Turn:
    def __init__(
        self,
        *,
        text: str,
        raw_input: Any,
        history_count: int,
        settings: TurnSettings,
        sessions: SessionStore,
        session: SessionRecord,
        run: Run | None,
        holds: Holds,
    ) -> None:
        self.text = text
        self.raw_input = raw_input
        self.history_count = history_count
        self.settings = settings
        self.output = ""
        self.output_tokens = 0
        self._sessions = sessions
        self._session = session
        self._run = run
        self._holds = holds
        self._after_tool = False

    def _emit(self, name: str, fields: dict[str, Any]) -> None:
        if self._run is not None:
            self._run.emit(name, fields)

    def emit_event(self, name: str, fields: dict[str, Any]) -> None:
        """Send any event on the run's stream (nothing for a cron turn), e.g. one a 0.19.0 client doesn't know."""
        self._emit(name, fields)

    def take_steer(self) -> str | None:
        """The steer text that arrived since the last step (joined by newlines, as Hermes does), or None."""
        if self._run is None or not self._run.pending_steer:
            return None
        text = "\n".join(self._run.pending_steer)
        self._run.pending_steer.clear()
        return text

    async def pause(self, seconds: float) -> None:
        if self._run is not None:
            await asyncio.sleep(seconds)

    async def hold(self) -> None:
        """Wait for a test's cue (``Holds``); a cron turn streams nothing, so it does not wait."""
        if self._run is not None:
            await self._holds.wait()

    async def say(
        self,
        text: str,
        *,
        chunks: list[str] | None = None,
        delay: float | None = None,
        paced: bool = False,
        holds_before: frozenset[int] = frozenset(),
    ) -> None:
        """Stream one assistant message as deltas (``chunks``, else word-sized pieces of ``text``), then
        ``reasoning.available`` like 0.19.0 does. ``paced``: the deltas keep to a fixed schedule, one
        per ``delay`` from the first, however late each sleep wakes. ``holds_before``: the positions of
        the chunks that wait for a cue (``hold``) before they stream (``len(chunks)``: before the end)."""
        chunks = list(chunks) if chunks else chunk_text(text)
        if self._after_tool:
            # After a tool turn Hermes's first delta starts with a blank line; the output does not.
            chunks[0] = "\n\n" + chunks[0]
            self._after_tool = False
        step = self.settings.delta_delay if delay is None else delay
        start = time.monotonic()
        for index, chunk in enumerate(chunks, 1):
            if index - 1 in holds_before:
                await self.hold()
            self._emit("message.delta", {"delta": chunk})
            await self.pause(max(0.0, start + index * step - time.monotonic()) if paced else step)
        if len(chunks) in holds_before:
            await self.hold()
        self._emit("reasoning.available", {"text": text[:500]})
        self.output = text
        self.output_tokens += len(text.split())
        self._session.api_call_count += 1

    @contextlib.asynccontextmanager
    async def tool(self, name: str, args: dict[str, Any], preview: str) -> AsyncIterator[ToolCall]:
        """A tool call: ``tool.started`` now, ``tool.completed`` when the block ends (an error if it raised)."""
        call = ToolCall(id=f"call_{secrets.token_hex(6)}", name=name, args=args)
        self._emit("tool.started", {"tool": name, "preview": preview, "tool_call_id": call.id, "args": args})
        self._sessions.add_message(
            self._session,
            "assistant",
            "",
            tool_calls=[
                {
                    "id": call.id,
                    "call_id": call.id,
                    "response_item_id": f"fc_{call.id.removeprefix('call_')}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)},
                }
            ],
            finish_reason="tool_calls",
        )
        self._session.api_call_count += 1
        try:
            yield call
        except BaseException:
            call.error = True
            call.result = call.result or json.dumps({"output": "", "exit_code": 130, "error": "[Command interrupted]"})
            raise
        finally:
            duration = round(time.monotonic() - call.started, 3)
            self._emit(
                "tool.completed",
                {"tool": name, "duration": duration, "error": call.error, "tool_call_id": call.id},
            )
            self._sessions.add_message(self._session, "tool", call.result, tool_call_id=call.id, tool_name=name)
            self._after_tool = True

    async def ask_approval(self, *, command: str, pattern_key: str, description: str) -> str:
        """Wait for ``POST …/approval``; "timeout" when nobody answers in ``approvals.timeout`` seconds.

        Without a human (cron) the command is denied at once.
        """
        run = self._run
        if run is None:
            return "deny"
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        run.pending_approvals.append(future)
        run.set_status("waiting_for_approval")
        # Key order as 0.19.0 writes it: the approval fields first, then the event envelope, then choices.
        run.emit_payload(
            {
                "command": command,
                "pattern_key": pattern_key,
                "pattern_keys": [pattern_key],
                "description": description,
                "allow_permanent": True,
                "event": "approval.request",
                "run_id": run.run_id,
                "timestamp": time.time(),
                "choices": ["once", "session", "always", "deny"],
            }
        )
        try:
            return await asyncio.wait_for(future, self.settings.approval_timeout)
        except TimeoutError:
            return "timeout"
        finally:
            run.pending_approvals.remove(future)
            if run.status == "waiting_for_approval":
                run.set_status("running")

    async def ask_clarify(self, question: str, choices: list[str] | None) -> str | None:
        """Wait for ``POST …/clarify`` (newer Hermes); None when nobody answers in time."""
        run = self._run
        if run is None:
            return None
        future: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        pending = PendingClarify(clarify_id=secrets.token_hex(16), future=future)
        run.pending_clarify = pending
        run.emit(
            "clarify.request",
            {"clarify_id": pending.clarify_id, "question": question, "choices": choices, "multi_select": False},
        )
        try:
            response = await asyncio.wait_for(future, self.settings.approval_timeout)
        except TimeoutError:
            response = None
        finally:
            run.pending_clarify = None
        notice = f"✅ answered: {response}" if response is not None else "⏱️ clarification expired"
        run.emit("clarify.retired", {"clarify_id": pending.clarify_id, "notice": notice})
        return response
