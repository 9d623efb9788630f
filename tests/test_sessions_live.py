"""Sessions on a live server (real uvicorn, the `websockets` client): the WebSocket's Origin rule, a
hello authenticated by the session cookie, sockets closed when their session is ended, `/attachments`
over the cookie, and the Pheby app's hello with the secret (no Origin) unchanged."""

from collections.abc import AsyncIterator

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.typing import Origin

from tests.live_server import LiveServer
from tests.test_auth import add_account
from tests.ws_client import PhebyClient

pytestmark = [pytest.mark.anyio, pytest.mark.live]
EVIL = "http://evil.example"


@pytest.fixture
async def http(live_server: LiveServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=live_server.base_url, timeout=30) as client:
        yield client


async def owner_session(http: httpx.AsyncClient, live: LiveServer) -> str:
    """A new session traded for the owner secret; its token (each test says which cookie it sends)."""
    response = await http.post("/api/auth/session", json={"secret": live.secret})
    assert response.status_code == 200, response.text
    http.cookies.clear()
    token: str = response.json()["token"]
    return token


def cookie(token: str) -> dict[str, str]:
    return {"Cookie": f"hope_session={token}"}


async def cookie_hello(live: LiveServer, token: str | None, origin: str | None) -> PhebyClient:
    """A socket with the cookie (if any) and the Origin (if any), whose hello has no secret."""
    headers = cookie(token) if token else {}
    client = await PhebyClient.connect(
        live.ws_url, origin=Origin(origin) if origin else None, additional_headers=headers
    )
    await client.send("hello", protocol_version=1)
    return client


@pytest.fixture
async def token(live_server: LiveServer, http: httpx.AsyncClient) -> str:
    return await owner_session(http, live_server)


async def test_a_foreign_origin_is_refused_before_any_credential(live_server: LiveServer, token: str) -> None:
    for headers in ({}, cookie(token)):
        with pytest.raises(InvalidStatus) as refused:
            await PhebyClient.connect(live_server.ws_url, origin=Origin(EVIL), additional_headers=headers)
        assert refused.value.response.status_code == 403
    with pytest.raises(InvalidStatus) as refused:  # the secret would follow: never asked for
        await PhebyClient.connect(live_server.ws_url, live_server.secret, origin=Origin(EVIL))
    assert refused.value.response.status_code == 403


async def test_the_cookie_authenticates_a_hello_without_secret_from_the_own_origin(
    live_server: LiveServer, token: str
) -> None:
    async with await cookie_hello(live_server, token, live_server.base_url) as client:
        await client.expect("ready")
        created = await client.request("conversation.create", "conversation.created", name="over the cookie")
        assert created["conversation_id"]


async def test_the_pheby_app_hello_with_the_secret_and_no_origin_is_unchanged(live_server: LiveServer) -> None:
    async with await PhebyClient.connect(live_server.ws_url, live_server.secret) as client:
        assert client.seen("ready")


async def test_no_secret_and_no_cookie_is_unauthorized(live_server: LiveServer, token: str) -> None:
    for sent in (None, "phb_not-a-session"):
        async with await cookie_hello(live_server, sent, None) as client:
            error = await client.expect("error")
            assert error["error"]["code"] == "unauthorized"
            assert await client.closed() == 1008


async def test_an_api_token_cookie_is_no_session(live_server: LiveServer, token: str) -> None:
    _, api_token = await add_account(live_server.settings, "carol")
    async with await cookie_hello(live_server, api_token, live_server.base_url) as client:
        assert (await client.expect("error"))["error"]["code"] == "unauthorized"


async def test_ending_a_session_closes_its_socket_at_once(
    live_server: LiveServer, http: httpx.AsyncClient, token: str
) -> None:
    other = await owner_session(http, live_server)
    async with await cookie_hello(live_server, other, live_server.base_url) as client:
        await client.expect("ready")
        listed = (await http.get("/api/auth/sessions", headers=cookie(token))).json()["sessions"]
        [ending] = [s["id"] for s in listed if not s["current"]]
        ended = await http.delete(f"/api/auth/sessions/{ending}", headers={**cookie(token), "Origin": EVIL})
        assert ended.status_code == 403  # a cookie change from another site
        ended = await http.delete(
            f"/api/auth/sessions/{ending}", headers={**cookie(token), "Origin": live_server.base_url}
        )
        assert ended.status_code == 204
        error = await client.expect("error")
        assert error["error"]["code"] == "unauthorized"
        assert await client.closed() == 1008
    third = await owner_session(http, live_server)
    async with await cookie_hello(live_server, third, live_server.base_url) as client:
        await client.expect("ready")
        everyone_else = await http.delete(
            "/api/auth/sessions", headers={**cookie(token), "Origin": live_server.base_url}
        )
        assert everyone_else.status_code == 204
        assert await client.closed() == 1008
    assert (await http.get("/api/me", headers=cookie(token))).status_code == 200


async def test_attachments_ride_the_cookie_with_the_origin_rule_for_uploads(
    live_server: LiveServer, http: httpx.AsyncClient, token: str
) -> None:
    async with await cookie_hello(live_server, token, live_server.base_url) as client:
        await client.expect("ready")
        created = await client.request("conversation.create", "conversation.created", name="files")
    query = {"conversation_id": created["conversation_id"], "filename": "notes.txt"}
    sent = {**cookie(token), "Content-Type": "text/plain"}
    for origin in ({}, {"Origin": EVIL}):
        refused = await http.post("/attachments", params=query, content=b"hello", headers={**sent, **origin})
        assert refused.status_code == 403
    upload = await http.post(
        "/attachments", params=query, content=b"hello", headers={**sent, "Origin": live_server.base_url}
    )
    assert upload.status_code == 201, upload.text
    path = upload.json()["attachment"]["download_path"]
    assert (await http.get(path)).status_code == 401  # no cookie, no credential
    download = await http.get(path, headers=cookie(token))
    assert (download.status_code, download.content) == (200, b"hello")
