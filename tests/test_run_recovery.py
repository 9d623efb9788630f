"""A run whose event stream is lost: it stays the conversation's run until Hermes says how it ended.

A TCP proxy (tests/tcp_proxy.py) between the server and the demo Hermes cuts the stream (new
connections still pass), freezes (nothing moves), refuses new connections, or Hermes is stopped (and later a new one is
started behind the same proxy).
"""

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from demo_hermes import DemoHermesServer
from pheby.settings import Settings
from tests.live_server import LiveServer
from tests.tcp_proxy import TcpProxy
from tests.test_attachments_e2e import upload
from tests.ws_client import PhebyClient

pytestmark = [pytest.mark.anyio, pytest.mark.live]

SLOW_TEXT = "".join(f"tick {i} " for i in range(100))  # what `/demo slow` answers, in 5 s


@pytest.fixture
def proxied(
    demo_hermes: DemoHermesServer,
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    make_tcp_proxy: Callable[..., TcpProxy],
) -> tuple[LiveServer, TcpProxy]:
    proxy = make_tcp_proxy(demo_hermes.port)
    server = start_live_server(live_settings(hermes_url=proxy.url, hermes_dashboard_url=proxy.url))
    return server, proxy


async def open_chat(server: LiveServer) -> tuple[PhebyClient, str]:
    client = await PhebyClient.connect(server.ws_url, server.secret)
    created = await client.request("conversation.create", "conversation.created")
    return client, created["conversation_id"]


async def send(client: PhebyClient, conversation_id: str, text: str) -> dict[str, Any]:
    return await client.request("chat.send", "run.accepted", conversation_id=conversation_id, text=text)


async def test_a_cut_stream_keeps_the_run_until_hermes_ends_it(proxied: tuple[LiveServer, TcpProxy]) -> None:
    server, proxy = proxied
    client, conversation_id = await open_chat(server)
    accepted = await client.request("chat.send", "run.accepted", conversation_id=conversation_id, text="/demo slow")
    run_id = accepted["run_id"]
    await client.expect("message.delta")
    proxy.cut()
    await asyncio.sleep(0.5)
    assert client.seen("run.finished") == []
    second = await client.request("chat.send", "run.accepted", conversation_id=conversation_id, text="again")
    assert (second["type"], second["error"]["code"]) == ("error", "run_active")
    opened = await client.request("conversation.open", "conversation.history", conversation_id=conversation_id)
    assert opened["run"]["run_id"] == run_id
    assert opened["run"]["text"]  # the draft so far
    finished = await client.expect("run.finished", timeout=20, run_id=run_id)
    assert finished["status"] == "completed"
    [complete] = client.seen("message.complete", message_id=opened["run"]["message_id"])
    assert complete["text"] == SLOW_TEXT.strip() or complete["text"] == SLOW_TEXT
    assert len(client.seen("run.finished", run_id=run_id)) == 1
    history = await client.request("conversation.open", "conversation.history", conversation_id=conversation_id)
    assert history["run"] is None
    assert history["messages"][-1]["text"] == complete["text"]
    await client.close()


async def test_a_run_finished_after_its_stream_was_cut_delivers_its_files_and_answers_approvals(
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    make_demo_hermes: Callable[..., DemoHermesServer],
    make_tcp_proxy: Callable[..., TcpProxy],
) -> None:
    hermes = make_demo_hermes(delta_delay=0.3)  # slow enough to cut each reply mid-way
    proxy = make_tcp_proxy(hermes.port)
    url = proxy.url
    server = start_live_server(
        live_settings(hermes_url=url, hermes_dashboard_url=url, hermes_api_key=hermes.api_key,
                      hermes_dashboard_token=hermes.dashboard_token, media_roots=(hermes.media_dir,))
    )  # fmt: skip
    try:
        client, conversation_id = await open_chat(server)
        accepted = await client.request(
            "chat.send", "run.accepted", conversation_id=conversation_id, text="/demo image"
        )
        await client.expect("message.delta")
        proxy.cut()
        finished = await client.expect("run.finished", timeout=20, run_id=accepted["run_id"])
        assert finished["status"] == "completed"
        [complete] = client.seen("message.complete")
        assert complete["text"] == "Here is the picture you asked for."  # MEDIA: tag resolved and stripped
        [added] = client.seen("attachment.added")
        assert added["attachment"]["message_id"] == complete["message_id"]

        # An approval asked before the cut can still be answered; the run's end is learnt from Hermes.
        accepted = await client.request(
            "chat.send", "run.accepted", conversation_id=conversation_id, text="/demo approve"
        )
        request = await client.expect("approval.request", run_id=accepted["run_id"])
        proxy.cut()
        await asyncio.sleep(0.3)
        opened = await client.request("conversation.open", "conversation.history", conversation_id=conversation_id)
        assert opened["run"]["status"] == "waiting_for_approval"
        resolved = await client.request("approval.respond", "approval.resolved", approval_id=request["approval_id"],
                                        choice="once")  # fmt: skip
        assert resolved["accepted"] is True
        finished = await client.expect("run.finished", timeout=20, run_id=accepted["run_id"])
        assert finished["status"] == "completed"
        assert client.seen("message.complete")[-1]["text"] == "Approved (once). I removed /tmp/build-output."
        await client.close()
    finally:
        proxy.stop()


async def test_a_cancel_while_the_stream_is_lost_still_cancels(proxied: tuple[LiveServer, TcpProxy]) -> None:
    server, proxy = proxied
    client, conversation_id = await open_chat(server)
    accepted = await client.request("chat.send", "run.accepted", conversation_id=conversation_id, text="/demo slow")
    await client.expect("message.delta")
    proxy.cut()
    await asyncio.sleep(0.3)
    await client.send("run.cancel", conversation_id=conversation_id, run_id=accepted["run_id"])
    finished = await client.expect("run.finished", timeout=15, run_id=accepted["run_id"])
    assert finished["status"] == "cancelled"
    await client.close()


async def test_hermes_gone_mid_run_fails_the_run_and_a_new_hermes_serves_the_next(
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    make_tcp_proxy: Callable[..., TcpProxy],
) -> None:
    first = DemoHermesServer().start()
    proxy = make_tcp_proxy(first.port)
    url = proxy.url
    server = start_live_server(
        live_settings(hermes_url=url, hermes_dashboard_url=url, hermes_api_key=first.api_key,
                      hermes_dashboard_token=first.dashboard_token, media_roots=(first.media_dir,))
    )  # fmt: skip
    second: DemoHermesServer | None = None
    try:
        client, conversation_id = await open_chat(server)
        accepted = await client.request("chat.send", "run.accepted", conversation_id=conversation_id, text="/demo slow")
        await client.expect("message.delta")
        killed_at = time.monotonic()
        first.stop()
        proxy.cut()
        finished = await client.expect("run.finished", timeout=15, run_id=accepted["run_id"])
        assert time.monotonic() - killed_at < 10
        assert finished["status"] == "failed"
        assert finished["error"] == "Lost contact with Hermes; the run was stopped"
        refused = await client.request("chat.send", "run.accepted", conversation_id=conversation_id, text="hi")
        assert refused["type"] == "error"  # Hermes is still down
        assert refused["error"]["message"].startswith("Hermes is unavailable right now")

        second = DemoHermesServer(api_key=first.api_key, dashboard_token=first.dashboard_token).start()
        proxy.retarget(second.port)
        again = await client.request("chat.send", "run.accepted", conversation_id=conversation_id, text="hello")
        assert again["type"] == "run.accepted", again
        done = await client.expect("run.finished", run_id=again["run_id"])
        assert done["status"] == "completed"
        assert client.seen("message.complete")[-1]["text"] == "You said: hello"
        await client.close()
    finally:
        proxy.stop()
        first.stop()
        if second is not None:
            second.stop()


async def test_hermes_silent_mid_run_fails_the_run_within_ten_seconds(
    proxied: tuple[LiveServer, TcpProxy],
) -> None:
    """No connection closes (a frozen host, a proxy that keeps the sockets): silence is noticed all the same."""
    server, proxy = proxied
    client, conversation_id = await open_chat(server)
    accepted = await client.request("chat.send", "run.accepted", conversation_id=conversation_id, text="/demo slow")
    await client.expect("message.delta")
    frozen_at = time.monotonic()
    proxy.freeze()
    finished = await client.expect("run.finished", timeout=30, run_id=accepted["run_id"])
    assert time.monotonic() - frozen_at < 10
    assert finished["status"] == "failed"
    assert finished["error"] == "Lost contact with Hermes; the run was stopped"
    await client.close()


async def test_hermes_down_at_the_start_frees_the_slot_and_the_attachment(
    proxied: tuple[LiveServer, TcpProxy], demo_hermes: DemoHermesServer
) -> None:
    server, proxy = proxied
    client, conversation_id = await open_chat(server)
    notes = await upload(server, conversation_id, "notes.md", b"# Notes", "text/markdown")
    proxy.refuse()  # every new connection to "Hermes" is refused,
    proxy.cut()  # and the pooled ones (the server's reads of what the gateway offers keep one) are gone
    refused = await client.request(
        "chat.send", "run.accepted", conversation_id=conversation_id, text="hi", attachment_ids=[notes["attachment_id"]]
    )
    assert refused["type"] == "error"
    assert refused["error"]["message"] == "Hermes is unavailable right now; the message was not sent, try again"
    assert client.seen("run.accepted") == []
    proxy.retarget(demo_hermes.port)
    accepted = await client.request(
        "chat.send", "run.accepted", conversation_id=conversation_id, text="hi", attachment_ids=[notes["attachment_id"]]
    )
    assert accepted["type"] == "run.accepted", accepted
    finished = await client.expect("run.finished", run_id=accepted["run_id"])
    assert finished["status"] == "completed"
    assert [a["attachment"]["attachment_id"] for a in client.seen("attachment.added")] == [notes["attachment_id"]]
    text = json.dumps(client.frames)
    assert str(proxy.port) not in text
    await client.close()
