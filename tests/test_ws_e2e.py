"""The Pheby protocol end to end: a real uvicorn server, the `websockets` client, the demo Hermes.

Every frame any client receives here is scanned at the end of each test for things that must
never reach a client: server paths, the Hermes URL and key, the owner secret.
"""

import asyncio
import contextlib
import functools
import itertools
import json
import re
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed

from demo_hermes import DemoHermesServer
from hermes_client import HermesNotFound
from pheby.errors import NotFound
from pheby.server import WS_MAX_SIZE
from pheby.settings import Settings
from pheby.store.accounts import Accounts, HermesAccountSettings
from tests.database import query
from tests.live_server import LiveServer, hermes_settings
from tests.polling import until
from tests.ws_client import Frame, PhebyClient

pytestmark = [pytest.mark.anyio, pytest.mark.live]

# The tests marked `both_engines` are this module's part of the end-to-end set that runs on PostgreSQL too:
# conversations, runs, decisions, history, reconnects, restarts, isolation. The rest (frames, hellos, limits)
# never reach the database's differences.
MiB = 1024 * 1024
ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+00:00$")


@pytest.fixture
def clients(live_server: LiveServer, demo_hermes: DemoHermesServer) -> Iterator[list[PhebyClient]]:
    """Clients opened by the test; their frames are scanned for leaks afterwards."""
    opened: list[PhebyClient] = []
    yield opened
    forbidden = [
        live_server.secret,
        str(live_server.settings.data_dir),
        demo_hermes.base_url,
        demo_hermes.api_key,
        demo_hermes.dashboard_token,
        str(demo_hermes.media_dir),
    ]
    for client in opened:
        for frame in client.frames:
            text = json.dumps(frame)
            for secret in forbidden:
                assert secret not in text, f"{frame['type']} leaked {secret!r}"


@pytest.fixture
def connect(live_server: LiveServer, clients: list[PhebyClient]) -> Callable[..., Any]:
    async def open_client(secret: str | None = live_server.secret, **kwargs: Any) -> PhebyClient:
        client = await PhebyClient.connect(live_server.ws_url, secret, **kwargs)
        clients.append(client)
        return client

    return open_client


@pytest.fixture
async def owner(connect: Callable[..., Any]) -> AsyncIterator[PhebyClient]:
    client = await connect()
    yield client
    await client.close()


async def new_conversation(client: PhebyClient, name: str = "Test chat") -> str:
    created = await client.request("conversation.create", "conversation.created", name=name)
    conversation_id: str = created["conversation_id"]
    return conversation_id


async def run_to_end(client: PhebyClient, conversation_id: str, text: str, timeout: float = 20) -> list[Frame]:
    """Send a chat and return every frame of that run, from run.accepted to run.finished."""
    start = len(client.frames)
    accepted = await client.request("chat.send", "run.accepted", conversation_id=conversation_id, text=text)
    assert accepted["type"] == "run.accepted", accepted
    await client.expect("run.finished", timeout=timeout, run_id=accepted["run_id"])
    return [
        f
        for f in client.frames[start:]
        if f.get("conversation_id") == conversation_id and not f["type"].startswith("conversation.")
    ]


def of_types(frames: list[Frame], *types: str) -> list[Frame]:
    return [f for f in frames if f["type"] in types]


async def add_account(settings: Settings, name: str, hermes: HermesAccountSettings | None = None) -> str:
    db = settings.open_database()
    await db.open()
    try:
        accounts = Accounts(db)
        account = await accounts.create(name)
        if hermes is not None:
            await accounts.set_hermes(name, hermes)
        return (await accounts.issue_token(account.id, "api", None)).token
    finally:
        await db.close()


# --- handshake -------------------------------------------------------------------------------


async def test_hello_ready_ping_and_timestamps(connect: Callable[..., Any], live_server: LiveServer) -> None:
    client = await connect(secret=None)
    await client.send("hello", secret=live_server.secret, protocol_version=1, request_id="h1")
    ready = await client.expect("ready")
    assert ready["protocol_version"] == 1
    assert ready["server"] == "pheby"
    assert ready["request_id"] == "h1"
    assert ISO_UTC.match(ready["ts"])
    pong = await client.request("ping", "pong", request_id="p1")
    assert pong["type"] == "pong"
    assert pong["request_id"] == "p1"
    assert ISO_UTC.match(pong["ts"])


@pytest.mark.parametrize(
    ("first_frame", "code"),
    [
        ({"type": "hello", "secret": "wrong-secret", "protocol_version": 1}, "unauthorized"),
        ({"type": "hello", "secret": "SECRET", "protocol_version": 2}, "version_mismatch"),
        ({"type": "hello", "secret": "SECRET"}, "version_mismatch"),
        ({"type": "hello", "secret": "SECRET", "protocol_version": "1"}, "version_mismatch"),
        ({"type": "hello", "secret": "SECRET", "protocol_version": 1.0}, "version_mismatch"),
        ({"type": "hello", "secret": "SECRET", "protocol_version": True}, "version_mismatch"),
        ({"type": "hello", "secret": "SECRET", "protocol_version": 2, "client": "v2"}, "version_mismatch"),
        ({"type": "hello", "secret": "SECRET", "protocol_version": 1, "client": "x"}, "unauthorized"),
        ({"type": "hello", "protocol_version": 1}, "unauthorized"),
        ({"type": "hello", "secret": 7, "protocol_version": 1}, "unauthorized"),
        ({"type": "ping"}, "unauthorized"),
        ({"type": "teleport"}, "unauthorized"),
        ({"secret": "SECRET", "protocol_version": 1}, "unauthorized"),
    ],
)
async def test_failed_hello_is_answered_and_closed(
    connect: Callable[..., Any], live_server: LiveServer, first_frame: dict[str, Any], code: str
) -> None:
    client = await connect(secret=None)
    if first_frame.get("secret") == "SECRET":
        first_frame["secret"] = live_server.secret
    await client.send_raw(json.dumps({**first_frame, "request_id": "h"}))
    error = await client.expect("error")
    assert error["error"]["code"] == code
    assert error["request_id"] == "h"
    assert await client.closed() is not None


@pytest.mark.parametrize(
    "first_frame",
    [
        "{not json",
        json.dumps(["hello"]),
    ],
    ids=["invalid-json", "not-an-object"],  # a frame too large: tests/test_ws_before_hello.py
)
async def test_a_first_frame_that_is_no_hello_is_unauthorized(connect: Callable[..., Any], first_frame: str) -> None:
    client = await connect(secret=None)
    await client.send_raw(first_frame)
    error = await client.expect("error")
    assert error["error"]["code"] == "unauthorized"
    assert await client.closed() is not None


async def test_every_failed_hello_counts_toward_the_lockout(
    connect: Callable[..., Any], live_server: LiveServer
) -> None:
    for first_frame in (
        "{not json",
        json.dumps({"type": "ping"}),
        json.dumps({"type": "hello", "secret": live_server.secret, "protocol_version": 2}),
        json.dumps({"type": "hello", "secret": live_server.secret, "protocol_version": 1, "extra": 1}),
        json.dumps({"type": "hello", "protocol_version": 1}),
    ):
        client = await connect(secret=None)
        await client.send_raw(first_frame)
        assert (await client.expect("error"))["error"]["code"] in ("unauthorized", "version_mismatch")
        await client.closed()
    locked = await connect(secret=None)
    with contextlib.suppress(ConnectionClosed):  # the refusal may come before the hello is even sent
        await locked.send("hello", secret=live_server.secret, protocol_version=1)
    assert (await locked.expect("error"))["error"]["code"] == "rate_limited"


async def test_auth_timeout(connect: Callable[..., Any]) -> None:
    client = await connect(secret=None)  # the test server allows 1 s for hello
    error = await client.expect("error", timeout=5)
    assert error["error"]["code"] == "auth_timeout"
    assert await client.closed() is not None


@pytest.mark.both_engines
async def test_lockout_after_five_failed_hellos(connect: Callable[..., Any], live_server: LiveServer) -> None:
    for _ in range(5):
        client = await connect(secret=None)
        await client.send("hello", secret="wrong-secret-value", protocol_version=1)
        assert (await client.expect("error"))["error"]["code"] == "unauthorized"
        await client.closed()
    locked = await connect(secret=None)
    with contextlib.suppress(ConnectionClosed):  # the refusal may come before the hello is even sent
        await locked.send("hello", secret=live_server.secret, protocol_version=1)
    error = await locked.expect("error")
    assert error["error"]["code"] == "rate_limited"
    assert await locked.closed() is not None


async def test_sockets_opened_before_a_lockout_get_no_more_guesses(
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    clients: list[PhebyClient],
) -> None:
    server = start_live_server(live_settings(ws_hello_timeout=10.0))
    early = [await PhebyClient.connect(server.ws_url, None) for _ in range(7)]  # all open before the lockout
    clients.extend(early)
    for client in early[:5]:
        await client.send("hello", secret="wrong-secret-value", protocol_version=1)
        assert (await client.expect("error"))["error"]["code"] == "unauthorized"
    await early[5].send("hello", secret="wrong-secret-value", protocol_version=1)
    assert (await early[5].expect("error"))["error"]["code"] == "rate_limited"  # no sixth guess
    await early[6].send("hello", secret=server.secret, protocol_version=1, request_id="late")
    refused = await early[6].expect("error")
    assert refused["error"]["code"] == "rate_limited"
    assert refused["request_id"] == "late"
    assert await early[6].closed() is not None
    assert early[6].seen("ready") == []


async def test_concurrent_hellos_get_no_more_guesses_than_the_limit(
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    clients: list[PhebyClient],
) -> None:
    server = start_live_server(live_settings(ws_hello_timeout=10.0))
    sockets = [await PhebyClient.connect(server.ws_url, None) for _ in range(8)]  # 8: the most before hello
    clients.extend(sockets)
    await asyncio.gather(
        *(c.send("hello", secret=f"wrong-secret-{i}", protocol_version=1) for i, c in enumerate(sockets))
    )
    codes = [(await c.expect("error"))["error"]["code"] for c in sockets]
    assert sorted(codes) == ["rate_limited"] * 3 + ["unauthorized"] * 5


async def test_forwarded_for_counts_only_from_trusted_proxies(
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    clients: list[PhebyClient],
) -> None:
    server = start_live_server(live_settings(trusted_proxies=("127.0.0.0/8",)))  # a network, as behind a load balancer

    async def hello(forwarded_for: str, secret: str) -> str:
        client = await PhebyClient.connect(server.ws_url, None, additional_headers={"X-Forwarded-For": forwarded_for})
        clients.append(client)
        with contextlib.suppress(ConnectionClosed):  # a locked-out address is refused before its hello
            await client.send("hello", secret=secret, protocol_version=1)
        frame = await client.wait_for(lambda f: f["type"] in ("ready", "error"))
        await client.close()
        return "ready" if frame["type"] == "ready" else frame["error"]["code"]

    for _ in range(5):
        assert await hello("203.0.113.7", "wrong-secret-value") == "unauthorized"
    assert await hello("203.0.113.7", server.secret) == "rate_limited"
    assert await hello("203.0.113.8", server.secret) == "ready"  # another client behind the same proxy


# --- errors and limits -----------------------------------------------------------------------


async def test_bad_frames_are_answered_and_the_connection_stays_open(owner: PhebyClient) -> None:
    async def error_for(raw: str | bytes) -> Frame:
        await owner.send_raw(raw)
        return await owner.expect("error")

    assert (await error_for("{not json"))["error"]["code"] == "invalid_json"
    unknown = await error_for(json.dumps({"type": "teleport", "request_id": "u1"}))
    assert unknown["error"]["code"] == "unknown_type"
    assert unknown["request_id"] == "u1"
    missing = await error_for(json.dumps({"type": "conversation.rename", "request_id": "b1"}))
    assert missing["error"]["code"] == "bad_request"
    assert missing["request_id"] == "b1"
    mistyped = await error_for(json.dumps({"type": "conversation.open", "conversation_id": 7}))
    assert mistyped["error"]["code"] == "bad_request"
    extra = await error_for(json.dumps({"type": "ping", "surprise": True}))
    assert extra["error"]["code"] == "bad_request"
    assert (await error_for(json.dumps(["ping"])))["error"]["code"] == "bad_request"
    assert (await error_for(json.dumps({"no": "type"})))["error"]["code"] == "bad_request"
    pong = await owner.request("ping", "pong")
    assert pong["type"] == "pong"


async def test_frame_over_two_mib_is_answered_too_large(owner: PhebyClient) -> None:
    frame = json.dumps({"type": "ping", "request_id": "big", "pad": ""})
    padding = "x" * (2 * MiB + 1 - len(frame))
    raw = frame.replace('"pad": ""', f'"pad": "{padding}"')
    assert len(raw.encode()) == 2 * MiB + 1
    await owner.send_raw(raw)
    error = await owner.expect("error")
    assert error["error"]["code"] == "too_large"
    assert error["request_id"] == "big"
    assert (await owner.request("ping", "pong"))["type"] == "pong"


@pytest.mark.parametrize("size", [3 * MiB, WS_MAX_SIZE - 1024])
async def test_frames_up_to_the_ceiling_are_answered_too_large(owner: PhebyClient, size: int) -> None:
    frame = json.dumps({"type": "ping", "request_id": "huge", "pad": ""})
    await owner.send_raw(frame.replace('"pad": ""', f'"pad": "{"x" * (size - len(frame))}"'))
    error = await owner.expect("error")
    assert error["error"]["code"] == "too_large"
    assert error["request_id"] == "huge"
    assert (await owner.request("ping", "pong"))["type"] == "pong"


async def test_frames_over_the_ceiling_close_the_connection_with_1009(owner: PhebyClient) -> None:
    with contextlib.suppress(ConnectionClosed):
        await owner.send_raw("x" * (WS_MAX_SIZE + 1))
    assert await owner.closed() == 1009


async def test_chat_limits(owner: PhebyClient) -> None:
    conversation_id = await new_conversation(owner)
    long_text = await owner.request("chat.send", "run.accepted", conversation_id=conversation_id, text="x" * 64_001)
    assert long_text["error"]["code"] == "too_large"
    blank = await owner.request("chat.send", "run.accepted", conversation_id=conversation_id, text="   ")
    assert blank["error"]["code"] == "bad_request"
    unknown = await owner.request("chat.send", "run.accepted", conversation_id="f" * 32, text="hi")
    assert unknown["error"]["code"] == "conversation_not_found"
    too_many = await owner.request(
        "chat.send",
        "run.accepted",
        conversation_id=conversation_id,
        text="hi",
        attachment_ids=[str(i) for i in range(11)],
    )
    assert too_many["error"]["code"] == "bad_request"


async def test_internal_error_reveals_nothing(
    connect: Callable[..., Any], live_server: LiveServer, demo_hermes: DemoHermesServer
) -> None:
    # An account whose Hermes is not running: the run can't start.
    token = await add_account(
        live_server.settings, "offline", HermesAccountSettings(url="http://127.0.0.1:9", api_key="k" * 20)
    )
    client = await connect(secret=token)
    conversation_id = await new_conversation(client)
    error = await client.request("chat.send", "run.accepted", conversation_id=conversation_id, text="hi")
    assert error["error"]["code"] == "internal_error"
    assert "127.0.0.1" not in error["error"]["message"]
    assert (await client.request("ping", "pong"))["type"] == "pong"


# --- conversations ---------------------------------------------------------------------------


@pytest.mark.both_engines
@pytest.mark.in_cluster
async def test_conversation_lifecycle_and_broadcasts(connect: Callable[..., Any]) -> None:
    first, second = await connect(), await connect()
    created = await first.request("conversation.create", "conversation.created", name="Project X")
    conversation_id = created["conversation_id"]
    assert re.fullmatch(r"[0-9a-f]{32}", conversation_id)
    assert created["name"] == "Project X"
    for client in (first, second):
        await client.expect("conversation.updated", conversation_id=conversation_id, name="Project X")

    unnamed = await first.request("conversation.create", "conversation.created")
    assert unnamed["name"] == "New chat"

    listing = await second.request("conversation.list", "conversation.snapshot")
    entry = next(c for c in listing["conversations"] if c["conversation_id"] == conversation_id)
    assert entry == {
        "conversation_id": conversation_id,
        "name": "Project X",
        "session_id": None,
        "last_active": None,
        "source": "hermes",
    }

    renamed = await first.request(
        "conversation.rename", "conversation.renamed", conversation_id=conversation_id, name="Y"
    )
    assert renamed["name"] == "Y"
    await second.wait_for(lambda f: f["type"] == "conversation.renamed" and "request_id" not in f)

    opened = await first.request("conversation.open", "conversation.history", conversation_id=conversation_id)
    assert opened["messages"] == []
    assert opened["has_more"] is False
    assert opened["run"] is None
    for key in ("attachments", "tools", "approvals", "clarifications"):
        assert opened[key] == []

    deleted = await first.request("conversation.delete", "conversation.deleted", conversation_id=conversation_id)
    assert deleted["type"] == "conversation.deleted"
    # Like a rename, a delete reaches the account's other clients (without the sender's request_id).
    await second.wait_for(
        lambda f: (
            f["type"] == "conversation.deleted" and f["conversation_id"] == conversation_id and "request_id" not in f
        )
    )
    for request, reply in (
        ("conversation.open", "conversation.history"),
        ("conversation.rename", "conversation.renamed"),
        ("conversation.delete", "conversation.deleted"),
        ("yolo.current", "yolo.snapshot"),
    ):
        extra = {"name": "z"} if request == "conversation.rename" else {}
        gone = await first.request(request, reply, conversation_id=conversation_id, **extra)
        assert gone["error"]["code"] == "conversation_not_found"


async def test_delete_removes_the_hermes_session(owner: PhebyClient, demo_hermes: DemoHermesServer) -> None:
    from tests.demo_hermes_server import client_for

    conversation_id = await new_conversation(owner)
    await run_to_end(owner, conversation_id, "remember me")
    listing = await owner.request("conversation.list", "conversation.snapshot")
    session_id = next(c for c in listing["conversations"] if c["conversation_id"] == conversation_id)["session_id"]
    assert session_id
    async with client_for(demo_hermes) as hermes:
        assert await hermes.session_messages(session_id)
        await owner.request("conversation.delete", "conversation.deleted", conversation_id=conversation_id)
        with pytest.raises(HermesNotFound):
            await hermes.get_session(session_id)


async def test_delete_goes_ahead_when_the_run_can_no_longer_be_cancelled(
    owner: PhebyClient, live_server: LiveServer, demo_hermes: DemoHermesServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.demo_hermes_server import client_for

    conversation_id = await new_conversation(owner)
    await run_to_end(owner, conversation_id, "remember me")
    await owner.request("chat.send", "run.accepted", conversation_id=conversation_id, text="/demo slow")
    await owner.expect("message.delta")
    services = live_server.services

    async def cannot_interrupt(*_: object) -> None:
        raise NotFound("The run can no longer be interrupted")

    monkeypatch.setattr(services.runs, "cancel", cannot_interrupt)
    listing = await owner.request("conversation.list", "conversation.snapshot")
    session_id = next(c for c in listing["conversations"] if c["conversation_id"] == conversation_id)["session_id"]
    deleted = await owner.request("conversation.delete", "conversation.deleted", conversation_id=conversation_id)
    assert deleted["type"] == "conversation.deleted", deleted
    listing = await owner.request("conversation.list", "conversation.snapshot")
    assert all(c["conversation_id"] != conversation_id for c in listing["conversations"])
    async with client_for(demo_hermes) as hermes:
        with pytest.raises(HermesNotFound):
            await hermes.get_session(session_id)


def answers(request_id: str, frame: dict[str, Any]) -> bool:
    return frame.get("request_id") == request_id


@pytest.mark.both_engines
async def test_a_delete_racing_the_first_send_leaves_no_run_or_session(
    owner: PhebyClient, live_server: LiveServer, demo_hermes: DemoHermesServer
) -> None:
    """The run slot is taken before Hermes names the run: a delete then waits for it, stops it, and
    removes the session the run made, instead of failing or leaving the run going."""
    from tests.demo_hermes_server import client_for

    other = await PhebyClient.connect(live_server.ws_url, live_server.secret)
    for _ in range(8):
        conversation_id = await new_conversation(owner)
        send_id = await owner.send("chat.send", conversation_id=conversation_id, text="/demo slow")
        deleted = await other.request("conversation.delete", "conversation.deleted", conversation_id=conversation_id)
        assert deleted["type"] == "conversation.deleted", deleted
        reply = await owner.wait_for(functools.partial(answers, send_id))
        if reply["type"] == "run.accepted":  # it got going: it must end, cancelled, not run on
            finished = await owner.expect("run.finished", run_id=reply["run_id"])
            assert finished["status"] == "cancelled"
        async with client_for(demo_hermes) as hermes:
            with pytest.raises(HermesNotFound):
                await hermes.get_session(f"pheby_{conversation_id}")
    await other.close()


async def test_a_send_slow_to_start_loses_to_a_delete(
    owner: PhebyClient, live_server: LiveServer, demo_hermes: DemoHermesServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A send still preparing its input when a delete arrives is refused, and no Hermes run is made;
    a send arriving while the delete is under way is refused too."""
    from tests.demo_hermes_server import client_for

    attachments = live_server.services.attachments
    prepare = attachments.prepare_chat_input

    async def slow_prepare(*args: Any) -> Any:
        await asyncio.sleep(0.5)
        return await prepare(*args)

    monkeypatch.setattr(attachments, "prepare_chat_input", slow_prepare)
    other = await PhebyClient.connect(live_server.ws_url, live_server.secret)
    third = await PhebyClient.connect(live_server.ws_url, live_server.secret)
    conversation_id = await new_conversation(owner)
    send_id = await owner.send("chat.send", conversation_id=conversation_id, text="hello")
    await asyncio.sleep(0.1)  # the send holds the run slot, preparing
    delete_id = await other.send("conversation.delete", conversation_id=conversation_id)
    await asyncio.sleep(0.1)  # the delete is under way, waiting for the send to start
    late = await third.request("chat.send", "run.accepted", conversation_id=conversation_id, text="late")
    assert late["error"]["code"] == "conversation_not_found"
    assert (await other.wait_for(functools.partial(answers, delete_id)))["type"] == "conversation.deleted"
    refused = await owner.wait_for(functools.partial(answers, send_id))
    assert refused["error"]["code"] == "conversation_not_found", refused
    assert owner.seen("run.accepted", conversation_id=conversation_id) == []
    async with client_for(demo_hermes) as hermes:
        with pytest.raises(HermesNotFound):
            await hermes.get_session(f"pheby_{conversation_id}")
    await other.close()
    await third.close()


@pytest.mark.both_engines
async def test_history_keeps_the_turns_hermes_compaction_hides(
    owner: PhebyClient, demo_hermes: DemoHermesServer
) -> None:
    conversation_id = await new_conversation(owner)
    for text in ("one", "two", "three"):
        await run_to_end(owner, conversation_id, text)
    before = await owner.request("conversation.open", "conversation.history", conversation_id=conversation_id)
    assert len(before["messages"]) == 6
    await asyncio.sleep(0.3)  # the server has logged the last turn

    demo_hermes.app.state.demo.sessions.compact(f"pheby_{conversation_id}", keep_last=2)
    after = await owner.request("conversation.open", "conversation.history", conversation_id=conversation_id)
    assert after["messages"] == before["messages"]  # same ids and texts; no summary, no copies

    await run_to_end(owner, conversation_id, "four")
    latest = await owner.request("conversation.open", "conversation.history", conversation_id=conversation_id)
    texts = [(m["role"], m["text"]) for m in latest["messages"]]
    assert texts[:6] == [(m["role"], m["text"]) for m in before["messages"]]
    assert texts[6:] == [("user", "four"), ("assistant", "You said: four")]
    page = await owner.request("conversation.open", "conversation.history", conversation_id=conversation_id, limit=3)
    assert [m["text"] for m in page["messages"]] == ["You said: three", "four", "You said: four"]
    assert page["has_more"] is True


async def test_a_transcript_with_image_parts_still_opens_and_runs(
    owner: PhebyClient, demo_hermes: DemoHermesServer
) -> None:
    """0.19.0 stores a multimodal tool result (a screenshot) as a list of parts, not a string."""
    conversation_id = await new_conversation(owner)
    await run_to_end(owner, conversation_id, "look at this")
    sessions = demo_hermes.app.state.demo.sessions
    parts: Any = [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]
    sessions.add_message(sessions.get(f"pheby_{conversation_id}"), "tool", parts, tool_call_id="call_1")
    history = await owner.request("conversation.open", "conversation.history", conversation_id=conversation_id)
    assert [m["text"] for m in history["messages"]] == ["look at this", "You said: look at this"]
    frames = await run_to_end(owner, conversation_id, "and now?")
    assert frames[-1]["status"] == "completed"


def ends_or_refuses(run_id: str, request_id: str, frame: dict[str, Any]) -> bool:
    """The run's run.finished, or an error answering the request."""
    if frame.get("type") == "run.finished":
        return frame.get("run_id") == run_id
    return frame.get("type") == "error" and frame.get("request_id") == request_id


async def test_a_cancel_right_after_run_accepted_stops_the_run(owner: PhebyClient, live_server: LiveServer) -> None:
    other = await PhebyClient.connect(live_server.ws_url, live_server.secret)
    for _ in range(5):
        conversation_id = await new_conversation(owner)
        await owner.send("chat.send", conversation_id=conversation_id, text="/demo slow")
        accepted = await other.expect("run.accepted", conversation_id=conversation_id)
        cancel_id = await other.send("run.cancel", conversation_id=conversation_id, run_id=accepted["run_id"])
        answer = await other.wait_for(functools.partial(ends_or_refuses, accepted["run_id"], cancel_id))
        assert (answer["type"], answer.get("status")) == ("run.finished", "cancelled"), answer
    await other.close()


# --- runs ------------------------------------------------------------------------------------


@pytest.mark.both_engines
@pytest.mark.in_cluster
async def test_streamed_run_follows_the_state_machine(owner: PhebyClient) -> None:
    conversation_id = await new_conversation(owner)
    frames = await run_to_end(owner, conversation_id, "hello there")
    kinds = [f["type"] for f in frames]
    assert kinds[0] == "run.accepted"
    assert kinds[1] == "message.start"
    assert kinds[-2:] == ["message.complete", "run.finished"]
    assert set(kinds[2:-2]) == {"message.delta"}
    deltas = of_types(frames, "message.delta")
    assert len(deltas) >= 2  # coalesced (pheby/protocol/coalesce.py): first text at once, newest before the end
    for before, after in itertools.pairwise(deltas):
        assert after["text"].startswith(before["text"])  # cumulative
    complete = of_types(frames, "message.complete")[0]
    assert complete["text"] == "You said: hello there"
    start = of_types(frames, "message.start")[0]
    assert start["message_id"] == complete["message_id"] == deltas[0]["message_id"]
    finished = frames[-1]
    assert finished["status"] == "completed"
    assert "error" not in finished
    assert all(ISO_UTC.match(f["ts"]) for f in frames)

    history = await owner.request("conversation.open", "conversation.history", conversation_id=conversation_id)
    assert [(m["role"], m["text"]) for m in history["messages"]] == [
        ("user", "hello there"),
        ("assistant", "You said: hello there"),
    ]
    again = await owner.request("conversation.open", "conversation.history", conversation_id=conversation_id)
    assert [m["message_id"] for m in again["messages"]] == [m["message_id"] for m in history["messages"]]


@pytest.mark.both_engines
async def test_history_pages_and_feeds_the_next_run(owner: PhebyClient) -> None:
    conversation_id = await new_conversation(owner)
    for text in ("one", "two"):
        await run_to_end(owner, conversation_id, text)
    echo = of_types(await run_to_end(owner, conversation_id, "/demo echo"), "message.complete")[0]["text"]
    assert "history=4" in echo.replace(" ", "")  # the earlier turns went to Hermes as conversation_history

    newest = await owner.request("conversation.open", "conversation.history", conversation_id=conversation_id, limit=2)
    assert len(newest["messages"]) == 2
    assert newest["has_more"] is True
    assert newest["messages"][-1]["role"] == "assistant"
    older = await owner.request(
        "conversation.open",
        "conversation.history",
        conversation_id=conversation_id,
        limit=500,
        before_message_id=newest["messages"][0]["message_id"],
    )
    assert [m["text"] for m in older["messages"]][:2] == ["one", "You said: one"]
    assert older["has_more"] is False
    unknown = await owner.request(
        "conversation.open", "conversation.history", conversation_id=conversation_id, before_message_id="m999999"
    )
    assert unknown["error"]["code"] == "not_found"
    capped = await owner.request(
        "conversation.open", "conversation.history", conversation_id=conversation_id, limit=100000
    )
    assert capped["type"] == "conversation.history"


@pytest.mark.both_engines
@pytest.mark.in_cluster
async def test_one_run_per_conversation_and_cancel(owner: PhebyClient) -> None:
    conversation_id = await new_conversation(owner)
    accepted = await owner.request("chat.send", "run.accepted", conversation_id=conversation_id, text="/demo slow")
    run_id = accepted["run_id"]
    await owner.expect("message.delta")
    busy = await owner.request("chat.send", "run.accepted", conversation_id=conversation_id, text="again")
    assert busy["error"]["code"] == "run_active"
    stale = await owner.request("run.cancel", "run.finished", conversation_id=conversation_id, run_id="0" * 32)
    assert stale["error"]["code"] == "not_found"
    await owner.send("run.cancel", conversation_id=conversation_id, run_id=run_id)
    finished = await owner.expect("run.finished", run_id=run_id, timeout=5)
    assert finished["status"] == "cancelled"
    drafted = owner.seen("message.delta", conversation_id=conversation_id)[-1]["text"]
    completed = owner.seen("message.complete", conversation_id=conversation_id)
    assert [c["text"] for c in completed] == [drafted]  # the turn ends with what was drafted, before run.finished
    assert owner.frames.index(completed[0]) < owner.frames.index(finished)
    await asyncio.sleep(0.5)
    assert len(owner.seen("run.finished", run_id=run_id)) == 1
    late = await owner.request("run.cancel", "run.finished", conversation_id=conversation_id, run_id=run_id)
    assert late["error"]["code"] == "not_found"
    # The conversation is consistent and usable again.
    frames = await run_to_end(owner, conversation_id, "after cancel")
    assert frames[-1]["status"] == "completed"


async def test_failed_run(owner: PhebyClient) -> None:
    conversation_id = await new_conversation(owner)
    frames = await run_to_end(owner, conversation_id, "/demo fail")
    finished = frames[-1]
    assert finished["status"] == "failed"
    assert finished["error"]
    assert [f["type"] for f in frames[:2]] == ["run.accepted", "message.start"]
    assert frames[-2]["type"] == "message.complete"  # the spec's state machine holds for a failed turn too
    assert frames[-2]["message_id"] == frames[1]["message_id"]


HOSTILE_ERROR = (
    "Error code: 401 - provider https://api.provider.example/v1/chat said: Incorrect API key "
    "sk-proj-4f9a8b7c6d5e4f3a2b1c provided; config at /home/hermes/.hermes/config.yaml, "
    "upstream 10.0.3.7:8642, Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl"
)


async def test_a_failed_runs_error_reaches_the_client_scrubbed(owner: PhebyClient) -> None:
    conversation_id = await new_conversation(owner)
    frames = await run_to_end(owner, conversation_id, f"/demo fail {HOSTILE_ERROR}")
    finished = frames[-1]
    assert finished["status"] == "failed"
    error = finished["error"]
    assert error.startswith("Error code: 401")  # still says what went wrong
    # The port with its colon: a bare "8642" turns up in random hex ids now and then.
    for leaked in ("https://", "api.provider.example", "sk-proj", "/home/hermes", "config.yaml", "10.0.3.7", ":8642",
                   "eyJhbGci", "c2lnbmF0dXJl"):  # fmt: skip
        assert leaked not in json.dumps(frames), leaked


async def test_tool_events_are_structured_and_redacted(owner: PhebyClient) -> None:
    conversation_id = await new_conversation(owner)
    frames = await run_to_end(owner, conversation_id, "/demo tool")
    tools = of_types(frames, "tool.event")
    assert [t["status"] for t in tools] == ["running", "completed"]
    running, completed = tools
    assert running["tool_call_id"] == completed["tool_call_id"]
    assert running["tool_name"] == "web_search"
    assert running["run_id"] == frames[0]["run_id"]
    assert running["args_redacted"] == {"query": "cats", "api_key": "[redacted]"}
    assert "args_redacted" not in completed
    assert isinstance(completed["duration_ms"], int)
    assert "sk-demo-0000" not in json.dumps(frames)
    for message in of_types(frames, "message.delta", "message.complete"):
        assert "web_search" not in message["text"]

    failing = of_types(await run_to_end(owner, conversation_id, "/demo tool-fail"), "tool.event")
    assert [t["status"] for t in failing] == ["running", "failed"]
    assert failing[1]["error"]


async def test_a_tool_in_flight_when_the_run_is_cancelled_ends_cancelled(owner: PhebyClient) -> None:
    conversation_id = await new_conversation(owner)
    accepted = await owner.request("chat.send", "run.accepted", conversation_id=conversation_id, text="/demo approve")
    run_id = accepted["run_id"]
    await owner.expect("approval.request", run_id=run_id)  # the terminal call waits for a human
    await owner.send("run.cancel", conversation_id=conversation_id, run_id=run_id)
    assert (await owner.expect("run.finished", run_id=run_id))["status"] == "cancelled"
    tools = owner.seen("tool.event", run_id=run_id)
    assert [t["status"] for t in tools] == ["running", "cancelled"]
    assert "error" not in tools[1]
    opened = await owner.request("conversation.open", "conversation.history", conversation_id=conversation_id)
    assert [t["status"] for t in opened["tools"]] == ["cancelled"]


@pytest.mark.both_engines
@pytest.mark.in_cluster
async def test_approval_once_and_deny(connect: Callable[..., Any]) -> None:
    first, second = await connect(), await connect()
    conversation_id = await new_conversation(first)
    await first.request("chat.send", "run.accepted", conversation_id=conversation_id, text="/demo approve")
    request = await first.expect("approval.request")
    await second.expect("approval.request", approval_id=request["approval_id"])
    assert request["command"] == "rm -rf /tmp/build-output"
    assert request["description"] == "Destructive shell command (rm -rf)"
    assert request["choices"] == ["once", "session", "always", "deny"]
    assert request["session_key"].endswith(conversation_id)
    await second.send("approval.respond", approval_id=request["approval_id"], choice="once", request_id="appr-1")
    for client in (first, second):
        resolved = await client.expect("approval.resolved", approval_id=request["approval_id"])
        assert resolved["choice"] == "once"
        assert resolved["accepted"] is True
        assert resolved["request_id"] == "appr-1"
    complete = await first.expect("message.complete")
    assert complete["text"].startswith("Approved (once)")
    await first.expect("run.finished")
    assert len(first.seen("approval.resolved", approval_id=request["approval_id"])) == 1
    again = await first.request(
        "approval.respond", "approval.resolved", approval_id=request["approval_id"], choice="once"
    )
    assert again["error"]["code"] == "approval_not_found"
    bad_choice = await first.request("approval.respond", "approval.resolved", approval_id="x", choice="maybe")
    assert bad_choice["error"]["code"] == "bad_request"

    await first.request("chat.send", "run.accepted", conversation_id=conversation_id, text="/demo approve")
    denied = await first.expect("approval.request")
    await first.send("approval.respond", approval_id=denied["approval_id"], choice="deny", reason="not today")
    await first.expect("approval.resolved", approval_id=denied["approval_id"], choice="deny")
    assert (await first.expect("message.complete"))["text"].startswith("Denied")


async def test_the_responders_answer_resolves_the_approval_when_the_run_moves_first(
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    make_demo_hermes: Callable[..., DemoHermesServer],
    clients: list[PhebyClient],
) -> None:
    # This Hermes replies to an answer only after the run went on: a denied tool fails, an approved run ends.
    hermes = make_demo_hermes(answer_delay=0.3)
    server = start_live_server(live_settings(**hermes_settings(hermes)))
    client = await PhebyClient.connect(server.ws_url, server.secret)
    clients.append(client)
    conversation_id = await new_conversation(client)
    answered: dict[str, tuple[str, bool, str]] = {}
    for round_ in range(3):
        for choice in ("deny", "once"):
            accepted = await client.request(
                "chat.send", "run.accepted", conversation_id=conversation_id, text="/demo approve"
            )
            request = await client.expect("approval.request", run_id=accepted["run_id"])
            request_id = f"{choice}-{round_}"
            await client.send(
                "approval.respond", approval_id=request["approval_id"], choice=choice, request_id=request_id
            )
            await client.expect("run.finished", run_id=accepted["run_id"])
            answered[request["approval_id"]] = (choice, True, request_id)
    await asyncio.sleep(0.5)  # every answer's reply from Hermes is back
    resolutions = {
        approval_id: [
            (r["choice"], r["accepted"], r.get("request_id"))
            for r in client.seen("approval.resolved", approval_id=approval_id)
        ]
        for approval_id in answered
    }
    assert resolutions == {approval_id: [outcome] for approval_id, outcome in answered.items()}
    assert client.seen("error") == []


@pytest.mark.both_engines
async def test_session_approval_covers_later_runs_of_the_conversation(owner: PhebyClient) -> None:
    conversation_id = await new_conversation(owner)
    await owner.request("chat.send", "run.accepted", conversation_id=conversation_id, text="/demo approve")
    request = await owner.expect("approval.request")
    await owner.send("approval.respond", approval_id=request["approval_id"], choice="session")
    await owner.expect("run.finished")
    second = await run_to_end(owner, conversation_id, "/demo approve")
    assert of_types(second, "approval.request") == []
    assert of_types(second, "message.complete")[0]["text"].startswith("Approved (once)")
    # Another conversation still asks.
    other = await new_conversation(owner)
    await owner.request("chat.send", "run.accepted", conversation_id=other, text="/demo approve")
    asked = await owner.expect("approval.request", conversation_id=other)
    await owner.send("approval.respond", approval_id=asked["approval_id"], choice="deny")
    await owner.expect("run.finished", conversation_id=other)


@pytest.mark.both_engines
@pytest.mark.in_cluster
async def test_clarify(connect: Callable[..., Any]) -> None:
    first, second = await connect(), await connect()
    conversation_id = await new_conversation(first)
    await first.request("chat.send", "run.accepted", conversation_id=conversation_id, text="/demo clarify")
    request = await first.expect("clarify.request")
    assert request["question"] == "Deploy to staging or production?"
    assert request["choices"] == ["staging", "production"]
    assert request["allow_free_text"] is True
    await second.send("clarify.respond", clarify_id=request["clarify_id"], response="production", request_id="c-1")
    for client in (first, second):
        resolved = await client.expect("clarify.resolved", clarify_id=request["clarify_id"])
        assert resolved["accepted"] is True
        assert resolved["request_id"] == "c-1"
    assert (await first.expect("message.complete"))["text"] == "You chose: production"
    stale = await first.request("clarify.respond", "clarify.resolved", clarify_id=request["clarify_id"], response="x")
    assert stale["error"]["code"] == "clarify_not_found"


async def test_retired_clarifications_resolve_once_while_the_run_goes_on(
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    make_demo_hermes: Callable[..., DemoHermesServer],
    clients: list[PhebyClient],
) -> None:
    from tests.demo_hermes_server import client_for

    # Hermes retires a question when it is answered (and replies to the answer after that) or expires.
    hermes = make_demo_hermes(answer_delay=0.3, delta_delay=0.2)
    async with client_for(hermes) as hermes_client:
        await hermes_client.put_config({"approvals": {"timeout": 0.5}})
    server = start_live_server(live_settings(**hermes_settings(hermes)))
    client = await PhebyClient.connect(server.ws_url, server.secret)
    clients.append(client)
    conversation_id = await new_conversation(client)

    await client.request("chat.send", "run.accepted", conversation_id=conversation_id, text="/demo clarify")
    answered = await client.expect("clarify.request")
    await client.send("clarify.respond", clarify_id=answered["clarify_id"], response="staging", request_id="c-1")
    await client.expect("run.finished", run_id=answered["run_id"])
    resolved = client.seen("clarify.resolved", clarify_id=answered["clarify_id"])
    assert [(r["accepted"], r.get("request_id")) for r in resolved] == [(True, "c-1")]

    await client.request("chat.send", "run.accepted", conversation_id=conversation_id, text="/demo clarify")
    unanswered = await client.expect("clarify.request")
    expired = await client.expect("clarify.resolved", clarify_id=unanswered["clarify_id"])
    assert (expired["accepted"], expired["expired"], "request_id" in expired) == (False, True, False)
    opened = await client.request("conversation.open", "conversation.history", conversation_id=conversation_id)
    assert opened["run"]["run_id"] == unanswered["run_id"]  # the run goes on without the question
    assert opened["clarifications"] == []
    await client.expect("run.finished", run_id=unanswered["run_id"])
    assert len(client.seen("clarify.resolved", clarify_id=unanswered["clarify_id"])) == 1
    stale = await client.request(
        "clarify.respond", "clarify.resolved", clarify_id=unanswered["clarify_id"], response="x"
    )
    assert stale["error"]["code"] == "clarify_not_found"


async def test_a_clarify_answer_in_flight_when_the_run_ends_is_the_responders(
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    make_demo_hermes: Callable[..., DemoHermesServer],
    clients: list[PhebyClient],
) -> None:
    hermes = make_demo_hermes(answer_delay=0.5, delta_delay=0)  # the run ends before the answer's reply
    server = start_live_server(live_settings(**hermes_settings(hermes)))
    client = await PhebyClient.connect(server.ws_url, server.secret)
    clients.append(client)
    conversation_id = await new_conversation(client)
    for round_ in range(3):
        await client.request("chat.send", "run.accepted", conversation_id=conversation_id, text="/demo clarify")
        question = await client.expect("clarify.request")
        request_id = f"c-{round_}"
        await client.send(
            "clarify.respond", clarify_id=question["clarify_id"], response="staging", request_id=request_id
        )
        await client.expect("run.finished", run_id=question["run_id"])
        await asyncio.sleep(0.7)  # the answer's reply is back
        resolved = client.seen("clarify.resolved", clarify_id=question["clarify_id"])
        assert [(r["accepted"], r.get("request_id")) for r in resolved] == [(True, request_id)]
    assert client.seen("error") == []


@pytest.mark.both_engines
async def test_yolo_is_per_conversation_and_survives_restart(
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    clients: list[PhebyClient],
) -> None:
    settings = live_settings()
    server = start_live_server(settings)
    owner = await PhebyClient.connect(server.ws_url, server.secret)
    clients.append(owner)
    conversation_id = await new_conversation(owner, "Risky")
    not_bool = await owner.request("yolo.set", "yolo.changed", conversation_id=conversation_id, enabled="yes")
    assert not_bool["error"]["code"] == "bad_request"
    changed = await owner.request("yolo.set", "yolo.changed", conversation_id=conversation_id, enabled=True)
    assert changed == {**changed, "enabled": True, "scope": "conversation", "conversation_id": conversation_id}
    await owner.wait_for(lambda f: f["type"] == "yolo.changed" and "request_id" not in f)
    frames = await run_to_end(owner, conversation_id, "/demo approve")
    assert of_types(frames, "approval.request") == []
    assert of_types(frames, "message.complete")[0]["text"].startswith("Approved (once)")
    unknown = await owner.request("yolo.set", "yolo.changed", conversation_id="0" * 32, enabled=True)
    assert unknown["error"]["code"] == "conversation_not_found"
    await owner.close()

    server.server.should_exit = True
    await asyncio.sleep(1.5)
    restarted = start_live_server(settings)
    again = await PhebyClient.connect(restarted.ws_url, restarted.secret)
    clients.append(again)
    current = await again.request("yolo.current", "yolo.snapshot", conversation_id=conversation_id)
    assert current["enabled"] is True
    listing = await again.request("conversation.list", "conversation.snapshot")
    assert any(c["conversation_id"] == conversation_id and c["name"] == "Risky" for c in listing["conversations"])
    await again.close()


@pytest.mark.both_engines
@pytest.mark.in_cluster
async def test_accounts_only_see_their_own_events(connect: Callable[..., Any], live_server: LiveServer) -> None:
    first, second = await connect(), await connect()
    bob = await connect(secret=await add_account(live_server.settings, "bob"))
    conversation_id = await new_conversation(first)
    await run_to_end(first, conversation_id, "/demo tool")
    await second.expect("run.finished")

    def run_frames(client: PhebyClient) -> list[tuple[str, str]]:
        return [
            (f["type"], f["ts"])
            for f in client.frames
            if f.get("conversation_id") == conversation_id and f["type"] != "conversation.created"
        ]

    assert run_frames(second) == run_frames(first)  # the same frames, in the same order
    await asyncio.sleep(0.3)
    assert [f["type"] for f in bob.frames] == ["ready"]
    not_yours = await bob.request("conversation.open", "conversation.history", conversation_id=conversation_id)
    assert not_yours["error"]["code"] == "conversation_not_found"
    listing = await bob.request("conversation.list", "conversation.snapshot")
    assert listing["conversations"] == []


@pytest.mark.both_engines
@pytest.mark.in_cluster
async def test_reconnect_mid_run_recovers_the_snapshot(connect: Callable[..., Any]) -> None:
    client = await connect()
    conversation_id = await new_conversation(client)
    accepted = await client.request("chat.send", "run.accepted", conversation_id=conversation_id, text="/demo slow")
    await client.expect("message.delta")
    await client.close()
    await asyncio.sleep(0.3)

    back = await connect()
    opened = await back.request("conversation.open", "conversation.history", conversation_id=conversation_id)
    run = opened["run"]
    assert run["run_id"] == accepted["run_id"]
    assert run["status"] == "running"
    assert run["text"].startswith("You said") or run["text"]
    delta = await back.expect("message.delta")
    assert delta["text"].startswith(run["text"][: len(run["text"]) - 5])
    await back.send("run.cancel", conversation_id=conversation_id, run_id=run["run_id"])
    await back.expect("run.finished", run_id=run["run_id"])


def assert_snapshots_agree_with_the_live_events(frames: list[Frame]) -> int:
    """A client replaces its state with each snapshot, then applies the events after it, so:
    a run shown active must finish later, and a run finished earlier is in the snapshot's transcript."""
    finished_at = {f["run_id"]: i for i, f in enumerate(frames) if f["type"] == "run.finished"}
    message_of = {f["message_id"]: f["run_id"] for f in frames if f["type"] == "message.start"}
    answer_of = {message_of[f["message_id"]]: f["text"] for f in frames if f["type"] == "message.complete"}
    snapshots = [(i, f) for i, f in enumerate(frames) if f["type"] == "conversation.history"]
    for at, snapshot in snapshots:
        if snapshot["run"] is not None:
            run_id = snapshot["run"]["run_id"]
            assert finished_at.get(run_id, -1) > at, f"snapshot {at} shows run {run_id} active after its run.finished"
        shown = {m["text"] for m in snapshot["messages"]}
        for run_id, finished in finished_at.items():
            if finished < at:
                assert answer_of[run_id] in shown, f"snapshot {at} lacks the answer of run {run_id}, finished before it"
    return len(snapshots)


@pytest.mark.both_engines
@pytest.mark.in_cluster
async def test_history_snapshots_agree_with_the_live_events(connect: Callable[..., Any]) -> None:
    sender = await connect()
    openers = [await connect() for _ in range(3)]
    conversation_id = await new_conversation(sender)
    done = asyncio.Event()

    async def keep_opening(client: PhebyClient) -> None:
        while not done.is_set():
            await client.request("conversation.open", "conversation.history", conversation_id=conversation_id)

    openings = [asyncio.create_task(keep_opening(client)) for client in openers]
    for i in range(25):  # short runs: each finishes while some snapshot is being read
        await run_to_end(sender, conversation_id, f"race {i}")
    done.set()
    await asyncio.gather(*openings)
    for client in openers:
        await client.request("ping", "pong")  # every run event was queued before this reply
        assert assert_snapshots_agree_with_the_live_events(client.frames) > 25


def turn_logged(live_server: LiveServer, conversation_id: str, answer: str) -> bool:
    """Whether the run's after-turn work has read the transcript holding `answer` and logged it. (A sync state
    alone shows nothing: the read before the run keeps one too, and the after-turn read may still come.)"""
    logged = query(
        live_server.settings,
        "SELECT 1 FROM history_log WHERE conversation_id = ? AND role = 'assistant' AND text = ?",
        (conversation_id, answer),
    )
    return bool(logged)


class ReadGate:
    """Wraps the Hermes clients `conversation.open` reads transcripts with: once armed, each read
    fetches the transcript, then waits (in the server's thread) until the test lets it return."""

    def __init__(self, for_account: Callable[[Any], Any]) -> None:
        self._for_account = for_account
        self.armed = False
        self.arrived = threading.Event()
        self.go = threading.Event()

    def for_account(self, account: Any) -> Any:
        return _GatedClient(self._for_account(account), self)


class _GatedClient:
    def __init__(self, inner: Any, gate: ReadGate) -> None:
        self._inner = inner
        self._gate = gate

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def session_messages(self, session_id: str) -> Any:
        messages = await self._inner.session_messages(session_id)
        if self._gate.armed:  # the transcript is read: from now on it may be stale
            self._gate.arrived.set()
            await asyncio.to_thread(self._gate.go.wait, 10)
            self._gate.go.clear()
        return messages


async def test_a_snapshot_read_while_runs_finish_holds_their_turns(
    connect: Callable[..., Any], live_server: LiveServer, demo_hermes: DemoHermesServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bad interleaving, forced: every run finishes while a snapshot's transcript read is suspended."""
    sender = await connect()
    opener = await connect()
    conversation_id = await new_conversation(sender)
    await run_to_end(sender, conversation_id, "before")
    await until(lambda: turn_logged(live_server, conversation_id, "You said: before"), "the first turn logged")
    # A turn typed in another Hermes client: the open can't page from the log, it reads the transcript.
    session = demo_hermes.state.sessions.get(f"pheby_{conversation_id}")
    assert session is not None
    demo_hermes.state.sessions.add_message(session, "user", "typed in another Hermes client")
    demo_hermes.state.sessions.add_message(session, "assistant", "answered there")
    hermes = live_server.services.hermes
    gate = ReadGate(hermes.for_account)
    monkeypatch.setattr(hermes, "for_account", gate.for_account)  # the handler's reads only: runs keep theirs
    gate.armed = True
    request_id = await opener.send("conversation.open", conversation_id=conversation_id)
    for i in range(4):  # more runs than the old handler had re-reads
        assert await asyncio.to_thread(gate.arrived.wait, 10), "no transcript read arrived"
        gate.arrived.clear()
        await run_to_end(sender, conversation_id, f"during {i}")  # its run.finished goes out before the reply
        gate.go.set()
        deadline = asyncio.get_running_loop().time() + 10
        while not opener.seen("conversation.history", request_id=request_id) and not gate.arrived.is_set():
            assert asyncio.get_running_loop().time() < deadline, "neither a reply nor another read"
            await asyncio.sleep(0.01)
        if opener.seen("conversation.history", request_id=request_id):
            break
    gate.armed = False
    gate.go.set()
    [snapshot] = opener.seen("conversation.history", request_id=request_id)
    assert snapshot["run"] is None
    await opener.request("ping", "pong")
    assert assert_snapshots_agree_with_the_live_events(opener.frames) == 1
    texts = [m["text"] for m in snapshot["messages"]]
    assert texts[-2:] == ["during 0", "You said: during 0"]
    assert len(texts) == len(set(texts))  # every turn once


@pytest.mark.both_engines
@pytest.mark.in_cluster
async def test_reconnect_recovers_a_pending_approval(connect: Callable[..., Any]) -> None:
    client = await connect()
    conversation_id = await new_conversation(client)
    await client.request("chat.send", "run.accepted", conversation_id=conversation_id, text="/demo approve")
    request = await client.expect("approval.request")
    await client.close()
    back = await connect()
    opened = await back.request("conversation.open", "conversation.history", conversation_id=conversation_id)
    assert opened["run"]["status"] == "waiting_for_approval"
    assert [a["approval_id"] for a in opened["approvals"]] == [request["approval_id"]]
    await back.send("approval.respond", approval_id=request["approval_id"], choice="deny")
    await back.expect("run.finished")


# --- models and reasoning --------------------------------------------------------------------


@pytest.mark.both_engines
async def test_models_and_reasoning(
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    make_demo_hermes: Callable[..., DemoHermesServer],
    clients: list[PhebyClient],
) -> None:
    hermes = make_demo_hermes()  # a private double: this test changes its global model
    server = start_live_server(
        live_settings(
            **hermes_settings(hermes),
        )
    )
    owner = await PhebyClient.connect(server.ws_url, server.secret)
    watcher = await PhebyClient.connect(server.ws_url, server.secret)
    clients.extend([owner, watcher])
    conversation_id = await new_conversation(owner)

    snapshot = await owner.request("models.list", "models.snapshot", conversation_id=conversation_id)
    assert snapshot["providers"]
    provider = snapshot["providers"][0]
    assert set(provider) == {"slug", "name", "is_current", "models", "total_models"}
    assert snapshot["supported_reasoning_efforts"] == ["minimal", "low", "medium", "high", "xhigh", "max", "ultra"]
    current = await owner.request("models.current", "model.current")
    assert current["model"] == snapshot["current_model"]

    target = next(m for p in snapshot["providers"] for m in p["models"] if m != snapshot["current_model"])
    target_provider = next(p["slug"] for p in snapshot["providers"] if target in p["models"])
    changed = await owner.request("model.set", "model.changed", model=target, provider=target_provider)
    assert changed["scope"] == "global"
    await watcher.wait_for(lambda f: f["type"] == "model.changed" and f["model"] == target)
    assert (await owner.request("models.current", "model.current"))["model"] == target
    scoped = await owner.request("model.set", "model.changed", model=target, conversation_id=conversation_id)
    assert scoped["error"]["code"] == "not_implemented"
    assert "conversation" in scoped["error"]["message"]

    reasoning = await owner.request("reasoning.current", "reasoning.snapshot", conversation_id=conversation_id)
    assert reasoning["supported_efforts"][0] == "none"
    assert isinstance(reasoning["enabled"], bool)
    set_high = await owner.request("reasoning.set", "reasoning.changed", effort="high")
    assert set_high["effort"] == "high"
    await watcher.wait_for(lambda f: f["type"] == "reasoning.changed" and f["effort"] == "high")
    assert (await owner.request("reasoning.current", "reasoning.snapshot"))["effort"] == "high"
    off = await owner.request("reasoning.set", "reasoning.changed", effort="none")
    assert off["effort"] == "none"
    assert (await owner.request("reasoning.current", "reasoning.snapshot"))["enabled"] is False
    invalid = await owner.request("reasoning.set", "reasoning.changed", effort="turbo")
    assert invalid["error"]["code"] == "bad_request"
    per_conversation = await owner.request(
        "reasoning.set", "reasoning.changed", effort="low", conversation_id=conversation_id
    )
    assert per_conversation["error"]["code"] == "not_implemented"


async def test_models_without_a_dashboard_are_not_implemented(
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    clients: list[PhebyClient],
) -> None:
    server = start_live_server(live_settings(hermes_dashboard_url="", hermes_dashboard_token=""))
    client = await PhebyClient.connect(server.ws_url, server.secret)
    clients.append(client)
    for request, reply in (("models.list", "models.snapshot"), ("reasoning.current", "reasoning.snapshot")):
        answer = await client.request(request, reply)
        assert answer["error"]["code"] == "not_implemented"
        assert "dashboard" in answer["error"]["message"]


def test_no_paths_in_this_module() -> None:
    assert Path(__file__).name == "test_ws_e2e.py"
