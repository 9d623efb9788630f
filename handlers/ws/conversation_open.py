"""`conversation.open` → `conversation.history`: a page of the transcript plus the recoverable snapshot.

The client replaces its state with the snapshot, then applies the live events after it, so the
snapshot must hold everything broadcast before it and nothing that is broadcast after it:

- the run state is read and the reply queued in one step (no await between), so every run event
  reaches the client either reflected in the snapshot or after it, never just before it; a run another
  process owns is asked of it, as of the last of its events delivered here
  (`pheby.runs.snapshots_elsewhere`);
- the stored part (history, attachments) is read once, inside `runs.reading`, and the engine
  merges into it every finished turn the read may have missed (`runs.with_finished_turns`) in that
  same step, so a turn whose `run.finished` went out before the reply is in it, whatever the
  interleaving; the history is a window around the page from the server's log when Hermes has
  nothing the log lacks, else the whole transcript (`pheby.hermes.history_pages`);
- attachments are the last read: the database runs one statement at a time, so an attachment
  committed after that read is announced after the reply is queued;
- a `message.delta` still held back by the coalescing (pheby/protocol/coalesce.py) carries the newest
  text broadcast, which is the run's draft the snapshot shows: sent after the snapshot, it
  repeats the snapshot's text, never an older one; to a client taking append deltas it carries the whole
  text (offset 0), the snapshot having replaced the draft it held.

`around_message_id` (a search hit) opens the page holding that message, and `after_message_id` the page
after one: both answer `has_newer` beside `has_more`, so the client can page either way
(docs/protocol-extensions.md).
"""

from typing import Annotated

import msgspec
from msgspec import UNSET, UnsetType

import hermes_client as hc
from handlers.ws.support.context import WsContext, rid
from handlers.ws.support.messages import ClientMessage
from pheby.errors import BadRequest
from pheby.hermes.failures import hermes_failure
from pheby.hermes.history import HISTORY_LIMIT_DEFAULT, HISTORY_LIMIT_MAX, page, page_after, page_around
from pheby.protocol.frames import ConversationHistory
from pheby.runs.snapshots_elsewhere import settled_with_snapshot_elsewhere
from pheby.store.attachments import pheby_descriptor

HISTORY_UNAVAILABLE = "Hermes is unavailable; history can't be loaded right now"


class ConversationOpen(ClientMessage, frozen=True, tag="conversation.open"):
    conversation_id: str
    limit: Annotated[int, msgspec.Meta(ge=1)] = HISTORY_LIMIT_DEFAULT
    before_message_id: str | None = None
    around_message_id: str | None = None
    after_message_id: str | None = None


async def handle(ctx: WsContext, msg: ConversationOpen) -> None:
    services = ctx.services
    runs = services.runs
    cursors = [c for c in (msg.before_message_id, msg.around_message_id, msg.after_message_id) if c is not None]
    if len(cursors) > 1:
        raise BadRequest("Name one of before_message_id, around_message_id and after_message_id")
    conversation = await services.conversations.get(ctx.account.id, msg.conversation_id)
    with runs.reading(conversation.id):
        limit = min(msg.limit, HISTORY_LIMIT_MAX)
        try:
            shown = await services.history.window(
                services.hermes.for_account(ctx.account),
                conversation,
                limit,
                cursors[0] if cursors else None,
                runs.finished_turns_after(conversation.id),
                both_ways=msg.before_message_id is None and bool(cursors),
            )
        except hc.HermesError as exc:  # any failure reading it: history can't be loaded now
            raise hermes_failure(exc, failed=HISTORY_UNAVAILABLE, unavailable=HISTORY_UNAVAILABLE) from None
        attachments = await services.attachments.for_conversation(ctx.account.id, conversation.id)
        # The last await: what was broadcast is out, what follows isn't (and a run another process owns, as it
        # stood at the last of its events delivered here).
        elsewhere = await settled_with_snapshot_elsewhere(runs, services.hub, ctx.account.id, conversation.id)
        # From here to the reply, no await: no broadcast can come between the run state and the snapshot.
        shown = runs.with_finished_turns(conversation.id, shown)
    has_newer: bool | UnsetType = UNSET
    if msg.around_message_id is not None:
        messages, has_more, has_newer = page_around(shown, limit, msg.around_message_id)
    elif msg.after_message_id is not None:
        messages, has_more, has_newer = page_after(shown, limit, msg.after_message_id)
    else:
        messages, has_more = page(shown, limit, msg.before_message_id)
    run, tools, approvals, clarifications = runs.snapshot(conversation.id)
    if run is None and elsewhere is not None:
        run, tools, approvals = elsewhere.run, elsewhere.tools, elsewhere.approvals
        clarifications = elsewhere.clarifications
    if run is not None:
        ctx.connection.forget_draft(run.message_id)  # the snapshot replaces the client's draft: next, the whole text
    ctx.reply(
        ConversationHistory(
            request_id=rid(msg.request_id),
            conversation_id=conversation.id,
            messages=messages,
            has_more=has_more,
            attachments=[pheby_descriptor(a) for a in attachments],
            run=run,
            tools=tools,
            approvals=approvals,
            clarifications=clarifications,
            has_newer=has_newer,
        )
    )
