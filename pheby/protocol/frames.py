"""Server → client frames of the Pheby protocol, as frozen msgspec Structs tagged on "type".

Optional keys default to UNSET and are left out of the frame; keys the spec shows as nullable
are typed `X | None` and always present. Every event carries `ts` (ISO-8601 UTC).
"""

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

PROTOCOL_VERSION = 1
RunStatus = Literal["completed", "cancelled", "failed"]
ToolStatus = Literal["running", "completed", "failed", "cancelled"]
ApprovalChoice = Literal["once", "session", "always", "deny"]


def utc_now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def utc_now_iso_seconds() -> str:
    """Now, to the second: the `ts` of a streamed `message.delta` (`pheby.runs.translate`). A run's deltas
    follow each other within the second; with compression, a `ts` that changed in every frame cost more of a
    cumulative frame than its new words did (bench/stream_bytes.py). It stays the frame's last key: one that
    changed before the text would part each frame from the one before."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def iso_utc(ts: float | None, timespec: str = "auto") -> str | None:
    """A Unix timestamp as ISO-8601 UTC (None stays None), the form every event uses."""
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat(timespec=timespec)


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of every outbound frame."""

    request_id: str | UnsetType = UNSET
    ts: str = msgspec.field(default_factory=utc_now_iso)


class ErrorBody(msgspec.Struct, frozen=True):
    code: str
    message: str


class Error(Event, frozen=True, tag="error"):
    error: ErrorBody


class Ready(Event, frozen=True, tag="ready"):
    protocol_version: int = PROTOCOL_VERSION
    server: str = "pheby"
    features: list[str] | UnsetType = UNSET  # those granted of the hello's `features`; absent when it asked none


class Pong(Event, frozen=True, tag="pong"):
    pass


# --- conversations ---------------------------------------------------------------------------


class ConversationSummary(msgspec.Struct, frozen=True):
    conversation_id: str
    name: str
    session_id: str | None
    last_active: str | None
    source: str


class ConversationSnapshot(Event, frozen=True, tag="conversation.snapshot"):
    conversations: list[ConversationSummary]


class ConversationCreated(Event, frozen=True, tag="conversation.created"):
    conversation_id: str
    name: str


class ConversationUpdated(Event, frozen=True, tag="conversation.updated"):
    conversation_id: str
    name: str


class ConversationRenamed(Event, frozen=True, tag="conversation.renamed"):
    conversation_id: str
    name: str


class ConversationDeleted(Event, frozen=True, tag="conversation.deleted"):
    conversation_id: str


class HistoryMessage(msgspec.Struct, frozen=True):
    message_id: str  # m<Hermes message id>
    role: Literal["user", "assistant"]
    text: str
    ts: str | None

    @property
    def number(self) -> int:
        """The Hermes message id behind `message_id` (they only grow)."""
        return int(self.message_id[1:])


class RunSnapshot(msgspec.Struct, frozen=True):
    run_id: str
    status: str
    message_id: str
    text: str


class ToolState(msgspec.Struct, frozen=True, kw_only=True):
    """One tool call of a run, as a run snapshot lists it; `tool.event` carries the same fields."""

    tool_call_id: str
    tool_name: str
    status: ToolStatus
    run_id: str
    args_redacted: dict[str, Any] | UnsetType = UNSET
    duration_ms: int | UnsetType | None = UNSET
    error: str | UnsetType = UNSET
    preview: str | UnsetType = UNSET


class ConversationHistory(Event, frozen=True, tag="conversation.history"):
    conversation_id: str
    messages: list[HistoryMessage]
    has_more: bool
    attachments: list[Any]
    run: RunSnapshot | None
    tools: list[ToolState]
    approvals: list["ApprovalRequest"]
    clarifications: list["ClarifyRequest"]
    # Only on a page opened `around_message_id` or `after_message_id` (docs/protocol-extensions.md):
    # whether newer messages follow the page (ask with `after_message_id` = its last message's id).
    has_newer: bool | UnsetType = UNSET


# --- runs ------------------------------------------------------------------------------------


class RunAccepted(Event, frozen=True, tag="run.accepted"):
    conversation_id: str
    run_id: str


class MessageStart(Event, frozen=True, tag="message.start"):
    conversation_id: str
    run_id: str
    message_id: str


class MessageDelta(Event, frozen=True, tag="message.delta"):
    conversation_id: str
    message_id: str
    text: str


class MessageAppend(Event, frozen=True, tag="message.delta"):
    """`message.delta` for a client granted `delta_append` (docs/protocol-extensions.md): the draft is its
    first `offset` characters (code points) as the client has them, followed by `append`. `stream`: for a
    client also granted `delta_packed`, the number its `PackedAppend` frames name the message by."""

    conversation_id: str
    message_id: str
    offset: int
    append: str
    stream: int | UnsetType = UNSET


class PackedAppend(msgspec.Struct, frozen=True, array_like=True, tag="d"):
    """An append delta for a client granted `delta_packed` (docs/protocol-extensions.md), positional:
    `["d", stream, offset, append]`, against the message whose whole `message.delta` carried `stream`.
    No keys, ids or `ts`: most of a short window's frame was those, not text."""

    stream: int
    offset: int
    append: str


class MessageComplete(Event, frozen=True, tag="message.complete"):
    conversation_id: str
    message_id: str
    text: str
    kind: str | UnsetType = UNSET


class RunFinished(Event, frozen=True, tag="run.finished"):
    conversation_id: str
    run_id: str
    status: RunStatus
    error: str | UnsetType = UNSET


class RunSteered(Event, frozen=True, tag="run.steered"):
    """A `run.steer` reached the run's agent (extension of protocol v1, docs/protocol-extensions.md)."""

    conversation_id: str
    run_id: str
    accepted: bool


def _fields_of(struct: type[msgspec.Struct]) -> list[tuple[Any, ...]]:
    """A Struct's fields as `msgspec.defstruct` takes them, so another Struct can have the same ones."""
    fields: list[tuple[Any, ...]] = []
    for f in msgspec.structs.fields(struct):
        if f.required:
            fields.append((f.name, f.type))
        elif f.default_factory is not msgspec.NODEFAULT:
            fields.append((f.name, f.type, msgspec.field(default_factory=f.default_factory)))
        else:
            fields.append((f.name, f.type, f.default))
    return fields


if TYPE_CHECKING:  # what the type checker sees: the frame is an Event with every field of ToolState

    class ToolEvent(Event, ToolState, frozen=True, tag="tool.event"):
        """A tool call's state pushed as it changes: `ToolState`'s fields and the conversation."""

        conversation_id: str

else:  # msgspec can't inherit from two Structs with fields, so the frame is built from ToolState's
    ToolEvent = msgspec.defstruct(
        "ToolEvent",
        [("conversation_id", str), *_fields_of(ToolState)],
        bases=(Event,),
        module=__name__,
        frozen=True,
        kw_only=True,
        tag="tool.event",
    )


# --- decisions -------------------------------------------------------------------------------


class ApprovalRequest(Event, frozen=True, tag="approval.request"):
    approval_id: str
    session_key: str
    conversation_id: str
    run_id: str
    command: str
    description: str
    choices: list[str]


class ApprovalResolved(Event, frozen=True, tag="approval.resolved"):
    approval_id: str
    choice: str
    accepted: bool


class ClarifyRequest(Event, frozen=True, tag="clarify.request"):
    clarify_id: str
    session_key: str
    conversation_id: str
    run_id: str
    question: str
    choices: list[str] | None
    allow_free_text: bool = True


class ClarifyResolved(Event, frozen=True, tag="clarify.resolved"):
    clarify_id: str
    accepted: bool
    expired: bool | UnsetType = UNSET


# --- settings --------------------------------------------------------------------------------


class YoloSnapshot(Event, frozen=True, tag="yolo.snapshot"):
    enabled: bool
    conversation_id: str
    scope: str = "conversation"


class YoloChanged(Event, frozen=True, tag="yolo.changed"):
    enabled: bool
    conversation_id: str
    scope: str = "conversation"


class ProviderModels(msgspec.Struct, frozen=True):
    slug: str
    name: str
    is_current: bool
    models: list[str]
    total_models: int


class ModelsSnapshot(Event, frozen=True, tag="models.snapshot"):
    providers: list[ProviderModels]
    current_model: str | None
    current_provider: str | None
    supported_reasoning_efforts: list[str]
    scope: str | UnsetType = UNSET
    # Which companion-plugin extras are live (`pheby.plugin.link.PluginExtras`); absent without a plugin.
    plugin: Any = UNSET
    # Which path each gateway-dependent feature takes (`pheby.hermes.features.FeaturePaths`).
    paths: Any = UNSET


class ModelCurrent(Event, frozen=True, tag="model.current"):
    model: str | None
    provider: str | None
    scope: str
    conversation_id: str | UnsetType = UNSET


class ModelChanged(Event, frozen=True, tag="model.changed"):
    model: str
    provider: str | None
    scope: str
    conversation_id: str | UnsetType = UNSET


class ReasoningSnapshot(Event, frozen=True, tag="reasoning.snapshot"):
    effort: str | None
    enabled: bool
    scope: str
    supported_efforts: list[str]
    conversation_id: str | UnsetType = UNSET


class ReasoningChanged(Event, frozen=True, tag="reasoning.changed"):
    effort: str
    scope: str
    conversation_id: str | UnsetType = UNSET


# --- push and presence (extensions of protocol v1, docs/protocol-extensions.md) --------------


class PushSubscribed(Event, frozen=True, tag="push.subscribed"):
    subscription: Any  # `pheby.push.subscriptions.Subscription`


class PushUnsubscribed(Event, frozen=True, tag="push.unsubscribed"):
    subscription_id: str


class PresenceState(Event, frozen=True, tag="presence.state"):
    state: Literal["foreground", "background"]


# --- attachments -----------------------------------------------------------------------------


class AttachmentAdded(Event, frozen=True, tag="attachment.added"):
    conversation_id: str
    attachment: Any


# --- search (an extension of protocol v1, docs/protocol-extensions.md) -------------------------


class SearchHitAttachment(msgspec.Struct, frozen=True):
    attachment_id: str
    filename: str


class SearchResult(msgspec.Struct, frozen=True, kw_only=True):
    """One hit: a message, a conversation's name, or an attachment's text (under its name)."""

    conversation_id: str
    conversation_name: str
    message_id: str | None  # the message to open the conversation at (None: a name hit)
    role: Literal["user", "assistant"] | None
    ts: str | None
    snippet: str
    highlights: list[tuple[int, int]]  # [start, end) code points of the snippet
    kind: Literal["message", "name", "attachment"]
    attachment: SearchHitAttachment | None


class ConversationSearchResults(Event, frozen=True, tag="conversation.search.results"):
    results: list[SearchResult]
    next_cursor: str | None


_ENCODER = msgspec.json.Encoder()


def encode_event(event: Event | PackedAppend) -> bytes:
    return _ENCODER.encode(event)


def error_event(code: str, message: str, request_id: str | UnsetType = UNSET) -> Error:
    return Error(error=ErrorBody(code=code, message=message), request_id=request_id)
