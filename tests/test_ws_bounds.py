"""Connection bounds: the send queue in bytes, sockets per account, sockets in all.

The caps and the queue are tested on `pheby.protocol.hub` directly (fake senders, no sockets), then once
each through a live server.
"""

import asyncio
import contextlib
import json
from collections.abc import Callable

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from pheby.errors import RateLimited
from pheby.protocol.hub import CLOSE_TRY_AGAIN_LATER, MAX_CONNECTIONS_PER_ACCOUNT, Connection, Hub
from pheby.settings import Settings
from tests.live_server import LiveServer
from tests.ws_client import PhebyClient

pytestmark = pytest.mark.anyio
KiB = 1024


class _StuckPeer:
    """A client that has stopped reading: every send blocks until `unblock`."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.closes: list[int] = []
        self._unblocked = asyncio.Event()

    async def send(self, frame: str) -> None:
        await self._unblocked.wait()
        self.sent.append(frame)

    async def close(self, code: int, reason: str) -> None:
        self.closes.append(code)

    def unblock(self) -> None:
        self._unblocked.set()


async def test_the_send_queue_is_bounded_in_bytes() -> None:
    peer = _StuckPeer()
    connection = Connection("acct", peer.send, peer.close, max_frames=1000, max_bytes=100 * KiB)
    connection.start()
    frame = "x" * (30 * KiB)
    for _ in range(3):  # one in the writer's hands, two queued: 90 KiB owed
        connection.send_frame(frame)
        await asyncio.sleep(0)
    assert not connection.closed.is_set()
    connection.send_frame(frame)  # 120 KiB owed: past the bound, long before the frame count's
    assert connection.closed.is_set()
    await asyncio.sleep(0.05)
    assert peer.closes == [CLOSE_TRY_AGAIN_LATER]
    peer.unblock()
    await connection.drain_and_stop()


async def test_one_frame_larger_than_the_bound_still_goes_out_alone() -> None:
    frames: list[str] = []

    async def send(frame: str) -> None:
        frames.append(frame)

    async def close(code: int, reason: str) -> None:
        raise AssertionError("closed")

    connection = Connection("acct", send, close, max_bytes=10 * KiB)
    connection.start()
    connection.send_frame("y" * (50 * KiB))
    await connection.drain_and_stop()
    assert len(frames) == 1


async def test_bytes_are_counted_as_utf8() -> None:
    peer = _StuckPeer()
    connection = Connection("acct", peer.send, peer.close, max_bytes=100 * KiB)
    connection.start()
    connection.send_frame("a")
    await asyncio.sleep(0)
    connection.send_frame("é" * (40 * KiB))  # 80 KiB of UTF-8
    assert not connection.closed.is_set()
    connection.send_frame("é" * (15 * KiB))
    assert connection.closed.is_set()
    peer.unblock()
    await connection.drain_and_stop()


def _connection(account_id: str) -> Connection:
    async def send(frame: str) -> None:
        pass

    async def close(code: int, reason: str) -> None:
        pass

    return Connection(account_id, send, close)


def test_an_account_holds_at_most_32_connections() -> None:
    hub = Hub()
    for _ in range(MAX_CONNECTIONS_PER_ACCOUNT):
        hub.add(_connection("alice"))
    with pytest.raises(RateLimited):
        hub.add(_connection("alice"))
    hub.add(_connection("bob"))  # other accounts are not affected
    assert hub.connections("alice") == MAX_CONNECTIONS_PER_ACCOUNT
    hub.remove(next(c for c in hub.all_connections() if c.account_id == "alice"))
    hub.add(_connection("alice"))  # a freed place can be taken again


def test_the_server_holds_at_most_its_socket_cap() -> None:
    hub = Hub(max_sockets=3)
    assert [hub.claim_socket() for _ in range(4)] == [True, True, True, False]
    hub.release_socket()
    assert hub.claim_socket()
    assert not hub.claim_socket()


@pytest.mark.live
async def test_the_33rd_socket_of_an_account_is_refused(live_server: LiveServer) -> None:
    clients = [await PhebyClient.connect(live_server.ws_url, live_server.secret) for _ in range(32)]
    try:
        extra = await PhebyClient.connect(live_server.ws_url)
        await extra.send("hello", secret=live_server.secret, protocol_version=1, request_id="h33")
        error = await extra.expect("error")
        assert error["error"]["code"] == "rate_limited"
        assert error["request_id"] == "h33"
        assert "32" in error["error"]["message"]
        assert await extra.closed() is not None
        assert not extra.seen("ready")
        await clients[0].close()  # a freed place is taken again
        again = await PhebyClient.connect(live_server.ws_url, live_server.secret)
        await again.close()
    finally:
        for client in clients[1:]:
            await client.close()


@pytest.mark.live
async def test_sockets_beyond_the_global_cap_are_refused(
    start_live_server: Callable[[Settings], LiveServer], live_settings: Callable[..., Settings]
) -> None:
    server = start_live_server(live_settings(ws_max_connections=3, ws_hello_timeout=30.0))
    held = [await PhebyClient.connect(server.ws_url, server.secret) for _ in range(2)]
    quiet = await PhebyClient.connect(server.ws_url)  # a socket that has not said hello counts too
    refused = await PhebyClient.connect(server.ws_url)
    error = await refused.expect("error")
    assert error["error"]["code"] == "rate_limited"
    assert await refused.closed() == CLOSE_TRY_AGAIN_LATER
    await held[0].close()
    await asyncio.sleep(0.2)
    admitted = await PhebyClient.connect(server.ws_url, server.secret)
    for client in (admitted, held[1], quiet):
        await client.close()


@pytest.mark.live
async def test_a_client_that_stops_reading_is_closed_once_the_bytes_owed_pass_the_bound(
    start_live_server: Callable[[Settings], LiveServer], live_settings: Callable[..., Settings]
) -> None:
    server = start_live_server(live_settings(ws_send_queue_bytes=256 * KiB))
    owner = await PhebyClient.connect(server.ws_url, server.secret)
    created = await owner.request("conversation.create", "conversation.created", name="big")
    conversation_id = created["conversation_id"]
    for _ in range(3):  # a history of about 180 KiB, so every conversation.open reply is that large
        await owner.request("chat.send", "run.accepted", conversation_id=conversation_id, text="z" * 60_000)
        await owner.expect("run.finished", conversation_id=conversation_id)
    await owner.close()

    # max_queue=1: the client library stops reading from the socket once one frame waits unread. No
    # compression: the frames must fill the socket's buffers as they are (these would deflate to ~1 KiB).
    async with connect(server.ws_url, max_size=None, max_queue=1, compression=None) as stuck:
        await stuck.send(json.dumps({"type": "hello", "secret": server.secret, "protocol_version": 1}))
        assert json.loads(await stuck.recv())["type"] == "ready"
        for index in range(200):
            open_ = {"type": "conversation.open", "conversation_id": conversation_id, "request_id": f"o{index}"}
            await stuck.send(json.dumps(open_))
        deadline = asyncio.get_running_loop().time() + 30
        while server.services.hub.all_connections():
            assert asyncio.get_running_loop().time() < deadline, "the stuck client was never dropped"
            await asyncio.sleep(0.1)
        with contextlib.suppress(ConnectionClosed):  # reading again: what was already written, then the close
            while True:
                await asyncio.wait_for(stuck.recv(), 30)
        assert stuck.close_code == CLOSE_TRY_AGAIN_LATER
