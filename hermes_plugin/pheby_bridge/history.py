"""Tool-aware history: the session's stored turns, tool calls included, spliced into the model request.

`/v1/runs` in 0.19.0 never loads a session's history from state.db; the server then sends no
text-only `conversation_history` and this splice supplies the real one. Hermes's own context
accounting and compression do not see the spliced turns (a known limit; the server's setting is
off by default).
"""

import logging
import threading
from collections import OrderedDict
from typing import Any

logger = logging.getLogger("pheby_bridge")

CACHE_TURNS = 64
_KEEP_TOOL_CALL_KEYS = ("id", "type", "function")

_lock = threading.Lock()
_cache: "OrderedDict[tuple[Any, ...], list[Any]]" = OrderedDict()
_db: Any = None


def _session_db() -> Any:
    global _db
    if _db is None:
        from hermes_state import SessionDB

        _db = SessionDB(read_only=True)
    return _db


def _norm(text: Any) -> str:
    return " ".join(text.split()) if isinstance(text, str) else ""


def _clean(message: dict[str, Any]) -> dict[str, Any] | None:
    """Only what a chat-completions provider accepts; Hermes's internal keys are dropped."""
    role = message.get("role")
    content = message.get("content")
    if role == "tool":
        call_id = message.get("tool_call_id")
        if not call_id:
            return None
        return {"role": "tool", "tool_call_id": call_id, "content": content if isinstance(content, str) else ""}
    if role == "user":
        return {"role": "user", "content": content if content is not None else ""}
    if role == "assistant":
        cleaned: dict[str, Any] = {"role": "assistant", "content": content if isinstance(content, str) else ""}
        calls = message.get("tool_calls")
        if isinstance(calls, list) and calls:
            cleaned["tool_calls"] = [
                {key: call[key] for key in _KEEP_TOOL_CALL_KEYS if key in call}
                for call in calls
                if isinstance(call, dict) and call.get("id")
            ]
        return cleaned
    return None


def stored_turns(session_id: str, current_user_text: str) -> list[dict[str, Any]]:
    """The session's messages before the current turn (which may already be stored), cleaned."""
    rows = _session_db().get_messages_as_conversation(session_id, include_ancestors=True, repair_alternation=True)
    current = _norm(current_user_text)
    for index in range(len(rows) - 1, -1, -1):
        row = rows[index]
        if row.get("role") != "user":
            continue
        stored = _norm(row.get("content"))
        if current and stored and (stored == current or stored in current or current in stored):
            rows = rows[:index]
        break
    cleaned = [c for c in (_clean(r) for r in rows if isinstance(r, dict)) if c is not None]
    # A tool result must follow the assistant message that called it; drop orphans.
    called = {call["id"] for m in cleaned for call in m.get("tool_calls", [])}
    return [m for m in cleaned if m["role"] != "tool" or m["tool_call_id"] in called]


def splice(request: dict[str, Any], session_id: str, turn_id: str) -> dict[str, Any] | None:
    """`request` with the stored turns inserted after the system prompt, or None to leave it alone."""
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages:
        return None
    head = 0
    while head < len(messages) and isinstance(messages[head], dict) and messages[head].get("role") == "system":
        head += 1
    current = messages[head:]
    users = [m for m in current if isinstance(m, dict) and m.get("role") == "user"]
    if not users:
        return None
    first_user = users[0]
    key = (session_id, turn_id or _norm(first_user.get("content"))[:200])
    with _lock:
        prefix = _cache.get(key)
    if prefix is None:
        text = first_user.get("content")
        # The turn's first request decides: several user messages mean Hermes already put the session's
        # history in (a 0.22-era `/v1/runs` loads it itself), and a second copy would repeat every turn.
        prefix = [] if len(users) > 1 else stored_turns(session_id, text if isinstance(text, str) else "")
        with _lock:
            _cache[key] = prefix
            while len(_cache) > CACHE_TURNS:
                _cache.popitem(last=False)
    if not prefix:
        return None
    return dict(request, messages=list(messages[:head]) + list(prefix) + list(current))
