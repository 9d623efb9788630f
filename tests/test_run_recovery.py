"""A run whose event stream is lost: it stays the conversation's run until Hermes says how it ended.

A TCP proxy between the server and the demo Hermes cuts the stream (new connections still pass),
or Hermes is stopped (and later a new one is started behind the same proxy).
"""

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from demo_hermes import DemoHermesServer
from pheby.settings import Settings
from tests.live_server import LiveServer
from tests.test_attachments_e2e import upload
from tests.ws_client import PhebyClient

pytestmark = [pytest.mark.anyio, pytest.mark.live]

SLOW_TEXT = "".join(f"tick {i} " for i in range(100))  # what `/demo slow` answers, in 5 s


class CuttingProxy:
    """A loopback TCP proxy whose open connections can be cut, and whose upstream can be swapped."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port: int | None = upstream_port
        self._server: asyncio.Server | None = None
        self._transports: set[asyncio.StreamWriter] = set()
        self._flowing = asyncio.Event()
        self._flowing.set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._transports.add(writer)
        await self._flowing.wait()  # frozen: the connection is held open, and nothing answers
        if self.upstream_port is None:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.transport.abort()
            return
        self._transports.update((writer, up_writer))

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await src.read(65536):
                    await self._flowing.wait()
                    dst.write(data)
                    await dst.drain()
            dst.transport.abort()

        try:
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        except asyncio.CancelledError:
            writer.transport.abort()
            up_writer.transport.abort()
        finally:
            self._transports.difference_update((writer, up_writer))

    def freeze(self) -> None:
        """Like a host that went silent: connections stay open, but no byte moves any more."""
        self._flowing.clear()

    def cut(self) -> None:
        """Drop every open connection (new ones are let through)."""
        for writer in list(self._transports):
            writer.transport.abort()

    async def stop(self) -> None:
        self._flowing.set()
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


@pytest.fixture
async def proxied(
    demo_hermes: DemoHermesServer,
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
) -> AsyncIterator[tuple[LiveServer, CuttingProxy]]:
    proxy = CuttingProxy(demo_hermes.port)
    port = await proxy.start()
    url = f"http://127.0.0.1:{port}"
    server = start_live_server(live_settings(hermes_url=url, hermes_dashboard_url=url))
    yield server, proxy
    await proxy.stop()


async def open_chat(server: LiveServer) -> tuple[PhebyClient, str]:
    client = await PhebyClient.connect(server.ws_url, server.secret)
    created = await client.request("conversation.create", "conversation.created")
    return client, created["conversation_id"]


async def send(client: PhebyClient, conversation_id: str, text: str) -> dict[str, Any]:
    return await client.request("chat.send", "run.accepted", conversation_id=conversation_id, text=text)


async def test_a_cut_stream_keeps_the_run_until_hermes_ends_it(proxied: tuple[LiveServer, CuttingProxy]) -> None:
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
) -> None:
    hermes = make_demo_hermes(delta_delay=0.3)  # slow enough to cut each reply mid-way
    proxy = CuttingProxy(hermes.port)
    port = await proxy.start()
    url = f"http://127.0.0.1:{port}"
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
        await proxy.stop()


async def test_a_cancel_while_the_stream_is_lost_still_cancels(proxied: tuple[LiveServer, CuttingProxy]) -> None:
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
) -> None:
    first = DemoHermesServer().start()
    proxy = CuttingProxy(first.port)
    port = await proxy.start()
    url = f"http://127.0.0.1:{port}"
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
        proxy.upstream_port = second.port
        again = await client.request("chat.send", "run.accepted", conversation_id=conversation_id, text="hello")
        assert again["type"] == "run.accepted", again
        done = await client.expect("run.finished", run_id=again["run_id"])
        assert done["status"] == "completed"
        assert client.seen("message.complete")[-1]["text"] == "You said: hello"
        await client.close()
    finally:
        await proxy.stop()
        first.stop()
        if second is not None:
            second.stop()


async def test_hermes_silent_mid_run_fails_the_run_within_ten_seconds(
    proxied: tuple[LiveServer, CuttingProxy],
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
    proxied: tuple[LiveServer, CuttingProxy], demo_hermes: DemoHermesServer
) -> None:
    server, proxy = proxied
    client, conversation_id = await open_chat(server)
    notes = await upload(server, conversation_id, "notes.md", b"# Notes", "text/markdown")
    proxy.upstream_port = None  # every new connection to "Hermes" is refused,
    proxy.cut()  # and the pooled ones (the server's reads of what the gateway offers keep one) are gone
    refused = await client.request(
        "chat.send", "run.accepted", conversation_id=conversation_id, text="hi", attachment_ids=[notes["attachment_id"]]
    )
    assert refused["type"] == "error"
    assert refused["error"]["message"] == "Hermes is unavailable right now; the message was not sent, try again"
    assert client.seen("run.accepted") == []
    proxy.upstream_port = demo_hermes.port
    accepted = await client.request(
        "chat.send", "run.accepted", conversation_id=conversation_id, text="hi", attachment_ids=[notes["attachment_id"]]
    )
    assert accepted["type"] == "run.accepted", accepted
    finished = await client.expect("run.finished", run_id=accepted["run_id"])
    assert finished["status"] == "completed"
    assert [a["attachment"]["attachment_id"] for a in client.seen("attachment.added")] == [notes["attachment_id"]]
    text = json.dumps(client.frames)
    assert str(port_of(proxy)) not in text
    await client.close()


def port_of(proxy: CuttingProxy) -> Any:
    assert proxy._server is not None
    return proxy._server.sockets[0].getsockname()[1]
