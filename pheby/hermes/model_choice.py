"""Model and reasoning-effort selection through Hermes's dashboard API.

Hermes 0.19.0 can change the model and effort only globally (the dashboard's `/api/model/set`
and `PUT /api/config`); a change for one conversation needs the companion plugin
(`pheby.plugin.conversation_settings`).

A global change goes to the Hermes of the account that asks, and only if that account owns it:
the owner owns the server's Hermes, an account with a gateway URL of its own owns that one. An
account that shares the server's Hermes may read its defaults but not change them (`unauthorized`).
"""

from collections.abc import Awaitable
from typing import TypeVar

import hermes_client as hc
from pheby.errors import BadRequest, NotImplementedByUpstream, Unauthorized
from pheby.hermes.failures import hermes_failure
from pheby.hermes.features import HermesFeatures
from pheby.hermes.pool import HermesClients
from pheby.protocol.frames import ProviderModels
from pheby.store.accounts import Account

REASONING_EFFORTS = ["none", "minimal", "low", "medium", "high", "xhigh", "max", "ultra"]
MODEL_EFFORTS = REASONING_EFFORTS[1:]  # what `models.snapshot` lists: the levels that enable thinking
T = TypeVar("T")
NO_DASHBOARD = (
    "Model and reasoning settings need Hermes's dashboard API (`hermes serve`); "
    "set HERMES_DASHBOARD_URL and HERMES_DASHBOARD_TOKEN"
)


class ModelChoices:
    """What the account's Hermes offers, and the global model and effort it uses."""

    def __init__(self, hermes: HermesClients, features: HermesFeatures | None = None) -> None:
        self._hermes = hermes
        self._features = features

    def _dashboard(self, account: Account) -> hc.HermesClient:
        client = self._hermes.for_account(account)
        if not client.has_dashboard:
            raise NotImplementedByUpstream(NO_DASHBOARD)
        return client

    def _owned_dashboard(self, account: Account, what: str) -> hc.HermesClient:
        """The dashboard of the account's Hermes, for a global change: only if the account owns that Hermes."""
        if not owns_its_hermes(account):
            raise Unauthorized(f"Only the owner can change the server's default {what}")
        return self._dashboard(account)

    async def options(self, account: Account) -> tuple[list[ProviderModels], str | None, str | None]:
        options = await self._model_options(account)
        providers = [
            ProviderModels(
                slug=p.slug,
                name=p.name,
                is_current=p.is_current,
                models=list(p.models),
                total_models=p.total_models if isinstance(p.total_models, int) else len(p.models),
            )
            for p in options.providers
        ]
        return providers, options.model, options.provider

    # A gateway with native `model_options` (0.22-era) lists its models itself (`GET /api/model/options` on
    # the API server); that list is used when no dashboard is configured.
    async def _model_options(self, account: Account) -> hc.ModelOptions:
        """The dashboard's model list, else (no dashboard) the API server's own where it advertises one."""
        client = self._hermes.for_account(account)
        if not client.has_dashboard and self._features and (await self._features.of(account)).model_options:
            return await _call(client.api_model_options())
        return await _call(self._dashboard(account).model_options())

    async def set_model(self, account: Account, model: str, provider: str | None) -> str:
        """Change the global model of the account's own Hermes; returns the provider it was set for."""
        client = self._owned_dashboard(account, "model")
        if not model.strip():
            raise BadRequest("model must not be blank")
        chosen = provider or (await _call(client.model_options())).provider
        if not chosen:
            raise BadRequest("provider is required: Hermes has no current provider")
        await _call(client.set_model(chosen, model))
        return chosen

    async def effort(self, account: Account) -> str | None:
        return await _call(self._dashboard(account).reasoning_effort())

    async def set_effort(self, account: Account, effort: str) -> None:
        """Change the global effort (`agent.reasoning_effort`) of the account's own Hermes."""
        client = self._owned_dashboard(account, "reasoning effort")
        if effort not in REASONING_EFFORTS:
            raise BadRequest(f"effort must be one of: {', '.join(REASONING_EFFORTS)}")
        await _call(client.put_config({"agent": {"reasoning_effort": effort}}))


def owns_its_hermes(account: Account) -> bool:
    """The owner owns the server's Hermes (or its own); any other account only a gateway of its own."""
    return account.is_owner or bool(account.hermes.url)


async def _call(awaitable: Awaitable[T]) -> T:
    try:
        return await awaitable
    except hc.HermesError as exc:
        raise hermes_failure(
            exc,
            unavailable="Hermes's dashboard is unavailable right now",
            refused="Hermes refused: {text}",
            failed="Hermes's dashboard answered with an error",
        ) from None
