"""The demo Hermes: contract 7's directives, 0.19.0's wire shapes, stop latency, sessions, cron and dashboard."""

import json
import re
import time
from collections.abc import Callable
from contextlib import aclosing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

import demo_hermes.turn as demo_turn
from demo_hermes import (
    APPROVAL_COMMAND,
    APPROVAL_DESCRIPTION,
    CLARIFY_CHOICES,
    CLARIFY_QUESTION,
    CRON_PREAMBLE,
    SEARCH_ARGS,
    DemoHermesServer,
    parse_echo_reply,
)
from hermes_client import (
    ApprovalRequest,
    ClarifyRequest,
    HermesClient,
    HermesNotFound,
    HermesRejected,
    JobSchedule,
    MessageDelta,
    ReasoningAvailable,
    RunCancelled,
    RunCompleted,
    RunEvent,
    RunFailed,
    ToolCompleted,
    ToolStarted,
)
from tests.demo_hermes_server import client_for

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

RUN_ID_PATTERN = re.compile(r"^run_[0-9a-f]{32}$")

OnEvent = Callable[[RunEvent], Any]


async def run_to_end(
    client: HermesClient,
    text: str | list[dict[str, str]],
    on_event: OnEvent | None = None,
    *,
    timeout: float = 20.0,
    **options: Any,
) -> tuple[str, list[RunEvent]]:
    """Start a run and read its stream to the end; ``on_event`` may answer prompts as they come."""
    with anyio.fail_after(timeout):
        handle = await client.create_run(text, **options)
        events: list[RunEvent] = []
        async with aclosing(client.run_events(handle.run_id)) as stream:
            async for event in stream:
                events.append(event)
                if on_event is not None:
                    await on_event(event)
    return handle.run_id, events


def final(events: list[RunEvent]) -> RunCompleted:
    assert isinstance(events[-1], RunCompleted), [type(e).__name__ for e in events]
    return events[-1]


def deltas(events: list[RunEvent]) -> list[str]:
    return [e.delta for e in events if isinstance(e, MessageDelta)]


def raw_http(server: DemoHermesServer, key: str | None = None) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {server.api_key if key is None else key}"}
    return httpx.AsyncClient(base_url=server.base_url, headers=headers, timeout=10)


# --- contract 7: the directives ---------------------------------------------------------------------


async def test_plain_text_is_echoed_in_at_least_three_deltas(demo_hermes_client: HermesClient) -> None:
    _, events = await run_to_end(demo_hermes_client, "hi")
    assert len(deltas(events)) >= 3
    assert "".join(deltas(events)) == final(events).output == "You said: hi"
    assert isinstance(events[-2], ReasoningAvailable)
    assert events[-2].text == "You said: hi"


async def test_tool_directive(demo_hermes_client: HermesClient) -> None:
    run_id, events = await run_to_end(demo_hermes_client, "/demo tool", session_id="demo-tool-session")
    started = next(e for e in events if isinstance(e, ToolStarted))
    completed = next(e for e in events if isinstance(e, ToolCompleted))
    assert (started.tool, started.args, started.preview) == ("web_search", SEARCH_ARGS, "cats")
    assert isinstance(started.tool_call_id, str)
    assert started.tool_call_id.startswith("call_")
    assert (completed.tool_call_id, completed.error) == (started.tool_call_id, False)
    assert events.index(completed) < events.index(next(e for e in events if isinstance(e, MessageDelta)))
    assert "cats" in final(events).output
    messages = await demo_hermes_client.session_messages("demo-tool-session")
    assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[1].tool_calls
    assert messages[1].tool_calls[0]["id"] == started.tool_call_id
    assert json.loads(messages[1].tool_calls[0]["function"]["arguments"]) == SEARCH_ARGS
    assert (messages[2].tool_call_id, messages[2].tool_name) == (started.tool_call_id, "web_search")
    assert (await demo_hermes_client.get_run(run_id)).status == "completed"


async def test_tool_fail_directive(demo_hermes_client: HermesClient) -> None:
    _, events = await run_to_end(demo_hermes_client, "/demo tool-fail")
    started = next(e for e in events if isinstance(e, ToolStarted))
    completed = next(e for e in events if isinstance(e, ToolCompleted))
    assert started.tool == "web_search"
    assert started.args == SEARCH_ARGS
    assert completed.error is True
    final(events)


@pytest.mark.parametrize(
    ("choice", "sent", "reply"),
    [
        ("once", "once", "Approved (once)"),
        ("session", "session", "Approved (session)"),
        ("always", "always", "Approved (always)"),
        ("deny", "deny", "Denied"),
        ("once", "approve", "Approved (once)"),  # 0.19.0's aliases approve/approved/allow mean once
        ("once", "allow", "Approved (once)"),
    ],
)
async def test_approve_directive(demo_hermes_client: HermesClient, choice: str, sent: str, reply: str) -> None:
    requests: list[ApprovalRequest] = []

    async def answer(event: RunEvent) -> None:
        if isinstance(event, ApprovalRequest):
            requests.append(event)
            status = await demo_hermes_client.get_run(event.run_id)
            assert (status.status, status.last_event) == ("waiting_for_approval", "approval.request")
            result = await demo_hermes_client.respond_approval(event.run_id, sent)
            assert (result.choice, result.resolved) == (choice, 1)

    run_id, events = await run_to_end(demo_hermes_client, "/demo approve", answer)
    [request] = requests
    assert (request.command, request.description) == (APPROVAL_COMMAND, APPROVAL_DESCRIPTION)
    assert request.choices == ["once", "session", "always", "deny"]
    assert request.pattern_keys == [request.pattern_key]
    assert request.allow_permanent is True
    assert final(events).output.startswith(reply)
    assert deltas(events)[0].startswith("\n\n"), "text after a tool starts with a blank line, like 0.19.0"
    completed = next(e for e in events if isinstance(e, ToolCompleted))
    assert completed.error is (choice == "deny")
    with pytest.raises(HermesRejected) as caught:
        await demo_hermes_client.respond_approval(run_id, "once")
    assert (caught.value.status, caught.value.code) == (409, "approval_not_active")


async def test_invalid_approval_choice_is_400_and_the_run_still_waits(demo_hermes_client: HermesClient) -> None:
    async def answer(event: RunEvent) -> None:
        if isinstance(event, ApprovalRequest):
            with pytest.raises(HermesRejected) as caught:
                await demo_hermes_client.respond_approval(event.run_id, "maybe")
            assert (caught.value.status, caught.value.code) == (400, "invalid_approval_choice")
            await demo_hermes_client.respond_approval(event.run_id, "deny")

    _, events = await run_to_end(demo_hermes_client, "/demo approve", answer)
    assert final(events).output.startswith("Denied")


async def test_clarify_directive(demo_hermes_client: HermesClient) -> None:
    async def answer(event: RunEvent) -> None:
        if isinstance(event, ClarifyRequest):
            assert (event.question, event.choices, event.multi_select) == (CLARIFY_QUESTION, CLARIFY_CHOICES, False)
            with pytest.raises(HermesRejected) as caught:
                await demo_hermes_client.respond_clarify(event.run_id, "not-the-id", "staging")
            assert (caught.value.status, caught.value.code) == (409, "clarify_not_pending")
            waiting = await demo_hermes_client.respond_clarify(event.run_id, event.clarify_id, None)
            assert (waiting.resolved, waiting.awaiting_text) == (False, True)
            answered = await demo_hermes_client.respond_clarify(event.run_id, event.clarify_id, "staging")
            assert (answered.resolved, answered.awaiting_text) == (True, False)

    run_id, events = await run_to_end(demo_hermes_client, "/demo clarify", answer)
    assert final(events).output == "You chose: staging"
    with pytest.raises(HermesRejected) as caught:
        await demo_hermes_client.respond_clarify(run_id, "x", "production")
    assert caught.value.code == "clarify_not_pending"


@pytest.mark.parametrize(("directive", "suffix"), [("/demo image", ".png"), ("/demo document", ".md")])
async def test_media_directives_deliver_a_file(
    demo_hermes_client: HermesClient, demo_hermes: DemoHermesServer, directive: str, suffix: str
) -> None:
    _, events = await run_to_end(demo_hermes_client, directive)
    output = final(events).output
    match = re.search(r"MEDIA:(\S+)$", output)
    assert match, output
    path = Path(match.group(1))
    assert path.is_absolute()
    assert path.suffix == suffix
    assert path.parent == demo_hermes.media_dir.resolve()
    content = path.read_bytes()
    if suffix == ".png":
        assert content.startswith(b"\x89PNG\r\n\x1a\n")
        assert content[12:16] == b"IHDR"
    else:
        assert content.decode().startswith("# ")


async def test_slow_directive_streams_100_deltas_50ms_apart(demo_hermes_client: HermesClient) -> None:
    started = time.monotonic()
    _, events = await run_to_end(demo_hermes_client, "/demo slow")
    elapsed = time.monotonic() - started
    assert len(deltas(events)) == 100
    assert 100 * 0.05 * 0.9 <= elapsed < 20


async def test_a_hold_in_chunks_streams_nothing_after_it_until_released(
    demo_hermes: DemoHermesServer, demo_hermes_client: HermesClient
) -> None:
    released_at: list[float] = []
    arrived: dict[str, float] = {}

    async def release_soon() -> None:
        await anyio.sleep(0.3)  # six times the pieces' 50 ms apart
        released_at.append(time.monotonic())
        demo_hermes.release()

    async with anyio.create_task_group() as tasks:

        async def on_event(event: RunEvent) -> None:
            if isinstance(event, MessageDelta):
                arrived[event.delta] = time.monotonic()
                if event.delta == "one ":
                    tasks.start_soon(release_soon)

        _, events = await run_to_end(demo_hermes_client, "/demo chunks one |<hold>|two", on_event)
    assert deltas(events) == ["one ", "two"]
    assert final(events).output == "one two"
    assert arrived["two"] >= released_at[0]


async def test_a_hold_nobody_releases_goes_on_after_its_longest_wait(
    demo_hermes_client: HermesClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(demo_turn, "HOLD_SECONDS", 0.2)
    _, events = await run_to_end(demo_hermes_client, "/demo chunks one |<hold>|two|<hold>")
    assert deltas(events) == ["one ", "two"]
    assert final(events).output == "one two"


async def test_fail_directive(demo_hermes_client: HermesClient) -> None:
    run_id, events = await run_to_end(demo_hermes_client, "/demo fail")
    assert isinstance(events[-1], RunFailed)
    assert events[-1].error
    status = await demo_hermes_client.get_run(run_id)
    assert (status.status, status.error, status.last_event) == ("failed", events[-1].error, "run.failed")


async def test_echo_reports_input_and_history(demo_hermes_client: HermesClient) -> None:
    history = [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"}]
    _, events = await run_to_end(demo_hermes_client, '/demo echo "quoted"\nnext', conversation_history=history)
    echo = parse_echo_reply(final(events).output)
    assert (echo.input, echo.history) == ('/demo echo "quoted"\nnext', 2)
    listed = [*history, {"role": "user", "content": "/demo echo"}]
    _, events = await run_to_end(demo_hermes_client, listed)
    echo = parse_echo_reply(final(events).output)
    assert (echo.input, echo.history) == (listed, 2), "a list input's earlier items are its history"
    assert (echo.model, echo.provider, echo.reasoning_effort) == ("demo-model", "demo", "medium")


async def test_unknown_directive_lists_the_known_ones(demo_hermes_client: HermesClient) -> None:
    _, events = await run_to_end(demo_hermes_client, "/demo dance")
    assert "/demo approve" in final(events).output


# --- stop ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["/demo slow", "/demo approve", "/demo clarify"])
async def test_stop_cancels_within_one_second(demo_hermes_client: HermesClient, text: str) -> None:
    stopped_at: list[float] = []

    async def stop_when_busy(event: RunEvent) -> None:
        if isinstance(event, MessageDelta | ApprovalRequest | ClarifyRequest) and not stopped_at:
            await demo_hermes_client.stop_run(event.run_id)
            stopped_at.append(time.monotonic())

    run_id, events = await run_to_end(demo_hermes_client, text, stop_when_busy)
    assert isinstance(events[-1], RunCancelled)
    assert time.monotonic() - stopped_at[0] < 1.0
    if text == "/demo approve":  # the waiting tool call ends as an error before the run is cancelled
        assert isinstance(events[-2], ToolCompleted)
        assert events[-2].error is True
    assert (await demo_hermes_client.get_run(run_id)).status == "cancelled"


# --- runs: 0.19.0 wire behaviour ------------------------------------------------------------------


async def test_run_creation_and_stream_wire_format(demo_hermes: DemoHermesServer) -> None:
    async with raw_http(demo_hermes) as http:
        created = await http.post("/v1/runs", json={"input": "hi"}, headers={"X-Hermes-Session-Key": "k1"})
        assert created.status_code == 202
        assert created.headers["x-hermes-session-key"] == "k1"
        body = created.json()
        assert set(body) == {"run_id", "status"}
        assert body["status"] == "started"
        assert RUN_ID_PATTERN.match(body["run_id"])
        async with http.stream("GET", f"/v1/runs/{body['run_id']}/events") as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            raw = (await stream.aread()).decode()
        assert "event:" not in raw
        assert raw.endswith(": stream closed\n\n")
        frames = raw.split("\n\n")
        assert all(frame.startswith(("data: {", ": stream closed")) for frame in frames if frame)
        first = json.loads(frames[0].removeprefix("data: "))
        assert list(first)[:3] == ["event", "run_id", "timestamp"]
        again = await http.get(f"/v1/runs/{body['run_id']}/events")
        assert again.status_code == 404
        assert again.json()["error"]["code"] == "run_not_found"


async def test_a_dropped_stream_cannot_be_resumed_but_the_run_goes_on(demo_hermes_client: HermesClient) -> None:
    handle = await demo_hermes_client.create_run("/demo slow")
    with anyio.fail_after(10):
        async with aclosing(demo_hermes_client.run_events(handle.run_id)) as stream:
            async for event in stream:
                if isinstance(event, MessageDelta):
                    break
        with pytest.raises(HermesNotFound):
            await _first_event(demo_hermes_client, handle.run_id)
        assert (await demo_hermes_client.get_run(handle.run_id)).status == "running"
        await demo_hermes_client.stop_run(handle.run_id)


async def _first_event(client: HermesClient, run_id: str) -> RunEvent:
    async with aclosing(client.run_events(run_id)) as stream:
        return await anext(stream)


async def test_late_subscriber_gets_every_event(demo_hermes_client: HermesClient) -> None:
    handle = await demo_hermes_client.create_run("late subscriber")
    with anyio.fail_after(10):
        while (await demo_hermes_client.get_run(handle.run_id)).status != "completed":
            await anyio.sleep(0.02)
    events = [event async for event in demo_hermes_client.run_events(handle.run_id)]
    assert "".join(deltas(events)) == final(events).output == "You said: late subscriber"


async def test_run_validation_errors(demo_hermes: DemoHermesServer) -> None:
    async with raw_http(demo_hermes) as http:
        cases = [
            ({}, "Missing 'input' field"),
            (
                {"input": "x", "conversation_history": "nope"},
                "'conversation_history' must be an array of message objects",
            ),
            (
                {"input": "x", "conversation_history": [{"role": "user"}]},
                "conversation_history[0] must have 'role' and 'content' fields",
            ),
        ]
        for body, message in cases:
            response = await http.post("/v1/runs", json=body)
            assert response.status_code == 400
            assert response.json() == {
                "error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}
            }
        bad_json = await http.post("/v1/runs", content=b"{not json", headers={"Content-Type": "application/json"})
        assert (bad_json.status_code, bad_json.json()["error"]["message"]) == (400, "Invalid JSON")


async def test_wrong_key_gets_the_0_19_0_envelope_and_health_is_open(demo_hermes: DemoHermesServer) -> None:
    async with raw_http(demo_hermes, key="wrong") as http:
        for method, path in [("GET", "/api/sessions"), ("POST", "/v1/runs"), ("GET", "/api/jobs")]:
            response = await http.request(method, path)
            assert response.status_code == 401
            assert response.json() == {
                "error": {
                    "message": "Invalid API key",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "invalid_api_key",
                }
            }
    async with httpx.AsyncClient(base_url=demo_hermes.base_url) as anonymous:
        health = await anonymous.get("/health")
        assert health.json() == {"status": "ok", "platform": "hermes-agent", "version": "0.19.0"}
        assert (await anonymous.get("/v1/health")).status_code == 200


async def test_keepalive_comment_during_silence(make_demo_hermes: Callable[..., DemoHermesServer]) -> None:
    server = make_demo_hermes(keepalive_seconds=0.2)
    async with raw_http(server) as http, client_for(server) as client:
        handle = await client.create_run("/demo approve")
        received = b""
        with anyio.fail_after(10):
            async with http.stream("GET", f"/v1/runs/{handle.run_id}/events") as stream:
                async for chunk in stream.aiter_bytes():
                    received += chunk
                    if b": keepalive\n\n" in received:
                        break
        await client.stop_run(handle.run_id)
    assert b'"event": "approval.request"' in received


async def test_approval_timeout_from_config_denies(make_demo_hermes: Callable[..., DemoHermesServer]) -> None:
    server = make_demo_hermes()
    async with client_for(server) as client:
        await client.put_config({"approvals": {"timeout": 0.3}})
        _, events = await run_to_end(client, "/demo approve")
    assert final(events).output.startswith("Denied")
    assert next(e for e in events if isinstance(e, ToolCompleted)).error is True


async def test_concurrency_cap_gives_429(make_demo_hermes: Callable[..., DemoHermesServer]) -> None:
    server = make_demo_hermes(max_concurrent_runs=1)
    async with client_for(server) as client:
        first = await client.create_run("/demo approve")
        with pytest.raises(HermesRejected) as caught:
            await client.create_run("hi")
        await client.stop_run(first.run_id)
    assert (caught.value.status, caught.value.code) == (429, "rate_limit_exceeded")


# --- sessions -------------------------------------------------------------------------------------


async def test_runs_create_and_extend_their_session(demo_hermes_client: HermesClient) -> None:
    session_id = f"bind-{time.time_ns()}"
    with pytest.raises(HermesNotFound):
        await demo_hermes_client.get_session(session_id)
    await run_to_end(demo_hermes_client, "first turn", session_id=session_id)
    _, events = await run_to_end(demo_hermes_client, "second turn", session_id=session_id)
    session = await demo_hermes_client.get_session(session_id)
    assert (session.source, session.message_count) == ("api_server", 4)
    messages = await demo_hermes_client.session_messages(session_id)
    assert [(m.role, m.content) for m in messages] == [
        ("user", "first turn"),
        ("assistant", "You said: first turn"),
        ("user", "second turn"),
        ("assistant", final(events).output),
    ]
    assert [m.id for m in messages] == sorted(m.id for m in messages)


async def test_session_routes_wire_format(demo_hermes: DemoHermesServer) -> None:
    title = f"wire {time.time_ns()}"
    async with raw_http(demo_hermes) as http:
        created = await http.post("/api/sessions", json={"title": title})
        assert created.status_code == 201
        body = created.json()
        assert body["object"] == "hermes.session"
        assert body["session"]["title"] == title
        session_id = body["session"]["id"]
        assert re.match(r"^api_\d+_[0-9a-f]{8}$", session_id)
        duplicate = await http.post("/api/sessions", json={"id": session_id})
        assert (duplicate.status_code, duplicate.json()["error"]["code"]) == (409, "session_exists")
        same_title = await http.post("/api/sessions", json={"title": title})
        assert (same_title.status_code, same_title.json()["error"]["code"]) == (400, "invalid_title")
        unsupported = await http.patch(f"/api/sessions/{session_id}", json={"model": "x"})
        assert unsupported.json()["error"]["code"] == "unsupported_session_field"
        messages = await http.get(f"/api/sessions/{session_id}/messages")
        assert messages.json() == {"object": "list", "session_id": session_id, "data": []}
        listing = (await http.get("/api/sessions", params={"limit": 1})).json()
        assert set(listing) == {"object", "data", "limit", "offset", "has_more"}
        assert listing["limit"] == 1
        assert {"last_active", "preview"} <= set(listing["data"][0])
        deleted = await http.delete(f"/api/sessions/{session_id}")
        assert deleted.json() == {"object": "hermes.session.deleted", "id": session_id, "deleted": True}
        gone = await http.get(f"/api/sessions/{session_id}")
        assert (gone.status_code, gone.json()["error"]["code"]) == (404, "session_not_found")


# --- jobs -----------------------------------------------------------------------------------------


async def test_job_routes_use_the_bare_string_envelope(demo_hermes: DemoHermesServer) -> None:
    async with raw_http(demo_hermes) as http:
        assert (await http.get("/api/jobs/notahexid")).json() == {"error": "Invalid job ID format"}
        unknown = await http.get("/api/jobs/0123456789ab")
        assert (unknown.status_code, unknown.json()) == (404, {"error": "Job not found"})
        bad = await http.post("/api/jobs", json={"name": "bad", "schedule": "whenever", "prompt": "x"})
        assert bad.status_code == 500
        assert bad.json()["error"].startswith("Invalid schedule 'whenever'. Use:\n")
        missing = await http.post("/api/jobs", json={"schedule": "every 5m", "prompt": "x"})
        assert (missing.status_code, missing.json()) == (400, {"error": "Name is required"})
        zero = await http.post("/api/jobs", json={"name": "z", "schedule": "every 5m", "prompt": "x", "repeat": 0})
        assert zero.json() == {"error": "Repeat must be a positive integer"}
        created = await http.post("/api/jobs", json={"name": "wire job", "schedule": "2h", "prompt": "x"})
        assert created.status_code == 200
        job = created.json()["job"]
        assert re.match(r"^[0-9a-f]{12}$", job["id"])
        assert job["schedule"]["kind"] == "once"
        assert job["schedule"]["display"] == "once in 2h"
        assert job["repeat"] == {"times": 1, "completed": 0}
        assert job["deliver"] == "local"
        assert job["origin"]["platform"] == "api_server"
        assert "latest_execution" not in job
        nothing = await http.patch(f"/api/jobs/{job['id']}", json={"foo": 1})
        assert (nothing.status_code, nothing.json()) == (400, {"error": "No valid fields to update"})
        assert (await http.delete(f"/api/jobs/{job['id']}")).json() == {"ok": True}


@pytest.mark.parametrize(
    ("schedule", "kind", "display"),
    [
        ("every 2h", "interval", "every 120m"),
        ("0 9 * * 1-5", "cron", "0 9 * * 1-5"),
        ("2099-01-02T03:04", "once", "once at 2099-01-02 03:04"),
        ("30m", "once", "once in 30m"),
    ],
)
async def test_job_schedule_forms(demo_hermes_client: HermesClient, schedule: str, kind: str, display: str) -> None:
    job = await demo_hermes_client.create_job("schedule form", schedule, "x")
    try:
        assert isinstance(job.schedule, JobSchedule)
        assert (job.schedule.kind, job.schedule.display, job.schedule_display) == (kind, display, display)
        assert isinstance(job.next_run_at, str)
    finally:
        await demo_hermes_client.delete_job(job.id)


async def test_a_bare_int_repeat_is_stored_like_0_19_0_and_still_listed(demo_hermes: DemoHermesServer) -> None:
    async with raw_http(demo_hermes) as http, client_for(demo_hermes) as client:
        job = await client.create_job("corrupted", "every 1h", "x")
        patched = await http.patch(f"/api/jobs/{job.id}", json={"repeat": 5})
        assert patched.json()["job"]["repeat"] == 5
        listed = {j.id: j for j in await client.list_jobs()}
        assert listed[job.id].repeat == 5
        await client.delete_job(job.id)


async def test_job_run_records_a_cron_session(demo_hermes_client: HermesClient) -> None:
    job = await demo_hermes_client.create_job("Daily digest", "every 1h", "/demo echo")
    await demo_hermes_client.run_job(job.id)
    with anyio.fail_after(10):
        while True:
            sessions = (await demo_hermes_client.list_sessions(source="cron", limit=200)).data
            session = next((s for s in sessions if s.id.startswith(f"cron_{job.id}_")), None)
            if session is not None and session.ended_at is not None:
                break
            await anyio.sleep(0.05)
    assert re.match(rf"^cron_{job.id}_\d{{8}}_\d{{6}}$", session.id)
    assert session.title
    assert re.match(r"^Daily digest · [A-Z][a-z]{2} \d{2} \d{2}:\d{2}$", session.title)
    assert (session.source, session.end_reason) == ("cron", "cron_complete")
    messages = await demo_hermes_client.session_messages(session.id)
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[0].content == f"{CRON_PREAMBLE}\n\n/demo echo"
    reply = messages[1].content
    assert isinstance(reply, str), reply
    assert parse_echo_reply(reply).input == "/demo echo"
    listed = {j.id: j for j in await demo_hermes_client.list_jobs()}[job.id]
    assert listed.last_status == "ok"
    assert listed.repeat is not None
    assert isinstance(listed.latest_execution, dict)
    assert listed.latest_execution["status"] == "completed"
    await demo_hermes_client.delete_job(job.id)


async def test_due_jobs_run_on_the_tick(make_demo_hermes: Callable[..., DemoHermesServer]) -> None:
    server = make_demo_hermes(cron_tick_seconds=0.1)
    # A timestamp a few seconds ago is still inside Hermes's grace window, so the job is due at once.
    due = (datetime.now(UTC) - timedelta(seconds=5)).strftime("%Y-%m-%dT%H:%M:%S")
    async with client_for(server) as client:
        job = await client.create_job("soon", due, "hi")
        with anyio.fail_after(10):
            while not (await client.list_sessions(source="cron")).data:
                await anyio.sleep(0.05)
        with anyio.fail_after(10):  # a one-shot job is removed once its single run is done
            while job.id in {j.id for j in await client.list_jobs()}:
                await anyio.sleep(0.05)


async def test_paused_jobs_are_hidden_unless_asked_for(demo_hermes_client: HermesClient) -> None:
    job = await demo_hermes_client.create_job("pausable", "every 1h", "x")
    paused = await demo_hermes_client.pause_job(job.id)
    assert (paused.enabled, paused.state) == (False, "paused")
    assert isinstance(paused.paused_at, str)
    assert job.id not in {j.id for j in await demo_hermes_client.list_jobs(include_disabled=False)}
    assert job.id in {j.id for j in await demo_hermes_client.list_jobs(include_disabled=True)}
    resumed = await demo_hermes_client.resume_job(job.id)
    assert (resumed.enabled, resumed.state, resumed.paused_at) == (True, "scheduled", None)
    await demo_hermes_client.delete_job(job.id)
    with pytest.raises(HermesNotFound):
        await demo_hermes_client.delete_job(job.id)


# --- dashboard --------------------------------------------------------------------------------------


async def test_model_and_effort_changes_reach_later_runs(make_demo_hermes: Callable[..., DemoHermesServer]) -> None:
    server = make_demo_hermes()
    async with client_for(server) as client:
        options = await client.model_options()
        assert (options.model, options.provider) == ("demo-model", "demo")
        assert [p.slug for p in options.providers if p.is_current] == ["demo"]
        assert await client.reasoning_effort() == "medium"

        await client.set_model("demo-alt", "alt-model")
        await client.put_config({"agent": {"reasoning_effort": "low"}})

        options = await client.model_options()
        assert (options.model, options.provider) == ("alt-model", "demo-alt")
        assert [p.slug for p in options.providers if p.is_current] == ["demo-alt"]
        info = await client.model_info()
        assert (info.model, info.provider) == ("alt-model", "demo-alt")
        config = await client.get_config()
        assert config["model"] == "alt-model"
        assert config["agent"]["reasoning_effort"] == "low"
        assert config["approvals"]["mode"] == "manual", "PUT /api/config deep-merges"
        assert await client.reasoning_effort() == "low"

        run_id, events = await run_to_end(client, "/demo echo", session_id="after-change")
        echo = parse_echo_reply(final(events).output)
        assert (echo.model, echo.provider, echo.reasoning_effort) == ("alt-model", "demo-alt", "low")
        assert (await client.get_session("after-change")).model == "alt-model"
        assert (await client.get_run(run_id)).model == "hermes-agent", "0.19.0 only echoes the request's model"

        with pytest.raises(HermesRejected) as caught:
            await client.set_model("nope", "x")
        assert caught.value.status == 400


async def test_dashboard_auth(demo_hermes: DemoHermesServer) -> None:
    async with httpx.AsyncClient(base_url=demo_hermes.dashboard_url) as http:
        assert (await http.get("/api/model/options")).status_code == 401
        assert (await http.get("/api/model/info")).status_code == 200, "model info is public, as in Hermes"
        bearer = {"Authorization": f"Bearer {demo_hermes.dashboard_token}"}
        assert (await http.get("/api/config", headers=bearer)).status_code == 200
        gateway_key = {"Authorization": f"Bearer {demo_hermes.api_key}"}
        assert (await http.get("/api/config", headers=gateway_key)).status_code == 401


async def test_idempotency_keys_only_with_the_feature_and_only_visible_ascii(
    demo_hermes: DemoHermesServer, make_demo_hermes: Callable[..., DemoHermesServer]
) -> None:
    body = {"input": "hello"}
    async with raw_http(demo_hermes, demo_hermes.api_key) as http:  # 0.19.0: the header means nothing
        made = [(await http.post("/v1/runs", json=body, headers={"Idempotency-Key": "k1"})).json() for _ in "ab"]
        assert made[0]["run_id"] != made[1]["run_id"]
        assert "replayed" not in made[0]
    idempotent = make_demo_hermes(features={"runs_idempotency"})
    async with raw_http(idempotent, idempotent.api_key) as http:
        for bad in (b"x" * 256, b"with space", "naïve".encode()):
            refused = await http.post("/v1/runs", json=body, headers={b"Idempotency-Key": bad})
            assert refused.status_code == 400, bad
            assert refused.json()["error"]["code"] == "invalid_idempotency_key"
