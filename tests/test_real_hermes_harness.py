"""Proves the real-Hermes harness (tests/real_hermes.py) with raw httpx calls against the live gateway."""

from __future__ import annotations

import json
import shlex
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.real_hermes import HERMES_VERSION, RealHermes

pytestmark = [pytest.mark.hermes, pytest.mark.live, pytest.mark.xdist_group("hermes")]

RUN_DEADLINE_S = 45.0
TERMINAL_EVENTS = frozenset({"run.completed", "run.failed", "run.cancelled"})

Event = dict[str, Any]


@pytest.fixture
def client(real_hermes: RealHermes) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=real_hermes.base_url,
        headers=real_hermes.auth_headers(),
        timeout=httpx.Timeout(10.0, read=20.0),
        trust_env=False,
    ) as client:
        yield client


def start_run(client: httpx.Client, text: str) -> str:
    resp = client.post("/v1/runs", json={"input": text})
    assert resp.status_code == 202, resp.text
    body = resp.json()
    assert body["status"] == "started"
    run_id = body["run_id"]
    assert isinstance(run_id, str)
    assert run_id.startswith("run_")
    return run_id


def read_events(client: httpx.Client, run_id: str, on_event: Callable[[Event], None] | None = None) -> list[Event]:
    """Read the run's SSE stream (``data: <json>`` lines) until a terminal event, bounded in time."""
    events: list[Event] = []
    deadline = time.monotonic() + RUN_DEADLINE_S
    with client.stream("GET", f"/v1/runs/{run_id}/events") as resp:
        assert resp.status_code == 200, resp.read()
        assert resp.headers["content-type"].startswith("text/event-stream")
        for line in resp.iter_lines():
            assert time.monotonic() < deadline, f"run {run_id} not finished after {RUN_DEADLINE_S}s: {events}"
            if not line.startswith("data: "):
                continue  # blank separators, ": keepalive", ": stream closed"
            event = json.loads(line.removeprefix("data: "))
            assert event["run_id"] == run_id
            events.append(event)
            if on_event is not None:
                on_event(event)
            if event["event"] in TERMINAL_EVENTS:
                break
    assert events, "no events"
    assert events[-1]["event"] in TERMINAL_EVENTS, events
    return events


def names(events: list[Event]) -> list[str]:
    return [e["event"] for e in events]


def test_health_reports_version(real_hermes: RealHermes) -> None:
    resp = httpx.get(f"{real_hermes.base_url}/health", timeout=5.0, trust_env=False)
    assert resp.status_code == 200
    assert resp.json() == {"status": "ok", "platform": "hermes-agent", "version": HERMES_VERSION}


@pytest.mark.parametrize("headers", [{"Authorization": "Bearer wrong-key-0123456789abcdef"}, {}])
def test_wrong_or_missing_key_is_401(real_hermes: RealHermes, headers: dict[str, str]) -> None:
    resp = httpx.get(f"{real_hermes.base_url}/v1/models", headers=headers, timeout=5.0, trust_env=False)
    assert resp.status_code == 401
    error = resp.json()["error"]
    assert error["code"] == "invalid_api_key"
    assert error["type"] == "invalid_request_error"


def test_plain_run_streams_deltas_and_completes(real_hermes: RealHermes, client: httpx.Client) -> None:
    token = uuid.uuid4().hex[:8]
    text = f"Say hi PLAIN {token}"
    run_id = start_run(client, text)
    events = read_events(client, run_id)

    expected = f"Hello from fake LLM. You said: {text}"
    deltas = [e["delta"] for e in events if e["event"] == "message.delta"]
    assert len(deltas) > 1
    assert "".join(deltas) == expected
    done = events[-1]
    assert done["event"] == "run.completed", events
    assert done["output"] == expected
    assert done["usage"]["total_tokens"] > 0

    status = client.get(f"/v1/runs/{run_id}").json()
    assert status["status"] == "completed"
    assert status["output"] == expected

    # The fake LLM saw the turn: a streaming chat-completions call with Hermes' tools.
    bodies = [b for b in real_hermes.chat_requests() if token in json.dumps(b.get("messages"))]
    assert bodies, "the fake LLM never saw the run"
    body = bodies[-1]
    assert body["model"] == "fake-model"
    assert body["stream"] is True
    tool_names = {t["function"]["name"] for t in body["tools"]}
    assert "terminal" in tool_names
    assert body["messages"][-1] == {"role": "user", "content": text}


def test_danger_run_asks_for_approval_and_deny_finishes_it(real_hermes: RealHermes, client: httpx.Client) -> None:
    assert real_hermes.danger_dir.is_dir()
    run_id = start_run(client, "DANGER: clean up the scratch dir")
    answers: list[httpx.Response] = []

    def answer(event: Event) -> None:
        if event["event"] == "approval.request":
            answers.append(client.post(f"/v1/runs/{run_id}/approval", json={"choice": "deny"}))

    events = read_events(client, run_id, on_event=answer)
    seen = names(events)

    request = next(e for e in events if e["event"] == "approval.request")
    assert request["command"] == f"rm -rf {shlex.quote(str(real_hermes.danger_dir))}"
    assert "delete" in request["pattern_key"]  # "delete in root path" (absolute path) or "recursive delete"
    assert request["choices"] == ["once", "session", "always", "deny"]
    assert len(answers) == 1
    assert answers[0].status_code == 200, answers[0].text
    assert answers[0].json()["choice"] == "deny"

    responded = next(e for e in events if e["event"] == "approval.responded")
    assert responded["choice"] == "deny"
    assert seen.index("tool.started") < seen.index("approval.request") < seen.index("approval.responded")
    completed_tool = next(e for e in events if e["event"] == "tool.completed")
    assert completed_tool["tool"] == "terminal"
    assert completed_tool["error"] is True

    done = events[-1]
    assert done["event"] == "run.completed", events  # a deny is not a failure
    assert done["output"].startswith("Tool finished. Result was: ")
    assert "BLOCKED" in done["output"]
    assert real_hermes.danger_dir.is_dir(), "denied command must not have run"

    # The fake LLM got the tool result back in a second call.
    tool_messages = [
        m
        for body in real_hermes.chat_requests()
        for m in body.get("messages", [])
        if m.get("role") == "tool" and "BLOCKED" in str(m.get("content"))
    ]
    assert tool_messages


def test_llm_log_records_every_request(real_hermes: RealHermes, client: httpx.Client) -> None:
    before = len(real_hermes.llm_requests())
    run_id = start_run(client, "log me")
    assert read_events(client, run_id)[-1]["event"] == "run.completed"
    new = real_hermes.llm_requests()[before:]
    assert any(r["method"] == "POST" and r["path"] == "/v1/chat/completions" for r in new), new
    assert all({"ts", "method", "path", "body"} <= r.keys() for r in new)
