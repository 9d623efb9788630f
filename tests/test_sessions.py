"""Sessions over REST, in process: the secret (or an API token) traded for a session, limited like a
login; the session list, ending one or all others (never another account's); `last_used_at` written
at most once a minute; logout clearing the cookie by its name."""

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from handlers.support.app import create_app
from pheby.services import Services
from pheby.settings import Settings
from tests.app_client import BASE
from tests.conftest import TEST_SECRET
from tests.passwords import PASSWORD
from tests.test_auth import add_account

pytestmark = [pytest.mark.anyio, pytest.mark.both_engines]


@pytest.fixture
async def settings(make_settings: Callable[..., Settings]) -> Settings:
    settings = make_settings(session_ttl_seconds=3600)
    await add_account(settings, "alice")
    await add_account(settings, "bob")
    return settings


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[AsyncTestClient[Litestar]]:
    async with AsyncTestClient(create_app(settings), base_url=BASE) as c:
        yield c


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def session_of(client: AsyncTestClient[Litestar], name: str) -> str:
    """A new password session of `name`, its token (no cookie kept)."""
    response = await client.post("/api/auth/login", json={"username": name, "password": PASSWORD})
    assert response.status_code == 200, response.text
    client.cookies.clear()
    token: str = response.json()["token"]
    return token


async def sessions(client: AsyncTestClient[Litestar], token: str) -> list[dict[str, Any]]:
    response = await client.get("/api/auth/sessions", headers=bearer(token))
    assert response.status_code == 200, response.text
    listed: list[dict[str, Any]] = response.json()["sessions"]
    return listed


async def test_the_secret_starts_a_session_whose_cookie_is_the_credential(client: AsyncTestClient[Litestar]) -> None:
    response = await client.post(
        "/api/auth/session", json={"secret": TEST_SECRET}, headers={"User-Agent": "Test browser/1.0"}
    )
    assert response.status_code == 200, response.text
    cookie = response.headers["set-cookie"]
    assert cookie.startswith("hope_session=")
    assert "httponly" in cookie.lower()
    assert TEST_SECRET not in cookie
    me = await client.get("/api/me")  # the cookie alone
    assert me.status_code == 200
    assert me.json()["name"] == "owner"
    [listed] = (await client.get("/api/auth/sessions")).json()["sessions"]
    assert listed["method"] == "secret"
    assert listed["device"] == "Test browser/1.0"
    assert listed["current"] is True
    assert set(listed) == {"id", "device", "method", "created_at", "last_used_at", "expires_at", "current"}


async def test_an_api_token_starts_a_session_and_a_session_token_does_not(
    client: AsyncTestClient[Litestar], settings: Settings
) -> None:
    _, api_token = await add_account(settings, "carol")
    response = await client.post("/api/auth/session", json={"secret": api_token})
    assert response.status_code == 200, response.text
    client.cookies.clear()
    session_token = response.json()["token"]
    assert (await client.get("/api/me", headers=bearer(session_token))).json()["name"] == "carol"
    # A session can't be stretched into fresh ones: only the secret or an API token is traded.
    again = await client.post("/api/auth/session", json={"secret": session_token})
    assert again.status_code == 401


async def test_wrong_secrets_are_401_then_429_with_retry_after(client: AsyncTestClient[Litestar]) -> None:
    for _ in range(5):
        response = await client.post("/api/auth/session", json={"secret": "not-the-secret"})
        assert response.status_code == 401
        assert "not-the-secret" not in response.text
        assert "set-cookie" not in response.headers
    locked = await client.post("/api/auth/session", json={"secret": TEST_SECRET})  # even the right one, now
    assert locked.status_code == 429
    assert int(locked.headers["retry-after"]) > 0
    assert (await client.post("/api/auth/session", json={"secret": 1})).status_code == 400
    assert (await client.post("/api/auth/session", json={"secret": "x", "more": 1})).status_code == 400


async def test_the_list_is_ones_own_newest_first_and_ending_one_ends_only_it(
    client: AsyncTestClient[Litestar],
) -> None:
    first, second, third = [await session_of(client, "alice") for _ in range(3)]
    bobs = await session_of(client, "bob")
    listed = await sessions(client, third)
    assert len(listed) == 3  # alice's only
    assert [s["current"] for s in listed] == [True, False, False]  # newest first: this call's own
    assert listed[0]["created_at"] >= listed[1]["created_at"] >= listed[2]["created_at"]
    oldest = listed[2]["id"]
    assert (await client.delete(f"/api/auth/sessions/{oldest}", headers=bearer(third))).status_code == 204
    assert (await client.get("/api/me", headers=bearer(first))).status_code == 401
    assert (await client.get("/api/me", headers=bearer(second))).status_code == 200
    assert (await client.delete(f"/api/auth/sessions/{oldest}", headers=bearer(third))).status_code == 404  # ended
    # Another account's session is not found, and stays alive.
    [bob_session] = await sessions(client, bobs)
    refused = await client.delete(f"/api/auth/sessions/{bob_session['id']}", headers=bearer(third))
    assert refused.status_code == 404
    assert refused.json()["error"]["message"] == "No such session"
    assert (await client.get("/api/me", headers=bearer(bobs))).status_code == 200


async def test_ending_all_others_keeps_the_current_one(client: AsyncTestClient[Litestar]) -> None:
    others = [await session_of(client, "alice") for _ in range(2)]
    current = await session_of(client, "alice")
    bobs = await session_of(client, "bob")
    assert (await client.delete("/api/auth/sessions", headers=bearer(current))).status_code == 204
    for token in others:
        assert (await client.get("/api/me", headers=bearer(token))).status_code == 401
    assert [s["current"] for s in await sessions(client, current)] == [True]
    assert (await client.get("/api/me", headers=bearer(bobs))).status_code == 200


async def test_last_used_is_written_at_most_once_a_minute(client: AsyncTestClient[Litestar]) -> None:
    token = await session_of(client, "alice")
    [listed] = await sessions(client, token)
    services: Services = client.app.state.services

    async def set_last_used(at: float) -> None:
        await services.db.run(
            lambda c: c.execute("UPDATE auth_tokens SET last_used_at = ? WHERE id = ?", (at, listed["id"]))
        )

    recent = time.time() - 30
    await set_last_used(recent)
    assert (await client.get("/api/me", headers=bearer(token))).status_code == 200
    [again] = await sessions(client, token)
    assert again["last_used_at"] == recent  # used half a minute ago: not written again
    stale = time.time() - 120
    await set_last_used(stale)
    before = time.time()
    assert (await client.get("/api/me", headers=bearer(token))).status_code == 200
    [touched] = await sessions(client, token)
    assert touched["last_used_at"] >= before


async def test_logout_ends_the_session_and_clears_its_cookie(client: AsyncTestClient[Litestar]) -> None:
    assert (await client.post("/api/auth/session", json={"secret": TEST_SECRET})).status_code == 200
    response = await client.post("/api/auth/logout", headers={"Origin": BASE})
    assert response.status_code == 200
    cleared = response.headers["set-cookie"]
    assert cleared.startswith(('hope_session=""', "hope_session=;"))
    assert "max-age=0" in cleared.lower()
    assert (await client.get("/api/me")).status_code == 401


async def test_signing_in_again_ends_the_session_the_browser_held(client: AsyncTestClient[Litestar]) -> None:
    """A new sign-in replaces the session of the cookie it arrived with (no fixation, no forgotten session)."""
    first = await client.post("/api/auth/login", json={"username": "alice", "password": PASSWORD})
    held = first.json()["token"]
    assert (await client.get("/api/me")).status_code == 200  # the cookie
    second = await client.post("/api/auth/session", json={"secret": TEST_SECRET})  # as someone else, even
    assert second.status_code == 200
    assert (await client.get("/api/me", headers=bearer(held))).status_code == 401
    assert (await client.get("/api/me")).json()["name"] == "owner"  # the new cookie
