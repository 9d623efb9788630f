"""What the companion plugin tells the engine about a run, as inputs of their own.

The plugin's pushes (`pheby.plugin.pushes`) are keyed by Hermes's run id and become one of these;
`PluginRuns.push` takes them. They are not Hermes stream events: a tool push carries the
call id and args the stream lacks, a clarification is held by the plugin, not by Hermes.
"""

from typing import Any, NamedTuple

from pheby.protocol import frames as ev
from pheby.runs.translate import ToolBegan, ToolEnded


class PluginToolStarted(NamedTuple):
    hermes_run_id: str
    tool_call_id: str
    tool: str
    args: dict[str, Any]

    def began(self) -> ToolBegan:
        return ToolBegan(self.tool, self.tool_call_id, dict(self.args), None)


class PluginToolEnded(NamedTuple):
    hermes_run_id: str
    tool_call_id: str
    tool: str
    duration_ms: int | None
    outcome: ev.ToolStatus
    error: str | None

    def ended(self) -> ToolEnded:
        duration = self.duration_ms / 1000 if self.duration_ms is not None else None
        failed = self.outcome != "completed"
        return ToolEnded(self.tool, self.tool_call_id, duration, failed, self.error, self.outcome == "cancelled")


class PluginClarifyAsked(NamedTuple):
    """A question the plugin holds the run for; the push's answer says whether a client was asked."""

    hermes_run_id: str
    clarify_id: str
    question: str
    choices: list[str] | None


class PluginClarifyExpired(NamedTuple):
    hermes_run_id: str
    clarify_id: str


class PluginMediaDone(NamedTuple):
    """The plugin has pushed every MEDIA: file of the run's final text it could."""

    hermes_run_id: str


PluginInput = PluginToolStarted | PluginToolEnded | PluginClarifyAsked | PluginClarifyExpired | PluginMediaDone
