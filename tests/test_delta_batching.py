"""Append deltas go out as they come, and are batched only where a connection is behind: a delta whose
message's previous delta still waits in the socket's queue is folded into it (`Connection.send_delta`),
exact through a retraction, in order around every other frame, within the socket's byte bound. A
cumulative client's window grows with the draft. End to end (a real server, the demo Hermes): an idle
server sends every Hermes delta; after a stalled event loop, ten runs' deltas go out joined, and every
client's text is exact.

The hub-level tests hold an in-memory socket (`tests.test_delta_append.Socket`) to make a client that
stops reading."""

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from prometheus_client import REGISTRY

import hermes_client as hc
from demo_hermes.turn import chunk_text
from pheby.protocol.coalesce import FULL_WINDOW_CHARS, SHORTEST_WINDOW_SECONDS, CoalescingHub, growing_window
from pheby.protocol.frames import MessageComplete, MessageDelta, MessageStart, encode_event
from pheby.protocol.hub import CLOSE_TRY_AGAIN_LATER, Connection
from pheby.runs.translate import Emit, RunView, joined_deltas, translate
from pheby.settings import Settings
from tests.live_server import LiveServer
from tests.polling import until
from tests.test_delta_append import ACCOUNT, CONVERSATION, MESSAGE, Socket, connect, delivered, drafts
from tests.ws_client import PhebyClient

pytestmark = pytest.mark.anyio


def growing(words: int, message_id: str = MESSAGE) -> list[MessageDelta]:
    """A draft growing a word at a time; at the 60th word a backquote shows, then is hidden again (a `MEDIA:`
    tag completed): the draft shrinks, a retraction."""
    texts: list[str] = []
    text = ""
    for index in range(words):
        text += f"w{index} "
        if index == 60:
            texts.append(text + "`")
        texts.append(text)
    return [MessageDelta(conversation_id=CONVERSATION, message_id=message_id, text=t) for t in texts]


def folds() -> float:
    """How many append deltas were folded so far (this process's servers, and its hubs)."""
    return REGISTRY.get_sample_value("pheby_ws_deltas_folded_total") or 0.0


def delta_frames_queued() -> float:
    return REGISTRY.get_sample_value("pheby_ws_frames_sent_total", {"type": "message.delta"}) or 0.0


def delta_frames(socket: Socket, message_id: str = MESSAGE) -> int:
    return sum(1 for f in socket.frames if f["type"] == "message.delta" and f["message_id"] == message_id)


@pytest.mark.parametrize("packed", [False, True], ids=["objects", "packed"])
async def test_deltas_go_out_one_by_one_while_the_socket_keeps_up_and_fold_while_it_is_behind(packed: bool) -> None:
    hub = CoalescingHub()  # the default windows: append deltas are held by no window
    connection, socket = connect(hub, delta_append=True, delta_packed=packed)
    deltas = growing(200)
    for count, event in enumerate(deltas[:10], 1):  # the socket keeps up: a frame for every delta
        hub.broadcast(ACCOUNT, event)
        await delivered(socket, count)
    assert drafts(socket.frames, MESSAGE) == [d.text for d in deltas[:10]]

    socket.open.clear()  # the client stops reading
    folded, queued = folds(), delta_frames_queued()
    hub.broadcast(ACCOUNT, deltas[10])
    await until(lambda: not connection.holds_unsent_delta(MESSAGE), "the writer holding the frame")
    for event in deltas[11:]:  # the retraction among them
        hub.broadcast(ACCOUNT, event)
    assert connection.holds_unsent_delta(MESSAGE)
    assert folds() - folded == len(deltas) - 12
    socket.open.set()
    await until(lambda: delta_frames(socket) == 12, "the held frame and the folded one written")
    await asyncio.sleep(0.05)
    assert delta_frames(socket) == 12  # the one being written when it stopped reading, then one for the rest
    assert delta_frames_queued() - queued == 2  # a folded delta is no frame (`pheby_ws_frames_sent_total`)
    shown = drafts(socket.frames, MESSAGE)
    assert shown[-1] == deltas[-1].text  # exact
    texts = [d.text for d in deltas]
    assert all(t in texts for t in shown)
    assert [texts.index(t) for t in shown] == sorted(texts.index(t) for t in shown)


async def test_deltas_of_several_messages_fold_each_into_its_own_and_never_across_another_frame() -> None:
    hub = CoalescingHub()
    connection, socket = connect(hub, delta_append=True, delta_packed=True)
    first, second = growing(5, "draft-a"), growing(5, "draft-b")
    socket.open.clear()
    hub.broadcast(ACCOUNT, first[0])  # taken by the writer, held there
    await until(lambda: not connection.holds_unsent_delta("draft-a"), "the writer holding the frame")
    hub.broadcast(ACCOUNT, second[0])  # waits
    hub.broadcast(ACCOUNT, first[1])  # waits: its message's last frame is being written, not waiting
    hub.broadcast(ACCOUNT, second[1])  # folded into the second's waiting delta
    hub.broadcast(ACCOUNT, first[2])  # folded into the first's waiting delta
    hub.broadcast(ACCOUNT, MessageStart(conversation_id=CONVERSATION, run_id="r2", message_id="draft-c"))
    hub.broadcast(ACCOUNT, first[3])  # after another frame: never folded into a delta before it
    hub.broadcast(ACCOUNT, second[4])
    socket.open.set()
    await delivered(socket, 6)
    order = [(f["type"], f.get("message_id")) for f in socket.frames]
    assert order == [
        ("message.delta", "draft-a"),
        ("message.delta", "draft-b"),
        ("message.delta", "draft-a"),
        ("message.start", "draft-c"),
        ("message.delta", "draft-a"),
        ("message.delta", "draft-b"),
    ]
    assert drafts(socket.frames, "draft-a") == [first[0].text, first[2].text, first[3].text]
    assert drafts(socket.frames, "draft-b") == [second[1].text, second[4].text]


async def test_a_folded_delta_past_the_sockets_byte_bound_closes_it_1013() -> None:
    hub = CoalescingHub()
    _, socket = connect(hub, delta_append=True, delta_packed=True, max_bytes=4096)
    socket.open.clear()
    for event in growing(1000):  # the folded frame grows towards the whole draft (~6 KB)
        hub.broadcast(ACCOUNT, event)
    await until(lambda: socket.closed_with is not None, "the socket closed")
    assert socket.closed_with == CLOSE_TRY_AGAIN_LATER


async def test_a_paced_clients_deltas_wait_for_its_pace_folded_and_any_other_frame_sends_them_at_once() -> None:
    """`delta_paced` (Pheby Web): one delta a pace, those in between folded into it; the pace is long here, so
    nothing but the pace or a frame queued behind it can let the waiting delta go."""
    hub = CoalescingHub()
    paced_connection, paced = connect(hub, delta_append=True, delta_packed=True, delta_pace=600.0)
    _, unpaced = connect(hub, delta_append=True, delta_packed=True)
    deltas = growing(80)  # the retraction among them
    for event in deltas:
        hub.broadcast(ACCOUNT, event)
        await asyncio.sleep(0)  # each written where the socket keeps up
    await delivered(unpaced, len(deltas))
    await delivered(paced, 1)  # the first at once: the pace starts with it
    assert paced_connection.holds_unsent_delta(MESSAGE)  # the rest, folded into one that waits
    assert delta_frames(paced) == 1
    complete = MessageComplete(conversation_id=CONVERSATION, message_id=MESSAGE, text=deltas[-1].text)
    hub.broadcast(ACCOUNT, complete)  # must come after the text: the waiting delta goes first, at once
    await delivered(paced, 3)
    assert [frame["type"] for frame in paced.frames] == ["message.delta", "message.delta", "message.complete"]
    assert drafts(paced.frames, MESSAGE) == [deltas[0].text, deltas[-1].text]
    assert drafts(unpaced.frames, MESSAGE) == [event.text for event in deltas]


async def test_a_paced_client_gets_a_delta_a_pace_while_text_streams() -> None:
    hub = CoalescingHub()
    _, paced = connect(hub, delta_append=True, delta_packed=True, delta_pace=0.05)
    deltas = growing(100)
    started = time.monotonic()
    for event in deltas:
        hub.broadcast(ACCOUNT, event)
        await asyncio.sleep(0.002)
    await until(lambda: drafts(paced.frames, MESSAGE)[-1:] == [deltas[-1].text], "the last text delivered")
    paces = (time.monotonic() - started) / 0.05
    assert 2 <= delta_frames(paced) <= paces + 2  # one at the start, then at most one a pace
    texts = [event.text for event in deltas]
    assert [texts.index(text) for text in drafts(paced.frames, MESSAGE)] == sorted(
        texts.index(text) for text in drafts(paced.frames, MESSAGE)
    )


def test_a_cumulative_window_grows_with_the_draft() -> None:
    assert growing_window(0.1, 0) == SHORTEST_WINDOW_SECONDS
    assert growing_window(0.1, FULL_WINDOW_CHARS // 2) == pytest.approx(0.05)
    assert growing_window(0.1, FULL_WINDOW_CHARS) == growing_window(0.1, 10 * FULL_WINDOW_CHARS) == 0.1
    assert growing_window(0.005, 0) == 0.005  # never longer than the window set


async def test_a_short_draft_is_held_a_short_window_and_a_long_one_the_whole() -> None:
    hub = CoalescingHub(delta_window_seconds=0.1)
    cumulative = Socket()
    hub.add(Connection(ACCOUNT, cumulative.send_text, cumulative.close))
    hub.broadcast(ACCOUNT, MessageDelta(conversation_id=CONVERSATION, message_id="short", text="Hi there"))
    assert hub.delta_held_for("short") <= SHORTEST_WINDOW_SECONDS
    long_text = "word " * FULL_WINDOW_CHARS
    hub.broadcast(ACCOUNT, MessageDelta(conversation_id=CONVERSATION, message_id="long", text=long_text))
    assert hub.delta_held_for("long") == pytest.approx(0.1, abs=0.01)
    for message_id, text in (("short", "Hi there"), ("long", long_text)):
        hub.broadcast(ACCOUNT, MessageComplete(conversation_id=CONVERSATION, message_id=message_id, text=text))
    assert hub.coalescer.pending_messages() == 0


def test_a_deltas_ts_is_to_the_second_and_its_last_key_so_a_runs_frames_repeat_it() -> None:
    """A run's deltas follow each other within the second; with compression, a `ts` that changed in every frame
    cost a cumulative frame more than its new words, and one that changed before the text parted each frame from
    the one before (bench/stream_bytes.py). Other events keep milliseconds."""
    before = datetime.now(UTC).replace(microsecond=0)
    view = RunView("run", CONVERSATION, MESSAGE, mint=lambda: "t")
    [made] = translate(view, hc.MessageDelta(run_id="h", timestamp=0.0, delta="Hi"))
    assert isinstance(made, Emit)
    assert isinstance(made.event, MessageDelta)
    stamped = datetime.fromisoformat(made.event.ts)
    assert stamped.microsecond == 0
    assert stamped.tzinfo == UTC
    assert before <= stamped <= datetime.now(UTC)
    assert list(json.loads(encode_event(made.event))) == ["type", "conversation_id", "message_id", "text", "ts"]
    complete = MessageComplete(conversation_id=CONVERSATION, message_id=MESSAGE, text="Hi")
    assert "." in complete.ts


# --- end to end: a real server, real clients, the demo Hermes ----------------------------------------


def words(count: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(count))


@pytest.fixture
def deltas_read(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many text deltas the (in-process) server's run readers got to broadcast: Hermes's deltas, those of
    one read joined into one (`joined_deltas`; on a busy machine a read may take two)."""
    counted = [0]
    original = hc.HermesClient.run_event_batches

    async def counting(
        self: hc.HermesClient, run_id: str, last_event_id: int | str | None = None, **kwargs: Any
    ) -> AsyncIterator[list[hc.RunEvent]]:
        async for batch in original(self, run_id, last_event_id, **kwargs):
            counted[0] += sum(isinstance(event, hc.MessageDelta) for event in joined_deltas(batch))
            yield batch

    monkeypatch.setattr(hc.HermesClient, "run_event_batches", counting)
    return counted


async def test_an_idle_server_sends_every_hermes_delta_as_it_comes(
    start_live_server: Callable[[Settings], LiveServer], live_settings: Callable[..., Settings], deltas_read: list[int]
) -> None:
    server = start_live_server(live_settings())  # the default windows
    text = words(60, "w")
    async with await PhebyClient.connect(
        server.ws_url, server.secret, features=["delta_append", "delta_packed"]
    ) as client:
        created = await client.request("conversation.create", "conversation.created", name="idle")
        folded = folds()
        accepted = await client.request(
            "chat.send", "run.accepted", conversation_id=created["conversation_id"], text=f"/demo say {text}"
        )
        message_id = f"draft-{accepted['run_id']}"
        complete = await client.arrived("message.complete", 20, message_id=message_id)
        shown = drafts(client.frames, message_id)
        assert shown[-1] == complete["text"] == text
        # Every delta read is a frame of its own, but for those folded where the socket was behind (this is a
        # shared machine: a pause shows as folds, or as deltas joined in one read, never as a frame held back by
        # a window). Idle, that is one frame per Hermes delta.
        assert len(shown) + folds() - folded == deltas_read[0]
        assert deltas_read[0] <= len(chunk_text(text))


async def test_after_a_stalled_loop_ten_runs_deltas_go_out_joined_and_every_client_rebuilds_its_text(
    start_live_server: Callable[[Settings], LiveServer], live_settings: Callable[..., Settings]
) -> None:
    server = start_live_server(live_settings())
    texts = [words(600, f"r{run}w") for run in range(10)]  # 6 s of text each: still streaming at the stall
    clients = [
        await PhebyClient.connect(server.ws_url, server.secret, features=["delta_append", "delta_packed"])
        for _ in range(2)
    ]
    try:
        runs: list[str] = []
        for text in texts:
            created = await clients[0].request("conversation.create", "conversation.created", name="stall")
            accepted = await clients[0].request(
                "chat.send", "run.accepted", conversation_id=created["conversation_id"], text=f"/demo say {text}"
            )
            runs.append(accepted["run_id"])
        # The server's loop stops for a second (a blocking call in it); Hermes streams on meanwhile. What piled
        # up is read in one go per run, its deltas joined (`pheby.runs.translate.joined_deltas`).
        loop = server.server.servers[0].get_loop()
        loop.call_soon_threadsafe(time.sleep, 1.0)
        for client in clients:
            for run_id in runs:
                await client.arrived("message.complete", 30, message_id=f"draft-{run_id}")
        for client in clients:
            frames = 0
            for run_id, text in zip(runs, texts, strict=True):
                complete = client.seen("message.complete", message_id=f"draft-{run_id}")[0]
                shown = drafts(client.frames, complete["message_id"])
                assert shown[-1] == complete["text"] == text  # exact
                frames += len(shown)
            assert frames < sum(len(chunk_text(text)) for text in texts)  # what piled up went out joined
    finally:
        for client in clients:
            await client.close()
