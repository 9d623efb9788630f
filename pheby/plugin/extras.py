"""The companion plugin's extras, declared once: `PluginExtras` has one flag per extra.

Everything else derives from its fields: the extras' names (`EXTRAS`), the server's switch for each
(`Settings.plugin_extras`, read from `PHEBY_PLUGIN_<NAME>`: `env_name`), the set the link asks the
plugin for, and `/api/capabilities`' `plugin` object. The plugin keeps its own list (it runs inside
Hermes and cannot import the server); a test holds it equal to `EXTRAS`.

This module imports nothing of the server, so `pheby.settings`, `pheby.hermes` and `pheby.runs` may.
"""

from typing import Final

import msgspec


class PluginExtras(msgspec.Struct, frozen=True, kw_only=True):
    """Which companion-plugin extras are live now (each also needs its PHEBY_PLUGIN_* switch on)."""

    live: bool = False
    tool_events: bool = False
    clarify: bool = False
    model: bool = False
    reasoning: bool = False
    yolo: bool = False
    media: bool = False
    cron: bool = False
    history: bool = False


NO_EXTRAS: Final = PluginExtras()
EXTRAS: Final[tuple[str, ...]] = tuple(name for name in PluginExtras.__struct_fields__ if name != "live")
# Splicing the stored history into model requests changes what the model sees: opt in.
OFF_BY_DEFAULT: Final = frozenset({"history"})


def setting_name(extra: str) -> str:
    """The flag name of an extra's switch (`load_settings(plugin_history=True)`)."""
    return f"plugin_{extra}"


def env_name(extra: str) -> str:
    """The environment variable of an extra's switch: `PHEBY_PLUGIN_TOOL_EVENTS`, ..."""
    return f"PHEBY_PLUGIN_{extra.upper()}"
