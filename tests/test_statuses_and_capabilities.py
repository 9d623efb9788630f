"""Honest statuses (/api/connectors, /api/research) and /api/capabilities against the demo Hermes."""

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

import pheby.hermes.capabilities
from demo_hermes import DemoHermesServer
from handlers.support.app import create_app
from hermes_client import HermesClient
from pheby.hermes.capabilities import (
    home_is_readable,
    jobs_api_answers,
    local_capabilities,
    selected_model_takes_images,
)
from pheby.settings import Settings
from tests.conftest import TEST_SECRET
from tests.live_server import free_port

pytestmark = pytest.mark.anyio
OWNER = {"Authorization": f"Bearer {TEST_SECRET}"}
CAPABILITY_KEYS = {"attachments", "artifacts", "sync", "image", "tasks", "memory"}


async def get_json(settings: Settings, path: str, headers: dict[str, str] | None = OWNER) -> tuple[int, Any, str]:
    async with AsyncTestClient[Litestar](create_app(settings)) as client:
        response = await client.get(path, headers=headers)
        return response.status_code, response.json(), response.text


def demo_settings(make_settings: Callable[..., Settings], demo: DemoHermesServer, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "hermes_url": demo.base_url,
        "hermes_api_key": demo.api_key,
        "hermes_dashboard_url": demo.dashboard_url,
        "hermes_dashboard_token": demo.dashboard_token,
    }
    values.update(overrides)
    return make_settings(**values)


# --- statuses ----------------------------------------------------------------------------------


async def test_connectors_say_plainly_they_are_unavailable(make_settings: Callable[..., Settings]) -> None:
    status, body, _ = await get_json(make_settings(), "/api/connectors")
    assert status == 200
    assert set(body) == {"connectors", "available", "reason"}
    assert body["connectors"] == []
    assert body["available"] is False
    assert "Hermes 0.19.0" in body["reason"]
    assert "still work in chat" in body["reason"]


async def test_research_says_plainly_it_is_unavailable(make_settings: Callable[..., Settings]) -> None:
    status, body, _ = await get_json(make_settings(), "/api/research")
    assert status == 200
    assert set(body) == {"available", "reason"}
    assert body["available"] is False
    assert "research" in body["reason"].lower()
    assert "web search and browser tools still work" in body["reason"]


@pytest.mark.parametrize("path", ["/api/connectors", "/api/research", "/api/capabilities"])
async def test_statuses_need_a_caller(make_settings: Callable[..., Settings], path: str) -> None:
    status, body, _ = await get_json(make_settings(hermes_url=f"http://127.0.0.1:{free_port()}"), path, None)
    assert status == 401
    assert body["error"]["code"] == "unauthorized"


# --- capabilities through the route --------------------------------------------------------------

# 0.19.0 without the companion plugin: every gateway-dependent feature is declined (tests/test_native_features.py).
NOTHING_NATIVE = dict.fromkeys(("conversation_model", "conversation_effort", "steer", "stream_resume"), "declined")


async def test_everything_qualified_on_the_demo_hermes(
    make_settings: Callable[..., Settings], demo_hermes: DemoHermesServer, tmp_path: Path
) -> None:
    home = tmp_path / "hermes-home"
    home.mkdir()  # no memories dir yet: Hermes makes it on its first memory
    settings = demo_settings(make_settings, demo_hermes, vision_models=("other", "demo-model"), hermes_home=home)
    status, body, text = await get_json(settings, "/api/capabilities")
    assert status == 200
    assert body == {"capabilities": {**dict.fromkeys(CAPABILITY_KEYS, True), "paths": NOTHING_NATIVE}}
    for secret in (demo_hermes.base_url, demo_hermes.api_key, demo_hermes.dashboard_token, str(home)):
        assert secret not in text


async def test_nothing_qualified_when_hermes_is_unreachable(make_settings: Callable[..., Settings]) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    settings = make_settings(
        hermes_url=nowhere, hermes_dashboard_url=nowhere, hermes_dashboard_token="t", vision_models=("demo-model",)
    )
    status, body, text = await get_json(settings, "/api/capabilities")
    assert status == 200
    assert body == {
        "capabilities": {
            "attachments": True,
            "artifacts": True,
            "sync": True,
            "image": False,
            "tasks": False,
            "memory": False,
            "paths": NOTHING_NATIVE,
        }
    }
    assert "127.0.0.1" not in text


async def test_each_hermes_feature_is_qualified_on_its_own(
    make_settings: Callable[..., Settings], demo_hermes: DemoHermesServer, tmp_path: Path
) -> None:
    async def capabilities(**overrides: Any) -> dict[str, bool]:
        status, body, _ = await get_json(demo_settings(make_settings, demo_hermes, **overrides), "/api/capabilities")
        assert status == 200
        found: dict[str, bool] = body["capabilities"]
        assert {found["attachments"], found["artifacts"], found["sync"]} == {True}
        return found

    # The selected model is not declared vision-capable, or no models are: no image.
    assert (await capabilities(vision_models=("gpt-vision",)))["image"] is False
    assert (await capabilities())["image"] is False
    # Vision declared but no dashboard to say which model is selected: no image.
    assert (await capabilities(vision_models=("demo-model",), hermes_dashboard_url=""))["image"] is False
    # A wrong key (401) and a Hermes without the jobs API (404): no tasks.
    assert (await capabilities(hermes_api_key="wrong"))["tasks"] is False
    assert (await capabilities(hermes_url=f"{demo_hermes.base_url}/no-such-api"))["tasks"] is False
    # No home configured, a missing one, a file: no memory. A home with a readable memories dir: memory.
    assert (await capabilities())["memory"] is False
    assert (await capabilities(hermes_home=tmp_path / "missing"))["memory"] is False
    (tmp_path / "file").write_text("x")
    assert (await capabilities(hermes_home=tmp_path / "file"))["memory"] is False
    (tmp_path / "home" / "memories").mkdir(parents=True)
    found = await capabilities(hermes_home=tmp_path / "home")
    assert (found["memory"], found["image"], found["tasks"]) == (True, False, True)


# --- the probes on their own ---------------------------------------------------------------------


def mock_client(handler: Callable[[httpx.Request], Any], *, dashboard: bool = True) -> HermesClient:
    transport = httpx.MockTransport(handler)
    dashboard_url = "http://dashboard.invalid" if dashboard else None
    return HermesClient("http://hermes.invalid", "key", dashboard_url=dashboard_url, transport=transport)


@pytest.mark.parametrize("status", [404, 501, 500, 503, 401])
async def test_a_jobs_api_that_refuses_is_no_tasks(status: int) -> None:
    async with mock_client(lambda _: httpx.Response(status, json={"error": "no"})) as client:
        assert await jobs_api_answers(client) is False


async def test_a_jobs_api_that_answers_is_tasks() -> None:
    async with mock_client(lambda _: httpx.Response(200, json={"jobs": []})) as client:
        assert await jobs_api_answers(client) is True


async def test_a_slow_hermes_is_no_capability(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pheby.hermes.capabilities, "PROBE_TIMEOUT_SECONDS", 0.05)

    async def stall(_: httpx.Request) -> httpx.Response:
        await asyncio.sleep(5)
        return httpx.Response(200, json={"jobs": []})

    async with mock_client(stall) as client:
        started = asyncio.get_running_loop().time()
        assert await jobs_api_answers(client) is False
        assert await selected_model_takes_images(client, ["demo-model"]) is False
        assert asyncio.get_running_loop().time() - started < 2


async def test_vision_follows_the_selected_model() -> None:
    options = {"providers": [], "model": "llava", "provider": "local"}
    async with mock_client(lambda _: httpx.Response(200, json=options)) as client:
        assert await selected_model_takes_images(client, ["llava", "x"]) is True
        assert await selected_model_takes_images(client, ["x"]) is False
        assert await selected_model_takes_images(client, []) is False
    async with mock_client(lambda _: httpx.Response(200, json={"providers": [], "model": None})) as client:
        assert await selected_model_takes_images(client, ["llava"]) is False
    async with mock_client(lambda _: httpx.Response(200, json=options), dashboard=False) as client:
        assert await selected_model_takes_images(client, ["llava"]) is False


def test_home_readability(tmp_path: Path) -> None:
    assert home_is_readable(None) is False
    assert home_is_readable(tmp_path / "missing") is False
    assert home_is_readable(tmp_path) is True
    (tmp_path / "memories").write_text("not a directory")
    assert home_is_readable(tmp_path) is False


def test_local_capabilities_are_off_for_hermes_features() -> None:
    local = local_capabilities()
    assert (local.attachments, local.artifacts, local.sync) == (True, True, True)
    assert (local.image, local.tasks, local.memory) == (False, False, False)
