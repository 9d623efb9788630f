"""Observer hooks: tool calls, MEDIA: files and cron output out to the server; YOLO in.

Every hook returns at once: pushes are only enqueued (see `outbox`). They act only on runs that
came through the API server's `/v1/runs` (HERMES_SESSION_PLATFORM == "api_server", run key
`run_…`), except `post_llm_call` for cron runs (platform "cron").
"""

import logging
import re
from collections.abc import Callable
from typing import Any

from .bridge import Bridge

logger = logging.getLogger("pheby_bridge")

CRON_SESSION = re.compile(r"^cron_(?P<job>[0-9a-f]{12})_\d{8}_\d{6}$")
ERROR_MAX = 500


def api_run_id() -> str:
    """The `/v1/runs` run id of the current API-server run, else ''."""
    try:
        from gateway.session_context import get_session_env
        from tools.approval import get_current_session_key

        if get_session_env("HERMES_SESSION_PLATFORM", "") != "api_server":
            return ""
        key = get_current_session_key("")
    except Exception:  # noqa: BLE001 - never let a hook fail the agent
        return ""
    return key if isinstance(key, str) and key.startswith("run_") else ""


def _safe(fn: Callable[..., None]) -> Callable[..., None]:
    def wrapper(**kwargs: Any) -> None:
        try:
            fn(**kwargs)
        except Exception:
            logger.debug("pheby_bridge: hook %s failed", fn.__name__, exc_info=True)

    wrapper.__name__ = fn.__name__
    return wrapper


def _sync_yolo(bridge: Bridge, run_id: str, session_id: str) -> None:
    """Hermes's own session YOLO for this run while the server flags the session (hard limits still apply)."""
    from tools.approval import disable_session_yolo, enable_session_yolo

    settings = bridge.session(session_id) or {}
    wanted = bridge.wants("yolo") and settings.get("yolo") is True
    if wanted and run_id not in bridge.yolo_runs:
        enable_session_yolo(run_id)
        bridge.yolo_runs.add(run_id)
    elif not wanted and run_id in bridge.yolo_runs:
        disable_session_yolo(run_id)
        bridge.yolo_runs.discard(run_id)


def register_hooks(ctx: Any, bridge: Bridge) -> None:
    @_safe
    def pre_tool_call(
        tool_name: str = "", args: Any = None, session_id: str = "", tool_call_id: str = "", **_: Any
    ) -> None:
        run_id = api_run_id()
        if not run_id:
            return
        _sync_yolo(bridge, run_id, session_id)
        if bridge.wants("tool_events") and tool_call_id:
            bridge.outbox.push(
                {
                    "event": "tool.start",
                    "run_id": run_id,
                    "session_id": session_id,
                    "tool_call_id": tool_call_id,
                    "tool": tool_name,
                    "args": args if isinstance(args, dict) else {},
                }
            )

    @_safe
    def post_tool_call(
        tool_name: str = "",
        session_id: str = "",
        tool_call_id: str = "",
        duration_ms: Any = None,
        status: Any = None,
        error_message: Any = None,
        **_: Any,
    ) -> None:
        run_id = api_run_id()
        if not run_id or not bridge.wants("tool_events") or not tool_call_id:
            return
        bridge.outbox.push(
            {
                "event": "tool.end",
                "run_id": run_id,
                "session_id": session_id,
                "tool_call_id": tool_call_id,
                "tool": tool_name,
                "duration_ms": duration_ms if isinstance(duration_ms, int) else None,
                "status": str(status or "ok"),
                "error": str(error_message)[:ERROR_MAX] if error_message else None,
            }
        )

    @_safe
    def post_llm_call(session_id: str = "", assistant_response: Any = None, platform: str = "", **_: Any) -> None:
        if not isinstance(assistant_response, str) or not assistant_response.strip():
            return
        if platform == "cron":
            match = CRON_SESSION.match(session_id or "")
            if match and bridge.wants("cron"):
                bridge.outbox.push(
                    {
                        "event": "cron.output",
                        "session_id": session_id,
                        "job_id": match.group("job"),
                        "text": assistant_response,
                    }
                )
            return
        run_id = api_run_id()
        if not run_id or not bridge.wants("media") or "MEDIA:" not in assistant_response:
            return
        from gateway.platforms.base import BasePlatformAdapter

        found, _cleaned = BasePlatformAdapter.extract_media(assistant_response)
        safe = BasePlatformAdapter.filter_media_delivery_paths(found)  # Hermes's own path safety rules
        for path, _is_voice in safe:
            bridge.outbox.push_media(path, {"run_id": run_id, "session_id": session_id})
        bridge.outbox.push({"event": "media.done", "run_id": run_id, "offered": len(found), "pushed": len(safe)})

    @_safe
    def on_session_end(**_: Any) -> None:
        run_id = api_run_id()
        if run_id and run_id in bridge.yolo_runs:
            from tools.approval import disable_session_yolo

            disable_session_yolo(run_id)
            bridge.yolo_runs.discard(run_id)

    registered(bridge, ctx.register_hook, "pre_tool_call", pre_tool_call, ("tool_events", "yolo"))
    registered(bridge, ctx.register_hook, "post_tool_call", post_tool_call, ("tool_events",))
    registered(bridge, ctx.register_hook, "post_llm_call", post_llm_call, ("media", "cron"))
    registered(bridge, ctx.register_hook, "on_session_end", on_session_end, ("yolo",))


def registered(bridge: Bridge, register: Callable[..., Any], name: str, fn: Any, extras: tuple[str, ...]) -> bool:
    """Register a hook or middleware; a Hermes that refuses it (unknown name, changed API) turns `extras` off."""
    try:
        register(name, fn)
    except Exception as exc:  # noqa: BLE001 - the plugin must load even where Hermes differs
        logger.info("pheby_bridge: Hermes refused %s (%s); %s stay off", name, type(exc).__name__, ", ".join(extras))
        bridge.lose(*extras)
        return False
    return True
