"""The events of a Hermes run stream (``GET /v1/runs/{id}/events``), as one tagged union.

The event name is the JSON field ``"event"``. Fields that only newer Hermes (or our companion plugin)
sends default to ``UNSET``, so ``msgspec.to_builtins(event)`` shows exactly what arrived. Unknown
fields are ignored: Hermes is upstream and may add some at any time.

A 0.22-era gateway numbers its events: ``seq`` (also the SSE ``id:``) is what a caller hands back as
``Last-Event-ID`` to resume the stream; 0.19.0 sends none. An event name this client does not know
(``message.interim``, ``subagent.start``, ...) decodes to :class:`UnknownEvent`, logged once per name.
"""

import logging
from typing import Any, Final

import msgspec
from msgspec import UNSET, UnsetType

from hermes_client.errors import HermesUpstreamError

__all__ = [
    "RUN_EVENT_DECODER",
    "TERMINAL_EVENTS",
    "ApprovalRequest",
    "ApprovalResponded",
    "ClarifyRequest",
    "ClarifyRetired",
    "MessageDelta",
    "ReasoningAvailable",
    "ReplayTruncated",
    "RunCancelled",
    "RunCompleted",
    "RunEvent",
    "RunFailed",
    "RunInterrupted",
    "RunSteered",
    "ToolCompleted",
    "ToolStarted",
    "UnknownEvent",
    "Usage",
    "decode_run_event",
    "event_name",
]

log = logging.getLogger(__name__)

MAX_EVENT_NAME_CHARS: Final = 100  # an unknown name is kept (and logged) only this long
MAX_LOGGED_UNKNOWN_NAMES: Final = 256  # past this many distinct unknown names, no more are remembered or logged


# gc=False: decoded events hold only JSON values, so they can never be part of a reference cycle, and
# untracked structs decode about 20% faster (this is the hot path of every run stream).
class _RunEventBase(msgspec.Struct, frozen=True, kw_only=True, tag_field="event", gc=False):
    run_id: str
    timestamp: float
    seq: int | UnsetType = UNSET  # 0.22-era: the event's number in the run's stream (its SSE id)


class MessageDelta(_RunEventBase, frozen=True, tag="message.delta"):
    """A piece of assistant text. After a tool turn the first delta starts with ``"\\n\\n"``."""

    delta: str


class ToolStarted(_RunEventBase, frozen=True, tag="tool.started"):
    """A tool call began. 0.19.0 sends no call id and no args; newer Hermes or our plugin may."""

    tool: str
    preview: str | None = None
    tool_call_id: str | UnsetType = UNSET
    args: dict[str, Any] | UnsetType = UNSET


class ToolCompleted(_RunEventBase, frozen=True, tag="tool.completed"):
    """A tool call ended; ``error`` is true for a failed, denied or interrupted call.

    Hermes always sends ``duration``; only our plugin may not know it (None). Only the plugin says
    why a call failed (``error_message``, already truncated) and that it was interrupted (``cancelled``).
    """

    tool: str
    duration: float | None
    error: bool
    tool_call_id: str | UnsetType = UNSET
    error_message: str | UnsetType = UNSET
    cancelled: bool | UnsetType = UNSET


class ReasoningAvailable(_RunEventBase, frozen=True, tag="reasoning.available"):
    """The text of an LLM response (≤ 500 chars). It repeats the answer; it is not hidden reasoning."""

    text: str


class ApprovalRequest(_RunEventBase, frozen=True, tag="approval.request"):
    """A command waits for a human decision (``POST /v1/runs/{id}/approval``)."""

    command: str
    pattern_key: str
    pattern_keys: list[str]
    description: str
    allow_permanent: bool
    choices: list[str]
    smart_denied: bool | UnsetType = UNSET


class ApprovalResponded(_RunEventBase, frozen=True, tag="approval.responded"):
    """An approval was answered; ``resolved`` is how many pending approvals it resolved."""

    choice: str
    resolved: int


class ClarifyRequest(_RunEventBase, frozen=True, tag="clarify.request"):
    """Newer Hermes: the agent asks the user a question (``POST /v1/runs/{id}/clarify``)."""

    clarify_id: str
    question: str
    choices: list[str] | None = None
    multi_select: bool | UnsetType = UNSET
    tool_call_id: str | UnsetType = UNSET


class ClarifyRetired(_RunEventBase, frozen=True, tag="clarify.retired"):
    """Newer Hermes: a question stopped waiting, answered or expired (``notice`` says which, for humans)."""

    clarify_id: str
    notice: str | None = None


class Usage(msgspec.Struct, frozen=True):
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0


class RunCompleted(_RunEventBase, frozen=True, tag="run.completed"):
    """The run finished. ``output`` is the final text, ``MEDIA:`` tags still in it.

    0.22-era: ``pending_steer`` is steer text the agent never got to (the run ended first).
    """

    output: str
    usage: Usage | None = None
    pending_steer: str | UnsetType = UNSET


class RunFailed(_RunEventBase, frozen=True, tag="run.failed"):
    error: str
    pending_steer: str | UnsetType = UNSET


class RunCancelled(_RunEventBase, frozen=True, tag="run.cancelled"):
    pending_steer: str | UnsetType = UNSET


class RunInterrupted(_RunEventBase, frozen=True, tag="run.interrupted"):
    """0.22-era: the gateway shut down under the run (its status becomes ``interrupted``)."""

    error: str | None = None


class RunSteered(_RunEventBase, frozen=True, tag="run.steered"):
    """0.22-era: ``POST /v1/runs/{id}/steer`` was accepted; the agent reads the text at its next step."""

    accepted: bool = True


class ReplayTruncated(_RunEventBase, frozen=True, tag="replay.truncated"):
    """0.22-era: a resumed stream lost events (the gateway keeps the last 1000): the events after
    ``requested_seq`` and before ``oldest_retained_seq`` are gone. This frame itself has no ``seq``."""

    oldest_retained_seq: int
    requested_seq: int | UnsetType = UNSET


class UnknownEvent(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """An event whose name this client does not know (a newer Hermes): only its envelope is kept."""

    name: str
    run_id: str | None = None
    timestamp: float | None = None
    seq: int | UnsetType = UNSET


_KnownRunEvent = (
    MessageDelta
    | ToolStarted
    | ToolCompleted
    | ReasoningAvailable
    | ApprovalRequest
    | ApprovalResponded
    | ClarifyRequest
    | ClarifyRetired
    | RunSteered
    | ReplayTruncated
    | RunCompleted
    | RunFailed
    | RunCancelled
    | RunInterrupted
)
RunEvent = _KnownRunEvent | UnknownEvent

TERMINAL_EVENTS: Final = (RunCompleted, RunFailed, RunCancelled, RunInterrupted)

_KNOWN_EVENT_NAMES: Final = frozenset(str(cls.__struct_config__.tag) for cls in _KnownRunEvent.__args__)


class _Envelope(msgspec.Struct):
    """What every event has, whatever its name; anything else is ignored."""

    event: str
    run_id: str | None = None
    timestamp: float | None = None
    seq: int | UnsetType = UNSET


RUN_EVENT_DECODER: Final = msgspec.json.Decoder(_KnownRunEvent)
_ENVELOPE_DECODER: Final = msgspec.json.Decoder(_Envelope)
_logged_unknown: set[str] = set()


def event_name(event: RunEvent) -> str:
    """The wire name of an event, e.g. ``"message.delta"``."""
    if isinstance(event, UnknownEvent):
        return event.name
    return str(event.__struct_config__.tag)


def _note_unknown(name: str) -> None:
    """Log an unknown event name the first time it is seen (bounded: a hostile gateway can't grow the set)."""
    if name in _logged_unknown or len(_logged_unknown) >= MAX_LOGGED_UNKNOWN_NAMES:
        return
    _logged_unknown.add(name)
    log.info("ignoring run events named %r: this client does not know them (a newer Hermes?)", name)


def decode_run_event(data: bytes) -> RunEvent:
    """Decode one SSE ``data:`` payload; an event name this client does not know gives an ``UnknownEvent``.

    The fast path is a single decode with the prebuilt union decoder; only a payload that fails it
    is looked at again to tell an unknown event from a malformed one (``HermesUpstreamError``).
    """
    try:
        return RUN_EVENT_DECODER.decode(data)
    except msgspec.ValidationError as exc:
        try:
            envelope = _ENVELOPE_DECODER.decode(data)
        except msgspec.DecodeError:
            raise HermesUpstreamError(f"run event without an event name: {exc}") from exc
        name = envelope.event
        if name in _KNOWN_EVENT_NAMES:
            raise HermesUpstreamError(f"malformed {name} event: {exc}") from exc
        name = name[:MAX_EVENT_NAME_CHARS]
        _note_unknown(name)
        return UnknownEvent(name=name, run_id=envelope.run_id, timestamp=envelope.timestamp, seq=envelope.seq)
    except msgspec.DecodeError as exc:
        raise HermesUpstreamError(f"run event is not valid JSON: {exc}") from exc
