"""The display transcript of a conversation: Hermes's user/assistant turns, paged newest first."""

from collections.abc import Sequence
from typing import Literal

import hermes_client as hc
from pheby.conversations import input_digest
from pheby.errors import NotFound
from pheby.events import HistoryMessage, iso_utc
from pheby.media_tags import strip_media

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


def display_messages(messages: Sequence[hc.SessionMessage], original_inputs: dict[str, str]) -> list[HistoryMessage]:
    """Stable ids (`m<Hermes message id>`), roles user/assistant only, the user's own words, and no
    compaction summaries (they are Hermes's notes to the model, not turns anyone wrote)."""
    shown: list[HistoryMessage] = []
    for message in messages:
        if not isinstance(message.content, str):
            continue
        role: Literal["user", "assistant"]
        content = without_compaction_summary(message.content)
        if message.role == "user":
            role, text = "user", original_inputs.get(input_digest(content), content)
        elif message.role == "assistant":
            role, text = "assistant", strip_media(content)
        else:
            continue
        if not text.strip():
            continue
        ts = iso_utc(message.timestamp) if message.timestamp else None
        shown.append(HistoryMessage(message_id=f"m{message.id}", role=role, text=text, ts=ts))
    return shown


def with_logged(shown: Sequence[HistoryMessage], logged: Sequence[HistoryMessage]) -> list[HistoryMessage]:
    """The transcript with the logged messages Hermes no longer lists put back, oldest first.

    After an in-place compaction Hermes lists a summary (already left out), fresh copies of the
    turns it kept, and what came after. A logged message missing from the transcript is an
    original: it comes back, and the first listed message with its role and text, newer than it,
    is taken for its copy and left out.
    """
    listed = {m.message_id for m in shown}
    missing = [m for m in logged if m.message_id not in listed]
    if not missing:
        return list(shown)
    copies: set[str] = set()
    for original in missing:
        copy = next(
            (
                m
                for m in shown
                if m.message_id not in copies
                and (m.role, m.text) == (original.role, original.text)
                and _number(m) > _number(original)
            ),
            None,
        )
        if copy is not None:
            copies.add(copy.message_id)
    kept = [m for m in shown if m.message_id not in copies]
    return sorted([*missing, *kept], key=_number)


def _number(message: HistoryMessage) -> int:
    return int(message.message_id[1:])


def turn_message_ids(messages: Sequence[hc.SessionMessage]) -> tuple[str | None, str | None]:
    """History's ids of the latest turn: its user message and the answer after it (None when absent)."""
    user = answer = None
    for message in reversed(messages):
        if not isinstance(message.content, str) or not message.content.strip():
            continue
        if message.role == "assistant" and answer is None and user is None:
            answer = f"m{message.id}"
        elif message.role == "user":
            user = f"m{message.id}"
            break
    return user, answer


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
