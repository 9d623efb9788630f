"""The Hermes response bodies this client reads, as frozen msgspec structs.

Unknown fields are ignored (Hermes is upstream and grows). Fields that Hermes sends only in some
responses default to ``UNSET``, so an absent field stays absent when the struct is re-encoded.
Shapes follow hermes-agent 0.19.0 (see the project's ``HERMES_API.md``).
"""

from typing import Any, Final

import msgspec
from msgspec import UNSET, UnsetType

from hermes_client.events import Usage

__all__ = [
    "NATIVE_FEATURES",
    "ApprovalResult",
    "CapabilitiesDocument",
    "ClarifyResult",
    "Health",
    "HermesCapabilities",
    "Job",
    "JobRepeat",
    "JobSchedule",
    "ModelInfo",
    "ModelOptions",
    "ProviderOption",
    "RunHandle",
    "RunStatus",
    "Session",
    "SessionMessage",
    "SessionPage",
    "SteerResult",
]


class _Response(msgspec.Struct, frozen=True, kw_only=True):
    pass


class Health(_Response, frozen=True):
    status: str
    platform: str | None = None
    version: str | None = None


# --- capabilities -----------------------------------------------------------------------------------

# The features of a 0.22-era gateway the server uses natively where they are advertised (docs/hermes-versions.md).
NATIVE_FEATURES: Final = frozenset({"run_steer", "model_options", "session_model_lock"})


class CapabilitiesDocument(_Response, frozen=True):
    """``GET /v1/capabilities`` as sent: ``features`` maps a name to a flag (or, for a few, an object)."""

    features: dict[str, Any] = msgspec.field(default_factory=dict)
    endpoints: dict[str, Any] = msgspec.field(default_factory=dict)
    model: str | None = None


class HermesCapabilities(_Response, frozen=True):
    """What one gateway offers, from ``/health`` and ``/v1/capabilities`` (``HermesClient.get_capabilities``).

    ``features`` holds the names whose flag is ``true`` (or whose object says ``"supported": true``, as
    ``runs_idempotency`` does); ``advertised`` is False for a gateway without the
    capabilities route, which then counts as offering nothing native. Ask these, never ``version``, which
    is informational (forks and newer releases keep the same flags).
    """

    version: str | None = None
    advertised: bool = False
    features: frozenset[str] = frozenset()
    endpoints: frozenset[str] = frozenset()
    model: str | None = None

    @property
    def native(self) -> frozenset[str]:
        """The advertised features of ``NATIVE_FEATURES``."""
        return self.features & NATIVE_FEATURES

    @property
    def run_steer(self) -> bool:
        """``POST /v1/runs/{id}/steer`` exists."""
        return "run_steer" in self.features

    @property
    def model_options(self) -> bool:
        """Per-run ``model``/``provider``/``model_options`` on ``/v1/runs``, and ``GET /api/model/options``."""
        return "model_options" in self.features

    @property
    def runs_idempotency(self) -> bool:
        """``POST /v1/runs`` with an ``Idempotency-Key`` makes the run once: the same key again answers the
        run it made (``replayed``), so a create whose answer was lost can be sent again."""
        return "runs_idempotency" in self.features

    @property
    def session_model_lock(self) -> bool:
        """``POST /api/sessions/{id}/model`` pins a session's model."""
        return "session_model_lock" in self.features


# --- runs -------------------------------------------------------------------------------------------


class RunHandle(_Response, frozen=True):
    """``POST /v1/runs`` (status ``started``) and ``POST …/stop`` (status ``stopping``)."""

    run_id: str
    status: str
    replayed: bool = False  # a 0.22-era gateway answering a repeated Idempotency-Key with the run it made


class RunStatus(_Response, frozen=True):
    """``GET /v1/runs/{id}``: in-memory only in 0.19.0, kept for an hour after the run ends.

    ``status`` is one of queued, running, waiting_for_approval, stopping, completed, failed, cancelled.
    ``model`` merely echoes the run request's ``model`` field.
    """

    run_id: str
    status: str
    created_at: float | None = None
    updated_at: float | None = None
    session_id: str | None = None
    model: str | None = None
    last_event: str | None = None
    output: str | UnsetType = UNSET
    usage: Usage | UnsetType = UNSET
    error: str | UnsetType = UNSET


class SteerResult(_Response, frozen=True):
    """``POST /v1/runs/{id}/steer``: ``accepted`` is true once the agent holds the text for its next step."""

    run_id: str
    accepted: bool


class ApprovalResult(_Response, frozen=True):
    run_id: str
    choice: str
    resolved: int


class ClarifyResult(_Response, frozen=True):
    """Newer Hermes: ``awaiting_text`` is true when a null response asked for free text instead."""

    run_id: str
    clarify_id: str
    resolved: bool
    awaiting_text: bool = False


# --- sessions ---------------------------------------------------------------------------------------


class Session(_Response, frozen=True):
    """A Hermes session (a row of ``state.db``). Times are epoch seconds."""

    id: str
    source: str | None = None
    user_id: str | None = None
    model: str | None = None
    title: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    end_reason: str | None = None
    parent_session_id: str | None = None
    message_count: int = 0
    tool_call_count: int = 0
    api_call_count: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    last_active: float | UnsetType = UNSET
    preview: str | UnsetType | None = UNSET


class SessionPage(_Response, frozen=True):
    """``GET /api/sessions``: ``has_more`` is only ``len(data) == limit``."""

    data: list[Session]
    limit: int = 0
    offset: int = 0
    has_more: bool = False


class SessionMessage(_Response, frozen=True):
    """One message of a session transcript; ``role`` is user, assistant or tool.

    ``tool_calls`` items look like ``{"id", "call_id", "type": "function", "function": {"name", "arguments"}}``
    where ``arguments`` is a JSON string.
    """

    id: int
    role: str
    content: str | list[Any] | None = None  # a list of parts for multimodal messages (tool images)
    session_id: str | None = None
    tool_call_id: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_name: str | None = None
    timestamp: float | None = None
    finish_reason: str | None = None
    reasoning: str | None = None


# --- jobs -------------------------------------------------------------------------------------------


class JobSchedule(_Response, frozen=True):
    """``kind`` is ``interval`` (with ``minutes``), ``cron`` (with ``expr``) or ``once`` (with ``run_at``)."""

    kind: str
    display: str | UnsetType | None = UNSET
    minutes: int | UnsetType = UNSET
    expr: str | UnsetType = UNSET
    run_at: str | UnsetType = UNSET


class JobRepeat(_Response, frozen=True):
    """``times`` is None for "forever". Absent fields stay ``UNSET``, so a projection shows what Hermes sent."""

    times: int | UnsetType | None = UNSET
    completed: int | UnsetType = UNSET


class Job(_Response, frozen=True):
    """A cron job as the gateway stores it. Optional fields stay ``UNSET`` when absent.

    Timestamps are ISO-8601 strings (or null), as Hermes sends them. ``repeat`` can be a bare int on a
    job that a buggy ``PATCH`` corrupted; it is kept as it came so listing never fails on one bad job.
    """

    id: str
    name: str | UnsetType = UNSET
    prompt: str | UnsetType = UNSET
    schedule: JobSchedule | UnsetType = UNSET
    schedule_display: str | UnsetType | None = UNSET
    repeat: JobRepeat | int | UnsetType | None = UNSET
    enabled: bool | UnsetType = UNSET
    state: str | UnsetType | None = UNSET
    deliver: str | UnsetType | None = UNSET
    skills: list[str] | UnsetType | None = UNSET
    skill: str | UnsetType | None = UNSET
    model: str | UnsetType | None = UNSET
    provider: str | UnsetType | None = UNSET
    created_at: str | UnsetType | None = UNSET
    next_run_at: str | UnsetType | None = UNSET
    last_run_at: str | UnsetType | None = UNSET
    last_status: str | UnsetType | None = UNSET
    last_error: str | UnsetType | None = UNSET
    last_delivery_error: str | UnsetType | None = UNSET
    paused_at: str | UnsetType | None = UNSET
    paused_reason: str | UnsetType | None = UNSET
    origin: dict[str, Any] | UnsetType | None = UNSET
    latest_execution: dict[str, Any] | UnsetType | None = UNSET


# --- dashboard (``hermes serve``) -------------------------------------------------------------------


class ProviderOption(_Response, frozen=True):
    slug: str
    name: str
    is_current: bool = False
    models: list[str] = msgspec.field(default_factory=list)
    total_models: int | UnsetType = UNSET
    authenticated: bool | UnsetType = UNSET


class ModelOptions(_Response, frozen=True):
    """``GET /api/model/options``: the providers and the current global model and provider."""

    providers: list[ProviderOption]
    model: str | None = None
    provider: str | None = None


class ModelInfo(_Response, frozen=True):
    """``GET /api/model/info``."""

    model: str | None = None
    provider: str | None = None
    auto_context_length: int | UnsetType | None = UNSET
    effective_context_length: int | UnsetType | None = UNSET
