"""Attachments end to end: a real uvicorn server, the `websockets` client, the demo Hermes."""

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from demo_hermes import DemoHermesServer, parse_echo_reply
from pheby.settings import Settings
from tests.files import PNG_1PX, encrypted_pdf
from tests.live_server import LiveServer
from tests.ws_client import PhebyClient

pytestmark = [pytest.mark.anyio, pytest.mark.live]
MiB = 1024 * 1024


async def upload(server: LiveServer, conversation_id: str, filename: str, body: bytes, mime: str) -> dict[str, str]:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as http:
        response = await http.post(
            "/attachments",
            params={"conversation_id": conversation_id, "filename": filename},
            content=body,
            headers={"Authorization": f"Bearer {server.secret}", "Content-Type": mime},
        )
    assert response.status_code == 201, response.text
    descriptor: dict[str, str] = response.json()["attachment"]
    return descriptor


async def send_with_files(client: PhebyClient, conversation_id: str, text: str, ids: list[str]) -> dict[str, Any]:
    """`chat.send` naming uploads; the reply (run.accepted) or the error."""
    return await client.request(
        "chat.send", "run.accepted", conversation_id=conversation_id, text=text, attachment_ids=ids
    )


async def download(server: LiveServer, path: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as http:
        return await http.get(path, headers={"X-Pheby-Secret": server.secret})


async def test_upload_chat_and_deliverable(live_server: LiveServer, demo_hermes: DemoHermesServer) -> None:
    first = await PhebyClient.connect(live_server.ws_url, live_server.secret)
    second = await PhebyClient.connect(live_server.ws_url, live_server.secret)
    conversation_id = (await first.request("conversation.create", "conversation.created"))["conversation_id"]
    notes = await upload(live_server, conversation_id, "notes.md", b"# Plan\nShip on Friday.", "text/markdown")
    photo = await upload(live_server, conversation_id, "photo.png", PNG_1PX, "image/png")
    await asyncio.sleep(0.2)
    assert first.seen("attachment.added") == []  # not broadcast before chat.send claims it

    accepted = await send_with_files(
        first, conversation_id, "/demo echo", [notes["attachment_id"], photo["attachment_id"]]
    )
    assert accepted["type"] == "run.accepted", accepted
    for client in (first, second):
        added = [await client.expect("attachment.added", conversation_id=conversation_id) for _ in range(2)]
        ids = {a["attachment"]["attachment_id"] for a in added}
        assert ids == {notes["attachment_id"], photo["attachment_id"]}
        assert all(a["attachment"]["message_id"] for a in added)
    complete = await first.expect("message.complete", conversation_id=conversation_id)
    echo = parse_echo_reply(complete["text"])
    assert "Ship on Friday." in echo.input  # small text files are inlined
    media_line = next(line for line in echo.input.splitlines() if "photo.png" in line)
    media_path = Path(media_line.split(" at ", 1)[1].rstrip("]"))
    assert media_path.read_bytes() == PNG_1PX  # other files are handed over as a path the agent can read
    await first.expect("run.finished", run_id=accepted["run_id"])

    again = await send_with_files(first, conversation_id, "again", [notes["attachment_id"]])
    assert again["error"]["code"] == "bad_request"  # an id can't be sent twice

    history = await first.request("conversation.open", "conversation.history", conversation_id=conversation_id)
    assert history["messages"][0] == {**history["messages"][0], "role": "user", "text": "/demo echo"}
    assert {a["attachment_id"] for a in history["attachments"]} == {notes["attachment_id"], photo["attachment_id"]}

    image_run = await first.request("chat.send", "run.accepted", conversation_id=conversation_id, text="/demo image")
    deliverable = await second.expect("attachment.added", conversation_id=conversation_id)
    descriptor = deliverable["attachment"]
    assert descriptor["direction"] == "outbound"
    assert descriptor["kind"] == "image"
    assert descriptor["inline_image"] is True
    assert descriptor["message_id"] == f"draft-{image_run['run_id']}"
    final = await first.expect("message.complete", conversation_id=conversation_id)
    assert "MEDIA:" not in final["text"]
    produced = sorted(demo_hermes.media_dir.glob("*.png"), key=lambda p: p.stat().st_mtime)[-1]
    downloaded = await download(live_server, descriptor["download_path"])
    assert downloaded.status_code == 200
    assert downloaded.content == produced.read_bytes()
    assert produced.exists()  # the agent's own file is never touched
    await first.close()
    await second.close()


async def test_a_deliverable_that_cannot_be_stored_spares_the_others(live_server: LiveServer) -> None:
    client = await PhebyClient.connect(live_server.ws_url, live_server.secret)
    conversation_id = (await client.request("conversation.create", "conversation.created"))["conversation_id"]
    accepted = await client.request("chat.send", "run.accepted", conversation_id=conversation_id, text="/demo files")
    finished = await client.expect("run.finished", run_id=accepted["run_id"])
    assert finished["status"] == "completed"
    added = [frame["attachment"] for frame in client.seen("attachment.added", conversation_id=conversation_id)]
    assert [a["mime_type"] for a in added] == ["image/png", "text/markdown"]  # the empty file is skipped alone
    assert {a["message_id"] for a in added} == {f"draft-{accepted['run_id']}"}
    opened = await client.request("conversation.open", "conversation.history", conversation_id=conversation_id)
    assert [a["attachment_id"] for a in opened["attachments"]] == [a["attachment_id"] for a in added]
    await client.close()


async def test_media_outside_the_roots_is_not_copied(
    start_live_server: Callable[[Settings], LiveServer], live_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    server = start_live_server(live_settings(media_roots=(tmp_path / "elsewhere",)))
    client = await PhebyClient.connect(server.ws_url, server.secret)
    conversation_id = (await client.request("conversation.create", "conversation.created"))["conversation_id"]
    accepted = await client.request("chat.send", "run.accepted", conversation_id=conversation_id, text="/demo document")
    complete = await client.expect("run.finished", run_id=accepted["run_id"])
    assert complete["status"] == "completed"
    assert client.seen("attachment.added") == []
    async with httpx.AsyncClient(
        base_url=server.base_url, headers={"Authorization": f"Bearer {server.secret}"}
    ) as http:
        opened = await client.request("conversation.open", "conversation.history", conversation_id=conversation_id)
        assert opened["attachments"] == []
        assert (await http.get("/api/attachments")).json()["attachments"] == []
    await client.close()


async def test_run_active_leaves_uploads_retryable(live_server: LiveServer) -> None:
    client = await PhebyClient.connect(live_server.ws_url, live_server.secret)
    conversation_id = (await client.request("conversation.create", "conversation.created"))["conversation_id"]
    note = await upload(live_server, conversation_id, "n.txt", b"note", "text/plain")
    slow = await client.request("chat.send", "run.accepted", conversation_id=conversation_id, text="/demo slow")
    busy = await send_with_files(client, conversation_id, "with file", [note["attachment_id"]])
    assert busy["error"]["code"] == "run_active"
    await client.send("run.cancel", conversation_id=conversation_id, run_id=slow["run_id"])
    await client.expect("run.finished", run_id=slow["run_id"])
    retry = await send_with_files(client, conversation_id, "with file", [note["attachment_id"]])
    assert retry["type"] == "run.accepted"
    other = (await client.request("conversation.create", "conversation.created"))["conversation_id"]
    await client.expect("run.finished", run_id=retry["run_id"])
    foreign = await upload(live_server, other, "x.txt", b"x", "text/plain")
    cross = await send_with_files(client, conversation_id, "hi", [foreign["attachment_id"]])
    assert cross["error"]["code"] == "bad_request"
    await client.close()


async def test_64_mib_plus_one_is_413_and_leaves_nothing(live_server: LiveServer) -> None:
    client = await PhebyClient.connect(live_server.ws_url, live_server.secret)
    conversation_id = (await client.request("conversation.create", "conversation.created"))["conversation_id"]
    await client.close()
    total = 64 * MiB + 1
    block = b"z" * MiB

    async def body() -> AsyncIterator[bytes]:
        sent = 0
        while sent < total:
            piece = block[: min(len(block), total - sent)]
            sent += len(piece)
            yield piece

    params = {"conversation_id": conversation_id, "filename": "huge.bin"}
    headers = {"Authorization": f"Bearer {live_server.secret}", "Content-Type": "application/octet-stream"}
    async with httpx.AsyncClient(base_url=live_server.base_url, timeout=120) as http:
        streamed = await http.post("/attachments", params=params, content=body(), headers=headers)
        assert streamed.status_code == 413
        assert streamed.json()["error"]["code"] == "too_large"
        declared = await http.post(
            "/attachments", params=params, content=body(), headers={**headers, "Content-Length": str(total)}
        )
        assert declared.status_code == 413
        fits = await http.post("/attachments", params={**params, "filename": "ok.bin"}, content=b"ok", headers=headers)
        assert fits.status_code == 201
    data_dir = live_server.settings.data_dir
    blobs = [p for p in (data_dir / "blobs").rglob("*") if p.is_file()]
    assert [p.name for p in blobs] == [fits.json()["attachment"]["attachment_id"]]  # no temp files, no partial blob
    conn = sqlite3.connect(live_server.settings.database_path)
    rows = conn.execute("SELECT filename FROM attachments").fetchall()
    conn.close()
    assert rows == [("ok.bin",)]
    assert json.dumps(rows)


async def test_files_that_cant_be_inlined_whole_go_to_the_agent_by_path(live_server: LiveServer) -> None:
    """Only unknown, already-sent or cross-conversation ids are refused; the rest reach the agent."""
    client = await PhebyClient.connect(live_server.ws_url, live_server.secret)
    conversation_id = (await client.request("conversation.create", "conversation.created"))["conversation_id"]
    long_text = b"x" * 100_000 + b"\nEND-MARKER\n"  # under 100 KiB, but over the 100,000-character extract
    files = {
        "long.txt": (long_text, "text/plain"),
        "latin1.txt": ("café".encode("latin-1"), "text/plain"),  # not UTF-8: extraction failed
        "locked.pdf": (encrypted_pdf(), "application/pdf"),
    }
    ids = [(await upload(live_server, conversation_id, name, *file))["attachment_id"] for name, file in files.items()]
    accepted = await client.request(
        "chat.send", "run.accepted", conversation_id=conversation_id, text="/demo echo", attachment_ids=ids
    )
    assert accepted["type"] == "run.accepted", accepted
    echo = parse_echo_reply((await client.expect("message.complete", conversation_id=conversation_id))["text"])
    assert "END-MARKER" not in echo.input  # not inlined cut short
    for name, (body, _) in files.items():
        line = next(line for line in echo.input.splitlines() if f"[Attachment: {name} (" in line)
        assert Path(line.split(" at ", 1)[1].rstrip("]")).read_bytes() == body
    await client.close()


async def test_after_a_turn_its_files_are_anchored_to_its_history_messages(live_server: LiveServer) -> None:
    """Live events use the run's ids (user-…, draft-…); the history snapshot uses the messages' own ids."""
    client = await PhebyClient.connect(live_server.ws_url, live_server.secret)
    conversation_id = (await client.request("conversation.create", "conversation.created"))["conversation_id"]
    notes = await upload(live_server, conversation_id, "notes.md", b"# Notes", "text/markdown")
    for text, ids in (("first", []), ("/demo echo", [notes["attachment_id"]]), ("/demo image", [])):
        accepted = await client.request(
            "chat.send", "run.accepted", conversation_id=conversation_id, text=text, attachment_ids=ids
        )
        await client.expect("run.finished", run_id=accepted["run_id"])

    history: dict[str, Any] = {}
    for _ in range(50):  # the files move to the history ids just after each run ends
        history = await client.request("conversation.open", "conversation.history", conversation_id=conversation_id)
        if all(a["message_id"].startswith("m") for a in history["attachments"]):
            break
        await asyncio.sleep(0.1)
    by_id = {m["message_id"]: m for m in history["messages"]}
    anchored = {a["filename"]: by_id[a["message_id"]] for a in history["attachments"]}
    assert (anchored["notes.md"]["role"], anchored["notes.md"]["text"]) == ("user", "/demo echo")
    image = next(name for name in anchored if name.endswith(".png"))
    assert anchored[image]["role"] == "assistant"
    assert anchored[image] == history["messages"][-1]  # the answer of the last turn
    await client.close()


async def test_files_stay_with_their_turn_when_the_next_send_comes_at_once(
    live_server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = live_server.services.runs
    after_turn = runs._after_turn

    async def late_after_turn(run: Any) -> None:
        await asyncio.sleep(0.5)  # the next turn is stored by then
        await after_turn(run)

    monkeypatch.setattr(runs, "_after_turn", late_after_turn)
    client = await PhebyClient.connect(live_server.ws_url, live_server.secret)
    conversation_id = (await client.request("conversation.create", "conversation.created"))["conversation_id"]
    notes = await upload(live_server, conversation_id, "notes.md", b"# Notes", "text/markdown")
    first = await send_with_files(client, conversation_id, "first", [notes["attachment_id"]])
    await client.expect("run.finished", run_id=first["run_id"])
    second = await client.request("chat.send", "run.accepted", conversation_id=conversation_id, text="second")
    await client.expect("run.finished", run_id=second["run_id"])
    await asyncio.sleep(1.2)
    history = await client.request("conversation.open", "conversation.history", conversation_id=conversation_id)
    by_id = {m["message_id"]: m["text"] for m in history["messages"]}
    assert [by_id[a["message_id"]] for a in history["attachments"]] == ["first"]
    await client.close()
