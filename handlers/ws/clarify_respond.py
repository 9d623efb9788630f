"""`clarify.respond` → one `clarify.resolved` broadcast carrying the responder's request_id."""

from handlers.ws.support.context import WsContext, rid
from handlers.ws.support.messages import ClientMessage


class ClarifyRespond(ClientMessage, frozen=True, tag="clarify.respond"):
    clarify_id: str
    response: str


async def handle(ctx: WsContext, msg: ClarifyRespond) -> None:
    await ctx.services.runs.decision_desk.respond_clarify(
        ctx.account.id, msg.clarify_id, msg.response, rid(msg.request_id)
    )
