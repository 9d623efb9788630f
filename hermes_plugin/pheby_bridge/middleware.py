"""Middleware: per-session model, effort and history on the LLM request; clarify through the server.

Both act only on API-server runs (`/v1/runs`) and only for what the server asked for.
"""

import inspect
import logging
from typing import Any

from . import history
from .bridge import Bridge, ClarifyUnanswered
from .hooks import api_run_id, registered

logger = logging.getLogger("pheby_bridge")


def apply_effort(request: dict[str, Any], effort: str) -> None:
    """Rewrite the effort where this provider carries it (top-level for chat completions, else extra_body)."""
    extra = request.get("extra_body")
    nested = isinstance(extra, dict) and isinstance(extra.get("reasoning"), dict)
    if isinstance(extra, dict) and nested:
        reasoning = dict(extra["reasoning"])
        if effort == "none":
            reasoning = {"enabled": False}
        else:
            reasoning["effort"] = effort
            reasoning.pop("enabled", None)
        request["extra_body"] = dict(extra, reasoning=reasoning)
    if effort == "none":
        request.pop("reasoning_effort", None)
    elif "reasoning_effort" in request or not nested:
        request["reasoning_effort"] = effort


def _ask_each(
    bridge: Bridge, run_id: str, session_id: str, tool_call_id: str, questions: list[dict[str, Any]]
) -> dict[str, Any]:
    """The reply a several-question clarify callback gives: `{"answers": {qid: text}, "outcome", "notice"?}`,
    stopping at the first question that gets no answer (as Hermes's own gateway callback does)."""
    from tools.interrupt import is_interrupted

    answers: dict[str, Any] = {}
    reply: dict[str, Any] = {"answers": answers, "outcome": "submitted"}
    for entry in questions:
        choices = entry.get("choices_offered") or entry.get("choices")
        try:
            answers[entry["qid"]] = bridge.ask_clarify(run_id, session_id, tool_call_id, entry["question"], choices)
        except ClarifyUnanswered as exc:
            reply.update(outcome="cancelled" if is_interrupted() else "timed_out", notice=str(exc))
            break
    return reply


def register_middleware(ctx: Any, bridge: Bridge) -> None:
    def llm_request(
        request: Any = None, session_id: str = "", platform: str = "", api_mode: str = "", turn_id: str = "", **_: Any
    ) -> dict[str, Any] | None:
        if platform != "api_server" or not isinstance(request, dict) or not api_run_id():
            return None
        settings = bridge.session(session_id)
        if not settings:
            return None
        changed: dict[str, Any] = dict(request)
        reasons = []
        if bridge.wants("model") and settings.get("model"):
            changed["model"] = settings["model"]
            reasons.append("model")
        if bridge.wants("reasoning") and settings.get("effort"):
            apply_effort(changed, settings["effort"])
            reasons.append("effort")
        if bridge.wants("history") and settings.get("history") and api_mode in ("", "chat_completions"):
            try:
                spliced = history.splice(changed, session_id, turn_id)
            except Exception:
                logger.warning("pheby_bridge: history splice failed; the request goes without it", exc_info=True)
                spliced = None
            if spliced is not None:
                changed = spliced
                reasons.append("history")
        if not reasons:
            return None
        return {"request": changed, "source": "pheby_bridge", "reason": "+".join(reasons)}

    def tool_execution(
        tool_name: str = "",
        args: Any = None,
        next_call: Any = None,
        session_id: str = "",
        tool_call_id: str = "",
        **_: Any,
    ) -> Any:
        run_id = api_run_id() if tool_name == "clarify" and bridge.wants("clarify") else ""
        if not run_id:
            return next_call(args)
        from tools.clarify_tool import clarify_tool

        params = args if isinstance(args, dict) else {}
        # Hermes's own clarify tool shapes and validates; only the asking goes through the server.
        if "questions" not in inspect.signature(clarify_tool).parameters:
            return clarify_tool(
                question=params.get("question", ""),
                choices=params.get("choices"),
                callback=lambda question, choices: bridge.ask_clarify(
                    run_id, session_id, tool_call_id, question, choices
                ),
            )
        # A Hermes whose clarify asks several questions in one call (0.22-era): one question to the server
        # at a time, answers keyed by Hermes's `qid`; a call in the older one-question shape is taken too.
        questions = params.get("questions")
        if questions is None and params.get("question"):
            questions = [{"question": params.get("question"), "choices": params.get("choices")}]
        return clarify_tool(
            questions=questions,
            callback=lambda normalized: _ask_each(bridge, run_id, session_id, tool_call_id, normalized),
        )

    registered(bridge, ctx.register_middleware, "llm_request", llm_request, ("model", "reasoning", "history"))
    registered(bridge, ctx.register_middleware, "tool_execution", tool_execution, ("clarify",))
