"""A WebSocket before `hello`, and frames no client should send: bounded, answered, counted.

A real uvicorn server (the protocol class `pheby serve` uses), the `websockets` client. Before
`hello` a frame is at most 64 KiB, refused from its header (nothing more is buffered), and each
source address may hold at most 8 sockets that have not said `hello`, and all such sockets together
at most `PHEBY_WS_PRE_HELLO_BYTES` of what they sent. Deeply nested JSON gets the
normal error: before `hello` a failed (counted) hello, after it an error on a connection that
stays open. `request_id` is at most 128 characters.
"""

import asyncio
import contextlib
import json
import logging
import struct
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.frames import Frame, Opcode

from pheby.protocol.ws_protocol import PhebyWebSocketProtocol
from pheby.settings import Settings
from tests.live_server import LiveServer
from tests.polling import until
from tests.ws_client import PhebyClient

pytestmark = [pytest.mark.anyio, pytest.mark.live]
PRE_HELLO_MAX_BYTES = 64 * 1024  # the limit, independent of the constant
DEEP_ARRAY = "[" * 1000 + "]" * 1000
DEEP_OBJECT = '{"a":' * 1000 + "1" + "}" * 1000
DEEP_HELLO = '{"type":"hello","secret":"s","protocol_version":1,"x":' + DEEP_OBJECT + "}"
DEEP_FRAMES = [DEEP_ARRAY, DEEP_OBJECT, DEEP_HELLO]


@pytest.fixture
async def opened() -> AsyncIterator[list[PhebyClient]]:
    clients: list[PhebyClient] = []
    yield clients
    for client in clients:
        with contextlib.suppress(Exception):
            await client.close()


@pytest.fixture
def connect(live_server: LiveServer, opened: list[PhebyClient]) -> Callable[..., Any]:
    async def open_client(secret: str | None = None, server: LiveServer = live_server, **kwargs: Any) -> PhebyClient:
        client = await PhebyClient.connect(server.ws_url, secret, **kwargs)
        opened.append(client)
        return client

    return open_client


def no_traceback_logged(caplog: pytest.LogCaptureFixture) -> None:
    for record in caplog.records:
        assert record.exc_info is None, f"{record.name}: {record.getMessage()}"
        assert "RecursionError" not in record.getMessage()
        assert record.levelno < logging.ERROR, f"{record.name}: {record.getMessage()}"


async def assert_locked_out(connect: Callable[..., Any], secret: str) -> None:
    locked = await connect()
    with contextlib.suppress(ConnectionClosed):  # the refusal may come before the hello is even sent
        await locked.send("hello", secret=secret, protocol_version=1)
    assert (await locked.expect("error"))["error"]["code"] == "rate_limited"


# --- pathological JSON -----------------------------------------------------------------------


@pytest.mark.parametrize("frame", DEEP_FRAMES, ids=["array", "object", "hello-with-deep-field"])
async def test_deep_nesting_before_hello_is_a_counted_failed_hello(
    connect: Callable[..., Any], live_server: LiveServer, caplog: pytest.LogCaptureFixture, frame: str
) -> None:
    for _ in range(5):
        client = await connect()
        await client.send_raw(frame)
        assert (await client.expect("error"))["error"]["code"] in ("unauthorized", "bad_request")
        assert await client.closed() is not None
    await assert_locked_out(connect, live_server.secret)
    no_traceback_logged(caplog)


@pytest.mark.parametrize("frame", DEEP_FRAMES, ids=["array", "object", "hello-with-deep-field"])
async def test_deep_nesting_after_hello_is_answered_and_the_socket_stays_open(
    connect: Callable[..., Any], live_server: LiveServer, caplog: pytest.LogCaptureFixture, frame: str
) -> None:
    client = await connect(live_server.secret)
    deep_ping = '{"type":"ping","request_id":"deep","x":' + DEEP_ARRAY + "}"
    for raw in (frame, deep_ping):
        await client.send_raw(raw)
        error = await client.expect("error")
        assert error["error"]["code"] in ("invalid_json", "bad_request")
    assert (await client.request("ping", "pong"))["type"] == "pong"
    no_traceback_logged(caplog)


# --- the pre-hello frame limit ----------------------------------------------------------------


async def test_a_pre_hello_frame_over_64_kib_is_too_large_closed_and_counted(
    connect: Callable[..., Any], live_server: LiveServer
) -> None:
    hello = json.dumps({"type": "hello", "secret": live_server.secret, "protocol_version": 1, "pad": ""})
    padded = hello.replace('"pad": ""', f'"pad": "{"x" * (PRE_HELLO_MAX_BYTES + 1 - len(hello))}"')
    assert len(padded) == PRE_HELLO_MAX_BYTES + 1
    for _ in range(5):
        client = await connect()
        with contextlib.suppress(ConnectionClosed):
            await client.send_raw(padded)
        assert (await client.expect("error"))["error"]["code"] == "too_large"
        assert await client.closed() is not None
    await assert_locked_out(connect, live_server.secret)


async def test_a_pre_hello_frame_is_refused_from_its_header(connect: Callable[..., Any]) -> None:
    """A frame announcing 3 MiB (under uvicorn's 4 MiB ceiling) is refused before its payload arrives."""
    client = await connect()
    length = 3 * 1024 * 1024
    header = bytes([0x81, 0x80 | 127]) + struct.pack("!Q", length) + b"\x00\x00\x00\x00"  # text, masked, zero key
    client.ws.transport.write(header + b"x" * 1024)  # and then nothing more: the server must not wait for it
    error = await client.expect("error", timeout=5)
    assert error["error"]["code"] == "too_large"
    assert await client.closed() is not None


async def test_a_hello_just_under_the_limit_still_works(connect: Callable[..., Any], live_server: LiveServer) -> None:
    client = await connect()
    await client.send_raw(padded_hello(live_server.secret, PRE_HELLO_MAX_BYTES))
    await client.expect("ready")
    big_ping = json.dumps({"type": "ping", "request_id": "big", "pad": ""})
    await client.send_raw(big_ping.replace('"pad": ""', f'"pad": "{"x" * (1024 * 1024)}"'))
    assert (await client.expect("error"))["error"]["code"] == "bad_request"  # unknown field: read, not refused
    assert (await client.request("ping", "pong"))["type"] == "pong"


# --- sockets that have not said hello ----------------------------------------------------------


async def test_a_ninth_socket_before_hello_from_one_address_is_refused(
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    connect: Callable[..., Any],
) -> None:
    server = start_live_server(live_settings(ws_hello_timeout=10.0, trusted_proxies=("127.0.0.1",)))
    from_a = {"additional_headers": {"X-Forwarded-For": "203.0.113.10"}}
    waiting = [await connect(server=server, **from_a) for _ in range(8)]
    ninth = await connect(server=server, **from_a)
    refused = await ninth.expect("error")
    assert refused["error"]["code"] == "rate_limited"
    assert await ninth.closed() is not None
    other = await connect(server=server, additional_headers={"X-Forwarded-For": "203.0.113.11"})
    await other.send("hello", secret=server.secret, protocol_version=1)
    await other.expect("ready")  # another address is not affected
    await waiting[1].send("hello", secret=server.secret, protocol_version=1)
    await waiting[1].expect("ready")  # a socket that says hello frees its place
    again = await connect(server=server, **from_a)
    await again.send("hello", secret=server.secret, protocol_version=1)
    await again.expect("ready")


# --- request_id -------------------------------------------------------------------------------


async def test_request_id_is_at_most_128_characters(connect: Callable[..., Any], live_server: LiveServer) -> None:
    client = await connect(live_server.secret)
    assert (await client.request("ping", "pong", request_id="r" * 128))["type"] == "pong"
    long_id = "r" * 129
    await client.send("ping", request_id=long_id)
    error = await client.expect("error")
    assert error["error"]["code"] == "bad_request"
    assert long_id not in json.dumps(error)
    await client.send("conversation.open", request_id="x" * 100_000, conversation_id="c")
    error = await client.expect("error")
    assert error["error"]["code"] == "bad_request"
    assert len(json.dumps(error)) < 1024
    assert (await client.request("ping", "pong"))["type"] == "pong"


async def test_a_hello_with_a_long_request_id_is_a_failed_hello(
    connect: Callable[..., Any], live_server: LiveServer
) -> None:
    client = await connect()
    await client.send("hello", secret=live_server.secret, protocol_version=1, request_id="h" * 129)
    error = await client.expect("error")
    assert error["error"]["code"] == "bad_request"
    assert "h" * 129 not in json.dumps(error)
    assert await client.closed() is not None


# --- what all sockets before hello may hold -----------------------------------------------------

STALLED_FRAME_BYTES = 60_000  # each stalled socket announces a hello this long
STALLED_SENT_BYTES = 50 * 1024  # and sends this much of it


def padded_hello(secret: str, length: int) -> str:
    """A valid hello of `length` characters (padded with spaces)."""
    hello = json.dumps({"type": "hello", "secret": secret, "protocol_version": 1})
    return hello + " " * (length - len(hello))


async def upgrade_answer(server: LiveServer, padding: int) -> bytes:
    """Everything the server writes back to an upgrade request carrying `padding` bytes of extra headers."""
    port = server.settings.port
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    pads = "".join(f"X-Pad-{n}: {'p' * 7_500}\r\n" for n in range(padding // 7_500))
    writer.write(
        (
            f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{pads}\r\n"
        ).encode()
    )
    try:
        return await asyncio.wait_for(reader.read(), timeout=10)
    finally:
        writer.close()


def stalled_hello(secret: str) -> tuple[bytes, bytes]:
    """A hello of `STALLED_FRAME_BYTES` as one masked text frame, cut after `STALLED_SENT_BYTES` of its
    payload: what a stalled socket sends, and the rest that would end the frame."""
    frame = Frame(Opcode.TEXT, padded_hello(secret, STALLED_FRAME_BYTES).encode()).serialize(mask=True, extensions=[])
    cut = len(frame) - STALLED_FRAME_BYTES + STALLED_SENT_BYTES
    return frame[:cut], frame[cut:]


async def test_the_bytes_all_sockets_before_hello_hold_are_bounded_and_given_back(
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    connect: Callable[..., Any],
) -> None:
    budget = 128 * 1024
    server = start_live_server(live_settings(ws_hello_timeout=10.0, ws_pre_hello_bytes=budget))
    protocol = server.server.config.ws_protocol_class  # looked at, not changed
    assert isinstance(protocol, type)
    assert issubclass(protocol, PhebyWebSocketProtocol)
    before_hello = protocol.pre_hello
    assert before_hello is not None
    assert before_hello.limit == budget
    first, rest = stalled_hello(server.secret)
    stalled = [await connect(server=server) for _ in range(2)]
    for client in stalled:
        client.ws.transport.write(first)
    await until(lambda: before_hello.held >= 2 * STALLED_SENT_BYTES, "the stalled hellos never all arrived")
    third = await connect(server=server)
    third.ws.transport.write(first)  # past the budget: refused, not held
    refused = await third.expect("error")
    assert refused["error"]["code"] == "rate_limited"
    assert await third.closed() == 1013
    fresh = await connect(server=server)  # a hello that fits still gets in meanwhile
    await fresh.send("hello", secret=server.secret, protocol_version=1)
    await fresh.expect("ready")
    assert 2 * STALLED_SENT_BYTES <= before_hello.held <= budget
    assert await upgrade_answer(server, padding=30_000) == b""  # over what is left: dropped, nothing written

    for client in stalled:
        client.ws.transport.abort()
    # Each gone socket gave its bytes back, the refused ones too.
    await until(lambda: before_hello.held == 0, "bytes of gone sockets were never given back")

    again = [await connect(server=server) for _ in range(2)]
    for client in again:
        client.ws.transport.write(first)
    for client in again:
        client.ws.transport.write(rest)  # the frame ends: a hello, taken
        await client.expect("ready")
    assert before_hello.held == 0  # a socket that said hello gave its bytes back
