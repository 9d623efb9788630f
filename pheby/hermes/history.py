"""The display transcript of a conversation: Hermes's user/assistant turns, paged newest first."""

from collections.abc import Sequence
from typing import Literal

import hermes_client as hc
from pheby.errors import NotFound
from pheby.files.media_tags import strip_media
from pheby.protocol.frames import HistoryMessage, iso_utc
from pheby.store.conversations import Conversations, TranscriptTurn, input_digest

HISTORY_LIMIT_MAX = 500
HISTORY_LIMIT_DEFAULT = 200

# What Hermes's context compression writes into a transcript (agent/context_compressor.py in 0.19.0):
# a standalone summary message, or the summary merged into the first kept message after its own text.
_SUMMARY_PREFIX = "[CONTEXT COMPACTION"
_MERGED_HEADER = "[PRIOR CONTEXT — for reference only; not a new message]"
_MERGED_DELIMITER = "[END OF PRIOR CONTEXT — COMPACTION SUMMARY BELOW]"


def without_compaction_summary(content: str) -> str:
    """A message's own text, without a compaction summary Hermes put in it ("" for a summary alone)."""
    if content.startswith(_SUMMARY_PREFIX):
        return ""
    if content.startswith(_MERGED_HEADER) and _MERGED_DELIMITER in content:
        return content[len(_MERGED_HEADER) :].split(_MERGED_DELIMITER, 1)[0].strip()
    return content


async def transcript(client: hc.HermesClient, session_ids: Sequence[str]) -> list[hc.SessionMessage]:
    """Every message of a conversation's Hermes sessions, oldest first; a deleted session is skipped."""
    messages: list[hc.SessionMessage] = []
    for session_id in session_ids:
        try:
            messages.extend(await client.session_messages(session_id))
        except hc.HermesNotFound:
            continue
    return messages


def text_turns(messages: Sequence[hc.SessionMessage]) -> list[TranscriptTurn]:
    """The user and assistant messages with text, oldest first, as Hermes stored them: a run's history
    where the gateway loads none itself (0.19.0). A compaction summary is one of them, as it is for
    Hermes's own model calls; the turns it replaced are not."""
    return [
        TranscriptTurn(message.id, message.role, message.content)
        for message in messages
        if message.role in ("user", "assistant") and isinstance(message.content, str) and message.content.strip()
    ]


def _shown(message: hc.SessionMessage, original_inputs: dict[str, str]) -> HistoryMessage | None:
    """How history shows one stored message, or None when it doesn't."""
    if not isinstance(message.content, str):
        return None
    role: Literal["user", "assistant"]
    content = without_compaction_summary(message.content)
    if message.role == "user":
        role, text = "user", original_inputs.get(input_digest(content), content)
    elif message.role == "assistant":
        role, text = "assistant", strip_media(content)
    else:
        return None
    if not text.strip():
        return None
    ts = iso_utc(message.timestamp) if message.timestamp else None
    return HistoryMessage(message_id=f"m{message.id}", role=role, text=text, ts=ts)


def display_messages(messages: Sequence[hc.SessionMessage], original_inputs: dict[str, str]) -> list[HistoryMessage]:
    """Stable ids (`m<Hermes message id>`), roles user/assistant only, the user's own words, and no
    compaction summaries (they are Hermes's notes to the model, not turns anyone wrote)."""
    return [shown for message in messages if (shown := _shown(message, original_inputs)) is not None]


def _is_compaction(content: str) -> bool:
    return content.startswith(_SUMMARY_PREFIX) or (content.startswith(_MERGED_HEADER) and _MERGED_DELIMITER in content)


def compaction_point(messages: Sequence[hc.SessionMessage], original_inputs: dict[str, str]) -> int | None:
    """Where the transcript's compaction summary sits, counted in shown messages (None without one).

    After an in-place compaction 0.19.0 lists copies of the first turns, the summary (standalone, or
    merged into the first kept message), copies of the last turns, then what came after.
    """
    count = 0
    for message in messages:
        if isinstance(message.content, str) and _is_compaction(message.content):
            return count
        if _shown(message, original_inputs) is not None:
            count += 1
    return None


_COPIES_MAX = 200  # Hermes keeps tens of turns around a summary (protect_first_n, protect_last_n)


def with_logged(
    shown: Sequence[HistoryMessage], logged: Sequence[HistoryMessage], compaction_at: int | None
) -> list[HistoryMessage]:
    """The transcript with the logged messages Hermes no longer lists put back, oldest first.

    Hidden originals come back with their own ids. The copies Hermes made of them are the messages
    right around the summary that repeat the first and the last hidden ones, in order; they are
    left out. Nothing else is taken for a copy, so a message typed again later stays.
    """
    listed = {m.message_id for m in shown}
    missing = [m for m in logged if m.message_id not in listed]
    if not missing:
        return list(shown)
    copies: set[str] = set()
    if compaction_at is not None:
        head, after = shown[:compaction_at], shown[compaction_at:]
        k = 0
        while k < min(len(head), len(missing)) and _same(head[k], missing[k]):
            k += 1
        copies.update(m.message_id for m in head[:k])
        for k in range(min(len(after), len(missing), _COPIES_MAX), 0, -1):
            if all(_same(a, b) for a, b in zip(after[:k], missing[-k:], strict=True)):
                copies.update(m.message_id for m in after[:k])
                break
    return sorted([*missing, *(m for m in shown if m.message_id not in copies)], key=lambda m: m.number)


def history_messages(
    messages: Sequence[hc.SessionMessage], original_inputs: dict[str, str], logged: Sequence[HistoryMessage]
) -> list[HistoryMessage]:
    """What history shows: the transcript as displayed, with what compaction hid put back."""
    return with_logged(display_messages(messages, original_inputs), logged, compaction_point(messages, original_inputs))


async def shown_history(
    conversations: Conversations, conversation_id: str, messages: Sequence[hc.SessionMessage]
) -> list[HistoryMessage]:
    """`history_messages` for a conversation, with the user's own words and its logged messages."""
    originals = await conversations.original_inputs(conversation_id)
    return history_messages(messages, originals, await conversations.logged_history(conversation_id))


def _same(a: HistoryMessage, b: HistoryMessage) -> bool:
    return (a.role, a.text) == (b.role, b.text)


def turn_message_ids(
    messages: Sequence[hc.SessionMessage], shown: Sequence[HistoryMessage], after_id: int, sent_text: str
) -> tuple[str | None, str | None]:
    """History's ids of one turn: the first user message stored after `after_id` with the text sent,
    and the last shown answer before the next user message (None when absent)."""
    shown_ids = {m.message_id for m in shown}  # never a copy Hermes made of an older, identical message
    user = next(
        (
            m
            for m in messages
            if m.role == "user" and m.id > after_id and m.content == sent_text and f"m{m.id}" in shown_ids
        ),
        None,
    )
    if user is None:
        return None, None
    next_user = next((m.id for m in messages if m.role == "user" and m.id > user.id), None)
    answers = [
        m.message_id
        for m in shown
        if m.role == "assistant" and user.id < m.number and (next_user is None or m.number < next_user)
    ]
    return f"m{user.id}", answers[-1] if answers else None


def page(
    messages: list[HistoryMessage], limit: int, before_message_id: str | None
) -> tuple[list[HistoryMessage], bool]:
    """The newest `limit` messages before the (exclusive) cursor, in chronological order.

    A cursor that names no message of the transcript is `not_found`: an empty last page would
    tell the client, wrongly, that it has seen the whole history.
    """
    end = len(messages)
    if before_message_id is not None:
        cursor = next((i for i, m in enumerate(messages) if m.message_id == before_message_id), None)
        if cursor is None:
            raise NotFound("before_message_id names no message of this conversation")
        end = cursor
    start = max(0, end - limit)
    return messages[start:end], start > 0


def _position(messages: list[HistoryMessage], message_id: str, name: str) -> int:
    found = next((i for i, m in enumerate(messages) if m.message_id == message_id), None)
    if found is None:
        raise NotFound(f"{name} names no message of this conversation")
    return found


def page_around(
    messages: list[HistoryMessage], limit: int, around_message_id: str
) -> tuple[list[HistoryMessage], bool, bool]:
    """The `limit` messages with the named one in their middle (as near as the ends allow), in
    chronological order; whether older ones precede them, and whether newer ones follow."""
    at = _position(messages, around_message_id, "around_message_id")
    start = max(0, min(at - (limit - 1) // 2, len(messages) - limit))
    end = min(len(messages), start + limit)
    return messages[start:end], start > 0, end < len(messages)


def page_after(
    messages: list[HistoryMessage], limit: int, after_message_id: str
) -> tuple[list[HistoryMessage], bool, bool]:
    """The oldest `limit` messages after the (exclusive) cursor; whether older ones precede them (the
    cursor does), and whether newer ones follow."""
    start = _position(messages, after_message_id, "after_message_id") + 1
    end = min(len(messages), start + limit)
    return messages[start:end], True, end < len(messages)
