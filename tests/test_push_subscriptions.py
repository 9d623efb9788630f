"""Web Push subscriptions on a real server: the config, one account's subscriptions on both surfaces,
invisible to another, bounded, and endpoints the server must never call refused."""

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from pheby.push.subscriptions import MAX_PER_ACCOUNT
from pheby.push.vapid import b64url
from pheby.settings import Settings
from tests.conftest import TEST_NAMES
from tests.live_server import LiveServer
from tests.test_media_isolation import add_account
from tests.ws_client import PhebyClient

pytestmark = [pytest.mark.anyio, pytest.mark.live, pytest.mark.both_engines]
ALLOWED = "127.0.0.1"


def browser_subscription(endpoint: str) -> dict[str, Any]:
    """What `PushSubscription.toJSON()` gives, with fresh keys."""
    point = (
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    )
    return {"endpoint": endpoint, "expirationTime": None, "keys": {"p256dh": b64url(point), "auth": b64url(bytes(16))}}


@pytest.fixture
def push_server(
    start_live_server: Callable[[Settings], LiveServer], live_settings: Callable[..., Settings]
) -> LiveServer:
    return start_live_server(live_settings(push_allow_hosts=(ALLOWED,)))


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_config_names_the_vapid_key_and_the_events(push_server: LiveServer) -> None:
    async with httpx.AsyncClient(base_url=push_server.base_url, headers=bearer(push_server.secret)) as http:
        config = (await http.get("/api/push/config")).json()
        assert config["events"] == ["approval", "clarify", "run_finished", "delivery"]
        assert config["vapid_public_key"] == push_server.services.push.identity.public_key
        assert (await http.get("/api/push/config", headers={"Authorization": "Bearer nope"})).status_code == 401


async def test_an_accounts_subscriptions_are_its_own_on_both_surfaces(push_server: LiveServer) -> None:
    _, bob_token = await add_account(push_server.settings, "bob")
    endpoint = f"http://{ALLOWED}:9/push/owner-1"
    async with (
        httpx.AsyncClient(base_url=push_server.base_url, headers=bearer(push_server.secret)) as owner,
        httpx.AsyncClient(base_url=push_server.base_url, headers=bearer(bob_token)) as bob,
    ):
        made = await owner.post(
            "/api/push/subscriptions", json={**browser_subscription(endpoint), "events": ["approval"]}
        )
        assert made.status_code == 201, made.text
        subscription = made.json()["subscription"]
        assert subscription["endpoint_origin"] == f"http://{ALLOWED}:9"
        assert subscription["events"] == ["approval"]
        assert set(subscription) == {"id", "endpoint_origin", "events", "created_at"}  # no keys, no full endpoint

        again = await owner.post("/api/push/subscriptions", json=browser_subscription(endpoint))
        assert again.status_code == 201
        assert again.json()["subscription"]["id"] == subscription["id"]  # the same endpoint: updated, same id
        assert again.json()["subscription"]["events"] == ["approval", "clarify", "run_finished", "delivery"]

        assert (await bob.get("/api/push/subscriptions")).json() == {"subscriptions": []}
        assert (await bob.delete(f"/api/push/subscriptions/{subscription['id']}")).status_code == 404
        listed = (await owner.get("/api/push/subscriptions")).json()["subscriptions"]
        assert [s["id"] for s in listed] == [subscription["id"]]

        # The same endpoint under bob is bob's own row.
        assert (await bob.post("/api/push/subscriptions", json=browser_subscription(endpoint))).status_code == 201
        assert len((await bob.get("/api/push/subscriptions")).json()["subscriptions"]) == 1

        assert (await owner.delete(f"/api/push/subscriptions/{subscription['id']}")).status_code == 204
        assert (await owner.get("/api/push/subscriptions")).json() == {"subscriptions": []}
        assert len((await bob.get("/api/push/subscriptions")).json()["subscriptions"]) == 1

    # The WebSocket extension: the same store, the same isolation.
    async with (
        await PhebyClient.connect(push_server.ws_url, push_server.secret) as owner_ws,
        await PhebyClient.connect(push_server.ws_url, bob_token) as bob_ws,
    ):
        subscribed = await owner_ws.request(
            "push.subscribe", "push.subscribed", subscription=browser_subscription(f"http://{ALLOWED}:9/push/ws")
        )
        subscription_id = subscribed["subscription"]["id"]
        refused = await bob_ws.request("push.unsubscribe", "error", subscription_id=subscription_id)
        assert refused["error"]["code"] == "not_found"
        gone = await owner_ws.request("push.unsubscribe", "push.unsubscribed", subscription_id=subscription_id)
        assert gone["subscription_id"] == subscription_id
        bad = await owner_ws.request(
            "push.subscribe", "error", subscription=browser_subscription("https://10.0.0.1/push")
        )
        assert bad["error"]["code"] == "bad_request"


async def test_bad_keys_and_too_many_subscriptions_are_refused(push_server: LiveServer) -> None:
    async with httpx.AsyncClient(base_url=push_server.base_url, headers=bearer(push_server.secret)) as http:
        good = browser_subscription(f"http://{ALLOWED}:9/push/k")
        not_a_point = {**good, "keys": {**good["keys"], "p256dh": b64url(b"\x04" + bytes(64))}}
        short_auth = {**good, "keys": {**good["keys"], "auth": b64url(bytes(15))}}
        for body in (not_a_point, short_auth, {**good, "events": ["nonsense"]}, {**good, "extra": 1}):
            answer = await http.post("/api/push/subscriptions", json=body)
            assert answer.status_code == 400, body
            assert set(answer.json()["error"]) == {"code", "message"}
        for n in range(MAX_PER_ACCOUNT):
            made = await http.post("/api/push/subscriptions", json=browser_subscription(f"http://{ALLOWED}:9/push/{n}"))
            assert made.status_code == 201
        over = await http.post("/api/push/subscriptions", json=browser_subscription(f"http://{ALLOWED}:9/push/x"))
        assert over.status_code == 409
        again = await http.post("/api/push/subscriptions", json=browser_subscription(f"http://{ALLOWED}:9/push/3"))
        assert again.status_code == 201  # an update of one it has is no new subscription


@pytest.mark.parametrize(
    "endpoint",
    [
        "http://push.example.com/x",  # http, not on the allow-list
        "http://127.0.0.2:9/push/x",  # loopback, and not the allowed address
        "https://10.0.0.1/",
        "https://169.254.169.254/",
        "https://[::1]/",
        "https://rebound.test/push",  # a name resolving to 127.0.0.1
        "https://unknown.test/push",  # a name that does not resolve
    ],
)
async def test_endpoints_the_server_must_never_call_are_refused(
    push_server: LiveServer, endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(TEST_NAMES, "rebound.test", ["127.0.0.1"])
    async with httpx.AsyncClient(base_url=push_server.base_url, headers=bearer(push_server.secret)) as http:
        answer = await http.post("/api/push/subscriptions", json=browser_subscription(endpoint))
        assert answer.status_code == 400
        assert "127.0.0" not in answer.text
        assert "10.0.0.1" not in answer.text
        assert (await http.get("/api/push/subscriptions")).json() == {"subscriptions": []}
