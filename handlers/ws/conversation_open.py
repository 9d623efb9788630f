"""`conversation.open` → `conversation.history`: a page of the transcript plus the recoverable snapshot."""

from typing import Annotated

import msgspec

import hermes_client as hc
from handlers.ws.context import WsContext, rid
from handlers.ws.messages import ClientMessage
from pheby.attachments import pheby_descriptor
from pheby.errors import Unavailable
from pheby.events import ConversationHistory
from pheby.history import HISTORY_LIMIT_DEFAULT, HISTORY_LIMIT_MAX, display_messages, page, transcript


class ConversationOpen(ClientMessage, frozen=True, tag="conversation.open"):
    conversation_id: str
    limit: Annotated[int, msgspec.Meta(ge=1)] = HISTORY_LIMIT_DEFAULT
    before_message_id: str | None = None


async def handle(ctx: WsContext, msg: ConversationOpen) -> None:
    services = ctx.services
    conversation = await services.conversations.get(ctx.account.id, msg.conversation_id)
    try:
        stored = await transcript(services.hermes.for_account(ctx.account), conversation.session_ids)
    except hc.HermesError:
        raise Unavailable("Hermes is unavailable; history can't be loaded right now") from None
    originals = await services.conversations.original_inputs(conversation.id)
    messages, has_more = page(
        display_messages(stored, originals), min(msg.limit, HISTORY_LIMIT_MAX), msg.before_message_id
    )
    run, tools, approvals, clarifications = services.runs.snapshot(conversation.id)
    attachments = await services.attachments.for_conversation(ctx.account.id, conversation.id)
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
        )
    )
