"""Global model and effort changes go to the Hermes of the account that asks, and only if it owns it.

The owner owns the server's Hermes; an account with its own gateway owns that one; an account that
shares the server's Hermes owns none, so its global `model.set` / `reasoning.set` is `unauthorized`
and the default is unchanged.
"""

from collections.abc import Callable

import pytest

from demo_hermes import DemoHermesServer
from pheby.settings import Settings
from pheby.store.accounts import HermesAccountSettings
from tests.live_server import LiveServer, hermes_settings
from tests.test_ws_e2e import add_account
from tests.ws_client import PhebyClient

pytestmark = [pytest.mark.anyio, pytest.mark.live]


async def other_model(client: PhebyClient) -> tuple[str, str]:
    snapshot = await client.request("models.list", "models.snapshot")
    current = snapshot["current_model"]
    model, provider = next((m, p["slug"]) for p in snapshot["providers"] for m in p["models"] if m != current)
    return model, provider


async def test_an_account_on_the_servers_hermes_cannot_change_its_default(
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    make_demo_hermes: Callable[..., DemoHermesServer],
    opened: list[PhebyClient],
) -> None:
    hermes = make_demo_hermes()  # private: the owner's part of this test changes its global model
    settings = live_settings(**hermes_settings(hermes))
    bob_token = await add_account(settings, "bob")
    server = start_live_server(settings)
    owner = await PhebyClient.connect(server.ws_url, server.secret)
    bob = await PhebyClient.connect(server.ws_url, bob_token)
    opened.extend([owner, bob])
    before = (await owner.request("models.current", "model.current"))["model"]
    effort_before = (await owner.request("reasoning.current", "reasoning.snapshot"))["effort"]
    model, provider = await other_model(bob)

    refused = await bob.request("model.set", "model.changed", model=model, provider=provider)
    assert refused["error"]["code"] == "unauthorized"
    assert "owner" in refused["error"]["message"]
    refused_effort = await bob.request(
        "reasoning.set", "reasoning.changed", effort="high" if effort_before != "high" else "low"
    )
    assert refused_effort["error"]["code"] == "unauthorized"
    assert (await owner.request("models.current", "model.current"))["model"] == before
    assert (await owner.request("reasoning.current", "reasoning.snapshot"))["effort"] == effort_before
    assert bob.seen("model.changed") == []
    assert bob.seen("reasoning.changed") == []

    changed = await owner.request("model.set", "model.changed", model=model, provider=provider)
    assert changed["model"] == model
    assert (await owner.request("reasoning.set", "reasoning.changed", effort="high"))["effort"] == "high"
    assert (await bob.request("models.current", "model.current"))["model"] == model  # bob sees the owner's change


async def test_an_account_with_its_own_gateway_changes_its_own_default_only(
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    make_demo_hermes: Callable[..., DemoHermesServer],
    opened: list[PhebyClient],
) -> None:
    servers_hermes = make_demo_hermes()
    carols_hermes = make_demo_hermes()
    settings = live_settings(**hermes_settings(servers_hermes))
    own = HermesAccountSettings(
        url=carols_hermes.base_url,
        api_key=carols_hermes.api_key,
        dashboard_url=carols_hermes.base_url,
        dashboard_token=carols_hermes.dashboard_token,
    )
    carol_token = await add_account(settings, "carol", own)
    server = start_live_server(settings)
    owner = await PhebyClient.connect(server.ws_url, server.secret)
    carol = await PhebyClient.connect(server.ws_url, carol_token)
    opened.extend([owner, carol])
    servers_model = (await owner.request("models.current", "model.current"))["model"]
    model, provider = await other_model(carol)
    changed = await carol.request("model.set", "model.changed", model=model, provider=provider)
    assert changed["type"] == "model.changed", changed
    assert (await carol.request("models.current", "model.current"))["model"] == model
    assert (await carol.request("reasoning.set", "reasoning.changed", effort="low"))["effort"] == "low"
    assert (await owner.request("models.current", "model.current"))["model"] == servers_model
