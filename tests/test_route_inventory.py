"""Every route, and every message a WebSocket may send before `hello`, refuses a caller without credentials
and one whose credentials were revoked. Generated from the route table and the message registry.

`/api/*` routes behind the router's guard are checked in tests/test_auth.py and here with revoked
credentials. Every other route must be listed in `OUTSIDE_THE_GUARD` with the credential it takes: a
route added outside the guard without an entry fails `test_every_route_outside_the_guard_is_listed`.
"""

import json
import re
from collections.abc import AsyncIterator, Callable
from typing import Any, Literal

import httpx
import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from handlers.support.app import create_app
from handlers.ws.hello import Hello
from handlers.ws.support.registry import HANDLERS
from pheby.services import Services
from pheby.settings import Settings
from pheby.store.lockout import BearerFailures
from tests.app_client import BASE
from tests.live_server import LiveServer
from tests.passwords import PASSWORD
from tests.test_auth import add_account
from tests.ws_client import PhebyClient

pytestmark = pytest.mark.anyio

Credential = Literal["none", "account", "answer token", "plugin secret", "metrics token", "hello"]

# Path templates outside the `/api` guard, and the credential each takes ("none": open by design).
OUTSIDE_THE_GUARD: dict[str, Credential] = {
    "/healthz": "none",
    "/readyz": "none",
    "/api/auth/login": "none",  # the way to get a credential
    "/api/auth/login/totp": "none",  # its second step: the ticket and the code are the credential
    "/api/auth/session": "none",  # the owner secret or an API token, traded for a session
    "/api/auth/passkey/options": "none",  # passkey sign-in: the challenge, then the signed answer
    "/api/auth/passkey": "none",
    "/api/auth/oidc": "none",  # OpenID Connect: offered?, then to the provider and back (its state is the check)
    "/api/auth/oidc/start": "none",
    "/api/auth/oidc/callback": "none",
    "/api/push/actions": "answer token",  # a notification's single-use answer token
    "/ws": "hello",  # its first message authenticates it
    "/attachments": "account",  # Bearer, ApiKey or X-Pheby-Secret
    "/attachments/{attachment_id:str}": "account",
    "/internal/hermes-plugin/events": "plugin secret",
    "/internal/hermes-plugin/media": "plugin secret",
    "/metrics": "metrics token",
    "/": "none",  # Pheby Web's page and assets: it signs in itself
    "/web/{version:str}/{path:path}": "none",
    "/manifest.webmanifest": "none",
    "/sw.js": "none",
}
OPENAPI_PREFIX = "/schema"  # the OpenAPI document and its viewer: open


@pytest.fixture
async def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings(metrics_token="m" * 32)


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[AsyncTestClient[Litestar]]:
    await add_account(settings, "alice")
    app = create_app(settings)
    async with AsyncTestClient(app, base_url=BASE) as test_client:
        # Every refused request here comes from one address; counted, they would lock it out (429).
        app.state.services.authenticator.bearer_failures = BearerFailures(limit=10_000)
        yield test_client


def services_of(client: AsyncTestClient[Litestar]) -> Services:
    services: Services = client.app.state.services
    return services


async def revoked_token(client: AsyncTestClient[Litestar], kind: Literal["session", "api"]) -> str:
    """A token of alice's that worked, then was revoked."""
    services = services_of(client)
    alice = await services.accounts.get_by_name("alice")
    issued = await services.accounts.issue_token(alice.id, kind, 3600)
    assert (await client.get("/api/me", headers={"Authorization": f"Bearer {issued.token}"})).status_code == 200
    await services.accounts.revoke_token(issued.token_id)
    return issued.token


def operations(app: Litestar) -> list[tuple[str, str, str]]:
    """Every (method, template, path) of the route table, path parameters filled with a dummy value."""
    found: list[tuple[str, str, str]] = []
    for route in app.routes:
        path = re.sub(r"\{[^}]+\}", "0123456789abcdef0123456789abcdef", route.path)
        methods = sorted(getattr(route, "methods", ())) or ["WEBSOCKET"]
        found += [(method, route.path, path) for method in methods if method not in ("OPTIONS", "HEAD")]
    return found


def guarded(template: str) -> bool:
    return template.startswith("/api/") and template not in OUTSIDE_THE_GUARD


async def test_every_route_outside_the_guard_is_listed(client: AsyncTestClient[Litestar]) -> None:
    templates = {template for _, template, _ in operations(client.app)}
    outside = {t for t in templates if not guarded(t) and not t.startswith(OPENAPI_PREFIX)}
    assert outside == set(OUTSIDE_THE_GUARD)


async def test_every_route_refuses_missing_and_revoked_credentials(client: AsyncTestClient[Litestar]) -> None:
    revoked_session = await revoked_token(client, "session")
    revoked_api = await revoked_token(client, "api")
    tried: dict[tuple[str, str, str], int] = {}
    for method, template, path in operations(client.app):
        credential = "account" if guarded(template) else OUTSIDE_THE_GUARD.get(template, "none")
        if credential in ("none", "hello"):
            continue  # open by design; `/ws`: below, per message
        attempts: dict[str, dict[str, str]] = {"none": {}}
        if credential == "account":
            attempts |= {
                "revoked session": {"Authorization": f"Bearer {revoked_session}"},
                "revoked api token": {"Authorization": f"Bearer {revoked_api}"},
                "revoked cookie": {"Cookie": f"hope_session={revoked_session}", "Origin": BASE},
            }
            if template.startswith("/attachments"):
                attempts["revoked X-Pheby-Secret"] = {"X-Pheby-Secret": revoked_api}
        elif credential in ("plugin secret", "metrics token"):  # an account's credential is not theirs
            attempts["an account's token"] = {"Authorization": f"Bearer {revoked_api}"}
        for name, headers in attempts.items():
            body: dict[str, Any] = {}
            if credential == "answer token":
                body = {"json": {"token": revoked_api if name != "none" else "", "action": "deny"}}
            response = await client.request(method, path, headers=headers, **body)
            tried[(method, path, name)] = response.status_code
    assert len(tried) >= 120  # the whole table, not an empty one
    refused = {401, 403} | {404}  # 404: an answer token that is no (longer a) token says only that
    let_through = {key: status for key, status in tried.items() if status not in refused}
    assert let_through == {}
    answers = {status for (method, path, _), status in tried.items() if path == "/api/push/actions"}
    assert answers <= {400, 404}, answers


def pre_hello_messages() -> list[str]:
    """Every message type the registry knows, hello aside."""
    return sorted(message.__struct_config__.tag for message in HANDLERS if message is not Hello)  # type: ignore[misc]


@pytest.fixture
async def proxied(
    start_live_server: Callable[[Settings], LiveServer], live_settings: Callable[..., Settings]
) -> LiveServer:
    """Behind a trusted "proxy" (loopback), so each socket comes from an address of its own: failed hellos
    lock an address out after five, and this test sends many more."""
    settings = live_settings(trusted_proxies=("127.0.0.1",))
    await add_account(settings, "alice")
    return start_live_server(settings)


def from_address(n: int) -> dict[str, Any]:
    return {"additional_headers": {"X-Forwarded-For": f"203.0.113.{n}"}}


@pytest.mark.live
async def test_every_message_before_hello_is_refused(proxied: LiveServer) -> None:
    messages = pre_hello_messages()
    assert len(messages) >= 20
    for n, message_type in enumerate(messages, start=1):
        async with await PhebyClient.connect(proxied.ws_url, **from_address(n)) as client:
            await client.send_raw(json.dumps({"type": message_type, "request_id": "r", "conversation_id": "c"}))
            error = await client.expect("error")
            assert error["error"]["code"] == "unauthorized", message_type
            assert await client.closed() is not None, message_type


@pytest.mark.live
async def test_a_hello_with_revoked_credentials_is_refused(proxied: LiveServer) -> None:
    async with httpx.AsyncClient(base_url=proxied.base_url, timeout=30) as http:
        login = await http.post("/api/auth/login", json={"username": "alice", "password": PASSWORD})
        token = login.json()["token"]
        logout = await http.post("/api/auth/logout", headers={"Authorization": f"Bearer {token}"})
        assert logout.status_code == 200
    for n, secret in enumerate((token, "", "phb_" + "A" * 43), start=100):
        async with await PhebyClient.connect(proxied.ws_url, **from_address(n)) as client:
            await client.send_raw(json.dumps({"type": "hello", "secret": secret, "protocol_version": 1}))
            assert (await client.expect("error"))["error"]["code"] == "unauthorized"
            assert await client.closed() is not None
