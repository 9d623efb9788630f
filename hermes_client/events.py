"""The events of a Hermes run stream (``GET /v1/runs/{id}/events``), as one tagged union.

The event name is the JSON field ``"event"``. Fields that only newer Hermes (or our companion plugin)
sends default to ``UNSET``, so ``msgspec.to_builtins(event)`` shows exactly what arrived. Unknown
fields are ignored: Hermes is upstream and may add some at any time.
"""

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
    "RunCancelled",
    "RunCompleted",
    "RunEvent",
    "RunFailed",
    "ToolCompleted",
    "ToolStarted",
    "Usage",
    "decode_run_event",
    "event_name",
]


# gc=False: decoded events hold only JSON values, so they can never be part of a reference cycle, and
# untracked structs decode about 20% faster (this is the hot path of every run stream).
class _RunEventBase(msgspec.Struct, frozen=True, kw_only=True, tag_field="event", gc=False):
    run_id: str
    timestamp: float


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
    """The run finished. ``output`` is the final text, ``MEDIA:`` tags still in it."""

    output: str
    usage: Usage | None = None


class RunFailed(_RunEventBase, frozen=True, tag="run.failed"):
    error: str


class RunCancelled(_RunEventBase, frozen=True, tag="run.cancelled"):
    pass


RunEvent = (
    MessageDelta
    | ToolStarted
    | ToolCompleted
    | ReasoningAvailable
    | ApprovalRequest
    | ApprovalResponded
    | ClarifyRequest
    | ClarifyRetired
    | RunCompleted
    | RunFailed
    | RunCancelled
)

TERMINAL_EVENTS: Final = (RunCompleted, RunFailed, RunCancelled)

_KNOWN_EVENT_NAMES: Final = frozenset(str(cls.__struct_config__.tag) for cls in RunEvent.__args__)


class _EventName(msgspec.Struct):
    event: str


RUN_EVENT_DECODER: Final = msgspec.json.Decoder(RunEvent)
_NAME_DECODER: Final = msgspec.json.Decoder(_EventName)


def event_name(event: RunEvent) -> str:
    """The wire name of an event, e.g. ``"message.delta"``."""
    return str(event.__struct_config__.tag)


def decode_run_event(data: bytes) -> RunEvent | None:
    """Decode one SSE ``data:`` payload. Returns None for an event name this client does not know.

    The fast path is a single decode with the prebuilt union decoder; only a payload that fails it
    is looked at again to tell an unknown (skippable) event from a malformed one.
    """
    try:
        return RUN_EVENT_DECODER.decode(data)
    except msgspec.ValidationError as exc:
        try:
            name = _NAME_DECODER.decode(data).event
        except msgspec.DecodeError:
            raise HermesUpstreamError(f"run event without an event name: {exc}") from exc
        if name in _KNOWN_EVENT_NAMES:
            raise HermesUpstreamError(f"malformed {name} event: {exc}") from exc
        return None
    except msgspec.DecodeError as exc:
        raise HermesUpstreamError(f"run event is not valid JSON: {exc}") from exc
