"""`conversation.delete` → `conversation.deleted` reply, plus the same event broadcast; deletes the
Hermes session(s) and the routing entry, and deletes the sessions again over the next minutes should a
0.22-era gateway's late title write bring one back (`pheby.hermes.session_deletes`).

An active run is cancelled first, best effort: a run Hermes can no longer interrupt (or one whose
slot is reserved but not yet started) must not keep the conversation from being deleted.
"""

import logging

import hermes_client as hc
from handlers.ws.support.context import WsContext, rid
from handlers.ws.support.messages import ClientMessage
from pheby.hermes.failures import hermes_failure
from pheby.protocol.frames import ConversationDeleted
from pheby.services import Services

log = logging.getLogger("pheby.ws")


class ConversationDelete(ClientMessage, frozen=True, tag="conversation.delete"):
    conversation_id: str


async def handle(ctx: WsContext, msg: ConversationDelete) -> None:
    services = ctx.services
    conversation = await services.conversations.get(ctx.account.id, msg.conversation_id)
    async with services.runs.deleting(conversation.id):  # from here on, no new run may start in it, anywhere
        if await _cancel_active_run(services, ctx.account.id, conversation.id):
            # A first run may have just named the conversation's Hermes session: read it again.
            conversation = await services.conversations.get(ctx.account.id, conversation.id)
        client = services.hermes.for_account(ctx.account)
        for session_id in conversation.session_ids:
            try:
                await client.delete_session(session_id)
            except hc.HermesNotFound:
                pass
            except hc.HermesUnavailable as exc:
                raise hermes_failure(
                    exc, unavailable="Hermes is unavailable; the conversation was not deleted"
                ) from None
        await services.conversations.delete(ctx.account.id, conversation.id)
    services.session_deletes.watch(client, conversation.session_ids)  # a late title may write one again
    ctx.reply(ConversationDeleted(conversation_id=conversation.id, request_id=rid(msg.request_id)))
    ctx.broadcast(ConversationDeleted(conversation_id=conversation.id))  # the account's other clients, as a rename


async def _cancel_active_run(services: Services, account_id: str, conversation_id: str) -> bool:
    """Cancel the conversation's run, if any (True then), best effort; one another process owns, there."""
    run = services.runs.active(conversation_id)
    run_id = None if run is None else run.run_id
    if run is None and (elsewhere := await services.runs.owner_elsewhere(account_id, conversation_id)):
        run_id = elsewhere.run_id
    if run_id is None:
        return False
    try:
        await services.runs.cancel(account_id, conversation_id, run_id, once_made=True)  # a run still starting too
    except Exception as exc:  # noqa: BLE001 - best effort: the delete goes ahead regardless
        log.warning("deleting conversation %s: its run %s was not cancelled: %s", conversation_id, run_id, exc)
    return True
