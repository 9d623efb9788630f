"""Accounts and auth on /api/*: bearer, cookie, Origin rule, lockout, revocation, expiry."""

import asyncio
import re
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest
from litestar import Litestar, post
from litestar.params import JSONBody
from litestar.testing import AsyncTestClient

from handlers.support import app as app_module
from handlers.support.app import create_app
from pheby.settings import Settings
from pheby.store.accounts import Accounts
from pheby.store.lockout import BearerFailures
from tests.app_client import BASE
from tests.conftest import TEST_SECRET
from tests.live_server import LiveServer
from tests.passwords import PASSWORD, fast_accounts

pytestmark = [pytest.mark.anyio, pytest.mark.both_engines]


async def add_account(settings: Settings, name: str, password: str | None = PASSWORD) -> tuple[str, str]:
    """Create an account and an API token straight in the database; return (id, token)."""
    db = settings.open_database()
    await db.open()
    try:
        accounts = fast_accounts(db)
        account = await accounts.create(name, password)
        issued = await accounts.issue_token(account.id, "api", None)
        return account.id, issued.token
    finally:
        await db.close()


@pytest.fixture
async def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings(session_ttl_seconds=3600)


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[AsyncTestClient[Litestar]]:
    await add_account(settings, "alice")
    async with AsyncTestClient(create_app(settings), base_url=BASE) as c:
        yield c


async def login(client: AsyncTestClient[Litestar], username: str = "alice", password: str = PASSWORD) -> httpx.Response:
    return await client.post("/api/auth/login", json={"username": username, "password": password})


async def test_no_or_wrong_credentials_are_401(client: AsyncTestClient[Litestar]) -> None:
    response = await client.get("/api/me")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"
    assert (await client.get("/api/me", headers={"Authorization": "Bearer nope"})).status_code == 401
    assert (await client.get("/api/me", headers={"Authorization": f"Basic {TEST_SECRET}"})).status_code == 401
    client.cookies.set("hope_session", "forged")
    assert (await client.get("/api/me")).status_code == 401


async def test_secret_is_the_owner_and_tokens_are_their_account(
    client: AsyncTestClient[Litestar], settings: Settings
) -> None:
    owner = await client.get("/api/me", headers={"Authorization": f"Bearer {TEST_SECRET}"})
    assert owner.status_code == 200
    assert owner.json()["name"] == "owner"
    _, token = await add_account(settings, "bob", None)
    bob = await client.get("/api/me", headers={"Authorization": f"Bearer {token}"})
    assert bob.json()["name"] == "bob"


async def test_login_sets_an_httponly_lax_cookie(client: AsyncTestClient[Litestar]) -> None:
    response = await login(client)
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"token", "expires_at"}
    set_cookie = response.headers["set-cookie"].lower()
    assert "hope_session=" in set_cookie
    assert "httponly" in set_cookie
    assert "samesite=lax" in set_cookie
    assert (await client.get("/api/me")).json()["name"] == "alice"  # the cookie alone authenticates
    assert (await client.get("/api/me", headers={"Authorization": f"Bearer {body['token']}"})).status_code == 200


async def test_wrong_password_is_401_and_sixth_failure_is_429(client: AsyncTestClient[Litestar]) -> None:
    for _ in range(5):
        assert (await login(client, password="wrong")).status_code == 401
    sixth = await login(client, password="wrong")
    assert sixth.status_code == 429
    assert sixth.json()["error"]["code"] == "rate_limited"
    # Locked out even with the right password, until the window passes; the address is locked, not only
    # this username (tests/test_login_limits.py has the per-username limit across addresses).
    assert (await login(client)).status_code == 429
    assert (await login(client, username="mallory", password="x")).status_code == 429


@pytest.mark.live
async def test_concurrent_wrong_passwords_get_no_more_than_the_limit(
    start_live_server: Callable[[Settings], LiveServer], live_settings: Callable[..., Settings]
) -> None:
    """The password check is slow; twenty guesses at once must not all pass the lockout check first."""
    settings = live_settings()
    await add_account(settings, "alice")
    server = start_live_server(settings)
    async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as http:

        async def guess(password: str) -> int:
            body = {"username": "alice", "password": password}
            return (await http.post("/api/auth/login", json=body)).status_code

        statuses = sorted(await asyncio.gather(*(guess(f"wrong-{n}") for n in range(20))))
        assert statuses == [401] * 5 + [429] * 15
        assert await guess(PASSWORD) == 429


async def test_cookie_mutation_needs_an_allowed_origin(client: AsyncTestClient[Litestar]) -> None:
    assert (await login(client)).status_code == 200
    missing = await client.post("/api/auth/logout")
    assert missing.status_code == 403
    foreign = await client.post("/api/auth/logout", headers={"Origin": "https://evil.example"})
    assert foreign.status_code == 403
    assert (await client.get("/api/me")).status_code == 200  # reads need no Origin
    allowed = await client.post("/api/auth/logout", headers={"Origin": BASE})
    assert allowed.status_code == 200


JSON_BODY_ROUTES = [
    ("POST", "/api/artifacts"),
    ("PATCH", "/api/artifacts/0123456789abcdef0123456789abcdef"),
    ("POST", "/api/tasks"),
    ("PATCH", "/api/tasks/0123456789ab"),
    ("PUT", "/api/memory/memory"),
]


@pytest.mark.parametrize(("method", "path"), JSON_BODY_ROUTES)
async def test_the_caller_is_checked_before_the_body_is_parsed(
    client: AsyncTestClient[Litestar], method: str, path: str
) -> None:
    broken = {"content": b"{", "headers": {"Content-Type": "application/json"}}
    assert (await client.request(method, path, **broken)).status_code == 401  # type: ignore[arg-type]
    assert (await login(client)).status_code == 200
    foreign = await client.request(method, path, content=b"{", headers={"Origin": "https://evil.example"})
    assert foreign.status_code == 403  # a cookie without the Origin rule met: refused before parsing too


async def test_configured_origins_are_allowed_beside_the_servers_own(make_settings: Callable[..., Settings]) -> None:
    # The server's own origin stays allowed: Pheby Web works over its cookie alone.
    settings = make_settings(allowed_origins=("https://hope.example",))
    await add_account(settings, "alice")
    async with AsyncTestClient(create_app(settings), base_url=BASE) as client:
        assert (await login(client)).status_code == 200
        refused = await client.post("/api/auth/logout", headers={"Origin": "https://evil.example"})
        assert refused.status_code == 403
        assert (await client.post("/api/auth/logout", headers={"Origin": "https://hope.example"})).status_code == 200
        assert (await login(client)).status_code == 200
        assert (await client.post("/api/auth/logout", headers={"Origin": BASE})).status_code == 200


async def test_bearer_mutation_needs_no_origin(client: AsyncTestClient[Litestar]) -> None:
    token = (await login(client)).json()["token"]
    client.cookies.clear()
    response = await client.post("/api/auth/logout", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200


async def test_logout_revokes_the_session(client: AsyncTestClient[Litestar]) -> None:
    token = (await login(client)).json()["token"]
    assert (await client.post("/api/auth/logout", headers={"Origin": BASE})).status_code == 200
    client.cookies.clear()
    assert (await client.get("/api/me", headers={"Authorization": f"Bearer {token}"})).status_code == 401
    client.cookies.set("hope_session", token)
    assert (await client.get("/api/me")).status_code == 401


async def test_expired_session_is_401(make_settings: Callable[..., Settings]) -> None:
    settings = make_settings(session_ttl_seconds=1)
    await add_account(settings, "alice")
    async with AsyncTestClient(create_app(settings), base_url=BASE) as client:
        token = (await login(client)).json()["token"]
        assert (await client.get("/api/me")).status_code == 200
        await asyncio.sleep(1.2)
        assert (await client.get("/api/me")).status_code == 401
        client.cookies.clear()
        assert (await client.get("/api/me", headers={"Authorization": f"Bearer {token}"})).status_code == 401


async def test_disabled_account_is_401(client: AsyncTestClient[Litestar], settings: Settings) -> None:
    _, token = await add_account(settings, "carol")
    assert (await client.get("/api/me", headers={"Authorization": f"Bearer {token}"})).status_code == 200
    db = settings.open_database()
    await db.open()
    await Accounts(db).set_disabled("carol")
    await db.close()
    assert (await client.get("/api/me", headers={"Authorization": f"Bearer {token}"})).status_code == 401
    assert (await login(client, username="carol")).status_code == 401


async def test_database_holds_no_token_in_clear(client: AsyncTestClient[Litestar], settings: Settings) -> None:
    session_token = (await login(client)).json()["token"]
    _, api_token = await add_account(settings, "dave")
    conn = sqlite3.connect(settings.database_path)
    dump = "\n".join(conn.iterdump())
    conn.close()
    raw = b"".join(p.read_bytes() for p in Path(settings.database_path).parent.glob("pheby.sqlite3*"))
    for token in (session_token, api_token):
        assert token not in dump
        assert token.encode() not in raw
    assert PASSWORD not in dump


# Outside the `/api` router on purpose: the ways to get a credential (a password and its code step, the
# secret), and the answer from a notification (its token is the credential: tests/test_push_e2e.py).
PUBLIC_API_PATHS = {"/api/auth/login", "/api/auth/login/totp", "/api/auth/session", "/api/push/actions"}
PUBLIC_API_PATHS |= {"/api/auth/oidc", "/api/auth/oidc/start", "/api/auth/oidc/callback"}  # OIDC sign-in
PUBLIC_API_PATHS |= {"/api/auth/passkey/options", "/api/auth/passkey"}  # passkey sign-in


def api_operations(app: Litestar) -> list[tuple[str, str]]:
    """Every (method, path) of the route table under `/api`, path parameters filled with a dummy value."""
    operations: list[tuple[str, str]] = []
    for route in app.routes:
        if not route.path.startswith("/api/") or route.path in PUBLIC_API_PATHS:
            continue
        path = re.sub(r"\{[^}]+\}", "0123456789ab", route.path)
        operations += [(method, path) for method in sorted(route.methods)]
    return operations


async def test_every_api_route_refuses_a_caller_without_credentials(settings: Settings) -> None:
    """Generated from the route table: no, wrong or cookie-forged credentials, with or without a broken body."""
    app = create_app(settings)
    operations = api_operations(app)
    assert len(operations) >= 27  # the whole table, not an empty one
    broken = {"content": b"{", "headers": {"Content-Type": "application/json"}}
    wrong = {"Authorization": "Bearer not-a-token"}
    answered: dict[tuple[str, str, str], int] = {}
    async with AsyncTestClient(app, base_url=BASE) as client:
        # Every wrong bearer here comes from one address: counted, they would lock it out (429) after ten,
        # which tests/test_bearer_failures.py covers; this test is about each route's 401.
        app.state.services.authenticator.bearer_failures = BearerFailures(limit=len(operations) * 4)
        for method, path in operations:
            answered[(method, path, "none")] = (await client.request(method, path)).status_code
            answered[(method, path, "wrong")] = (await client.request(method, path, headers=wrong)).status_code
            answered[(method, path, "broken body")] = (await client.request(method, path, **broken)).status_code  # type: ignore[arg-type]
            response = await client.request(
                method, path, headers={**wrong, "Content-Type": "application/json"}, content=b"{"
            )
            answered[(method, path, "wrong, broken body")] = response.status_code
    assert {key: status for key, status in answered.items() if status != 401} == {}


async def test_a_route_added_without_auth_code_is_protected(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One line in API_ROUTES, no guard, no `current_user`: the router alone makes it answer 401."""

    @post("/new-thing", sync_to_thread=False)
    def new_thing(data: JSONBody[dict[str, int]]) -> dict[str, int]:
        return data

    monkeypatch.setattr(app_module, "API_ROUTES", [*app_module.API_ROUTES, new_thing])
    app = create_app(settings)
    assert ("POST", "/api/new-thing") in api_operations(app)
    async with AsyncTestClient(app, base_url=BASE) as client:
        assert (await client.post("/api/new-thing", json={"a": 1})).status_code == 401
        broken = await client.post("/api/new-thing", content=b"{", headers={"Content-Type": "application/json"})
        assert broken.status_code == 401  # refused before the body is parsed
        owner = {"Authorization": f"Bearer {TEST_SECRET}"}
        assert (await client.post("/api/new-thing", json={"a": 1}, headers=owner)).json() == {"a": 1}
