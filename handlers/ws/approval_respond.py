"""`approval.respond` → one `approval.resolved` broadcast carrying the responder's request_id."""

from typing import Literal

from handlers.ws.support.context import WsContext, rid
from handlers.ws.support.messages import ClientMessage


class ApprovalRespond(ClientMessage, frozen=True, tag="approval.respond"):
    approval_id: str
    choice: Literal["once", "session", "always", "deny"]
    reason: str | None = None  # accepted with deny; Hermes 0.19.0 has no field to pass it on


async def handle(ctx: WsContext, msg: ApprovalRespond) -> None:
    await ctx.services.runs.decision_desk.respond_approval(
        ctx.account.id, msg.approval_id, msg.choice, rid(msg.request_id)
    )
