"""A conversation's own model, reasoning effort and YOLO, applied by Hermes itself or by the companion plugin.

Hermes 0.19.0 cannot do this for one session over HTTP; the plugin can (`llm_request` middleware
for model and effort, Hermes's own session YOLO). A gateway that advertises `model_options`
(0.22-era) takes `model`, `provider` and `model_options.reasoning_effort` with each run: there the
model and effort go with every run of the conversation (`run_options`), and the plugin's model and
effort extras are off (the native path wins). The overrides are kept here (the SQL of
`conversation_overrides` lives in this module) and handed to the plugin before every run of the
conversation and whenever they change, so a restarted Hermes gets them back with the next run.
With neither, a conversation-scoped change is declined with `not_implemented`.
"""

import logging
import time
from collections.abc import Callable

import msgspec

from pheby.db import Connection, Database
from pheby.errors import BadRequest, NotImplementedByUpstream, PhebyError
from pheby.hermes.features import NO_RUN_OPTIONS, HermesFeatures, RunOptions
from pheby.hermes.model_choice import REASONING_EFFORTS, ModelChoices
from pheby.hermes.pool import HermesClients
from pheby.plugin.extras import NO_EXTRAS, PluginExtras
from pheby.plugin.link import PluginLink, SessionSettings
from pheby.runs import hermes_session_id
from pheby.store.accounts import Account
from pheby.store.conversations import Conversation, Conversations

log = logging.getLogger("pheby.plugin")

NEEDS_PLUGIN = (
    "Changing the {what} of one conversation needs a Hermes that offers per-run model options, or the "
    "companion Hermes plugin (`pheby hermes install-plugin`), which is not live; omit conversation_id to "
    "change the default for every conversation"
)
OTHER_PROVIDER = (
    "A conversation can only use another model of the current provider ({current}); "
    "change the provider for every conversation instead"
)


class Overrides(msgspec.Struct, frozen=True, kw_only=True):
    model: str | None = None
    provider: str | None = None
    effort: str | None = None


class ModelView(msgspec.Struct, frozen=True, kw_only=True):
    model: str | None
    provider: str | None
    scope: str


class ConversationSettings:
    def __init__(
        self,
        db: Database,
        conversations: Conversations,
        hermes: HermesClients,
        models: ModelChoices,
        link: PluginLink,
        features: HermesFeatures,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._db = db
        self._conversations = conversations
        self._hermes = hermes
        self._models = models
        self._link = link
        self._features = features
        self._clock = clock

    def extras_for(self, account: Account) -> PluginExtras:
        """The plugin's live extras for the account's Hermes (none when it is not the server's own).

        On a gateway with native `model_options` the plugin's model and effort extras are off: the
        run itself carries them (`run_options`)."""
        extras = self._link.extras() if self._link.serves(self._hermes.url_for(account)) else NO_EXTRAS
        if (extras.model or extras.reasoning) and self._features.known(account).model_options:
            extras = msgspec.structs.replace(extras, model=False, reasoning=False)
        return extras

    async def _extras(self, account: Account) -> PluginExtras:
        """`extras_for`, once the account's gateway has been read (so a native path is known to win)."""
        await self._features.of(account)
        return self.extras_for(account)

    async def _native(self, account: Account) -> bool:
        """Whether the account's gateway takes a model and effort with each run (`model_options`)."""
        return (await self._features.of(account)).model_options

    async def run_options(self, account: Account, conversation: Conversation) -> RunOptions:
        """What to send on `POST /v1/runs` for this conversation's own model and effort: its overrides on a
        gateway with native `model_options`, nothing otherwise (or when it has none)."""
        if not await self._native(account):
            return NO_RUN_OPTIONS
        own = await self.overrides(conversation.id)
        return RunOptions(
            model=own.model,
            provider=own.provider if own.model else None,
            model_options={"reasoning_effort": own.effort} if own.effort else None,
        )

    # --- storage ---------------------------------------------------------------------------

    async def overrides(self, conversation_id: str) -> Overrides:
        row = await self._db.run(
            lambda c: c.execute(
                "SELECT model, provider, effort FROM conversation_overrides WHERE conversation_id = ?",
                (conversation_id,),
            ).fetchone()
        )
        if row is None:
            return Overrides()
        return Overrides(model=row["model"], provider=row["provider"], effort=row["effort"])

    async def _store(self, conversation_id: str, **values: str | None) -> None:
        now = self._clock()
        columns = ", ".join(values)
        updates = ", ".join(f"{name} = excluded.{name}" for name in values)
        sql = (
            f"INSERT INTO conversation_overrides (conversation_id, {columns}, updated_at) "  # noqa: S608 - fixed names
            f"VALUES (?, {', '.join('?' * len(values))}, ?) "
            f"ON CONFLICT (conversation_id) DO UPDATE SET {updates}, updated_at = excluded.updated_at"
        )

        def q(conn: Connection) -> None:
            conn.execute(sql, (conversation_id, *values.values(), now))

        await self._db.run(q)

    # --- changes from clients --------------------------------------------------------------

    async def set_model(self, account: Account, conversation_id: str, model: str, provider: str | None) -> str | None:
        """Use `model` in one conversation (through the plugin: of the current provider only); returns the
        provider it names."""
        conversation = await self._conversations.get(account.id, conversation_id)
        native = await self._native(account)
        if not native and not (await self._extras(account)).model:
            raise NotImplementedByUpstream(NEEDS_PLUGIN.format(what="model"))
        model = model.strip()
        if not model:
            raise BadRequest("model must not be blank")
        if provider is not None and not native:  # the plugin can switch models within the current provider only
            current = await self._current_provider(account)
            if provider != current:
                raise NotImplementedByUpstream(OTHER_PROVIDER.format(current=current or "unknown"))
        await self._store(conversation.id, model=model, provider=provider)
        await self.sync(account, conversation)
        # Without a provider of its own the conversation runs on the current one, whichever that is then.
        return provider or await self._current_provider_if_known(account)

    async def set_effort(self, account: Account, conversation_id: str, effort: str) -> None:
        conversation = await self._conversations.get(account.id, conversation_id)
        if effort not in REASONING_EFFORTS:
            raise BadRequest(f"effort must be one of: {', '.join(REASONING_EFFORTS)}")
        if not await self._native(account) and not (await self._extras(account)).reasoning:
            raise NotImplementedByUpstream(NEEDS_PLUGIN.format(what="reasoning effort"))
        await self._store(conversation.id, effort=effort)
        await self.sync(account, conversation)

    async def set_yolo(self, account: Account, conversation_id: str, enabled: bool) -> Conversation:
        """Keep the flag (the server's own YOLO) and hand it to Hermes's session YOLO when the plugin is live."""
        conversation = await self._conversations.set_yolo(account.id, conversation_id, enabled)
        await self.sync(account, conversation)
        return conversation

    async def _current_provider(self, account: Account) -> str | None:
        _, _, provider = await self._models.options(account)
        return provider

    async def _current_provider_if_known(self, account: Account) -> str | None:
        """The current provider, or None when Hermes can't say (no dashboard, or it is down)."""
        try:
            return await self._current_provider(account)
        except PhebyError:
            return None

    # --- what clients see ------------------------------------------------------------------

    async def own_model(self, account: Account, conversation_id: str | None) -> ModelView | None:
        """A conversation's own model, when it has one and Hermes or the plugin applies it."""
        if conversation_id is None:
            return None
        await self._conversations.get(account.id, conversation_id)
        own = await self.overrides(conversation_id)
        if own.model and (await self._native(account) or self.extras_for(account).model):
            provider = own.provider or await self._current_provider_if_known(account)
            return ModelView(model=own.model, provider=provider, scope="conversation")
        return None

    async def model_view(self, account: Account, conversation_id: str | None) -> ModelView:
        """The model a conversation's runs use (its own when set and applied), else the global one."""
        own = await self.own_model(account, conversation_id)
        if own is not None:
            return own
        _, model, provider = await self._models.options(account)
        return ModelView(model=model, provider=provider, scope="global")

    async def effort_view(self, account: Account, conversation_id: str | None) -> tuple[str | None, str]:
        """(effort, scope) for a conversation (its own when set and applied), else the global effort."""
        if conversation_id is not None:
            await self._conversations.get(account.id, conversation_id)
            own = await self.overrides(conversation_id)
            if own.effort and (await self._native(account) or self.extras_for(account).reasoning):
                return own.effort, "conversation"
        return await self._models.effort(account), "global"

    # --- the plugin ------------------------------------------------------------------------

    async def _session_settings(
        self, conversation: Conversation, session_id: str, extras: PluginExtras
    ) -> SessionSettings:
        own = await self.overrides(conversation.id)
        return SessionSettings(
            session_id=session_id,
            model=own.model if extras.model else None,
            effort=own.effort if extras.reasoning else None,
            yolo=conversation.yolo and extras.yolo,
            history=extras.history,
        )

    async def sync(self, account: Account, conversation: Conversation) -> None:
        """Hand a changed setting to the plugin now (a running run picks it up from its next step)."""
        extras = await self._extras(account)
        if not extras.live:
            return
        settings = await self._session_settings(conversation, hermes_session_id(conversation), extras)
        if not await self._link.push_session(settings):
            log.warning("the plugin did not take conversation %s's settings; its next run retries", conversation.id)

    async def prepare_run(self, account: Account, conversation: Conversation, session_id: str) -> PluginExtras:
        """Before a run: the plugin gets the session's settings; the extras the run may use."""
        extras = await self._extras(account)
        if not extras.live:
            return NO_EXTRAS
        settings = await self._session_settings(conversation, session_id, extras)
        return extras if await self._link.push_session(settings) else NO_EXTRAS

    async def answer_clarify(self, clarify_id: str, response: str) -> bool:
        return await self._link.answer_clarify(clarify_id, response)
