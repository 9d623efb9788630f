"""``/api/sessions``: list, create, read, rename, delete sessions and read their messages."""

import time
from typing import Any, Final

from litestar import Request, Response, delete, get, patch, post
from litestar.params import FromPath, FromQuery

from demo_hermes.sessions import SessionRecord
from demo_hermes.state import demo_state
from demo_hermes.wire import HermesHTTPError, api_error, json_response, read_json

__all__ = ["SESSION_ROUTES"]

DEFAULT_LIMIT: Final = 50
MAX_LIMIT: Final = 200
MAX_ID_CHARS: Final = 256
MAX_TITLE_CHARS: Final = 100
PATCHABLE: Final = frozenset({"title", "end_reason"})


def _session_not_found(session_id: str) -> HermesHTTPError:
    return api_error(404, f"Session not found: {session_id}", "session_not_found")


def _known_session(request: Request[Any, Any, Any], session_id: str) -> SessionRecord:
    session = demo_state(request).sessions.get(session_id)
    if session is None:
        raise _session_not_found(session_id)
    return session


def _session_body(session: SessionRecord) -> dict[str, Any]:
    return {"object": "hermes.session", "session": session.to_json()}


def _int_param(value: str | None, default: int, maximum: int | None = None) -> int:
    try:
        number = int(value) if value is not None else default
    except ValueError:
        number = default
    number = max(number, 0)
    return min(number, maximum) if maximum is not None else number


def _valid_title(request: Request[Any, Any, Any], title: Any, session_id: str | None) -> str | None:
    """A title after cleanup, or None to clear it; titles are unique across sessions."""
    if title is None or (isinstance(title, str) and not title.strip()):
        return None
    if not isinstance(title, str) or len(title.strip()) > MAX_TITLE_CHARS:
        raise api_error(400, f"Title must be a string of at most {MAX_TITLE_CHARS} characters", "invalid_title")
    owner = demo_state(request).sessions.title_owner(title.strip())
    if owner is not None and owner.id != session_id:
        raise api_error(400, f"Title already in use by session {owner.id}", "invalid_title")
    return title.strip()


@get("/api/sessions")
async def list_sessions(
    request: Request[Any, Any, Any],
    limit: FromQuery[str | None] = None,
    offset: FromQuery[str | None] = None,
    source: FromQuery[str | None] = None,
) -> Response[bytes]:
    page_limit = _int_param(limit, DEFAULT_LIMIT, MAX_LIMIT)
    page_offset = _int_param(offset, 0)
    sessions = demo_state(request).sessions.listing(source=source, limit=page_limit, offset=page_offset)
    return json_response(
        {
            "object": "list",
            "data": [session.to_json(listing=True) for session in sessions],
            "limit": page_limit,
            "offset": page_offset,
            "has_more": len(sessions) == page_limit,
        }
    )


@post("/api/sessions")
async def create_session(request: Request[Any, Any, Any]) -> Response[bytes]:
    store = demo_state(request).sessions
    body = await read_json(request, api_error(400, "Invalid JSON")) if await request.body() else {}
    if not isinstance(body, dict):
        raise api_error(400, "Invalid JSON")
    session_id = body.get("id") or body.get("session_id")
    if session_id is not None and (
        not isinstance(session_id, str)
        or len(session_id) > MAX_ID_CHARS
        or any(c in session_id for c in "\r\n\0/\\")
        or session_id in {".", ".."}
    ):
        raise api_error(400, "Invalid session id", "invalid_session_id")
    if session_id is not None and store.get(session_id) is not None:
        raise api_error(409, f"Session already exists: {session_id}", "session_exists")
    title = _valid_title(request, body.get("title"), None)
    model = body.get("model")
    model = model if isinstance(model, str) and model else "hermes-agent"
    session = store.create(
        session_id, source="api_server", model=model, title=title, has_system_prompt=bool(body.get("system_prompt"))
    )
    return json_response(_session_body(session), 201)


@get("/api/sessions/{session_id:str}")
async def get_session(request: Request[Any, Any, Any], session_id: FromPath[str]) -> Response[bytes]:
    return json_response(_session_body(_known_session(request, session_id)))


@patch("/api/sessions/{session_id:str}")
async def update_session(request: Request[Any, Any, Any], session_id: FromPath[str]) -> Response[bytes]:
    session = _known_session(request, session_id)
    body = await read_json(request, api_error(400, "Invalid JSON"))
    if not isinstance(body, dict):
        raise api_error(400, "Invalid JSON")
    unsupported = sorted(set(body) - PATCHABLE)
    if unsupported:
        raise api_error(400, f"Unsupported session fields: {', '.join(unsupported)}", "unsupported_session_field")
    if "title" in body:
        session.title = _valid_title(request, body["title"], session.id)
    if body.get("end_reason"):
        session.ended_at, session.end_reason = time.time(), str(body["end_reason"])
    return json_response(_session_body(session))


@delete("/api/sessions/{session_id:str}", status_code=200)
async def delete_session(request: Request[Any, Any, Any], session_id: FromPath[str]) -> Response[bytes]:
    if not demo_state(request).sessions.delete(session_id):
        raise _session_not_found(session_id)
    return json_response({"object": "hermes.session.deleted", "id": session_id, "deleted": True})


@get("/api/sessions/{session_id:str}/messages")
async def session_messages(request: Request[Any, Any, Any], session_id: FromPath[str]) -> Response[bytes]:
    session = _known_session(request, session_id)
    return json_response(
        {"object": "list", "session_id": session.id, "data": [message.to_json() for message in session.messages]}
    )


SESSION_ROUTES: Final = [list_sessions, create_session, get_session, update_session, delete_session, session_messages]
