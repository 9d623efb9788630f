"""The app factory: health, OpenAPI docs, and the one error shape."""

from collections.abc import Callable, Iterator

import pytest
from litestar import get
from litestar.testing import AsyncTestClient

from handlers.support.app import create_app
from pheby.settings import Settings
from tests.conftest import TEST_SECRET
from tests.test_auth import PUBLIC_API_PATHS

pytestmark = pytest.mark.anyio


async def test_healthz_needs_no_auth(make_settings: Callable[..., Settings]) -> None:
    async with AsyncTestClient(create_app(make_settings())) as client:
        response = await client.get("/healthz")
        assert response.status_code == 200
        assert response.json() == {"status": "ok"}
        assert response.headers["x-content-type-options"] == "nosniff"
        probe = await client.head("/healthz")
        assert (probe.status_code, probe.content) == (200, b"")


async def test_openapi_schema_is_served(make_settings: Callable[..., Settings]) -> None:
    async with AsyncTestClient(create_app(make_settings())) as client:
        response = await client.get("/schema/openapi.json")
        assert response.status_code == 200
        assert "/healthz" in response.json()["paths"]


async def test_unknown_route_and_bad_body_use_the_error_shape(make_settings: Callable[..., Settings]) -> None:
    async with AsyncTestClient(create_app(make_settings())) as client:
        missing = await client.get("/nowhere")
        assert missing.status_code == 404
        assert missing.json() == {"error": {"code": "not_found", "message": "Not found"}}
        bad = await client.post("/api/auth/login", json={"username": 1})
        assert bad.status_code == 400
        assert bad.json()["error"]["code"] == "bad_request"
        not_json = await client.post("/api/auth/login", content=b"{", headers={"content-type": "application/json"})
        assert not_json.status_code == 400


async def test_unexpected_errors_reveal_nothing(make_settings: Callable[..., Settings]) -> None:
    @get("/api/explode", sync_to_thread=False)
    def explode() -> None:
        raise RuntimeError("/secret/path/token=abc http://hermes.internal")

    app = create_app(make_settings())
    app.register(explode)
    async with AsyncTestClient(app) as client:
        response = await client.get("/api/explode", headers={"Authorization": f"Bearer {TEST_SECRET}"})
        assert response.status_code == 500
        assert response.json() == {"error": {"code": "internal_error", "message": "Internal error"}}
        assert "secret" not in response.text


async def test_a_wrong_method_is_405_with_allow(make_settings: Callable[..., Settings]) -> None:
    async with AsyncTestClient(create_app(make_settings())) as client:
        response = await client.request("TRACE", "/healthz")
        assert response.status_code == 405
        assert response.json()["error"]["code"] == "method_not_allowed"
        assert set(response.headers["allow"].split(", ")) == {"GET", "HEAD", "OPTIONS"}


async def test_options_lists_every_method_of_a_path(make_settings: Callable[..., Settings]) -> None:
    """Litestar's own OPTIONS answer listed only the first handler registered on a path."""
    owner = {"Authorization": f"Bearer {TEST_SECRET}"}
    async with AsyncTestClient(create_app(make_settings())) as client:
        response = await client.options("/api/artifacts/0123456789abcdef", headers=owner)
        assert response.status_code == 204
        assert set(response.headers["allow"].split(", ")) == {"GET", "PATCH", "DELETE", "OPTIONS"}


async def test_every_documented_error_has_the_real_shape(make_settings: Callable[..., Settings]) -> None:
    async with AsyncTestClient(create_app(make_settings())) as client:
        document = (await client.get("/schema/openapi.json")).json()
    assert set(document["components"]["schemas"]["ErrorResponse"]["properties"]) == {"error"}
    wrong = {}
    for path, item in document["paths"].items():
        for method, operation in item.items():
            for status, response in operation["responses"].items():
                if int(status) >= 400:
                    schema = response["content"]["application/json"]["schema"]
                    # The readiness probe's 503 is its report (what is down), not an error of the request.
                    expected = "Readiness" if path == "/readyz" and status == "503" else "ErrorResponse"
                    if schema != {"$ref": f"#/components/schemas/{expected}"}:
                        wrong[(method, path, status)] = schema
            if path.startswith("/api/") and path not in PUBLIC_API_PATHS:
                assert "401" in operation["responses"], (method, path)
    assert wrong == {}


async def test_every_reference_of_the_openapi_document_resolves(make_settings: Callable[..., Settings]) -> None:
    """A `$ref` into msgspec's `$defs` (a nested struct of a JSON body) has nothing to resolve against in the
    OpenAPI document: clients and fuzzers can't read the body's schema."""
    async with AsyncTestClient(create_app(make_settings())) as client:
        document = (await client.get("/schema/openapi.json")).json()

    def references(node: object) -> Iterator[str]:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "$ref" and isinstance(value, str):
                    yield value
                else:
                    yield from references(value)
        elif isinstance(node, list):
            for item in node:
                yield from references(item)

    found = set(references(document))
    assert found  # the document does use references
    known = {f"#/components/schemas/{name}" for name in document["components"]["schemas"]}
    assert found - known == set()


async def test_hsts_is_sent_on_every_response_when_the_public_url_is_https(
    make_settings: Callable[..., Settings],
) -> None:
    async with AsyncTestClient(create_app(make_settings(public_url="https://pheby.example.com"))) as client:
        for response in (
            await client.get("/healthz"),
            await client.get("/nowhere"),  # an error
            await client.get("/api/me"),  # refused
            await client.get("/"),  # Pheby Web
        ):
            assert response.headers["strict-transport-security"] == "max-age=31536000", response.url
    async with AsyncTestClient(create_app(make_settings(public_url="http://localhost:8620"))) as client:
        assert "strict-transport-security" not in (await client.get("/healthz")).headers
    async with AsyncTestClient(create_app(make_settings())) as client:
        assert "strict-transport-security" not in (await client.get("/healthz")).headers
