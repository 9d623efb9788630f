"""History across a real hermes-agent 0.19.0 in-place compaction (its default compression mode).

The gateway gets a small context (64,000 tokens, 40,000 kept for the reply) so that the third
turn of about 28,000 characters each is compacted: Hermes then lists a summary and fresh copies of
the kept turns only. History must still show every turn once, with its own ids, and no summary.
"""

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from pheby.settings import Settings
from tests.fake_llm import text_of
from tests.live_server import LiveServer, free_port
from tests.real_hermes import RealHermes, hermes_gateway
from tests.ws_client import PhebyClient

pytestmark = [pytest.mark.anyio, pytest.mark.hermes, pytest.mark.live, pytest.mark.xdist_group("hermes-own-gateways")]

COMPACTING = {
    "model": {"context_length": 64000, "max_tokens": 40000},
    "compression": {"in_place": True, "protect_first_n": 0, "protect_last_n": 3},
}


@pytest.fixture
def compacting_hermes(hermes_venv: Path, tmp_path: Path) -> Iterator[RealHermes]:
    with hermes_gateway(tmp_path / "gateway", hermes=hermes_venv, config_overrides=COMPACTING) as hermes:
        yield hermes


async def test_history_shows_every_turn_after_a_compaction(
    compacting_hermes: RealHermes,
    start_live_server: Callable[[Settings], LiveServer],
    make_settings: Callable[..., Settings],
) -> None:
    hermes = compacting_hermes
    server = start_live_server(
        make_settings(port=free_port(), hermes_url=hermes.base_url, hermes_api_key=hermes.api_key)
    )
    client = await PhebyClient.connect(server.ws_url, server.secret)
    conversation_id = (await client.request("conversation.create", "conversation.created"))["conversation_id"]
    sent = [f"TURN{n} " + f"word{n} " * 4000 for n in range(1, 5)]  # about 28,000 characters each
    for text in sent:
        accepted = await client.request(
            "chat.send", "run.accepted", conversation_id=conversation_id, text=text, timeout=60
        )
        finished = await client.expect("run.finished", run_id=accepted["run_id"], timeout=120)
        assert finished["status"] == "completed", finished

    async with httpx.AsyncClient(base_url=hermes.base_url, headers=hermes.auth_headers(), timeout=30) as http:
        listed = (await http.get(f"/api/sessions/pheby_{conversation_id}/messages")).json()["data"]
    assert any((m["content"] or "").startswith("[CONTEXT COMPACTION") for m in listed)  # it did compact
    assert not any((m["content"] or "").startswith("TURN1 ") for m in listed)  # and hid the first turn

    history = await client.request("conversation.open", "conversation.history", conversation_id=conversation_id)
    users = [m["text"] for m in history["messages"] if m["role"] == "user"]
    assert users == sent  # every turn once, in order
    assert [m["role"] for m in history["messages"]] == ["user", "assistant"] * 4
    numbers = [int(m["message_id"][1:]) for m in history["messages"]]
    assert numbers == sorted(set(numbers))
    assert not any(m["text"].startswith("[CONTEXT COMPACTION") for m in history["messages"])

    # The next run is sent the history Hermes keeps (its summary, not the turns it replaced), whether the
    # server reads the transcript for it or takes it from what it kept of the last read.
    accepted = await client.request("chat.send", "run.accepted", conversation_id=conversation_id, text="TURN5")
    assert (await client.expect("run.finished", run_id=accepted["run_id"], timeout=120))["status"] == "completed"
    asked = next(r for r in reversed(hermes.chat_requests()) if "TURN5" in text_of(r["messages"][-1]["content"]))
    contents = [text_of(m["content"]) for m in asked["messages"] if m["role"] in ("user", "assistant")]
    assert any(c.startswith("[CONTEXT COMPACTION") or "COMPACTION SUMMARY" in c for c in contents), contents
    assert not any(c.startswith("TURN1 ") for c in contents)
    assert "TURN5" in contents[-1]
    await client.close()
