"""Behind a TLS proxy: a trusted proxy's `X-Forwarded-Proto: https` (or `PHEBY_PUBLIC_URL`) makes the login
cookie `Secure` and the server's own origin `https://...`; from an untrusted peer the header is ignored."""

from collections.abc import Callable

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.typing import Origin

from pheby.settings import Settings, SettingsError, load_settings
from tests.live_server import LiveServer
from tests.passwords import PASSWORD
from tests.test_auth import add_account
from tests.ws_client import PhebyClient

pytestmark = [pytest.mark.anyio, pytest.mark.live]


async def start(
    start_live_server: Callable[[Settings], LiveServer], live_settings: Callable[..., Settings], **overrides: object
) -> LiveServer:
    settings = live_settings(**overrides)
    await add_account(settings, "alice")
    return start_live_server(settings)


async def login(http: httpx.AsyncClient, headers: dict[str, str]) -> httpx.Response:
    response = await http.post("/api/auth/login", json={"username": "alice", "password": PASSWORD}, headers=headers)
    assert response.status_code == 200, response.text
    return response


async def logout_status(
    http: httpx.AsyncClient, token: str, origin: str, headers: dict[str, str], *, https: bool
) -> int:
    """A cookie mutation (the cookie set by hand: httpx keeps a Secure cookie off plain http)."""
    name = "__Host-hope_session" if https else "hope_session"
    sent = {**headers, "Cookie": f"{name}={token}", "Origin": origin}
    return (await http.post("/api/auth/logout", headers=sent)).status_code


async def test_a_trusted_proxys_https_makes_the_cookie_secure_and_the_https_origin_own(
    start_live_server: Callable[[Settings], LiveServer], live_settings: Callable[..., Settings]
) -> None:
    server = await start(start_live_server, live_settings, trusted_proxies=("127.0.0.1",))
    host = server.base_url.removeprefix("http://")
    forwarded = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.5"}
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as http:
        response = await login(http, forwarded)
        assert "secure" in response.headers["set-cookie"].lower()
        assert response.headers["set-cookie"].startswith("__Host-hope_session=")
        assert "domain" not in response.headers["set-cookie"].lower()
        token = response.json()["token"]
        assert await logout_status(http, token, f"http://{host}", forwarded, https=True) == 403
        # Over https a plain `hope_session` (one a sibling host could have set) is no credential.
        assert await logout_status(http, token, f"https://{host}", forwarded, https=False) == 401
        assert await logout_status(http, token, f"https://{host}", forwarded, https=True) == 200
        plain = await login(http, {"X-Forwarded-For": "203.0.113.5"})  # the proxy spoke plain http this time
        assert "secure" not in plain.headers["set-cookie"].lower()
        assert plain.headers["set-cookie"].startswith("hope_session=")


async def test_an_untrusted_peers_forwarded_proto_is_ignored(
    start_live_server: Callable[[Settings], LiveServer], live_settings: Callable[..., Settings]
) -> None:
    server = await start(start_live_server, live_settings)  # no trusted proxies
    host = server.base_url.removeprefix("http://")
    forwarded = {"X-Forwarded-Proto": "https"}
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as http:
        response = await login(http, forwarded)
        assert "secure" not in response.headers["set-cookie"].lower()
        token = response.json()["token"]
        assert await logout_status(http, token, f"https://{host}", forwarded, https=False) == 403
        assert await logout_status(http, token, f"http://{host}", forwarded, https=False) == 200


async def test_the_public_url_is_the_own_origin_and_makes_the_cookie_secure(
    start_live_server: Callable[[Settings], LiveServer], live_settings: Callable[..., Settings]
) -> None:
    server = await start(start_live_server, live_settings, public_url="https://pheby.example.com")
    host = server.base_url.removeprefix("http://")
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as http:
        response = await login(http, {})
        assert "secure" in response.headers["set-cookie"].lower()
        token = response.json()["token"]
        assert await logout_status(http, token, f"http://{host}", {}, https=True) == 403
        assert await logout_status(http, token, "https://evil.example", {}, https=True) == 403
        assert await logout_status(http, token, "https://pheby.example.com", {}, https=True) == 200
        # The secret's session too: its cookie is `__Host-hope_session`, and the WebSocket reads that one.
        session = await http.post("/api/auth/session", json={"secret": server.secret})
        assert session.headers["set-cookie"].startswith("__Host-hope_session=")
        assert "secure" in session.headers["set-cookie"].lower()
        token = session.json()["token"]
    for name, origin, answer in (
        ("__Host-hope_session", "https://pheby.example.com", "ready"),
        ("hope_session", "https://pheby.example.com", "error"),  # the plain name is no credential over https
    ):
        headers = {"Cookie": f"{name}={token}"}
        async with await PhebyClient.connect(server.ws_url, origin=Origin(origin), additional_headers=headers) as ws:
            await ws.send("hello", protocol_version=1)
            await ws.expect(answer)
    with pytest.raises(InvalidStatus) as refused:  # its own origin is the public URL's, not the Host's
        await PhebyClient.connect(server.ws_url, origin=Origin(f"http://{host}"))
    assert refused.value.response.status_code == 403


def test_the_public_url_is_validated() -> None:
    secret = {"PHEBY_SECRET": "s" * 20}
    assert load_settings({**secret, "PHEBY_PUBLIC_URL": "https://pheby.example.com/"}).public_url == (
        "https://pheby.example.com"
    )
    assert load_settings({**secret, "PHEBY_PUBLIC_URL": "http://10.0.0.5:8620"}).public_url == "http://10.0.0.5:8620"
    for bad in ("pheby.example.com", "ftp://x.example", "https://x.example/path", "https://", "https://a b"):
        with pytest.raises(SettingsError, match="PHEBY_PUBLIC_URL"):
            load_settings({**secret, "PHEBY_PUBLIC_URL": bad})
