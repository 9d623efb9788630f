"""Append deltas (`delta_append`, and packed, `delta_packed`: docs/protocol-extensions.md): negotiated in
hello, rebuilt by the client to exactly the cumulative texts, one encoding per form, old clients unchanged.

The hub-level tests drive `pheby.protocol.hub.Hub` with in-memory sockets (one can be held, so its
queue backs up and merges); the end-to-end ones a real uvicorn server and `websockets` clients
against the demo Hermes, with both windows at 0 so every client sees every draft.
"""

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from pheby.protocol import append as append_module
from pheby.protocol import hub as hub_module
from pheby.protocol.append import AppendDrafts, common_prefix_length, granted
from pheby.protocol.coalesce import FULL_WINDOW_CHARS, CoalescingHub
from pheby.protocol.frames import (
    ConversationHistory,
    MessageComplete,
    MessageDelta,
    RunFinished,
    RunSnapshot,
    encode_event,
)
from pheby.protocol.hub import SEND_QUEUE_BYTES, Connection, Hub
from pheby.settings import Settings
from tests.live_server import LiveServer
from tests.polling import until
from tests.ws_client import Frame, PackedStreams, PhebyClient

pytestmark = pytest.mark.anyio
ACCOUNT = "acct"
CONVERSATION = "c1"
MESSAGE = "draft-r1"


class Socket:
    """A client's end in memory: the frames written to it, decoded; clearing `open` stops the writer at its next
    frame; `closed_with`: the close's code, once closed."""

    def __init__(self) -> None:
        self.frames: list[Frame] = []
        self.raw: list[str] = []
        self.open = asyncio.Event()
        self.open.set()
        self.closed_with: int | None = None
        self._streams = PackedStreams()

    async def send_text(self, frame: str) -> None:
        await self.open.wait()
        self.raw.append(frame)
        self.frames.append(self._streams.frame(json.loads(frame)))

    async def close(self, code: int, reason: str) -> None:
        del reason
        self.closed_with = code


def connect(
    hub: Hub,
    *,
    delta_append: bool,
    delta_packed: bool = False,
    delta_pace: float = 0.0,
    max_bytes: int = SEND_QUEUE_BYTES,
) -> tuple[Connection, Socket]:
    socket = Socket()
    connection = Connection(
        ACCOUNT,
        socket.send_text,
        socket.close,
        max_bytes=max_bytes,
        delta_append=delta_append,
        delta_packed=delta_packed,
        delta_pace=delta_pace,
    )
    hub.add(connection)
    connection.start()
    return connection, socket


def delta(text: str) -> MessageDelta:
    return MessageDelta(conversation_id=CONVERSATION, message_id=MESSAGE, text=text)


def drafts(frames: list[Frame], message_id: str) -> list[str]:
    """The draft a client holds after each `message.delta` of the message, applying either form; a
    snapshot's run text replaces it, as Pheby Web does."""
    shown: list[str] = []
    draft: str | None = None
    for frame in frames:
        if frame["type"] == "conversation.history" and frame["run"] and frame["run"]["message_id"] == message_id:
            draft = frame["run"]["text"]
        elif frame["type"] == "message.delta" and frame["message_id"] == message_id:
            if "text" in frame:
                draft = frame["text"]
            else:
                assert set(frame) >= {"offset", "append"}
                assert "text" not in frame
                assert draft is not None or frame["offset"] == 0, "an append against a draft the client lacks"
                assert frame["offset"] <= len(draft or "")
                draft = (draft or "")[: frame["offset"]] + frame["append"]
            shown.append(draft)
    return shown


def offsets(frames: list[Frame]) -> list[int]:
    return [frame["offset"] for frame in frames if frame["type"] == "message.delta"]


async def delivered(socket: Socket, frames: int) -> None:
    await until(lambda: len(socket.frames) == frames, f"{frames} frames written")


def test_granted_features_are_the_known_ones_in_order_once() -> None:
    assert granted(["nope", "delta_append", "delta_append"]) == ["delta_append"]
    assert granted([]) == []
    assert granted(["delta_packed", "delta_append"]) == ["delta_packed", "delta_append"]
    assert granted(["delta_packed"]) == []  # it changes append deltas: nothing without them
    assert granted(["delta_paced", "delta_packed", "delta_append"]) == ["delta_paced", "delta_packed", "delta_append"]
    assert granted(["delta_paced"]) == []


def packed_shapes(socket: Socket) -> list[str]:
    """Each `message.delta` a socket got, as it came: "packed" (`["d", stream, offset, append]`), "whole+stream"
    (an object naming the stream) or "object"."""
    shapes = []
    for raw in socket.raw:
        decoded = json.loads(raw)
        if isinstance(decoded, list):
            assert len(decoded) == 4
            assert decoded[0] == "d"
            assert all(type(v) is int for v in decoded[1:3])
            assert type(decoded[3]) is str
            shapes.append("packed")
        elif decoded["type"] == "message.delta":
            shapes.append("whole+stream" if "stream" in decoded else "object")
    return shapes


@pytest.mark.parametrize(
    ("old", "new", "shared"),
    [("", "abc", 0), ("abc", "abcdef", 3), ("abc `", "abc", 3), ("héllo wörld", "héllo w", 7), ("abc", "xyz", 0)],
)
def test_common_prefix_length(old: str, new: str, shared: int) -> None:
    assert common_prefix_length(old, new) == shared


@pytest.mark.parametrize("packed", [False, True], ids=["objects", "packed"])
async def test_an_append_client_rebuilds_every_cumulative_text_through_retraction_snapshot_merge_and_cancel(
    packed: bool,
) -> None:
    hub = Hub()
    _, cumulative = connect(hub, delta_append=False)
    appending, fast = connect(hub, delta_append=True, delta_packed=packed)
    slow_connection, slow = connect(hub, delta_append=True, delta_packed=packed)
    texts = ["Here", "Here is the", "Here is the `", "Here is the", "Here is the end", "Here is the end, é"]
    texts.append(texts[-1] + "!")
    for count, text in enumerate(texts[:4], 1):  # the fourth retracts: a `MEDIA:` tag after the backquote is hidden
        hub.broadcast(ACCOUNT, delta(text))
        await delivered(slow, count)
    # A reconnect snapshot on the fast client: its draft is replaced, so its next delta is whole.
    appending.forget_draft(MESSAGE)
    snapshot = RunSnapshot(run_id="r1", status="running", message_id=MESSAGE, text=texts[3])
    appending.send(
        ConversationHistory(
            conversation_id=CONVERSATION,
            messages=[],
            has_more=False,
            attachments=[],
            run=snapshot,
            tools=[],
            approvals=[],
            clarifications=[],
        )
    )
    # The slow client stops reading: its writer holds the next frame, the one after it waits in its queue,
    # and the third is folded into it (one frame, from where the waiting one started to the newest text).
    slow.open.clear()
    for count, text in enumerate(texts[4:], 6):
        if count == 8:
            assert slow_connection.holds_unsent_delta(MESSAGE)
        hub.broadcast(ACCOUNT, delta(text))
        await delivered(fast, count)
    assert slow_connection.holds_unsent_delta(MESSAGE)
    # A cancel: the message completes with the draft, then the run finishes.
    hub.broadcast(ACCOUNT, MessageComplete(conversation_id=CONVERSATION, message_id=MESSAGE, text=texts[-1]))
    hub.broadcast(ACCOUNT, RunFinished(conversation_id=CONVERSATION, run_id="r1", status="cancelled"))
    slow.open.set()
    await until(
        lambda: all(s.frames and s.frames[-1]["type"] == "run.finished" for s in (cumulative, fast, slow)),
        "every client got the run's end",
    )

    assert [f["text"] for f in cumulative.frames if f["type"] == "message.delta"] == texts
    assert drafts(fast.frames, MESSAGE) == texts
    assert offsets(fast.frames) == [0, 4, 11, 11, 0, 15, 18]  # the retraction (11 < 13), the snapshot (0)
    assert drafts(slow.frames, MESSAGE) == texts[:5] + texts[6:]  # the folded delta jumps to the newest text
    assert offsets(slow.frames) == [0, 4, 11, 11, 11, 15]  # ... from where the one it replaced started
    if packed:  # every continuation positional; whatever carries the whole text names the stream
        assert packed_shapes(fast) == ["whole+stream", "packed", "packed", "packed", "whole+stream", "packed", "packed"]
        assert packed_shapes(slow) == ["whole+stream", "packed", "packed", "packed", "packed", "packed"]
        assert len({f["stream"] for s in (fast, slow) for f in s.frames if "stream" in f}) == 1
    else:  # a delta_append client without delta_packed: objects, as before, no stream named
        assert set(packed_shapes(fast) + packed_shapes(slow)) == {"object"}
    for socket in (cumulative, fast, slow):
        assert socket.frames[-2]["text"] == texts[-1]  # message.complete holds the text to check against
    assert hub._append_drafts.streaming() == 0  # nothing stays behind
    assert slow_connection.draft_generation(MESSAGE) is None
    assert appending.draft_generation(MESSAGE) is None


async def test_each_form_of_an_event_is_encoded_once_however_many_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    encoded: list[str] = []

    def counting(event: Any) -> bytes:
        encoded.append(type(event).__name__)
        return encode_event(event)

    monkeypatch.setattr(hub_module, "encode_event", counting)
    monkeypatch.setattr(append_module, "encode_event", counting)
    hub = Hub()
    forms = [(False, False), (True, False), (True, True)] * 3  # cumulative, append, packed append
    sockets = [connect(hub, delta_append=append, delta_packed=packed)[1] for append, packed in forms]
    hub.broadcast(ACCOUNT, delta("one"))
    # The first append delta is whole: one object without the stream, one with it.
    assert sorted(encoded) == ["MessageAppend", "MessageAppend", "MessageDelta"]
    encoded.clear()
    await until(lambda: all(len(s.frames) == 1 for s in sockets), "the first delta written")  # none to merge
    late = connect(hub, delta_append=True)[1]  # holds no draft: it needs the whole text
    late_packed = connect(hub, delta_append=True, delta_packed=True)[1]
    hub.broadcast(ACCOUNT, delta("one two"))
    # Cumulative; continuation and whole, as objects and packed.
    assert sorted(encoded) == ["MessageAppend", "MessageAppend", "MessageAppend", "MessageDelta", "PackedAppend"]
    await until(
        lambda: all(len(s.frames) == 2 for s in sockets) and bool(late.frames and late_packed.frames),
        "both deltas written",
    )
    assert {json.dumps(s.frames[-1], sort_keys=True) for s in sockets[1::3]} == {
        json.dumps(late.frames[-1] | {"offset": 3, "append": " two"}, sort_keys=True)
    }
    assert {s.raw[-1] for s in sockets[2::3]} == {'["d",1,3," two"]'}
    assert late.frames[-1]["offset"] == late_packed.frames[-1]["offset"] == 0
    assert late.frames[-1]["append"] == late_packed.frames[-1]["append"] == "one two"
    assert late_packed.frames[-1]["stream"] == 1


async def test_the_shorter_append_window_paces_the_reader_and_cumulative_clients_keep_theirs() -> None:
    hub = CoalescingHub(delta_window_seconds=0.2, append_window_seconds=0.02)
    _, cumulative = connect(hub, delta_append=False)
    a = "a" * FULL_WINDOW_CHARS  # a draft long enough for the cumulative window to be whole (`growing_window`)
    assert hub.delta_held_for(MESSAGE) == 0.0
    hub.broadcast(ACCOUNT, delta(a))
    assert hub.delta_held_for(MESSAGE) == pytest.approx(0.2, abs=0.01)  # no append client: the long window
    _, appending = connect(hub, delta_append=True)
    for index in range(12):  # 12 drafts over ~0.24 s
        hub.broadcast(ACCOUNT, delta(a + " b" * (index + 1)))
        if index == 0:
            assert hub.delta_held_for(MESSAGE) <= 0.021  # the append window, now open, is the shorter
        await asyncio.sleep(0.02)
    hub.broadcast(ACCOUNT, MessageComplete(conversation_id=CONVERSATION, message_id=MESSAGE, text=a + " b" * 12))
    await until(lambda: any(f["type"] == "message.complete" for f in appending.frames), "the message completed")
    cumulative_deltas = [f for f in cumulative.frames if f["type"] == "message.delta"]
    append_deltas = [f for f in appending.frames if f["type"] == "message.delta"]
    assert len(cumulative_deltas) <= 4 < len(append_deltas)
    assert drafts(appending.frames, MESSAGE)[-1] == cumulative_deltas[-1]["text"] == a + " b" * 12
    assert hub.coalescer.pending_messages() == hub.append_coalescer.pending_messages() == 0


async def test_an_account_of_append_clients_only_holds_no_cumulative_drafts() -> None:
    hub = CoalescingHub(delta_window_seconds=0.2, append_window_seconds=0.02)
    hub.broadcast(ACCOUNT, delta("a"))
    # No connection: the cumulative window still paces the run's reader.
    assert (hub.coalescer.pending_messages(), hub.append_coalescer.pending_messages()) == (1, 0)
    first, _ = connect(hub, delta_append=False)
    hub.broadcast(ACCOUNT, delta("a b"))  # held by the cumulative window
    hub.remove(first)
    _, appending = connect(hub, delta_append=True)
    hub.broadcast(ACCOUNT, delta("a b c"))
    # Only append connections: no cumulative window, and the draft it held ("a b") is dropped unsent.
    assert (hub.coalescer.pending_messages(), hub.append_coalescer.pending_messages()) == (0, 1)
    _, late = connect(hub, delta_append=False)
    hub.broadcast(ACCOUNT, delta("a b c d"))  # a cumulative client again: a window opens, its text at once
    await asyncio.sleep(0.25)  # past that window: nothing older follows
    assert [f["text"] for f in late.frames if f["type"] == "message.delta"] == ["a b c d"]
    assert drafts(appending.frames, MESSAGE) == ["a b c", "a b c d"]


def test_drafts_of_a_finished_run_are_forgotten_without_connections() -> None:
    drafts_ = AppendDrafts()
    drafts_.send([], delta("x"), None)
    assert drafts_.streaming() == 1
    drafts_.settle([], RunFinished(conversation_id=CONVERSATION, run_id="r1", status="failed"))
    assert drafts_.streaming() == 0


# --- end to end: a real server, real clients, the demo Hermes ----------------------------------------

# Streamed verbatim, 50 ms apart: the third piece completes a `MEDIA:` tag, which is then hidden, so
# the visible draft shrinks (from "... the `" to "... the"): a retraction. The 40 words after it leave
# two seconds for a client to reconnect mid-run.
CHUNKS = "/demo chunks Here is |the `|MEDIA:/nowhere/x.png` |and |the rest" + "".join(f"| w{i}" for i in range(40))


@pytest.fixture
async def server(
    start_live_server: Callable[[Settings], LiveServer], live_settings: Callable[..., Settings]
) -> LiveServer:
    return start_live_server(live_settings(ws_delta_window_ms=0, ws_append_window_ms=0))


async def test_hello_features_are_granted_and_echoed_by_ready(server: LiveServer) -> None:
    async with await PhebyClient.connect(server.ws_url) as client:
        await client.send("hello", secret=server.secret, protocol_version=1, features=["delta_append", "x"])
        assert (await client.expect("ready"))["features"] == ["delta_append"]
    async with await PhebyClient.connect(server.ws_url) as client:
        await client.send("hello", secret=server.secret, protocol_version=1, features=["later"])
        assert (await client.expect("ready"))["features"] == []
    async with await PhebyClient.connect(server.ws_url) as client:
        await client.send("hello", secret=server.secret, protocol_version=1, features=["delta_append", "delta_packed"])
        assert (await client.expect("ready"))["features"] == ["delta_append", "delta_packed"]
    async with await PhebyClient.connect(server.ws_url) as client:
        await client.send("hello", secret=server.secret, protocol_version=1, features=["delta_packed"])
        assert (await client.expect("ready"))["features"] == []  # only with delta_append
    async with await PhebyClient.connect(server.ws_url, server.secret) as old:
        ready = json.loads(old.raw[0])
        assert set(ready) == {"type", "request_id", "ts", "protocol_version", "server"}  # unchanged
    async with await PhebyClient.connect(server.ws_url) as client:
        await client.send("hello", secret=server.secret, protocol_version=1, features=["f"] * 17)
        assert (await client.expect("error"))["error"]["code"] == "unauthorized"  # bounded, refused


async def test_over_real_runs_append_clients_rebuild_what_cumulative_clients_see(server: LiveServer) -> None:
    old = await PhebyClient.connect(server.ws_url, server.secret)
    new = await PhebyClient.connect(server.ws_url, server.secret, features=["delta_append"])
    packed = await PhebyClient.connect(server.ws_url, server.secret, features=["delta_append", "delta_packed"])
    try:
        created = await old.request("conversation.create", "conversation.created", name="append")
        conversation_id = created["conversation_id"]
        accepted = await old.request("chat.send", "run.accepted", conversation_id=conversation_id, text=CHUNKS)
        start = await old.expect("message.start", run_id=accepted["run_id"])
        message_id = start["message_id"]
        await old.expect("message.delta", message_id=message_id, text="Here is the  and the rest")
        # A third client reconnects mid-run: its snapshot, then deltas (the first of them whole).
        late = await PhebyClient.connect(server.ws_url, server.secret, features=["delta_append"])
        try:
            history = await late.request("conversation.open", "conversation.history", conversation_id=conversation_id)
            assert history["run"]["message_id"] == message_id
            complete = await old.expect("message.complete", message_id=message_id)
            for client in (new, packed, late):
                await client.expect("message.complete", message_id=message_id)
            cumulative = [
                f["text"] for f in old.frames if f["type"] == "message.delta" and f["message_id"] == message_id
            ]
            assert "Here is the `" in cumulative
            assert cumulative[-1] == complete["text"]
            appended = drafts(new.frames, message_id)
            assert appended == cumulative
            assert drafts(packed.frames, message_id) == cumulative
            new_offsets = [
                f["offset"] for f in new.frames if f["type"] == "message.delta" and f["message_id"] == message_id
            ]
            assert new_offsets[0] == 0
            assert any(b < len(a) for a, b in zip(cumulative, new_offsets[1:], strict=False))
            late_drafts = drafts(late.frames, message_id)
            assert late_drafts
            assert late_drafts == cumulative[-len(late_drafts) :]
            assert next(f for f in late.frames if f["type"] == "message.delta")["offset"] == 0
        finally:
            await late.close()
        # A conversation takes its next run once the last has finished (message.complete comes before).
        await old.expect("run.finished", run_id=accepted["run_id"])

        # A cancelled run: both forms end on the same text.
        accepted = await old.request("chat.send", "run.accepted", conversation_id=conversation_id, text="/demo slow")
        assert accepted["type"] == "run.accepted", accepted
        start = await old.expect("message.start", run_id=accepted["run_id"])
        await old.expect("message.delta", message_id=start["message_id"], text="tick 0 tick 1 tick 2")
        await old.send("run.cancel", conversation_id=conversation_id, run_id=accepted["run_id"])
        finished = await old.expect("run.finished", run_id=accepted["run_id"])
        assert finished["status"] == "cancelled"
        await new.expect("run.finished", run_id=accepted["run_id"])
        await packed.expect("run.finished", run_id=accepted["run_id"])
        cumulative = [
            f["text"] for f in old.frames if f["type"] == "message.delta" and f["message_id"] == start["message_id"]
        ]
        assert drafts(new.frames, start["message_id"]) == cumulative
        assert drafts(packed.frames, start["message_id"]) == cumulative
        completes = [c.seen("message.complete", message_id=start["message_id"]) for c in (old, new, packed)]
        assert completes[0][0]["text"] == completes[1][0]["text"] == completes[2][0]["text"]
        # Packed: continuations positional, each whole delta naming its message's stream; two messages, two
        # streams. Append objects without delta_packed never name one.
        packed_texts = [r for r in packed.raw if isinstance(r, str)]
        assert len(packed_texts) == len(packed.raw)  # the server sends text frames only
        wholes = [json.loads(r) for r in packed_texts if r.startswith('{"type":"message.delta"')]
        assert len({w["stream"] for w in wholes}) == 2
        assert all(w["offset"] == 0 for w in wholes)
        assert sum(r.startswith('["d",') for r in packed_texts) > len(wholes)
        assert not any("stream" in f for f in new.frames)
        assert not any(isinstance(json.loads(r), list) for r in new.raw)
        # The old client's frames are the protocol's cumulative ones, key for key.
        for raw in old.raw:
            frame = json.loads(raw)
            if frame["type"] == "message.delta":
                assert set(frame) == {"type", "ts", "conversation_id", "message_id", "text"}
    finally:
        await old.close()
        await new.close()
        await packed.close()
