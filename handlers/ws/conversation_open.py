"""`conversation.open` → `conversation.history`: a page of the transcript plus the recoverable snapshot.

The client replaces its state with the snapshot, then applies the live events after it, so the
snapshot must hold everything broadcast before it and nothing that is broadcast after it:

- the run state is read and the reply queued in one step (no await between), so every run event
  reaches the client either reflected in the snapshot or after it, never just before it;
- the stored part (transcript, attachments) is read first and read again when a run was accepted
  or finished meanwhile, so a turn finished before the snapshot is in it;
- attachments are the last read: the database runs one statement at a time, so an attachment
  committed after that read is announced after the reply is queued;
- a `message.delta` still held back by the coalescing (pheby/coalesce.py) carries the newest
  text broadcast, which is the run's draft the snapshot shows: sent after the snapshot, it
  repeats the snapshot's text, never an older one.
"""

from typing import Annotated, NamedTuple

import msgspec

import hermes_client as hc
from handlers.ws.context import WsContext, rid
from handlers.ws.messages import ClientMessage
from pheby.attachments import Attachment, pheby_descriptor
from pheby.conversations import Conversation
from pheby.errors import Unavailable
from pheby.events import ConversationHistory, HistoryMessage
from pheby.history import HISTORY_LIMIT_DEFAULT, HISTORY_LIMIT_MAX, page, shown_history, transcript

# Reads of the stored part before the snapshot goes out regardless (a busy conversation could
# otherwise keep it waiting); a turn that finishes during the last read arrives as live events.
STORED_READS = 3


class ConversationOpen(ClientMessage, frozen=True, tag="conversation.open"):
    conversation_id: str
    limit: Annotated[int, msgspec.Meta(ge=1)] = HISTORY_LIMIT_DEFAULT
    before_message_id: str | None = None


class _Stored(NamedTuple):
    conversation: Conversation
    messages: list[HistoryMessage]
    has_more: bool
    attachments: list[Attachment]


async def handle(ctx: WsContext, msg: ConversationOpen) -> None:
    runs = ctx.services.runs
    for _ in range(STORED_READS):
        transitions = runs.transitions(msg.conversation_id)
        stored = await _read_stored(ctx, msg)
        if runs.transitions(msg.conversation_id) == transitions:
            break
    # From here to the reply, no await: no broadcast can come between the run state and the snapshot.
    conversation = stored.conversation
    run, tools, approvals, clarifications = runs.snapshot(conversation.id)
    ctx.reply(
        ConversationHistory(
            request_id=rid(msg.request_id),
            conversation_id=conversation.id,
            messages=stored.messages,
            has_more=stored.has_more,
            attachments=[pheby_descriptor(a) for a in stored.attachments],
            run=run,
            tools=tools,
            approvals=approvals,
            clarifications=clarifications,
        )
    )


async def _read_stored(ctx: WsContext, msg: ConversationOpen) -> _Stored:
    services = ctx.services
    conversation = await services.conversations.get(ctx.account.id, msg.conversation_id)
    try:
        stored = await transcript(services.hermes.for_account(ctx.account), conversation.session_ids)
    except hc.HermesError:
        raise Unavailable("Hermes is unavailable; history can't be loaded right now") from None
    shown = await shown_history(services.conversations, conversation.id, stored)
    messages, has_more = page(shown, min(msg.limit, HISTORY_LIMIT_MAX), msg.before_message_id)
    attachments = await services.attachments.for_conversation(ctx.account.id, conversation.id)  # the last await
    return _Stored(conversation, messages, has_more, attachments)
