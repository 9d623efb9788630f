"""``/v1/runs``: start a run, read its status, stream its events, answer its prompts, stop it."""

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator
from typing import Any, Final

from litestar import Request, Response, get, post
from litestar.params import FromPath
from litestar.response import Stream

from demo_hermes.execution import RunInput, start_run
from demo_hermes.newer import record_run_request
from demo_hermes.runs import KEEPALIVE, STREAM_CLOSED, Run
from demo_hermes.state import demo_state
from demo_hermes.wire import HermesHTTPError, api_error, json_response, read_json

__all__ = ["RUN_ROUTES"]

APPROVAL_CHOICES: Final = ("once", "session", "always", "deny")
APPROVAL_ALIASES: Final = {"approve": "once", "approved": "once", "allow": "once"}
SUBSCRIBE_WAIT_SECONDS: Final = 1.0  # 0.19.0 waits this long for a run id that is not registered yet
MAX_CLARIFY_RESPONSE: Final = 65536
MAX_IDEMPOTENCY_KEY: Final = 255


def _invalid_json() -> HermesHTTPError:
    return api_error(400, "Invalid JSON")


def _run_not_found(run_id: str) -> HermesHTTPError:
    return api_error(404, f"Run not found: {run_id}", "run_not_found")


def _known_run(request: Request[Any, Any, Any], run_id: str) -> Run:
    run = demo_state(request).runs.get(run_id)
    if run is None:
        raise _run_not_found(run_id)
    return run


def _run_input(body: dict[str, Any]) -> RunInput:
    """Validate a run request like 0.19.0 and work out the user text and how much history came with it."""
    raw_input = body.get("input")
    if not raw_input:
        raise api_error(400, "Missing 'input' field")
    history = body.get("conversation_history")
    if history is not None:
        if not isinstance(history, list):
            raise api_error(400, "'conversation_history' must be an array of message objects")
        for index, message in enumerate(history):
            if not isinstance(message, dict) or "role" not in message or "content" not in message:
                raise api_error(400, f"conversation_history[{index}] must have 'role' and 'content' fields")
    if isinstance(raw_input, str):
        return RunInput(raw_input, raw_input, len(history or []))
    if not isinstance(raw_input, list):
        raise api_error(400, "'input' must be a string or an array of message objects")
    for index, message in enumerate(raw_input):
        if not isinstance(message, dict) or "role" not in message or "content" not in message:
            raise api_error(400, f"input[{index}] must have 'role' and 'content' fields")
    # A list input: the last item is the user message, earlier ones are history unless history was given.
    history_count = len(history) if history is not None else len(raw_input) - 1
    return RunInput(str(raw_input[-1]["content"]), raw_input, history_count)


@post("/v1/runs")
async def create_run(request: Request[Any, Any, Any]) -> Response[bytes]:
    state = demo_state(request)
    body = await read_json(request, _invalid_json())
    if not isinstance(body, dict):
        raise _invalid_json()
    run_input = _run_input(body)
    session_id = body.get("session_id")
    if session_id is not None and not isinstance(session_id, str):
        raise api_error(400, "'session_id' must be a string")
    if state.options.max_concurrent_runs and len(state.runs.active()) >= state.options.max_concurrent_runs:
        raise api_error(
            429,
            f"Too many concurrent runs (max {state.options.max_concurrent_runs})",
            "rate_limit_exceeded",
            error_type="rate_limit_error",
            headers={"Retry-After": "1"},
        )
    idempotency_key = _idempotency_key(request) if "runs_idempotency" in state.features else None
    fingerprint = "" if idempotency_key is None else _fingerprint(body)
    if idempotency_key is not None and (admitted := state.runs.admitted(idempotency_key)) is not None:
        if admitted[0] != fingerprint:
            raise api_error(
                409, "Idempotency-Key was already used with a different request payload", "idempotency_key_conflict"
            )
        made = state.runs.get(admitted[1])
        status = made.status if made is not None else "completed"
        return json_response({"run_id": admitted[1], "status": status, "replayed": True}, 202)
    run = state.runs.create(session_id=session_id, model=str(body.get("model") or "hermes-agent"))
    if idempotency_key is not None:
        state.runs.admit(idempotency_key, fingerprint, run.run_id)
    record_run_request(run, body)
    start_run(state, run, run_input)
    if state.options.create_delay:
        await asyncio.sleep(state.options.create_delay)
    session_key = request.headers.get("X-Hermes-Session-Key")
    headers = {"X-Hermes-Session-Key": session_key} if session_key else None
    return json_response({"run_id": run.run_id, "status": "started"}, 202, headers)


def _fingerprint(body: dict[str, Any]) -> str:
    """What makes two run requests the same request for one ``Idempotency-Key``."""
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _idempotency_key(request: Request[Any, Any, Any]) -> str | None:
    """The request's ``Idempotency-Key`` (None without one); 400 unless 1-255 visible ASCII characters."""
    key = request.headers.get("Idempotency-Key", "").strip()
    if not key:
        return None
    if len(key) > MAX_IDEMPOTENCY_KEY or not all("!" <= ch <= "~" for ch in key):
        raise api_error(400, "Idempotency-Key must be 1-255 visible ASCII characters", "invalid_idempotency_key")
    return key


@get("/v1/runs/{run_id:str}")
async def get_run(request: Request[Any, Any, Any], run_id: FromPath[str]) -> Response[bytes]:
    return json_response(_known_run(request, run_id).status_json())


async def _event_stream(run: Run, queue: "asyncio.Queue[bytes | None]", keepalive: float) -> AsyncIterator[bytes]:
    # One get() outlives any number of keepalive timeouts, so no frame is lost to a cancelled get().
    getter: asyncio.Future[bytes | None] | None = None
    try:
        while True:
            if getter is None:
                getter = asyncio.ensure_future(queue.get())
            done, _ = await asyncio.wait({getter}, timeout=keepalive)
            if not done:
                yield KEEPALIVE
                continue
            frame, getter = getter.result(), None
            if frame is None:
                yield STREAM_CLOSED
                return
            yield frame
    finally:
        if getter is not None:
            getter.cancel()
        run.close_stream(queue)  # 0.19.0: single consumer, no resume: whatever ended this response ends the stream


@get("/v1/runs/{run_id:str}/events")
async def run_events(request: Request[Any, Any, Any], run_id: FromPath[str]) -> Stream:
    state = demo_state(request)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SUBSCRIBE_WAIT_SECONDS
    last_event_id = request.headers.get("Last-Event-ID") or request.query_params.get("last_seq")
    while True:
        run = state.runs.get(run_id)
        queue = run.claim_stream(last_event_id) if run is not None else None
        if run is not None and queue is not None:
            break
        if loop.time() >= deadline:
            raise _run_not_found(run_id)
        await asyncio.sleep(0.05)
    return Stream(
        _event_stream(run, queue, state.options.keepalive_seconds),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _answer_delay(request: Request[Any, Any, Any]) -> None:
    """Hermes answers while the agent already goes on; a delay makes the run win that race every time."""
    delay = demo_state(request).options.answer_delay
    if delay:
        await asyncio.sleep(delay)


@post("/v1/runs/{run_id:str}/approval")
async def respond_approval(request: Request[Any, Any, Any], run_id: FromPath[str]) -> Response[bytes]:
    run = _known_run(request, run_id)
    body = await read_json(request, _invalid_json())
    if not isinstance(body, dict):
        raise _invalid_json()
    raw_choice = body.get("choice")
    choice = APPROVAL_ALIASES.get(raw_choice, raw_choice) if isinstance(raw_choice, str) else None
    if choice is None or choice not in APPROVAL_CHOICES:
        raise api_error(
            400, f"Invalid approval choice; expected one of: {', '.join(APPROVAL_CHOICES)}", "invalid_approval_choice"
        )
    if run.finished:
        raise api_error(409, f"Run is no longer active: {run_id}", "approval_not_active")
    resolved = run.resolve_approvals(choice, resolve_all=bool(body.get("all") or body.get("resolve_all")))
    if not resolved:
        raise api_error(409, f"Run has no pending approval: {run_id}", "approval_not_pending")
    run.emit("approval.responded", {"choice": choice, "resolved": resolved})
    await _answer_delay(request)
    return json_response(
        {"object": "hermes.run.approval_response", "run_id": run_id, "choice": choice, "resolved": resolved}
    )


@post("/v1/runs/{run_id:str}/clarify")
async def respond_clarify(request: Request[Any, Any, Any], run_id: FromPath[str]) -> Response[bytes]:
    run = _known_run(request, run_id)
    body = await read_json(request, _invalid_json())
    clarify_id = body.get("clarify_id") if isinstance(body, dict) else None
    response = body.get("response") if isinstance(body, dict) else None
    if (
        not isinstance(clarify_id, str)
        or not clarify_id.strip()
        or len(clarify_id) > 256
        or "response" not in body
        or not (response is None or (isinstance(response, str) and len(response) <= MAX_CLARIFY_RESPONSE))
    ):
        raise api_error(400, "Expected clarify_id and response (string or null).", "invalid_clarify_response")
    pending = run.pending_clarify
    if run.finished or pending is None or pending.clarify_id != clarify_id or pending.future.done():
        raise api_error(409, "Run has no matching pending clarify request.", "clarify_not_pending")
    if response is not None:  # a null response only says "free text will follow"; the question stays open
        pending.future.set_result(response)
    await _answer_delay(request)
    return json_response(
        {
            "object": "hermes.run.clarify_response",
            "run_id": run_id,
            "clarify_id": clarify_id,
            "resolved": response is not None,
            "awaiting_text": response is None,
        }
    )


@post("/v1/runs/{run_id:str}/stop")
async def stop_run(request: Request[Any, Any, Any], run_id: FromPath[str]) -> Response[bytes]:
    run = _known_run(request, run_id)
    if run.finished and demo_state(request).features:
        return json_response(run.status_json())  # 0.22-era: a finished run's status, not a 404
    if run.finished or run.task is None:
        raise _run_not_found(run_id)
    run.set_status("stopping", last_event="run.stopping")
    run.task.cancel()
    return json_response({"run_id": run_id, "status": "stopping"})


RUN_ROUTES: Final = [create_run, get_run, run_events, respond_approval, respond_clarify, stop_run]
