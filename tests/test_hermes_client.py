"""HermesClient: the four error kinds, the envelopes it parses, requests it sends, and SSE edge cases."""

import json
import socket
import time
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from typing import Any

import httpx
import msgspec
import pytest

from demo_hermes import DemoHermesServer
from hermes_client import (
    ApprovalRequest,
    ClarifyRetired,
    HermesClient,
    HermesError,
    HermesNotFound,
    HermesRejected,
    HermesUnavailable,
    HermesUpstreamError,
    Job,
    JobRepeat,
    MessageDelta,
    RunCompleted,
    RunEvent,
    SSEDataParser,
    ToolStarted,
    UnknownEvent,
    decode_run_event,
    event_name,
    sanitize_message,
)
from tests.demo_hermes_server import client_for

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


async def read_events(client: HermesClient) -> list[RunEvent]:
    async with aclosing(client.run_events(RUN_ID)) as stream:
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


async def test_stream_parsing_keeps_up_with_reading_lines() -> None:
    """run_events must stay within 2x of merely reading the same stream line by line with httpx."""
    body = (DELTA + event("tool.completed", tool="terminal", duration=0.1, error=False)) * 2500 + COMPLETED
    chunks = [body[i : i + 4096] for i in range(0, len(body), 4096)]

    def handler(request: httpx.Request) -> httpx.Response:
        async def stream() -> AsyncIterator[bytes]:
            for chunk in chunks:
                yield chunk

        return httpx.Response(200, content=stream())

    async def parse() -> float:
        started = time.thread_time()
        async with mock_client(handler) as client:
            assert len(await read_events(client)) == 5001
        return time.thread_time() - started

    async def lines() -> float:
        started = time.thread_time()
        http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
        async with http, http.stream("GET", "http://hermes.test/") as response:
            count = sum([1 async for _ in response.aiter_lines()])
        assert count > 10000
        return time.thread_time() - started

    # CPU time of this thread (everything here runs on the event loop's thread), interleaved, best of
    # five: load elsewhere on the machine (other pytest workers) cannot skew the comparison.
    parse_times, lines_times = [], []
    for _ in range(5):
        parse_times.append(await parse())
        lines_times.append(await lines())
    assert min(parse_times) <= 2 * min(lines_times), (min(parse_times), min(lines_times))
