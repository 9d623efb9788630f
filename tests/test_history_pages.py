"""`conversation.open` serves pages from the server's log of a conversation's history, reading the whole
Hermes transcript only when Hermes has something the log lacks (`pheby.hermes.history_pages`).

The server reaches a demo Hermes of the test's own through a TCP proxy (tests/tcp_proxy.py), which
records every request: the transcript reads (`GET /api/sessions/{id}/messages`) are counted there.
"""

import asyncio
import contextlib
import json
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

import hermes_client as hc
from demo_hermes import DemoHermesServer
from pheby.db import SqliteDatabase
from pheby.hermes.history_pages import HERMES_READS_AT_ONCE, HistoryPages
from pheby.settings import Settings
from pheby.store.accounts import Accounts
from pheby.store.conversations import Conversations
from tests.live_server import LiveServer, hermes_settings, stopped
from tests.polling import until
from tests.tcp_proxy import TcpProxy
from tests.test_ws_e2e import new_conversation, of_types, run_to_end
from tests.ws_client import Frame, PhebyClient

pytestmark = [pytest.mark.anyio, pytest.mark.live]

OPENS = 6


@pytest.fixture
def hermes(make_demo_hermes: Callable[..., DemoHermesServer]) -> DemoHermesServer:
    return make_demo_hermes()


@pytest.fixture
def proxy(make_tcp_proxy: Callable[..., TcpProxy], hermes: DemoHermesServer) -> TcpProxy:
    return make_tcp_proxy(hermes.port)


@pytest.fixture
def settings(live_settings: Callable[..., Settings], hermes: DemoHermesServer, proxy: TcpProxy) -> Settings:
    return live_settings(
        **{**hermes_settings(hermes), "hermes_url": proxy.url, "hermes_dashboard_url": proxy.url},
        media_roots=(hermes.media_dir,),
    )


@pytest.fixture
async def client(start_live_server: Callable[[Settings], LiveServer], settings: Settings) -> AsyncIterator[PhebyClient]:
    server = start_live_server(settings)
    client = await PhebyClient.connect(server.ws_url, server.secret)
    yield client
    await client.close()


def transcript_reads(proxy: TcpProxy, conversation_id: str) -> int:
    return proxy.requests().count(("GET", f"/api/sessions/pheby_{conversation_id}/messages"))


async def logged_after_its_run(proxy: TcpProxy, settings: Settings, conversation_id: str, timeout: float = 10) -> None:
    """Wait (bounded) until the newest run's turn is logged: the transcript read after the run was made, and
    the state the log then matched kept (seeing the read's request alone, a run sent at once could come
    before the server took in its answer, and read the transcript again)."""
    read = ("GET", f"/api/sessions/pheby_{conversation_id}/messages")
    deadline = time.monotonic() + timeout
    while True:
        requests = proxy.requests()
        made = max(i for i, request in enumerate(requests) if request == ("POST", "/v1/runs"))
        if read in requests[made:] and kept_message_count(settings, conversation_id) == 2 * requests.count(
            ("POST", "/v1/runs")
        ):
            return
        assert time.monotonic() < deadline, requests[-20:]
        await asyncio.sleep(0.02)


def kept_message_count(settings: Settings, conversation_id: str) -> int:
    """The messages of the Hermes session state the server kept for the conversation (`history_sync`)."""
    with contextlib.closing(sqlite3.connect(f"file:{settings.database_path}?mode=ro", uri=True)) as conn:
        row = conn.execute("SELECT state FROM history_sync WHERE conversation_id = ?", (conversation_id,)).fetchone()
    if row is None or row[0] is None:
        return 0
    return sum(session[1] or 0 for session in json.loads(row[0]))


async def open_page(client: PhebyClient, conversation_id: str, **fields: Any) -> Frame:
    reply = await client.request("conversation.open", "conversation.history", conversation_id=conversation_id, **fields)
    assert reply["type"] == "conversation.history", reply
    return reply


def texts(reply: Frame) -> list[tuple[str, str]]:
    return [(m["role"], m["text"]) for m in reply["messages"]]


async def test_repeated_opens_of_an_unchanged_conversation_read_the_transcript_at_most_once(
    client: PhebyClient, proxy: TcpProxy
) -> None:
    conversation_id = await new_conversation(client)
    for text in ("one", "two", "three"):
        assert (await run_to_end(client, conversation_id, text))[-1]["status"] == "completed"
    first = await open_page(client, conversation_id)
    reads = transcript_reads(proxy, conversation_id)
    for _ in range(OPENS):
        again = await open_page(client, conversation_id)
        assert again["messages"] == first["messages"]
    assert transcript_reads(proxy, conversation_id) - reads <= 1, proxy.requests()[-20:]
    assert texts(first) == [(role, text) for t in ("one", "two", "three") for role, text in
                            (("user", t), ("assistant", f"You said: {t}"))]  # fmt: skip


async def test_a_turn_added_behind_the_servers_back_still_shows_up(
    client: PhebyClient, proxy: TcpProxy, hermes: DemoHermesServer
) -> None:
    conversation_id = await new_conversation(client)
    await run_to_end(client, conversation_id, "one")
    for _ in range(3):
        await open_page(client, conversation_id)
    sessions = hermes.state.sessions
    session = sessions.get(f"pheby_{conversation_id}")
    assert session is not None
    sessions.add_message(session, "user", "typed in another Hermes client")
    sessions.add_message(session, "assistant", "answered there")
    shown = await open_page(client, conversation_id)
    assert texts(shown)[-2:] == [("user", "typed in another Hermes client"), ("assistant", "answered there")]
    reads = transcript_reads(proxy, conversation_id)
    for _ in range(OPENS):
        assert (await open_page(client, conversation_id))["messages"] == shown["messages"]
    assert transcript_reads(proxy, conversation_id) - reads <= 1


async def test_pages_from_the_log_are_the_pages_of_the_whole_history(client: PhebyClient, proxy: TcpProxy) -> None:
    conversation_id = await new_conversation(client)
    for index in range(6):
        await run_to_end(client, conversation_id, f"turn {index}")
    whole = (await open_page(client, conversation_id, limit=500))["messages"]
    assert len(whole) == 12
    await open_page(client, conversation_id)  # in sync from here on
    reads = transcript_reads(proxy, conversation_id)
    for limit in (1, 5, 12, 13):
        paged: list[Frame] = []
        cursor: str | None = None
        while True:
            reply = await open_page(client, conversation_id, limit=limit, before_message_id=cursor)
            assert len(reply["messages"]) <= limit
            paged = reply["messages"] + paged
            if not reply["has_more"]:
                break
            cursor = reply["messages"][0]["message_id"]
        assert paged == whole, limit
    assert transcript_reads(proxy, conversation_id) == reads  # every page came from the log
    unknown = await client.request(
        "conversation.open", "conversation.history", conversation_id=conversation_id, before_message_id="m999999"
    )
    assert unknown["error"]["code"] == "not_found", unknown


async def test_a_run_in_a_conversation_the_log_holds_is_sent_its_history_without_reading_the_transcript(
    client: PhebyClient, proxy: TcpProxy, settings: Settings
) -> None:
    """0.19.0 loads no history for a run, so the server sends it: from what it keeps, like history pages."""
    conversation_id = await new_conversation(client)
    for text in ("one", "two"):
        await run_to_end(client, conversation_id, text)
        await logged_after_its_run(proxy, settings, conversation_id)
    before = len(proxy.requests())
    frames = await run_to_end(client, conversation_id, "/demo echo")
    since = proxy.requests()[before:]
    made = since.index(("POST", "/v1/runs"))
    assert ("GET", f"/api/sessions/pheby_{conversation_id}/messages") not in since[:made], since
    echo = of_types(frames, "message.complete")[0]["text"]
    assert "history=4" in echo.replace(" ", "")  # both earlier turns went with the run


async def test_after_a_restart_an_unchanged_conversation_is_opened_from_the_log(
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    hermes: DemoHermesServer,
    proxy: TcpProxy,
) -> None:
    """The states at which the log matched Hermes are kept in the database: a restart reads no transcript again
    (a reconnect storm after a deploy would read every conversation whole)."""
    settings = live_settings(
        **{**hermes_settings(hermes), "hermes_url": proxy.url, "hermes_dashboard_url": proxy.url},
        media_roots=(hermes.media_dir,),
    )
    server = start_live_server(settings)
    async with await PhebyClient.connect(server.ws_url, server.secret) as client:
        conversation_id = await new_conversation(client)
        for text in ("one", "two"):
            assert (await run_to_end(client, conversation_id, text))[-1]["status"] == "completed"
        await logged_after_its_run(proxy, settings, conversation_id)
        before = await open_page(client, conversation_id)
    await stopped(server)

    reads = transcript_reads(proxy, conversation_id)
    server = start_live_server(settings)
    async with await PhebyClient.connect(server.ws_url, server.secret) as client:
        after = await open_page(client, conversation_id)
        assert after["messages"] == before["messages"]
        assert transcript_reads(proxy, conversation_id) == reads  # from the log
        assert (await run_to_end(client, conversation_id, "three"))[-1]["status"] == "completed"
        await logged_after_its_run(proxy, settings, conversation_id)
        changed = await open_page(client, conversation_id)
        assert texts(changed)[-2:] == [("user", "three"), ("assistant", "You said: three")]


class HeldHermes:
    """Session reads that wait until released, counting how many are under way at once."""

    def __init__(self) -> None:
        self.under_way = 0
        self.most = 0
        self.release = asyncio.Event()

    async def get_session(self, session_id: str) -> hc.Session:
        self.under_way += 1
        self.most = max(self.most, self.under_way)
        try:
            await self.release.wait()
            return hc.Session(id=session_id, message_count=0)
        finally:
            self.under_way -= 1

    async def session_messages(self, session_id: str) -> list[hc.SessionMessage]:
        return []


async def test_a_storm_of_opens_reads_hermes_a_bounded_number_at_once(tmp_path: Path) -> None:
    """Every client of a restarted server opening its conversations at once: history's reads of Hermes queue
    here, so the connections the runs' own requests need stay free."""
    db = SqliteDatabase(tmp_path / "pheby.sqlite3")
    await db.open()
    try:
        owner = await Accounts(db).ensure_owner()
        conversations = Conversations(db)
        pages = HistoryPages(db, conversations)
        opened = []
        for i in range(3 * HERMES_READS_AT_ONCE):
            made = await conversations.create(owner.id, f"c{i}")
            await conversations.add_session(made.id, f"pheby_{made.id}")
            opened.append(await conversations.get(owner.id, made.id))
        hermes = HeldHermes()
        storm = [asyncio.create_task(pages.window(hermes, c, 50, None, None)) for c in opened]  # type: ignore[arg-type]
        await until(lambda: hermes.under_way == HERMES_READS_AT_ONCE, "the first reads under way")
        await asyncio.sleep(0.05)
        assert hermes.most == HERMES_READS_AT_ONCE
        hermes.release.set()
        assert all(window == [] for window in await asyncio.gather(*storm))
    finally:
        await db.close()
