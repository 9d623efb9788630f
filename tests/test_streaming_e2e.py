"""Streaming end to end (real uvicorn server, `websockets` client, demo Hermes): coalesced deltas and
WebSocket compression."""

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

import hermes_client as hc
from demo_hermes.long_stream import LONG_STREAM_DELTAS, long_stream_parts, part_marker
from pheby.files.media_tags import visible_draft
from pheby.protocol import ws_compression
from pheby.protocol.ws_compression import CompressedWebSocketProtocol, ReleasablePerMessageDeflate
from pheby.runs import engine as run_engine
from pheby.settings import Settings
from tests.live_server import LiveServer
from tests.ws_client import Frame, PhebyClient

pytestmark = [pytest.mark.anyio, pytest.mark.live]
LONG_RUN_SECONDS = 90.0
LONG_STREAM = "/demo long-stream"


@pytest.fixture
def start(
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    opened: list[PhebyClient],
) -> Callable[..., Any]:
    async def start_and_connect(**settings: Any) -> tuple[LiveServer, PhebyClient]:
        server = start_live_server(live_settings(**settings))
        client = await PhebyClient.connect(server.ws_url, server.secret)
        opened.append(client)
        return server, client

    return start_and_connect


class StreamReads:
    """Per run stream the server read: its socket reads (the pauses the run's reader awaited) and events."""

    def __init__(self) -> None:
        self.streams: list[list[int]] = []  # [reads, events] per subscription

    @property
    def reads(self) -> int:
        return sum(reads for reads, _ in self.streams)

    @property
    def events(self) -> int:
        return sum(events for _, events in self.streams)


@pytest.fixture
def stream_reads(monkeypatch: pytest.MonkeyPatch) -> StreamReads:
    """Counts the socket reads of every run stream the (in-process) server reads (a counting
    `read_pause` around the reader's own, if it has one)."""
    counted = StreamReads()
    original = hc.HermesClient.run_event_batches

    async def counting(
        self: hc.HermesClient,
        run_id: str,
        last_event_id: int | str | None = None,
        *,
        read_pause: hc.ReadPause | None = None,
    ) -> AsyncIterator[list[hc.RunEvent]]:
        tally = [0, 0]
        counted.streams.append(tally)

        async def pause() -> None:
            tally[0] += 1
            if read_pause is not None:
                await read_pause()

        async for batch in original(self, run_id, last_event_id, read_pause=pause):
            tally[1] += len(batch)
            yield batch

    monkeypatch.setattr(hc.HermesClient, "run_event_batches", counting)
    return counted


def expected_text() -> str:
    """What the client must end up showing: every delta, as the server drafts it (the MEDIA: line hidden)."""
    part1, part2, part3 = long_stream_parts("/any/path.png")
    return visible_draft("".join(part1) + "\n\n" + "".join(part2) + "\n\n" + "".join(part3))


def text_before(frames: list[Frame], index: int) -> str:
    """The newest delta text a client had when frame `index` arrived."""
    deltas = [f["text"] for f in frames[:index] if f["type"] == "message.delta"]
    return deltas[-1] if deltas else ""


async def test_a_long_run_arrives_coalesced_cumulative_and_in_the_specs_order(
    start: Callable[..., Any], stream_reads: StreamReads
) -> None:
    _, client = await start()
    created = await client.request("conversation.create", "conversation.created", name="Long")
    conversation_id = created["conversation_id"]
    accepted = await client.request(
        "chat.send", "run.accepted", conversation_id=conversation_id, text="/demo long-stream"
    )
    approval = await client.expect("approval.request", timeout=LONG_RUN_SECONDS, conversation_id=conversation_id)
    await client.send("approval.respond", approval_id=approval["approval_id"], choice="once")
    await client.expect("run.finished", timeout=LONG_RUN_SECONDS, run_id=accepted["run_id"])
    frames = [
        f for f in client.frames if f.get("conversation_id") == conversation_id or f["type"] == "approval.resolved"
    ]

    deltas = [f["text"] for f in frames if f["type"] == "message.delta"]
    # One per 100 ms window once the draft is 500 characters long (about 210 over the run); more while it is
    # shorter, its window shorter in proportion (`growing_window`).
    assert 2 <= len(deltas) <= 260, f"{len(deltas)} message.delta frames for {LONG_STREAM_DELTAS} Hermes deltas"
    assert all(later.startswith(earlier) for earlier, later in itertools.pairwise(deltas)), "not cumulative"
    assert deltas[-1] == expected_text()

    types = [f["type"] for f in frames]
    first_tool = types.index("tool.event")
    assert part_marker(1) in text_before(frames, first_tool)
    assert part_marker(2) not in text_before(frames, first_tool)
    approval_index = types.index("approval.request")
    assert part_marker(2) in text_before(frames, approval_index)
    assert part_marker(3) not in text_before(frames, approval_index)
    complete = types.index("message.complete")
    assert text_before(frames, complete) == expected_text()  # nothing held back past message.complete
    assert "message.delta" not in types[complete:]
    assert complete < types.index("attachment.added") < len(types)
    assert types.index("run.finished") > complete
    # The server read Hermes's stream in far fewer reads than events: many events per read, while held.
    assert 0 < stream_reads.reads * 3 <= stream_reads.events, f"{stream_reads.streams} (reads, events)"


async def test_at_window_zero_the_reader_reads_each_event_as_it_comes_and_forwards_every_delta(
    start: Callable[..., Any], stream_reads: StreamReads
) -> None:
    _, client = await start(ws_delta_window_ms=0)
    words = 200
    await echo_run(client, words)
    deltas = client.seen("message.delta")
    assert len(deltas) >= words  # one frame per Hermes delta: nothing coalesced
    # Each delta is its own TCP segment and read; a busy machine merges a few, never the ten or so of a
    # paused read.
    assert stream_reads.reads * 4 >= stream_reads.events, f"{stream_reads.streams} (reads, events)"


async def test_a_cancel_while_the_reader_waits_out_a_long_window_ends_the_run_promptly(
    start: Callable[..., Any], stream_reads: StreamReads, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The engine's grace for a cancel outlasts the window, so only the reader can end the run before it.
    monkeypatch.setattr(run_engine, "CANCEL_GRACE_SECONDS", 60.0)
    _, client = await start(ws_delta_window_ms=10_000)  # the longest window: the reader would wait 10 s
    created = await client.request("conversation.create", "conversation.created", name="Cancel")
    conversation_id = created["conversation_id"]
    accepted = await client.request("chat.send", "run.accepted", conversation_id=conversation_id, text=LONG_STREAM)
    await client.expect("message.delta", timeout=20, conversation_id=conversation_id)
    await asyncio.sleep(0.3)  # the reader is now waiting for the window's end
    await client.send("run.cancel", conversation_id=conversation_id, run_id=accepted["run_id"])
    # Well before the window ends (10 s): Hermes's answer to the stop was read as it came.
    finished = await client.expect("run.finished", timeout=8, run_id=accepted["run_id"])
    assert finished["status"] == "cancelled"
    complete = client.seen("message.complete", conversation_id=conversation_id)
    assert len(complete) == 1
    assert complete[0]["text"].startswith(client.seen("message.delta", conversation_id=conversation_id)[-1]["text"])


async def test_a_snapshot_during_a_run_is_never_followed_by_older_text(
    start: Callable[..., Any], opened: list[PhebyClient]
) -> None:
    server, driver = await start(ws_delta_window_ms=400)  # a long window: a delta is pending most of the time
    created = await driver.request("conversation.create", "conversation.created", name="Snapshot")
    conversation_id = created["conversation_id"]
    accepted = await driver.request(
        "chat.send", "run.accepted", conversation_id=conversation_id, text="/demo long-stream"
    )
    await driver.expect("message.delta", timeout=20, conversation_id=conversation_id)
    for _ in range(5):
        reader = await PhebyClient.connect(server.ws_url, server.secret)
        opened.append(reader)
        history = await reader.request("conversation.open", "conversation.history", conversation_id=conversation_id)
        snapshot = history["run"]["text"]
        later = await reader.expect("message.delta", timeout=10, conversation_id=conversation_id)
        assert later["text"].startswith(snapshot), "a delta older than the snapshot followed it"
    await driver.send("run.cancel", conversation_id=conversation_id, run_id=accepted["run_id"])
    await driver.expect("run.finished", timeout=30, run_id=accepted["run_id"])


# --- permessage-deflate ---------------------------------------------------------------------------


def server_deflates(server: LiveServer) -> list[ReleasablePerMessageDeflate]:
    """The compression extension of every open server-side connection (read from the test's thread)."""
    return [
        extension
        for protocol in list(server.server.server_state.connections)
        if isinstance(protocol, CompressedWebSocketProtocol)
        for extension in protocol.conn.extensions
        if isinstance(extension, ReleasablePerMessageDeflate)
    ]


def negotiated(client: PhebyClient) -> str | None:
    assert client.ws.response is not None
    value: str | None = client.ws.response.headers.get("Sec-WebSocket-Extensions")
    return value


async def echo_run(client: PhebyClient, words: int) -> None:
    """A `/demo echo` of a long text (large cumulative frames); its last delta must hold all of it."""
    created = await client.request("conversation.create", "conversation.created", name="Echo")
    conversation_id = created["conversation_id"]
    text = "/demo echo " + " ".join(f"word{i}" for i in range(words))
    await client.request("chat.send", "run.accepted", conversation_id=conversation_id, text=text)
    complete = await client.expect("message.complete", timeout=60, conversation_id=conversation_id)
    assert f"word{words - 1}" in complete["text"]
    deltas = client.seen("message.delta", conversation_id=conversation_id)
    assert deltas[-1]["text"] == complete["text"]


async def test_a_client_offering_permessage_deflate_gets_it_with_context_takeover(
    start: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ws_compression, "ENCODER_IDLE_SECONDS", 0.5)
    server, client = await start()  # the websockets client offers permessage-deflate by default
    offer = negotiated(client)
    assert offer is not None
    assert offer.startswith("permessage-deflate")
    assert "no_context_takeover" not in offer
    assert f"server_max_window_bits={ws_compression.SERVER_MAX_WINDOW_BITS}" in offer
    (deflate,) = server_deflates(server)
    assert not deflate.holds_encoder()  # `ready` is too small to compress: no compressor yet
    await echo_run(client, 600)
    assert deflate.holds_encoder()
    await asyncio.sleep(1.5)
    assert not deflate.holds_encoder()  # idle: the compressor is released ...
    await echo_run(client, 300)  # ... and a fresh one serves the next run, the client decoding it all


async def test_a_client_not_offering_compression_still_works(
    start: Callable[..., Any], opened: list[PhebyClient]
) -> None:
    server, _ = await start()
    plain = await PhebyClient.connect(server.ws_url, server.secret, compression=None)
    opened.append(plain)
    assert negotiated(plain) is None
    await echo_run(plain, 300)


async def test_with_the_setting_off_no_compression_is_negotiated(start: Callable[..., Any]) -> None:
    server, client = await start(ws_compression=False)
    assert negotiated(client) is None
    assert server_deflates(server) == []
    await echo_run(client, 300)
