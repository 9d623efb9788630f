"""Hermes run events → Pheby events, as a pure state machine (no I/O, no clock, no sockets).

`translate(view, event)` takes a run's translation state and one Hermes event and returns what to
do: `Emit` an event to the account's clients, or an effect the engine performs (`AskApproval`,
`Complete`, `Finish`, ...). Tool calls arrive as `ToolBegan`/`ToolEnded`, the shape both the run
stream and the companion plugin's pushes are turned into (see `pheby.runs.tool_merge`). Ids are minted
by the view's `mint` function, so a test can make them predictable.
"""

import itertools
import secrets
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import msgspec
from msgspec import UNSET, UnsetType

import hermes_client as hc
from pheby.files.media_tags import GrowingDraft, media_paths, strip_media
from pheby.protocol import frames as ev
from pheby.redact import redact, sanitize_error

PREVIEW_MAX = 200
INTERRUPTED_ERROR = "Hermes shut down while the run was going; the run was stopped"


def mint_tool_id() -> str:
    return f"t-{secrets.token_hex(6)}"


# --- what comes in ---------------------------------------------------------------------------------


class ToolBegan(NamedTuple):
    """A tool call began (from the stream or the plugin); `tool_call_id` None when the source has none."""

    tool: str
    tool_call_id: str | None
    args: dict[str, Any] | UnsetType  # UNSET: the source sends none (0.19.0's stream)
    preview: str | None


class ToolEnded(NamedTuple):
    tool: str
    tool_call_id: str | None
    duration: float | None  # seconds
    error: bool
    error_message: str | None
    cancelled: bool | None  # True when the source says the call was interrupted


def began_from_stream(event: hc.ToolStarted) -> ToolBegan:
    preview = event.preview if isinstance(event.preview, str) else None
    args = event.args if isinstance(event.args, dict) else UNSET
    call_id = event.tool_call_id if isinstance(event.tool_call_id, str) and event.tool_call_id else None
    return ToolBegan(event.tool, call_id, args, preview)


def ended_from_stream(event: hc.ToolCompleted) -> ToolEnded:
    call_id = event.tool_call_id if isinstance(event.tool_call_id, str) and event.tool_call_id else None
    message = event.error_message if isinstance(event.error_message, str) else None
    cancelled = event.cancelled if isinstance(event.cancelled, bool) else None
    return ToolEnded(event.tool, call_id, event.duration, bool(event.error), message, cancelled)


# --- what goes out ---------------------------------------------------------------------------------


class Emit(NamedTuple):
    event: ev.Event


class StreamTool(NamedTuple):
    """A tool event of the stream for the tool merge (the plugin reports tools for this run too)."""

    event: ToolBegan | ToolEnded


class AskApproval(NamedTuple):
    event: hc.ApprovalRequest


class AskClarify(NamedTuple):
    held_id: str
    question: str
    choices: list[str] | None
    seq: int | UnsetType = UNSET  # the asking event's number, where the gateway numbers them


class RetireClarify(NamedTuple):
    held_id: str


class ExpireUnansweredApprovals(NamedTuple):
    """A tool failed while approvals wait: Hermes failed them closed after its own timeout."""


class ExpirePluginClarifications(NamedTuple):
    """The clarify tool ended: a question the plugin asked for it went unanswered."""


class Complete(NamedTuple):
    """The run completed: settle its tool calls, send `message.complete`, deliver its MEDIA: files."""

    message: ev.MessageComplete
    paths: list[str]


class Finish(NamedTuple):
    status: ev.RunStatus
    error: str | None = None


Output = (
    Emit
    | StreamTool
    | AskApproval
    | AskClarify
    | RetireClarify
    | ExpireUnansweredApprovals
    | ExpirePluginClarifications
    | Complete
    | Finish
)


# --- the state -------------------------------------------------------------------------------------


@dataclass
class RunView:
    """What the translation of one run remembers: its draft and its tool calls."""

    run_id: str
    conversation_id: str
    message_id: str
    merged: bool = False  # tool events go through the tool merge (the plugin reports them too)
    cancelling: bool = False  # a call failing now was interrupted, not failed
    streamed: GrowingDraft = field(default_factory=GrowingDraft)  # the text Hermes streamed, tags and all
    draft: str = ""
    message_completed: bool = False
    tools: dict[str, ev.ToolState] = field(default_factory=dict)
    open_tools: defaultdict[str, deque[str]] = field(default_factory=lambda: defaultdict(deque))
    mint: Callable[[], str] = mint_tool_id


def joined_deltas(events: list[hc.RunEvent]) -> list[hc.RunEvent]:
    """The events of one read, each run of consecutive text deltas joined into one (the last's, with all
    their text): a draft only grows by a delta's text, so it ends the same, for one translation and one
    broadcast instead of one per delta. The order of everything else is untouched."""
    if len(events) < 2:
        return events
    joined: list[hc.RunEvent] = []
    for is_delta, group in itertools.groupby(events, key=lambda event: type(event) is hc.MessageDelta):
        if not is_delta:
            joined.extend(group)
            continue
        deltas = [event for event in group if isinstance(event, hc.MessageDelta)]
        text = "".join(delta.delta for delta in deltas)
        joined.append(deltas[0] if len(deltas) == 1 else msgspec.structs.replace(deltas[-1], delta=text))
    return joined


def translate(view: RunView, event: hc.RunEvent) -> list[Output]:
    """The outputs of one Hermes event; updates `view`."""
    match event:
        case hc.MessageDelta(delta=delta):
            if view.message_completed:
                return []
            visible = view.streamed.add(delta)
            if visible == view.draft:
                return []
            view.draft = visible
            ts = ev.utc_now_iso_seconds()
            return [
                Emit(
                    ev.MessageDelta(
                        conversation_id=view.conversation_id, message_id=view.message_id, text=visible, ts=ts
                    )
                )
            ]
        case hc.ToolStarted():
            began = began_from_stream(event)
            return [StreamTool(began)] if view.merged else tool_began(view, began)
        case hc.ToolCompleted():
            ended = ended_from_stream(event)
            return [StreamTool(ended)] if view.merged else tool_ended(view, ended)
        case hc.ApprovalRequest():
            return [AskApproval(event)]
        case hc.ClarifyRequest():
            return [
                AskClarify(event.clarify_id, event.question, list(event.choices) if event.choices else None, event.seq)
            ]
        case hc.ClarifyRetired(clarify_id=held_id):
            return [RetireClarify(held_id)]
        case hc.RunCompleted(output=output):
            return complete(view, output)
        case hc.RunFailed(error=error):
            return [Finish("failed", sanitize_error(error))]
        case hc.RunCancelled():
            return [Finish("cancelled")]
        case hc.RunInterrupted():
            return [Finish("failed", INTERRUPTED_ERROR)]
        case _:
            # reasoning.available repeats the text; approval.responded is echoed by us; a newer Hermes's
            # events we don't know (UnknownEvent, logged by the client) are dropped.
            return []


def complete(view: RunView, output: str) -> list[Output]:
    """The final text: `message.complete` (MEDIA: tags stripped), then the delivery of its files."""
    view.message_completed = True
    view.draft = strip_media(output)
    done = ev.MessageComplete(conversation_id=view.conversation_id, message_id=view.message_id, text=view.draft)
    return [Complete(done, media_paths(output))]


def tool_began(view: RunView, began: ToolBegan) -> list[Output]:
    call_id = began.tool_call_id or view.mint()
    view.open_tools[began.tool].append(call_id)
    state = ev.ToolState(
        tool_call_id=call_id,
        tool_name=began.tool,
        status="running",
        run_id=view.run_id,
        args_redacted=redact(began.args) if isinstance(began.args, dict) else {},
        preview=_short(began.preview or "", PREVIEW_MAX),
    )
    view.tools[call_id] = state
    return [Emit(tool_event(view, state))]


def tool_ended(view: RunView, ended: ToolEnded) -> list[Output]:
    pending = view.open_tools[ended.tool]
    call_id = ended.tool_call_id or (pending.popleft() if pending else view.mint())
    if ended.tool_call_id and call_id in pending:
        pending.remove(call_id)
    started = view.tools.get(call_id)
    status = tool_outcome(ended, cancelling=view.cancelling)
    state = ev.ToolState(
        tool_call_id=call_id,
        tool_name=ended.tool,
        status=status,
        run_id=view.run_id,
        args_redacted=started.args_redacted if started else {},
        duration_ms=round(ended.duration * 1000) if ended.duration is not None else None,
        error=sanitize_error(ended.error_message or "Tool failed") if status == "failed" else UNSET,
    )
    view.tools[call_id] = state
    outputs: list[Output] = [Emit(tool_event(view, state))]
    if ended.error:
        outputs.append(ExpireUnansweredApprovals())
    if ended.tool == "clarify":
        outputs.append(ExpirePluginClarifications())
    return outputs


def end_running_tools(view: RunView) -> list[Output]:
    """The run ended: a call still running was cut off with it."""
    outputs: list[Output] = []
    for call_id, state in list(view.tools.items()):
        if state.status == "running":
            ended = ev.ToolState(
                tool_call_id=call_id, tool_name=state.tool_name, status="cancelled", run_id=view.run_id
            )
            view.tools[call_id] = ended
            outputs.append(Emit(tool_event(view, ended)))
    return outputs


def tool_outcome(ended: ToolEnded, *, cancelling: bool) -> ev.ToolStatus:
    """A call that ended with an error while its run was being cancelled was interrupted, not failed."""
    if not ended.error:
        return "completed"
    return "cancelled" if ended.cancelled is True or cancelling else "failed"


def tool_event(view: RunView, state: ev.ToolState) -> ev.ToolEvent:
    """The `tool.event` of a call's state: the same fields (the args only while it runs)."""
    fields = msgspec.structs.asdict(state)
    if state.status != "running":
        fields["args_redacted"] = UNSET
    return ev.ToolEvent(conversation_id=view.conversation_id, **fields)


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
