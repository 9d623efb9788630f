"""Memory written through /api/memory reaches the system prompt a real hermes-agent 0.19.0 sends its LLM."""

import uuid
from collections.abc import Callable
from contextlib import aclosing

import anyio
import pytest

from hermes_client import HermesClient, RunCompleted
from pheby.settings import Settings
from tests.app_client import Api
from tests.real_hermes import RealHermes
from tests.test_tasks import OWNER

pytestmark = [pytest.mark.anyio, pytest.mark.hermes, pytest.mark.live, pytest.mark.xdist_group("hermes")]


@pytest.fixture
def settings(make_settings: Callable[..., Settings], real_hermes: RealHermes) -> Settings:
    return make_settings(
        hermes_url=real_hermes.base_url, hermes_api_key=real_hermes.api_key, hermes_home=real_hermes.home
    )


def system_text(body: dict[str, object]) -> str:
    messages = body.get("messages")
    assert isinstance(messages, list)
    parts: list[str] = []
    for message in messages:
        if isinstance(message, dict) and message.get("role") == "system":
            content = message.get("content")
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                parts.extend(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "\n".join(parts)


def last_user_text(body: dict[str, object]) -> str:
    messages = body.get("messages")
    assert isinstance(messages, list)
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    return str(users[-1].get("content")) if users else ""


async def test_memory_put_reaches_the_next_runs_system_prompt(api: Api, real_hermes: RealHermes) -> None:
    marker = uuid.uuid4().hex[:10]
    note = f"Pheby memory check {marker}: the user keeps bees."
    profile = f"Pheby profile check {marker}: the user is called Ada."
    before = {s["section"]: s for s in (await api.get("/api/memory", headers=OWNER)).json()["sections"]}
    try:
        for section, text in (("memory", note), ("user", profile)):
            response = await api.put(
                f"/api/memory/{section}",
                json={"content": text, "revision": before[section]["revision"]},
                headers=OWNER,
            )
            assert response.status_code == 200, response.text
        assert (real_hermes.home / "memories" / "MEMORY.md").read_text(encoding="utf-8") == note

        prompt = f"Say hi PLAIN {marker}"
        async with HermesClient(real_hermes.base_url, real_hermes.api_key) as hermes:
            handle = await hermes.create_run(prompt)
            with anyio.fail_after(90):
                async with aclosing(hermes.run_events(handle.run_id)) as events:
                    last = None
                    async for event in events:
                        last = event
            assert isinstance(last, RunCompleted), last

        bodies = [body for body in real_hermes.chat_requests() if marker in last_user_text(body)]
        assert bodies, "the fake LLM never saw the run"
        system = system_text(bodies[0])
        assert note in system
        assert profile in system
    finally:
        current = {s["section"]: s for s in (await api.get("/api/memory", headers=OWNER)).json()["sections"]}
        for section, old in before.items():
            await api.put(
                f"/api/memory/{section}",
                json={"content": old["content"], "revision": current[section]["revision"]},
                headers=OWNER,
            )


async def test_a_symlink_planted_in_the_real_home_is_refused(
    api: Api, real_hermes: RealHermes, tmp_path_factory: pytest.TempPathFactory
) -> None:
    memories = real_hermes.home / "memories"
    memories.mkdir(mode=0o700, exist_ok=True)
    user_file = memories / "USER.md"
    saved = user_file.read_bytes() if user_file.exists() and not user_file.is_symlink() else None
    target = tmp_path_factory.mktemp("outside") / "target.txt"
    target.write_text("not Hermes memory", encoding="utf-8")
    user_file.unlink(missing_ok=True)
    user_file.symlink_to(target)
    try:
        response = await api.put("/api/memory/user", json={"content": "planted", "revision": "0" * 64}, headers=OWNER)
        assert response.status_code in (409, 503)
        assert "symbolic link" in response.json()["error"]["message"]
        assert target.read_text(encoding="utf-8") == "not Hermes memory"
    finally:
        user_file.unlink()
        if saved is not None:
            user_file.write_bytes(saved)
            user_file.chmod(0o600)
