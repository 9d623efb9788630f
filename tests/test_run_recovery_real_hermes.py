"""A lost run stream against a real hermes-agent 0.19.0: the run stays active until Hermes ends it.

0.19.0 keeps a run going when its one SSE consumer goes away (a re-subscribe is 404), so the server
asks `GET /v1/runs/{id}` until the run is over.
"""

from collections.abc import Callable

import pytest

from pheby.settings import Settings
from tests.live_server import LiveServer, free_port
from tests.real_hermes import RealHermes
from tests.tcp_proxy import TcpProxy
from tests.ws_client import PhebyClient

pytestmark = [pytest.mark.anyio, pytest.mark.hermes, pytest.mark.live, pytest.mark.xdist_group("hermes")]


@pytest.fixture
def proxied(
    start_live_server: Callable[[Settings], LiveServer],
    make_settings: Callable[..., Settings],
    make_tcp_proxy: Callable[..., TcpProxy],
    real_hermes: RealHermes,
) -> tuple[LiveServer, TcpProxy]:
    proxy = make_tcp_proxy(int(real_hermes.base_url.rsplit(":", 1)[1]))
    settings = make_settings(port=free_port(), hermes_url=proxy.url, hermes_api_key=real_hermes.api_key)
    server = start_live_server(settings)
    return server, proxy


async def test_a_cut_stream_ends_with_the_real_runs_text_and_status(proxied: tuple[LiveServer, TcpProxy]) -> None:
    server, proxy = proxied
    client = await PhebyClient.connect(server.ws_url, server.secret)
    conversation_id = (await client.request("conversation.create", "conversation.created"))["conversation_id"]
    accepted = await client.request(
        "chat.send", "run.accepted", conversation_id=conversation_id, text="Go SLOW please", timeout=30
    )
    run_id = accepted["run_id"]
    await client.expect("message.delta", timeout=60)
    proxy.cut()
    second = await client.request("chat.send", "run.accepted", conversation_id=conversation_id, text="again")
    assert (second["type"], second["error"]["code"]) == ("error", "run_active")
    finished = await client.expect("run.finished", run_id=run_id, timeout=60)
    assert finished["status"] == "completed"
    [complete] = [f for f in client.seen("message.complete") if f["message_id"] == f"draft-{run_id}"]
    assert complete["text"].startswith("tick 0 tick 1")
    assert complete["text"].rstrip().endswith("tick 39")
    assert len(client.seen("run.finished", run_id=run_id)) == 1
    await client.close()
