"""A conversation as a file to keep: Markdown to read, or JSON in the shape of Pheby's history.

Both hold what history shows (the user's own words, the answers without `MEDIA:` tags, the turns a
compaction hid put back from the server's log), in order, each with its role and time; the tool calls
that led to each answer, by name only (never their arguments or output, which may hold secrets); and
the conversation's attachments as descriptors (no bytes, no download path: an export outlives the
server it came from). Nothing in an export names a host, a path on disk or a key.
"""

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import msgspec

import hermes_client as hc
from pheby.hermes.history import shown_history, transcript
from pheby.protocol.frames import HistoryMessage, iso_utc
from pheby.store.attachments import Attachment, pheby_descriptor
from pheby.store.conversations import Conversation, Conversations


class ExportedToolCall(msgspec.Struct, frozen=True):
    tool_name: str
    message_id: str | None  # the answer the call led to (None: the turn ended without one)


class ConversationExport(msgspec.Struct, frozen=True, kw_only=True):
    """The JSON export: `conversation.history`'s messages and attachment descriptors, and the tool calls."""

    conversation_id: str
    name: str
    created_at: str | None
    last_active: str | None
    exported_at: str
    messages: list[HistoryMessage]
    tool_calls: list[ExportedToolCall]
    attachments: list[dict[str, Any]]


async def conversation_export(
    client: hc.HermesClient,
    conversations: Conversations,
    conversation: Conversation,
    attachments: Sequence[Attachment],
    now: float,
) -> ConversationExport:
    """Read the conversation's transcript (raises `HermesError`) and make its export."""
    stored = await transcript(client, conversation.session_ids)
    shown = await shown_history(conversations, conversation.id, stored)
    descriptors = []
    for attachment in attachments:
        descriptor = msgspec.structs.asdict(pheby_descriptor(attachment))
        del descriptor["download_path"]
        descriptors.append(descriptor)
    return ConversationExport(
        conversation_id=conversation.id,
        name=conversation.name,
        created_at=iso_utc(conversation.created_at, "seconds"),
        last_active=iso_utc(conversation.last_active, "seconds"),
        exported_at=iso_utc(now, "seconds") or "",
        messages=shown,
        tool_calls=tool_calls(stored, {m.message_id for m in shown}),
        attachments=descriptors,
    )


def tool_calls(stored: Sequence[hc.SessionMessage], shown_ids: set[str]) -> list[ExportedToolCall]:
    """Each tool call of the transcript, by name, with the shown answer that came after it."""
    calls: list[ExportedToolCall] = []
    pending: list[str] = []
    for message in stored:
        if message.role == "assistant" and message.tool_calls:
            pending += [_tool_name(call) for call in message.tool_calls]
        if message.role == "assistant" and f"m{message.id}" in shown_ids:
            calls += [ExportedToolCall(tool_name=name, message_id=f"m{message.id}") for name in pending]
            pending = []
        elif message.role == "user" and pending:
            calls += [ExportedToolCall(tool_name=name, message_id=None) for name in pending]
            pending = []
    return calls + [ExportedToolCall(tool_name=name, message_id=None) for name in pending]


def _tool_name(call: dict[str, Any]) -> str:
    function = call.get("function")
    name = function.get("name") if isinstance(function, dict) else None
    return name if isinstance(name, str) and name else "tool"


_ROLES = {"user": "You", "assistant": "Assistant"}


def as_markdown(export: ConversationExport) -> str:
    """The export for people: a title, the dates, each turn under its role and time, tool calls as short
    lines before the answer they led to, attachments listed by name."""
    lines = [f"# {_one_line(export.name)}", ""]
    dates = [f"Created {_readable(export.created_at)}"]
    if export.last_active:
        dates.append(f"last active {_readable(export.last_active)}")
    lines += [", ".join(dates) + f". Exported {_readable(export.exported_at)}.", ""]
    calls: dict[str | None, list[str]] = {}
    for call in export.tool_calls:
        calls.setdefault(call.message_id, []).append(call.tool_name)
    for message in export.messages:
        heading = _ROLES[message.role] + (f" · {_readable(message.ts)}" if message.ts else "")
        lines += [f"## {heading}", ""]
        if used := calls.get(message.message_id):
            lines += [*(f"- Tool call: `{_one_line(name)}`" for name in used), ""]
        lines += [message.text.rstrip(), ""]
    if unanswered := calls.get(None):
        lines += ["## Tool calls without an answer", "", *(f"- `{_one_line(name)}`" for name in unanswered), ""]
    if export.attachments:
        lines += ["## Attachments", ""]
        for attachment in export.attachments:
            sender = "you" if attachment["direction"] == "inbound" else "the assistant"
            lines.append(
                f"- {_one_line(attachment['filename'])} ({attachment['mime_type']}, {attachment['size']} bytes, "
                f"from {sender})"
            )
        lines.append("")
    return "\n".join(lines)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _readable(iso: str | None) -> str:
    if not iso:
        return "unknown"
    return datetime.fromisoformat(iso).astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
