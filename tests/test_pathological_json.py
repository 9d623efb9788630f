"""Deeply nested JSON on every HTTP route with a JSON body: 400 `bad_request`, never a 500, no traceback."""

import logging
from collections.abc import AsyncIterator, Callable

import httpx
import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from handlers.support.app import create_app
from pheby.plugin.pushes import SECRET_HEADER
from pheby.settings import Settings
from tests.app_client import BASE
from tests.conftest import TEST_SECRET
from tests.live_server import LiveServer

pytestmark = pytest.mark.anyio
PLUGIN_SECRET = "plugin-secret-0123456789abcdef"
DEEP_BODIES = {
    "array": b"[" * 1000 + b"]" * 1000,
    "object": b'{"a":' * 1000 + b"1" + b"}" * 1000,
    "deep-field": b'{"username":"u","password":"p","title":' + b'{"a":' * 1000 + b"1" + b"}" * 1001,
}
JSON_ROUTES = [
    ("POST", "/api/auth/login"),
    ("POST", "/api/artifacts"),
    ("PATCH", "/api/artifacts/0123456789abcdef0123456789abcdef"),
    ("POST", "/api/tasks"),
    ("PATCH", "/api/tasks/0123456789ab"),
    ("PUT", "/api/memory/memory"),
]


@pytest.fixture
async def client(make_settings: Callable[..., Settings]) -> AsyncIterator[AsyncTestClient[Litestar]]:
    async with AsyncTestClient(create_app(make_settings()), base_url=BASE) as c:
        yield c


@pytest.mark.parametrize("body", DEEP_BODIES.values(), ids=DEEP_BODIES.keys())
@pytest.mark.parametrize(("method", "path"), JSON_ROUTES)
async def test_deep_nesting_is_a_bad_request(
    client: AsyncTestClient[Litestar], caplog: pytest.LogCaptureFixture, method: str, path: str, body: bytes
) -> None:
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {TEST_SECRET}"}
    with caplog.at_level(logging.INFO):
        response = await client.request(method, path, content=body, headers=headers)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "bad_request"
    for record in caplog.records:
        assert record.exc_info is None, record.getMessage()
        assert "RecursionError" not in record.getMessage()


async def test_the_plugin_push_route_refuses_deep_nesting_too(
    make_settings: Callable[..., Settings], caplog: pytest.LogCaptureFixture
) -> None:
    """The plugin's route decodes its own body; it must not be the one place a deep body is a 500."""
    settings = make_settings(hermes_url="http://127.0.0.1:9", plugin_secret=PLUGIN_SECRET, plugin_peers=("testclient",))
    async with AsyncTestClient(create_app(settings), base_url=BASE) as client:
        for body in DEEP_BODIES.values():
            response = await client.post(
                "/internal/hermes-plugin/events",
                content=body,
                headers={"Content-Type": "application/json", SECRET_HEADER: PLUGIN_SECRET},
            )
            assert response.status_code == 400, response.text
            assert response.json()["error"]["code"] == "bad_request"
    assert all(record.exc_info is None for record in caplog.records)


@pytest.mark.live
async def test_deep_nesting_on_a_live_server_is_a_bad_request(
    live_server: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The same through uvicorn (the server's real call stack), on login and another JSON route."""
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {live_server.secret}"}
    async with httpx.AsyncClient(base_url=live_server.base_url, timeout=30) as http:
        for method, path in (("POST", "/api/auth/login"), ("POST", "/api/tasks")):
            for body in DEEP_BODIES.values():
                response = await http.request(method, path, content=body, headers=headers)
                assert response.status_code == 400, response.text
                assert response.json()["error"]["code"] == "bad_request"
    for record in caplog.records:
        assert record.exc_info is None, record.getMessage()
        assert "RecursionError" not in record.getMessage()
