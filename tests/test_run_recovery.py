"""A run whose event stream is lost stays the conversation's run until Hermes says how it ended: the demo Hermes.

A run survives a cut event stream (its files and approvals too, and a cancel still cancels it), and a
Hermes that dies mid-run, or goes silent, ends it `failed`; a Hermes down at the start refuses the message.

As 0.19.0 (the default demo) the server learns the run's end by asking for it; as a 0.22-era gateway
(``features=NEWER_FEATURES``: numbered events, replay) it resumes the stream where it broke.

A TCP proxy (tests/tcp_proxy.py) sits between the live server and a private demo Hermes, so a test
can cut the run's SSE stream (the demo goes on running the run), freeze every connection, refuse new
ones, or stop the demo and later point the proxy at a new one. The scenarios are in
tests/run_recovery.py, shared with the real gateway.
"""

import asyncio
import json
import secrets
import time
from collections.abc import AsyncIterator, Callable
from typing import Final

import pytest

from demo_hermes import DemoHermesServer
from demo_hermes.newer import NEWER_FEATURES
from pheby.settings import Settings
from tests.demo_hermes_server import client_for
from tests.live_server import LiveServer, hermes_settings
from tests.polling import until
from tests.run_recovery import KILL_DEADLINE_S, killed_hermes_scenario, stream_cut_scenario
from tests.tcp_proxy import TcpProxy
from tests.test_attachments_e2e import upload
from tests.ws_client import PhebyClient

pytestmark = [pytest.mark.anyio, pytest.mark.live]

# `/demo slow` streams "tick 0 " … "tick 99 ", 50 ms apart (demo_hermes/agent.py): a 5 s run.
SLOW_FINAL_TEXT: Final = "".join(f"tick {i} " for i in range(100)).strip()
LOST_CONTACT: Final = "Lost contact with Hermes; the run was stopped"


@pytest.fixture
def hermes(make_demo_hermes: Callable[..., DemoHermesServer], request: pytest.FixtureRequest) -> DemoHermesServer:
    """A demo Hermes of this test's own: what it ran is this test's alone, and it may be stopped.
    Parametrized indirectly with its options (none: 0.19.0)."""
    return make_demo_hermes(**getattr(request, "param", {}))


@pytest.fixture
def proxy(make_tcp_proxy: Callable[..., TcpProxy], hermes: DemoHermesServer) -> TcpProxy:
    return make_tcp_proxy(hermes.port)


@pytest.fixture
def server(
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    hermes: DemoHermesServer,
    proxy: TcpProxy,
) -> LiveServer:
    """The server, reaching the demo's gateway and dashboard only through the proxy."""
    return start_live_server(
        live_settings(
            **{**hermes_settings(hermes), "hermes_url": proxy.url, "hermes_dashboard_url": proxy.url},
            media_roots=(hermes.media_dir,),
        )
    )


@pytest.fixture
async def client(server: LiveServer) -> AsyncIterator[PhebyClient]:
    client = await PhebyClient.connect(server.ws_url, server.secret)
    yield client
    await client.close()


REPLAYING: Final = {"features": NEWER_FEATURES}
# Keeps 2 events: `/demo slow` emits 5 in the 0.25 s before the first resumption, so a replay is truncated.
REPLAYING_SHORT_BACKLOG: Final = {"features": NEWER_FEATURES, "replay_backlog": 2}


@pytest.mark.parametrize(
    ("hermes", "resumed"),
    [
        pytest.param({}, False, id="0.19.0"),  # the run's end is asked for
        pytest.param(REPLAYING, True, id="replay"),  # resumed without loss or repeat
        pytest.param(REPLAYING_SHORT_BACKLOG, False, id="replay-truncated"),  # falls back to asking for the end
    ],
    indirect=["hermes"],
)
async def test_a_cut_stream_keeps_the_run_until_hermes_ends_it(
    client: PhebyClient, proxy: TcpProxy, hermes: DemoHermesServer, resumed: bool
) -> None:
    marker = f"m{secrets.token_hex(4)}"
    async with client_for(hermes) as direct:
        await stream_cut_scenario(
            client,
            proxy,
            direct,
            marker=marker,
            slow_text=f"/demo slow {marker}",
            final_text=SLOW_FINAL_TEXT,
            second_text=f"second try {marker}",
            first_delta_timeout=10,
            finish_timeout=20,
            resumed=resumed,
        )


async def kill_and_revive_the_demo(
    client: PhebyClient,
    proxy: TcpProxy,
    hermes: DemoHermesServer,
    make_demo_hermes: Callable[..., DemoHermesServer],
    *,
    cut_first: bool,
    reset_connections: bool = False,
    failed_error: str | None = None,
) -> None:
    """killed_hermes_scenario on the demo: stopped (``reset_connections``: and every proxied connection reset
    at once), then started again with the same keys on a new port the proxy is pointed at."""

    async def kill() -> None:
        await asyncio.to_thread(hermes.stop)
        if reset_connections:
            proxy.cut()

    async def revive() -> None:
        # The same keys on a new port: to the server (behind the proxy) it is the same Hermes, restarted.
        again = await asyncio.to_thread(
            make_demo_hermes,
            api_key=hermes.api_key,
            dashboard_token=hermes.dashboard_token,
            features=hermes.options.features,
        )
        proxy.retarget(again.port)

    await killed_hermes_scenario(
        client,
        slow_text="/demo slow",
        kill=kill,
        revive=revive,
        after_text="hello again",
        after_replies=("You said: hello again",),
        first_delta_timeout=10,
        after_timeout=20,
        forbidden=[proxy.url, f"127.0.0.1:{proxy.port}", str(hermes.media_dir)],
        cut_first=proxy if cut_first else None,
        failed_error=failed_error,
        refused_while_down="Hermes is unavailable right now",
    )


@pytest.mark.parametrize("hermes", [{}, REPLAYING], indirect=True, ids=["0.19.0", "replay"])
@pytest.mark.parametrize("cut_first", [False, True], ids=["streaming", "stream-cut-before"])
async def test_a_killed_hermes_fails_the_run_and_the_conversation_works_once_it_is_back(
    client: PhebyClient,
    proxy: TcpProxy,
    hermes: DemoHermesServer,
    make_demo_hermes: Callable[..., DemoHermesServer],
    cut_first: bool,
) -> None:
    await kill_and_revive_the_demo(
        client, proxy, hermes, make_demo_hermes, cut_first=cut_first, failed_error=LOST_CONTACT
    )


async def test_hermes_gone_mid_run_fails_the_run_lost_contact_and_a_new_hermes_serves_the_next(
    client: PhebyClient, proxy: TcpProxy, hermes: DemoHermesServer, make_demo_hermes: Callable[..., DemoHermesServer]
) -> None:
    """Hermes stopped and its connections reset (as a crashed host's): the run fails with the lost-contact error."""
    await kill_and_revive_the_demo(
        client, proxy, hermes, make_demo_hermes, cut_first=False, reset_connections=True, failed_error=LOST_CONTACT
    )


async def open_chat(client: PhebyClient) -> str:
    created = await client.request("conversation.create", "conversation.created")
    return str(created["conversation_id"])


@pytest.mark.parametrize("hermes", [{"delta_delay": 0.3}], indirect=True, ids=["slow-deltas"])  # cut each reply mid-way
async def test_a_run_finished_after_its_stream_was_cut_delivers_its_files_and_answers_approvals(
    client: PhebyClient, proxy: TcpProxy
) -> None:
    conversation_id = await open_chat(client)
    accepted = await client.request("chat.send", "run.accepted", conversation_id=conversation_id, text="/demo image")
    await client.expect("message.delta")
    proxy.cut()
    finished = await client.expect("run.finished", timeout=20, run_id=accepted["run_id"])
    assert finished["status"] == "completed"
    [complete] = client.seen("message.complete")
    assert complete["text"] == "Here is the picture you asked for."  # MEDIA: tag resolved and stripped
    [added] = client.seen("attachment.added")
    assert added["attachment"]["message_id"] == complete["message_id"]

    # An approval asked before the cut can still be answered; the run's end is learnt from Hermes.
    accepted = await client.request("chat.send", "run.accepted", conversation_id=conversation_id, text="/demo approve")
    request = await client.expect("approval.request", run_id=accepted["run_id"])
    proxy.cut()
    await asyncio.sleep(0.3)
    opened = await client.request("conversation.open", "conversation.history", conversation_id=conversation_id)
    assert opened["run"]["status"] == "waiting_for_approval"
    resolved = await client.request(
        "approval.respond", "approval.resolved", approval_id=request["approval_id"], choice="once"
    )
    assert resolved["accepted"] is True
    finished = await client.expect("run.finished", timeout=20, run_id=accepted["run_id"])
    assert finished["status"] == "completed"
    assert client.seen("message.complete")[-1]["text"] == "Approved (once). I removed /tmp/build-output."


async def test_a_cancel_while_the_stream_is_lost_still_cancels(client: PhebyClient, proxy: TcpProxy) -> None:
    conversation_id = await open_chat(client)
    accepted = await client.request("chat.send", "run.accepted", conversation_id=conversation_id, text="/demo slow")
    await client.expect("message.delta")
    proxy.cut()
    await asyncio.sleep(0.3)
    await client.send("run.cancel", conversation_id=conversation_id, run_id=accepted["run_id"])
    finished = await client.expect("run.finished", timeout=15, run_id=accepted["run_id"])
    assert finished["status"] == "cancelled"


async def test_hermes_silent_mid_run_fails_the_run_within_ten_seconds(client: PhebyClient, proxy: TcpProxy) -> None:
    """No connection closes (a frozen host, a proxy that keeps the sockets): silence is noticed all the same."""
    conversation_id = await open_chat(client)
    accepted = await client.request("chat.send", "run.accepted", conversation_id=conversation_id, text="/demo slow")
    await client.expect("message.delta")
    frozen_at = time.monotonic()
    proxy.freeze()
    finished = await client.expect("run.finished", timeout=30, run_id=accepted["run_id"])
    assert time.monotonic() - frozen_at < KILL_DEADLINE_S
    assert finished["status"] == "failed"
    assert finished["error"] == LOST_CONTACT


async def test_hermes_down_at_the_start_frees_the_slot_and_the_attachment(
    client: PhebyClient, proxy: TcpProxy, server: LiveServer, hermes: DemoHermesServer
) -> None:
    conversation_id = await open_chat(client)
    notes = await upload(server, conversation_id, "notes.md", b"# Notes", "text/markdown")
    proxy.refuse()  # every new connection to "Hermes" is refused,
    proxy.cut()  # and the pooled ones (the server's reads of what the gateway offers keep one) are gone
    refused = await client.request(
        "chat.send", "run.accepted", conversation_id=conversation_id, text="hi", attachment_ids=[notes["attachment_id"]]
    )
    assert refused["type"] == "error"
    assert refused["error"]["message"] == "Hermes is unavailable right now; the message was not sent, try again"
    assert client.seen("run.accepted") == []
    proxy.retarget(hermes.port)
    accepted = await client.request(
        "chat.send", "run.accepted", conversation_id=conversation_id, text="hi", attachment_ids=[notes["attachment_id"]]
    )
    assert accepted["type"] == "run.accepted", accepted
    finished = await client.expect("run.finished", run_id=accepted["run_id"])
    assert finished["status"] == "completed"
    assert [a["attachment"]["attachment_id"] for a in client.seen("attachment.added")] == [notes["attachment_id"]]
    assert str(proxy.port) not in json.dumps(client.frames)


# Hermes makes the run, then takes a second to answer `POST /v1/runs`: time for the test to cut that answer.
ANSWERS_CREATE_LATE: Final = {"create_delay": 1.0}


async def send_and_lose_the_create_answer(
    client: PhebyClient, hermes: DemoHermesServer, proxy: TcpProxy, conversation_id: str
) -> None:
    """`chat.send` a slow run; once Hermes has made it, cut the connection its create's answer would come on."""
    await client.send("chat.send", conversation_id=conversation_id, text="/demo slow", request_id="send-1")
    await until(lambda: bool(hermes.state.runs.active()), "Hermes never made the run", interval=0.01)
    assert proxy.cut_requests("POST", "/v1/runs") == 1


@pytest.mark.parametrize("hermes", [{**ANSWERS_CREATE_LATE, "features": {"runs_idempotency"}}], indirect=True)
async def test_a_create_whose_answer_is_lost_is_sent_again_and_hermes_answers_with_the_run_it_made(
    client: PhebyClient, hermes: DemoHermesServer, proxy: TcpProxy
) -> None:
    """Where the gateway advertises `runs_idempotency`: the run it made is the run the client sees, once."""
    conversation_id = (await client.request("conversation.create", "conversation.created"))["conversation_id"]
    await send_and_lose_the_create_answer(client, hermes, proxy, conversation_id)
    accepted = await client.expect("run.accepted", conversation_id=conversation_id, timeout=15)
    assert accepted["request_id"] == "send-1"
    finished = await client.expect("run.finished", run_id=accepted["run_id"], timeout=30)
    assert finished["status"] == "completed", finished
    completed = client.seen("message.complete", conversation_id=conversation_id)
    assert [c["text"] for c in completed] == [SLOW_FINAL_TEXT]
    assert not client.seen("error")
    assert proxy.requests().count(("POST", "/v1/runs")) == 2  # sent again, with the same key
    history = await client.request("conversation.open", "conversation.history", conversation_id=conversation_id)
    assert [m["role"] for m in history["messages"]] == ["user", "assistant"]  # one run, not two


@pytest.mark.parametrize("hermes", [ANSWERS_CREATE_LATE], indirect=True)
async def test_without_idempotent_runs_a_lost_create_answer_is_the_clients_error(
    client: PhebyClient, hermes: DemoHermesServer, proxy: TcpProxy
) -> None:
    """0.19.0 can't say whether it made the run: sending it again could run it twice, so it is sent once."""
    conversation_id = (await client.request("conversation.create", "conversation.created"))["conversation_id"]
    await send_and_lose_the_create_answer(client, hermes, proxy, conversation_id)
    error = await client.expect("error", timeout=15)
    assert error["request_id"] == "send-1"
    assert error["error"]["message"] == "Hermes is unavailable right now; the message was not sent, try again"
    assert proxy.requests().count(("POST", "/v1/runs")) == 1
