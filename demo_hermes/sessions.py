"""The demo's ``state.db``: sessions and their messages, in memory, shaped like hermes-agent 0.19.0."""

import secrets
import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["COMPACTION_SUMMARY", "MessageRecord", "SessionRecord", "SessionStore"]

# How 0.19.0's context compressor opens the summary it stores in place of the compacted turns.
COMPACTION_SUMMARY = "[CONTEXT COMPACTION — REFERENCE ONLY] Earlier turns were compacted into the summary below."


@dataclass
class MessageRecord:
    id: int
    session_id: str
    role: str
    content: str | None
    timestamp: float
    tool_call_id: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_name: str | None = None
    finish_reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "session_id": self.session_id,
            "role": self.role,
            "content": self.content,
            "tool_call_id": self.tool_call_id,
            "tool_calls": self.tool_calls,
            "tool_name": self.tool_name,
            "timestamp": self.timestamp,
            "token_count": None,
            "finish_reason": self.finish_reason,
            "reasoning": None,
            "reasoning_content": None,
        }


@dataclass
class SessionRecord:
    id: str
    source: str
    model: str
    title: str | None = None
    started_at: float = field(default_factory=time.time)
    ended_at: float | None = None
    end_reason: str | None = None
    has_system_prompt: bool = False
    has_model_config: bool = False
    input_tokens: int = 0
    output_tokens: int = 0
    api_call_count: int = 0
    tool_call_count: int = 0
    last_active: float = field(default_factory=time.time)
    messages: list[MessageRecord] = field(default_factory=list)

    def to_json(self, *, listing: bool = False) -> dict[str, Any]:
        """The session object; a listing adds ``last_active`` and ``preview`` like 0.19.0."""
        body: dict[str, Any] = {
            "id": self.id,
            "source": self.source,
            "user_id": None,
            "model": self.model,
            "title": self.title,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "end_reason": self.end_reason,
            "message_count": len(self.messages),
            "tool_call_count": self.tool_call_count,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": 0,
            "cache_write_tokens": 0,
            "reasoning_tokens": 0,
            "estimated_cost_usd": 0.0 if self.api_call_count else None,
            "actual_cost_usd": None,
            "api_call_count": self.api_call_count,
            "parent_session_id": None,
        }
        if listing:
            body["last_active"] = self.last_active
            body["preview"] = self.preview()
        body["has_system_prompt"] = self.has_system_prompt
        body["has_model_config"] = self.has_model_config
        return body

    def preview(self) -> str:
        """The first user message (about 60 chars); "" before there is one, as 0.19.0 sends."""
        first_user = next((m.content for m in self.messages if m.role == "user" and m.content), None)
        return first_user[:60] if first_user else ""


class SessionStore:
    def __init__(self) -> None:
        self.sessions: dict[str, SessionRecord] = {}
        self._next_message_id = 1

    def get(self, session_id: str) -> SessionRecord | None:
        return self.sessions.get(session_id)

    def create(
        self,
        session_id: str | None,
        *,
        source: str,
        model: str,
        title: str | None = None,
        has_system_prompt: bool = False,
    ) -> SessionRecord:
        new_id = session_id or f"api_{int(time.time())}_{secrets.token_hex(4)}"
        record = SessionRecord(id=new_id, source=source, model=model, title=title, has_system_prompt=has_system_prompt)
        self.sessions[new_id] = record
        return record

    def ensure(self, session_id: str, *, source: str, model: str) -> SessionRecord:
        """The session a run writes to, created on first use as ``POST /v1/runs`` does."""
        record = self.sessions.get(session_id)
        if record is None:
            record = self.create(session_id, source=source, model=model, has_system_prompt=True)
        record.has_model_config = True
        return record

    def compact(self, session_id: str, keep_last: int) -> None:
        """Compress a session in place as 0.19.0 does by default: the listed messages become a
        summary plus fresh copies (new ids) of the last `keep_last`; the rest is no longer listed."""
        session = self.sessions[session_id]
        kept = session.messages[-keep_last:] if keep_last else []
        session.messages = []
        self.add_message(session, "user", COMPACTION_SUMMARY)
        for message in kept:
            self.add_message(session, message.role, message.content)

    def delete(self, session_id: str) -> bool:
        return self.sessions.pop(session_id, None) is not None

    def title_owner(self, title: str) -> SessionRecord | None:
        return next((s for s in self.sessions.values() if s.title == title), None)

    def listing(self, *, source: str | None, limit: int, offset: int) -> list[SessionRecord]:
        matching = [s for s in self.sessions.values() if source is None or s.source == source]
        matching.sort(key=lambda s: s.last_active, reverse=True)
        return matching[offset : offset + limit]

    def add_message(
        self,
        session: SessionRecord,
        role: str,
        content: str | None,
        *,
        tool_call_id: str | None = None,
        tool_calls: list[dict[str, Any]] | None = None,
        tool_name: str | None = None,
        finish_reason: str | None = None,
    ) -> MessageRecord:
        message = MessageRecord(
            id=self._next_message_id,
            session_id=session.id,
            role=role,
            content=content,
            timestamp=time.time(),
            tool_call_id=tool_call_id,
            tool_calls=tool_calls,
            tool_name=tool_name,
            finish_reason=finish_reason,
        )
        self._next_message_id += 1
        session.messages.append(message)
        session.last_active = message.timestamp
        if tool_calls:
            session.tool_call_count += len(tool_calls)
        return message
