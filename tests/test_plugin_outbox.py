"""The companion plugin's outbox keeps what the server has not acknowledged and delivers it in order.

A real HTTP server on 127.0.0.1 stands in for the Pheby server: before `start` (and after `stop`)
its port refuses connections, like a server being redeployed or killed; `status` decides each answer.
"""

import json
import logging
import socket
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from hermes_plugin.pheby_bridge import bridge as bridge_module
from hermes_plugin.pheby_bridge.bridge import Bridge, ClarifyUnanswered
from hermes_plugin.pheby_bridge.config import BridgeConfig
from hermes_plugin.pheby_bridge.outbox import EVENTS_PATH, SECRET_HEADER, Outbox

SECRET = "outbox-test-secret-0123456789"
WAIT_S = 2.0


class FakePheby:
    """Records, in order, every event it accepted (2xx) and every attempt it answered."""

    def __init__(self) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.accepted: list[dict[str, Any]] = []
        self.attempts: list[tuple[int, dict[str, Any]]] = []
        self.status: Callable[[dict[str, Any]], int] = lambda event: 200
        self._server: ThreadingHTTPServer | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                event = json.loads(body)
                with fake._lock:
                    ok = self.path == EVENTS_PATH and self.headers.get(SECRET_HEADER) == SECRET
                    status = fake.status(event) if ok else 403
                    fake.attempts.append((status, event))
                    if status < 300:
                        fake.accepted.append(event)
                reply = json.dumps({"accepted": True, "extras": ["tool_events"]}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def names(self) -> list[str]:
        with self._lock:
            return [str(event.get("n", event.get("event"))) for event in self.accepted]

    def wait_for(self, count: int) -> list[str]:
        deadline = time.monotonic() + WAIT_S
        while len(self.names()) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.names()


@pytest.fixture
def pheby() -> Iterator[FakePheby]:
    fake = FakePheby()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture
def make_outbox(pheby: FakePheby) -> Iterator[Callable[..., Outbox]]:
    made: list[Outbox] = []

    def make(**caps: Any) -> Outbox:
        caps = {"retry_first_s": 0.02, "retry_max_s": 0.1, **caps}
        outbox = Outbox(pheby.url, SECRET, 1024 * 1024, **caps)
        made.append(outbox)
        return outbox

    try:
        yield make
    finally:
        for outbox in made:
            outbox.close()


def event(n: int, pad: str = "") -> dict[str, Any]:
    return {"event": "tool.start", "n": str(n), "pad": pad}


class Results:
    """What each push's `on_done` was told."""

    def __init__(self) -> None:
        self.calls: dict[str, tuple[bool, Any]] = {}

    def done(self, name: str) -> Callable[[bool, Any], None]:
        def record(ok: bool, reply: Any) -> None:
            self.calls[name] = (ok, reply)

        return record

    def wait_for(self, *names: str) -> dict[str, tuple[bool, Any]]:
        deadline = time.monotonic() + WAIT_S
        while not all(name in self.calls for name in names) and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.calls


def settle() -> None:
    """Long enough for the worker to try (and fail) against a port that refuses connections."""
    time.sleep(0.15)


def test_pushes_made_while_the_server_is_down_arrive_in_order_once_it_is_back(
    pheby: FakePheby, make_outbox: Callable[..., Outbox]
) -> None:
    outbox, results = make_outbox(), Results()
    for n in range(1, 4):
        assert outbox.push(event(n), on_done=results.done(str(n)))
    settle()
    pheby.status = lambda e: 503  # up, but not ready: still kept
    pheby.start()
    for n in range(4, 6):
        outbox.push(event(n), on_done=results.done(str(n)))
    deadline = time.monotonic() + WAIT_S
    while len(pheby.attempts) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert pheby.attempts
    assert all(status == 503 and e["n"] == "1" for status, e in pheby.attempts)
    assert results.calls == {}  # nothing acknowledged, nothing given up
    pheby.status = lambda e: 200
    assert pheby.wait_for(5) == ["1", "2", "3", "4", "5"]
    assert [e["n"] for status, e in pheby.attempts if status == 200] == ["1", "2", "3", "4", "5"]
    calls = results.wait_for(*(str(n) for n in range(1, 6)))  # the last is told just after the server has it
    assert all(calls[str(n)] == (True, {"accepted": True, "extras": ["tool_events"]}) for n in range(1, 6))


def test_the_count_cap_drops_the_oldest_and_logs(
    pheby: FakePheby, make_outbox: Callable[..., Outbox], caplog: pytest.LogCaptureFixture
) -> None:
    outbox, results = make_outbox(max_items=3), Results()
    with caplog.at_level(logging.WARNING, logger="pheby_bridge"):
        for n in range(1, 6):
            outbox.push(event(n), on_done=results.done(str(n)))
            if n == 1:
                settle()  # the first is being retried when the others come
        pheby.start()
        assert pheby.wait_for(3) == ["3", "4", "5"]
    assert results.calls["1"] == (False, None)
    assert results.calls["2"] == (False, None)
    assert sum("dropped" in message or "not be retried" in message for message in caplog.messages) >= 2
    time.sleep(0.1)
    assert pheby.names() == ["3", "4", "5"]


def test_the_byte_cap_drops_the_oldest_and_logs(
    pheby: FakePheby, make_outbox: Callable[..., Outbox], caplog: pytest.LogCaptureFixture
) -> None:
    size = len(json.dumps(event(1, "x" * 200), ensure_ascii=False).encode())
    outbox, results = make_outbox(max_bytes=3 * size + size // 2), Results()
    with caplog.at_level(logging.WARNING, logger="pheby_bridge"):
        for n in range(1, 6):
            outbox.push(event(n, "x" * 200), on_done=results.done(str(n)))
        settle()
        outbox.push({"event": "media.done", "n": "small"})  # fits beside the three newest
        pheby.start()
        assert pheby.wait_for(4) == ["3", "4", "5", "small"]
    assert results.calls["1"] == (False, None)
    assert results.calls["2"] == (False, None)
    assert sum("dropped" in message or "not be retried" in message for message in caplog.messages) >= 2


def test_an_item_past_its_age_is_dropped_with_a_log_line(
    pheby: FakePheby, make_outbox: Callable[..., Outbox], caplog: pytest.LogCaptureFixture
) -> None:
    outbox, results = make_outbox(max_age_s=0.3), Results()
    with caplog.at_level(logging.WARNING, logger="pheby_bridge"):
        outbox.push(event(1), on_done=results.done("1"))
        assert results.wait_for("1")["1"] == (False, None)  # dropped while the server was still down
        outbox.push(event(2), on_done=results.done("2"))
        pheby.start()
        assert pheby.wait_for(1) == ["2"]
    assert any("not delivered within 0.3 s" in message for message in caplog.messages)
    time.sleep(0.1)
    assert pheby.names() == ["2"]


def test_a_permanent_refusal_is_dropped_and_what_follows_still_arrives(
    pheby: FakePheby, make_outbox: Callable[..., Outbox], caplog: pytest.LogCaptureFixture
) -> None:
    busy_once = {"4"}

    def status(e: dict[str, Any]) -> int:
        if e["n"] == "2":
            return 404  # e.g. a run the server does not know
        if e["n"] in busy_once:
            busy_once.discard(e["n"])
            return 429  # retried, and still before 5
        return 200

    pheby.status = status
    pheby.start()
    outbox, results = make_outbox(), Results()
    with caplog.at_level(logging.WARNING, logger="pheby_bridge"):
        for n in range(1, 6):
            outbox.push(event(n), on_done=results.done(str(n)))
        assert pheby.wait_for(4) == ["1", "3", "4", "5"]
    assert [(status, e["n"]) for status, e in pheby.attempts] == [
        (200, "1"),
        (404, "2"),
        (200, "3"),
        (429, "4"),
        (200, "4"),
        (200, "5"),
    ]
    assert results.calls["2"] == (False, {"status": 404})
    assert any("refused a tool.start push (HTTP 404)" in message for message in caplog.messages)


def test_the_hello_probe_goes_first_when_the_service_comes_back(
    pheby: FakePheby, make_outbox: Callable[..., Outbox]
) -> None:
    outbox, results = make_outbox(retry_first_s=5.0, retry_max_s=5.0), Results()  # a long backoff to cut short
    outbox.push(event(1))
    outbox.push(event(2))
    settle()  # the first has failed: the worker now waits out its backoff
    assert outbox.push({"event": "plugin.hello", "n": "hello"}, on_done=results.done("early"), probe=True)
    assert results.wait_for("early")["early"] == (False, None)  # tried at once (the server is still down), and not kept
    pheby.start()
    started = time.monotonic()
    outbox.push({"event": "plugin.hello", "n": "hello"}, on_done=results.done("hello"), probe=True)
    assert pheby.wait_for(3) == ["hello", "1", "2"]
    assert time.monotonic() - started < 1.0  # the hello ended the backoff
    assert results.calls["hello"] == (True, {"accepted": True, "extras": ["tool_events"]})


@pytest.mark.parametrize("ends_on", ["timeout", "cancel", "grace"])
def test_a_clarification_whose_wait_ended_unsent_reaches_the_server_before_its_expiry(
    ends_on: str, pheby: FakePheby, make_outbox: Callable[..., Outbox], monkeypatch: pytest.MonkeyPatch
) -> None:
    started = time.monotonic()
    tools, interrupt = types.ModuleType("tools"), types.ModuleType("tools.interrupt")
    interrupt.is_interrupted = lambda: ends_on == "cancel" and time.monotonic() - started > 0.3  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tools", tools)
    monkeypatch.setitem(sys.modules, "tools.interrupt", interrupt)
    bridge = Bridge(BridgeConfig(service_url=pheby.url, secret=SECRET))
    bridge.outbox = make_outbox()
    # grace: the server stays away longer than a restart takes; the agent is not held for the whole timeout.
    monkeypatch.setattr(bridge_module, "DELIVERY_GRACE_S", 0.3 if ends_on == "grace" else 10.0)
    bridge._apply_server_view({"clarify_timeout": 0.3 if ends_on == "timeout" else 30})
    expected = {"timeout": "did not answer", "cancel": "cancelled", "grace": "not reachable"}[ends_on]
    with pytest.raises(ClarifyUnanswered, match=expected):
        bridge.ask_clarify("run_1", "s1", "call_1", "Which one?", ["a", "b"])
    assert time.monotonic() - started < 0.3 + 0.5  # no longer than its own end, and a wait slice
    pheby.start()
    assert pheby.wait_for(2) == ["clarify.request", "clarify.expired"]
    assert pheby.accepted[0]["clarify_id"] == pheby.accepted[1]["clarify_id"]
    time.sleep(0.1)
    assert len(pheby.accepted) == 2
