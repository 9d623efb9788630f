"""`conversation.delete` — deletes the Hermes session(s) and the routing entry."""

import hermes_client as hc
from handlers.ws.context import WsContext, rid
from handlers.ws.messages import ClientMessage
from pheby.errors import Unavailable
from pheby.events import ConversationDeleted


class ConversationDelete(ClientMessage, frozen=True, tag="conversation.delete"):
    conversation_id: str


async def handle(ctx: WsContext, msg: ConversationDelete) -> None:
    services = ctx.services
    conversation = await services.conversations.get(ctx.account.id, msg.conversation_id)
    run = services.runs.active(conversation.id)
    if run is not None:
        await services.runs.cancel(ctx.account.id, conversation.id, run.run_id)
    client = services.hermes.for_account(ctx.account)
    for session_id in conversation.session_ids:
        try:
            await client.delete_session(session_id)
        except hc.HermesNotFound:
            pass
        except hc.HermesUnavailable:
            raise Unavailable("Hermes is unavailable; the conversation was not deleted") from None
    await services.conversations.delete(ctx.account.id, conversation.id)
    ctx.reply(ConversationDeleted(conversation_id=conversation.id, request_id=rid(msg.request_id)))
