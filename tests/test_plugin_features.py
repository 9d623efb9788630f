"""The companion plugin's handshake names only the extras this Hermes can carry (`pheby_bridge.bridge.NEEDS`).

Outside a Hermes process (this test's interpreter) the Hermes internals are missing, so only the extra that
needs none (cron output) is offered; a Hermes that refuses a hook turns off the extras that need it. The
server's side (`PluginLink`) turns every extra the hello leaves out off (tests/test_plugin_server.py).
"""

from typing import Any

from hermes_plugin.pheby_bridge.bridge import FEATURES, NEEDS, Bridge, available_features, has_internal
from hermes_plugin.pheby_bridge.config import BridgeConfig
from hermes_plugin.pheby_bridge.hooks import register_hooks

CONFIG = BridgeConfig(service_url="http://127.0.0.1:9", secret="s" * 32)


def test_every_extra_says_what_it_needs() -> None:
    assert set(NEEDS) == set(FEATURES)


def test_internals_are_looked_up_not_called() -> None:
    assert has_internal("json:JSONDecoder.decode")
    assert not has_internal("json:JSONDecoder.no_such_method")
    assert not has_internal("no_such_hermes_module:anything")


def test_outside_hermes_only_cron_is_offered() -> None:
    assert available_features() == ("cron",)
    bridge = Bridge(CONFIG)
    assert bridge.hello_body()["features"] == ["cron"]
    bridge.handle({"type": "hello", "extras": list(FEATURES)})  # the server wants everything
    assert [name for name in FEATURES if bridge.wants(name)] == ["cron"]


class RefusingContext:
    """A plugin context whose Hermes does not know the `post_llm_call` hook."""

    def __init__(self) -> None:
        self.hooks: list[str] = []

    def register_hook(self, name: str, callback: Any) -> None:
        if name == "post_llm_call":
            raise ValueError(f"unknown hook {name}")
        self.hooks.append(name)


def test_a_refused_hook_turns_its_extras_off() -> None:
    bridge = Bridge(CONFIG)
    ctx = RefusingContext()
    register_hooks(ctx, bridge)  # loads anyway
    assert ctx.hooks == ["pre_tool_call", "post_tool_call", "on_session_end"]
    assert "cron" not in bridge.hello_body()["features"]
