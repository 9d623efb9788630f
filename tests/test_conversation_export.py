"""`GET /api/conversations/{id}/export?format=md|json`, end to end on the demo Hermes: every turn in order with
its tool calls and attachments, as a download, and nothing that names a host, a path or a key."""

import json
from typing import Any

import httpx
import pytest

from demo_hermes import DemoHermesServer
from tests.live_server import LiveServer
from tests.test_media_isolation import add_account
from tests.ws_client import PhebyClient

pytestmark = [pytest.mark.anyio, pytest.mark.live]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def chat(client: PhebyClient, conversation_id: str, text: str, **fields: Any) -> None:
    accepted = await client.request("chat.send", "run.accepted", conversation_id=conversation_id, text=text, **fields)
    await client.expect("run.finished", run_id=accepted["run_id"])


async def test_exports_hold_every_turn_in_order_and_no_secret_host_or_path(
    live_server: LiveServer, demo_hermes: DemoHermesServer, opened: list[PhebyClient]
) -> None:
    owner = await PhebyClient.connect(live_server.ws_url, live_server.secret)
    opened.append(owner)
    created = await owner.request("conversation.create", "conversation.created", name="Cats / research")
    conversation_id = created["conversation_id"]
    upload = httpx.post(
        f"{live_server.base_url}/attachments",
        params={"conversation_id": conversation_id, "filename": "whiskers.md"},
        headers={**bearer(live_server.secret), "Content-Type": "text/markdown"},
        content=b"# Whiskers\n\nlong ones\n",
        timeout=10,
    )
    assert upload.status_code == 201
    attachment_id = upload.json()["attachment"]["attachment_id"]
    await chat(owner, conversation_id, "first, the file", attachment_ids=[attachment_id])
    await chat(owner, conversation_id, "/demo tool")
    await chat(owner, conversation_id, "and the last word")
    history = await owner.request("conversation.open", "conversation.history", conversation_id=conversation_id)
    shown = [(m["role"], m["text"]) for m in history["messages"]]
    assert len(shown) == 6

    url = f"{live_server.base_url}/api/conversations/{conversation_id}/export"
    as_json = httpx.get(url, params={"format": "json"}, headers=bearer(live_server.secret), timeout=10)
    markdown = httpx.get(url, headers=bearer(live_server.secret), timeout=10)
    for response, suffix in ((as_json, "json"), (markdown, "md")):
        assert response.status_code == 200
        assert response.headers["content-disposition"].startswith(f'attachment; filename="Cats _ research.{suffix}"')
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["cache-control"] == "no-store"
        for forbidden in (
            live_server.secret,
            demo_hermes.api_key,
            demo_hermes.base_url,
            "127.0.0.1",
            "sk-demo-0000",  # the tool's argument: calls are exported by name only
            str(live_server.settings.data_dir),
            str(demo_hermes.media_dir),
            "/attachments/",
        ):
            assert forbidden not in response.text, (suffix, forbidden)

    exported = as_json.json()
    assert (exported["conversation_id"], exported["name"]) == (conversation_id, "Cats / research")
    assert [(m["role"], m["text"]) for m in exported["messages"]] == shown
    assert [m["message_id"] for m in exported["messages"]] == [m["message_id"] for m in history["messages"]]
    tool_answer = history["messages"][3]["message_id"]  # the answer of the /demo tool turn
    assert exported["tool_calls"] == [{"tool_name": "web_search", "message_id": tool_answer}]
    [attachment] = exported["attachments"]
    assert (attachment["attachment_id"], attachment["filename"]) == (attachment_id, "whiskers.md")
    assert "download_path" not in attachment

    text = markdown.text
    assert text.startswith("# Cats / research\n")
    positions = [text.index(message_text) for _, message_text in shown]
    assert positions == sorted(positions)  # every turn, in order
    assert text.count("## You · ") == 3
    assert text.count("## Assistant · ") == 3
    assert text.index("- Tool call: `web_search`") < positions[3]
    assert "- whiskers.md (text/markdown" in text
    assert json.loads(as_json.text) == exported


async def test_another_accounts_conversation_and_an_unknown_one_are_404(
    live_server: LiveServer, opened: list[PhebyClient]
) -> None:
    owner = await PhebyClient.connect(live_server.ws_url, live_server.secret)
    opened.append(owner)
    conversation_id = (await owner.request("conversation.create", "conversation.created"))["conversation_id"]
    _, bob_token = await add_account(live_server.settings, "bob")
    for token, target in ((bob_token, conversation_id), (live_server.secret, "0" * 32)):
        for export_format in ("md", "json"):
            response = httpx.get(
                f"{live_server.base_url}/api/conversations/{target}/export",
                params={"format": export_format},
                headers=bearer(token),
                timeout=10,
            )
            assert response.status_code == 404
            assert "content-disposition" not in response.headers
    wrong_format = httpx.get(
        f"{live_server.base_url}/api/conversations/{conversation_id}/export",
        params={"format": "html"},
        headers=bearer(live_server.secret),
        timeout=10,
    )
    assert wrong_format.status_code == 400
