"""`models.list` → `models.snapshot` from Hermes's own picker data (the dashboard API, else the API server's).

With a conversation_id, the current model and scope are that conversation's; `plugin` says which
companion-plugin extras are live (left out when no plugin is configured); `paths` which path each
gateway-dependent feature takes (native, plugin or declined), as in `/api/capabilities`.
"""

from msgspec import UNSET

from handlers.ws.support.context import WsContext, rid
from handlers.ws.support.messages import ClientMessage
from pheby.hermes.model_choice import MODEL_EFFORTS
from pheby.plugin.conversation_settings import ModelView
from pheby.protocol.frames import ModelsSnapshot


class ModelsList(ClientMessage, frozen=True, tag="models.list"):
    conversation_id: str | None = None


async def handle(ctx: WsContext, msg: ModelsList) -> None:
    settings = ctx.services.conversation_settings
    own = await settings.own_model(ctx.account, msg.conversation_id)
    providers, model, provider = await ctx.services.models.options(ctx.account)
    view = own or ModelView(model=model, provider=provider, scope="global")
    await ctx.services.hermes_features.of(ctx.account)  # read now if start-up has not yet (bounded)
    extras = settings.extras_for(ctx.account)
    ctx.reply(
        ModelsSnapshot(
            request_id=rid(msg.request_id),
            providers=providers,
            current_model=view.model,
            current_provider=view.provider,
            supported_reasoning_efforts=MODEL_EFFORTS,
            scope=view.scope,
            plugin=extras if ctx.services.plugin_link.configured else UNSET,
            paths=ctx.services.hermes_features.paths(ctx.account, extras),
        )
    )
