"""``GET /v1/capabilities`` (every mode) and ``POST /v1/runs/{id}/steer`` (with the ``run_steer`` feature).

The capabilities document is 0.19.0's (HERMES_API.md §5.2) plus, per feature of the demo, the flag and
endpoint a 0.22-era gateway adds (``run_steer``, ``model_options``). ``run_replay`` adds nothing: real
Hermes does not advertise replay either. A gateway without the steer route answers aiohttp's bare 404.
"""

from typing import Any, Final

from litestar import Request, Response, get, post
from litestar.params import FromPath

from demo_hermes.routes.runs import _known_run
from demo_hermes.state import demo_state
from demo_hermes.wire import api_error, json_response, read_json

__all__ = ["NEWER_ROUTES", "capabilities_document"]

MAX_STEER_TEXT: Final = 65536
_TRUE_0_19: Final = (
    "chat_completions",
    "chat_completions_streaming",
    "responses_api",
    "responses_streaming",
    "run_submission",
    "run_status",
    "run_events_sse",
    "run_stop",
    "run_approval_response",
    "tool_progress_events",
    "approval_events",
    "session_resources",
    "session_chat",
    "session_chat_streaming",
    "session_fork",
    "skills_api",
)
_FALSE_0_19: Final = ("admin_config_rw", "jobs_admin", "memory_write_api", "audio_api", "realtime_voice")
_ENDPOINTS_0_19: Final = {
    "health": ("GET", "/health"),
    "models": ("GET", "/v1/models"),
    "chat_completions": ("POST", "/v1/chat/completions"),
    "responses": ("POST", "/v1/responses"),
    "runs": ("POST", "/v1/runs"),
    "run_status": ("GET", "/v1/runs/{run_id}"),
    "run_events": ("GET", "/v1/runs/{run_id}/events"),
    "run_approval": ("POST", "/v1/runs/{run_id}/approval"),
    "run_stop": ("POST", "/v1/runs/{run_id}/stop"),
    "sessions": ("GET", "/api/sessions"),
    "session_messages": ("GET", "/api/sessions/{session_id}/messages"),
}
_NEWER_ENDPOINTS: Final = {
    "run_steer": ("run_steer", "POST", "/v1/runs/{run_id}/steer"),
    "model_options": ("model_options", "GET", "/api/model/options"),
}


def capabilities_document(features: frozenset[str]) -> dict[str, Any]:
    """What ``GET /v1/capabilities`` answers for a demo with these features."""
    flags: dict[str, Any] = dict.fromkeys(_TRUE_0_19, True)
    flags.update(dict.fromkeys(_FALSE_0_19, False))
    flags.update(dict.fromkeys(sorted(features & _NEWER_ENDPOINTS.keys()), True))
    if "runs_idempotency" in features:
        flags["runs_idempotency"] = {"supported": True, "durable": False, "retention_seconds": 86400}
    flags["session_continuity_header"] = "X-Hermes-Session-Id"
    flags["session_key_header"] = "X-Hermes-Session-Key"
    flags["cors"] = False
    endpoints = {name: {"method": method, "path": path} for name, (method, path) in _ENDPOINTS_0_19.items()}
    for feature in sorted(features & _NEWER_ENDPOINTS.keys()):
        name, method, path = _NEWER_ENDPOINTS[feature]
        endpoints[name] = {"method": method, "path": path}
    return {
        "object": "hermes.api_server.capabilities",
        "platform": "hermes-agent",
        "model": "hermes-agent",
        "auth": {"type": "bearer", "required": True},
        "runtime": {"mode": "server_agent", "tool_execution": "server", "split_runtime": False},
        "features": flags,
        "endpoints": endpoints,
    }


@get("/v1/capabilities")
async def capabilities(request: Request[Any, Any, Any]) -> Response[bytes]:
    return json_response(capabilities_document(demo_state(request).features))


def _no_such_route() -> Response[bytes]:
    """What aiohttp answers for a path it has no route for (0.19.0 has no steer route)."""
    return Response(content=b"404: Not Found", status_code=404, media_type="text/plain; charset=utf-8")


@post("/v1/runs/{run_id:str}/steer")
async def steer_run(request: Request[Any, Any, Any], run_id: FromPath[str]) -> Response[bytes]:
    """Queue guidance for the agent's next step, as ``_handle_steer_run`` does."""
    if "run_steer" not in demo_state(request).features:
        return _no_such_route()
    run = _known_run(request, run_id)
    if run.status != "running":
        raise api_error(409, f"Run is not currently accepting steer input: {run_id}", "run_not_accepting_steer")
    body = await read_json(request, api_error(400, "Invalid JSON"))
    fields = body if isinstance(body, dict) else {}
    raw = next((fields[key] for key in ("input", "message", "text") if fields.get(key)), "")
    text = raw.strip() if isinstance(raw, str) and len(raw) <= MAX_STEER_TEXT else ""
    if not text:
        raise api_error(
            400, "Missing non-empty steer text; expected 'input', 'message', or 'text'.", "invalid_steer_input"
        )
    run.pending_steer.append(text)
    run.emit("run.steered", {"accepted": True})
    return json_response({"object": "hermes.run.steer", "run_id": run_id, "accepted": True})


NEWER_ROUTES: Final = [capabilities, steer_run]
