"""One run's tool calls from two channels: the run stream (no ids) and the companion plugin (ids, args).

Hermes 0.19.0's `tool.started`/`tool.completed` carry only the tool's name; the plugin's pushes
carry Hermes's `tool_call_id` and args but have no ordering with the stream. While the plugin is
live for a run, its pushes drive the run's tool events and the stream's tool events are matched to
them by name (oldest first) and dropped. A stream event that no push claims within `window`
seconds falls back to the stream's own translation (a minted `t-…` id), and a completion the
plugin never pushes is taken from the stream, with the plugin's id. Either way a client sees one
`running` and one terminal event per call.

Both channels arrive as `pheby.runs.translate.ToolBegan`/`ToolEnded`; `start` and `end` receive
them with the id to use always filled in.
"""

import asyncio
import secrets
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Literal

from pheby.runs.translate import ToolBegan, ToolEnded

Source = Literal["pending", "plugin", "stream"]


class _StreamCall:
    """A `tool.started` of the stream, until its `tool.completed` arrives."""

    __slots__ = ("alias", "call_id", "event", "source", "timer")

    def __init__(self, event: ToolBegan) -> None:
        self.event = event
        self.source: Source = "pending"
        self.call_id = ""
        self.alias = ""
        self.timer: asyncio.TimerHandle | None = None


def mint_id() -> str:
    return f"t-{secrets.token_hex(6)}"


class ToolMerge:
    def __init__(
        self,
        window: float,
        start: Callable[[ToolBegan], None],
        end: Callable[[ToolEnded], None],
    ) -> None:
        self._window = window
        self._start = start
        self._end = end
        self._open: defaultdict[str, deque[_StreamCall]] = defaultdict(deque)
        self._credits: defaultdict[str, deque[str]] = defaultdict(deque)
        self._started: set[str] = set()
        self._ended: set[str] = set()
        self._aliases: set[str] = set()
        self._end_timers: dict[str, tuple[asyncio.TimerHandle, ToolEnded]] = {}

    # --- the stream ----------------------------------------------------------------------

    def stream_started(self, event: ToolBegan) -> None:
        call = _StreamCall(event)
        self._open[event.tool].append(call)
        credits = self._credits[event.tool]
        if credits:
            call.source, call.call_id = "plugin", credits.popleft()
            return
        call.timer = asyncio.get_running_loop().call_later(self._window, self._fall_back, call)

    def stream_completed(self, event: ToolEnded) -> None:
        calls = self._open[event.tool]
        call = calls.popleft() if calls else None
        if call is None:
            self._end(event)  # a completion without a start: the stream's own translation
            return
        if call.source == "pending":
            self._fall_back(call)
        if call.source == "stream":
            self._end(event._replace(tool_call_id=call.call_id))
            return
        if call.call_id in self._ended:
            return
        timer = asyncio.get_running_loop().call_later(self._window, self._late_end, call.call_id)
        self._end_timers[call.call_id] = (timer, event)

    def _fall_back(self, call: _StreamCall) -> None:
        if call.source != "pending":
            return
        if call.timer is not None:
            call.timer.cancel()
            call.timer = None
        call.source, call.call_id = "stream", mint_id()
        self._start(call.event._replace(tool_call_id=call.call_id))

    def _late_end(self, call_id: str) -> None:
        timer, event = self._end_timers.pop(call_id, (None, None))
        if timer is not None:
            timer.cancel()
        if event is None or call_id in self._ended:
            return
        self._ended.add(call_id)
        self._end(event._replace(tool_call_id=call_id))

    # --- the plugin ----------------------------------------------------------------------

    def plugin_started(self, event: ToolBegan) -> None:
        call_id = event.tool_call_id
        if not isinstance(call_id, str) or call_id in self._started:
            return
        self._started.add(call_id)
        calls = self._open[event.tool]
        pending = next((c for c in calls if c.source == "pending"), None)
        if pending is not None:
            if pending.timer is not None:
                pending.timer.cancel()
                pending.timer = None
            pending.source, pending.call_id = "plugin", call_id
        else:
            shown = next((c for c in calls if c.source == "stream" and not c.alias), None)
            if shown is not None:  # too late: the stream's translation already shows this call
                shown.alias = call_id
                self._aliases.add(call_id)
                return
            self._credits[event.tool].append(call_id)
        if not isinstance(event.preview, str) and isinstance(pending, _StreamCall):
            event = event._replace(preview=pending.event.preview)
        self._start(event)

    def plugin_completed(self, event: ToolEnded) -> None:
        call_id = event.tool_call_id
        if not isinstance(call_id, str) or call_id in self._aliases or call_id in self._ended:
            return
        self._ended.add(call_id)
        timer, _ = self._end_timers.pop(call_id, (None, None))
        if timer is not None:
            timer.cancel()
        self._end(event)

    # --- the end of the run ----------------------------------------------------------------

    def flush(self) -> None:
        """The run is ending: settle every call now instead of waiting out its window."""
        for calls in self._open.values():
            for call in calls:
                if call.source == "pending":
                    self._fall_back(call)
        for call_id in list(self._end_timers):
            self._late_end(call_id)
