"""`run.steer` → `run.steered` reply and broadcast: more guidance for a running agent (extension of protocol v1).

Where the account's gateway advertises `run_steer`, the text goes to Hermes's `POST /v1/runs/{id}/steer`
and the agent reads it at its next step; elsewhere the answer is `not_implemented`. The run must be the
conversation's active run, of this account, and made in Hermes already (else `not_found`). See
docs/protocol-extensions.md.
"""

import msgspec

import hermes_client as hc
from handlers.ws.chat_send import CHAT_TEXT_MAX
from handlers.ws.support.context import WsContext, rid
from handlers.ws.support.messages import ClientMessage
from pheby.errors import (
    BadRequest,
    NotImplementedByUpstream,
    ProtocolTooLarge,
)
from pheby.hermes.failures import hermes_failure
from pheby.protocol.frames import RunSteered

NO_STEER = "Steering a running agent needs a Hermes that offers it (`run_steer`); the connected one does not"


class RunSteer(ClientMessage, frozen=True, tag="run.steer"):
    conversation_id: str
    run_id: str
    text: str


async def handle(ctx: WsContext, msg: RunSteer) -> None:
    if not msg.text.strip():
        raise BadRequest("text must not be blank")
    if len(msg.text) > CHAT_TEXT_MAX:
        raise ProtocolTooLarge(f"text is limited to {CHAT_TEXT_MAX} characters")
    if not (await ctx.services.hermes_features.of(ctx.account)).run_steer:
        raise NotImplementedByUpstream(NO_STEER)
    # Whichever process owns the run: the guidance goes to Hermes from here.
    hermes_run_id = await ctx.services.runs.hermes_run_id(ctx.account.id, msg.conversation_id, msg.run_id)
    try:
        result = await ctx.services.hermes.for_account(ctx.account).steer_run(hermes_run_id, msg.text)
    except hc.HermesError as exc:
        raise hermes_failure(
            exc,
            not_found="The run can no longer be steered",
            conflict="The run is not taking guidance right now",  # e.g. waiting for an approval, or ending
            refused="Hermes refused the guidance: {text}",
            unavailable="Hermes is unavailable right now; try again",
            failed="Hermes answered the steer with an error",
        ) from None
    steered = RunSteered(conversation_id=msg.conversation_id, run_id=msg.run_id, accepted=result.accepted)
    ctx.reply(msgspec.structs.replace(steered, request_id=rid(msg.request_id)))
    ctx.broadcast(steered)
