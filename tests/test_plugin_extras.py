"""The companion plugin's extras are declared once (`pheby.plugin.extras.PluginExtras`): the settings,
their environment names and the link's set come from it, and the plugin's own list matches it."""

import pytest

from hermes_plugin.pheby_bridge.bridge import FEATURES
from pheby.plugin.extras import EXTRAS, OFF_BY_DEFAULT, PluginExtras
from pheby.plugin.link import PluginLink
from pheby.settings import ENV_NAMES, SettingsError, load_settings


def test_the_plugin_offers_exactly_the_declared_extras() -> None:
    # The plugin runs inside Hermes and cannot import the server: its list is a copy, held equal here.
    assert FEATURES == EXTRAS


def test_the_extras_are_the_struct_fields() -> None:
    assert EXTRAS == ("tool_events", "clarify", "model", "reasoning", "yolo", "media", "cron", "history")
    assert set(PluginExtras.__struct_fields__) == {"live", *EXTRAS}


def test_each_extra_has_its_variable_and_default() -> None:
    for extra in EXTRAS:
        assert ENV_NAMES[f"plugin_{extra}"] == f"PHEBY_PLUGIN_{extra.upper()}"
    assert load_settings({}).plugin_extras == frozenset(EXTRAS) - OFF_BY_DEFAULT == frozenset(EXTRAS) - {"history"}


def test_a_variable_or_flag_switches_one_extra() -> None:
    settings = load_settings({"PHEBY_PLUGIN_MODEL": "false", "PHEBY_PLUGIN_HISTORY": "true"})
    assert settings.plugin_extras == frozenset(EXTRAS) - {"model"}
    assert "media" not in load_settings({}, plugin_media=False).plugin_extras
    with pytest.raises(SettingsError, match=r"^PHEBY_PLUGIN_YOLO: Expected `bool`"):
        load_settings({"PHEBY_PLUGIN_YOLO": "maybe"})


def test_the_link_asks_for_the_extras_switched_on() -> None:
    link = PluginLink(load_settings({"PHEBY_PLUGIN_CRON": "0"}, hermes_url="http://127.0.0.1:1"))
    assert link.server_view()["extras"] == [e for e in EXTRAS if e not in {"cron", "history"}]
