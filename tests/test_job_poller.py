"""The job poller: a Hermes cron run reaches connected clients as an unsolicited turn."""

import asyncio
from collections.abc import AsyncIterator, Callable

import httpx
import pytest

from demo_hermes import DemoHermesServer
from pheby.settings import Settings
from tests.demo_hermes_server import client_for
from tests.live_server import LiveServer, hermes_settings
from tests.ws_client import PhebyClient

pytestmark = [pytest.mark.anyio, pytest.mark.live]
Polling = tuple[DemoHermesServer, LiveServer, PhebyClient]


@pytest.fixture
async def polling(
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    make_demo_hermes: Callable[..., DemoHermesServer],
) -> AsyncIterator[Polling]:
    """A demo Hermes of its own, a server polling its jobs every 0.3 s, and a connected client."""
    hermes = make_demo_hermes()
    server = start_live_server(
        live_settings(**hermes_settings(hermes), media_roots=(hermes.media_dir,), job_poll_seconds=0.3)
    )
    client = await PhebyClient.connect(server.ws_url, server.secret)
    await asyncio.sleep(0.8)  # the first poll sets the baseline: older cron sessions are history
    yield hermes, server, client
    await client.close()


async def test_cron_output_is_pushed_listed_and_in_history(polling: Polling) -> None:
    hermes, _, client = polling
    async with client_for(hermes) as hermes_client:
        job = await hermes_client.create_job("Morning brief", "every 2h", "Summarise the news")
        await hermes_client.run_job(job.id)

    created = await client.expect("conversation.updated", timeout=15)
    conversation_id = created["conversation_id"]
    assert created["name"] == "Morning brief"
    accepted = await client.expect("run.accepted", conversation_id=conversation_id)
    assert "request_id" not in accepted
    await client.expect("message.start", run_id=accepted["run_id"])
    complete = await client.expect("message.complete", conversation_id=conversation_id)
    assert "Summarise the news" in complete["text"]
    finished = await client.expect("run.finished", run_id=accepted["run_id"])
    assert finished["status"] == "completed"

    listing = await client.request("conversation.list", "conversation.snapshot")
    entry = next(c for c in listing["conversations"] if c["conversation_id"] == conversation_id)
    assert entry["source"] == "task"
    assert entry["session_id"].startswith(f"cron_{job.id}_")
    history = await client.request("conversation.open", "conversation.history", conversation_id=conversation_id)
    assert history["messages"][-1]["role"] == "assistant"
    assert history["messages"][-1]["text"] == complete["text"]

    await asyncio.sleep(1)  # later polls do not deliver the same run again
    assert len(client.seen("message.complete", conversation_id=conversation_id)) == 1


async def test_files_in_cron_output_become_attachments_of_the_pushed_turn(polling: Polling) -> None:
    hermes, server, client = polling
    async with client_for(hermes) as hermes_client:
        job = await hermes_client.create_job("Daily chart", "every 2h", "/demo image")
        await hermes_client.run_job(job.id)

    accepted = await client.expect("run.accepted", timeout=15)
    conversation_id = accepted["conversation_id"]
    complete = await client.expect("message.complete", conversation_id=conversation_id)
    assert "MEDIA:" not in complete["text"]
    added = await client.expect("attachment.added", conversation_id=conversation_id)
    await client.expect("run.finished", run_id=accepted["run_id"])
    attachment = added["attachment"]
    assert (attachment["direction"], attachment["kind"]) == ("outbound", "image")
    assert attachment["message_id"] == complete["message_id"] == f"draft-{accepted['run_id']}"
    history = await client.request("conversation.open", "conversation.history", conversation_id=conversation_id)
    assert [a["attachment_id"] for a in history["attachments"]] == [attachment["attachment_id"]]
    async with httpx.AsyncClient(base_url=server.base_url) as http:
        downloaded = await http.get(attachment["download_path"], headers={"X-Pheby-Secret": server.secret})
    assert downloaded.content[:8] == b"\x89PNG\r\n\x1a\n"
