"""Headless Chromium for the Pheby Web tests: Playwright driving Debian's `chromium` (never a
downloaded browser), one browser per test module, a fresh context per page, and the console
watched for errors. Screenshots go to `test-artifacts/` (gitignored).
"""

import asyncio
import json
import os
import re
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar
from unittest import mock

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Dialog, Page, WebSocketRoute, expect, sync_playwright

from tests.live_server import LiveServer

CHROMIUM = "/usr/bin/chromium"
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
T = TypeVar("T")
# The machine is shared and busy: wait generously for what the page shows.
expect.set_options(timeout=15_000)


# Playwright's driver sees (and routes) the requests a service worker makes only when this is in its
# environment as it starts.
SERVICE_WORKER_REQUESTS = {"PW_EXPERIMENTAL_SERVICE_WORKER_NETWORK_EVENTS": "1"}


@contextmanager
def launched_chromium(driver_environment: dict[str, str] | None = None) -> Iterator[Browser]:
    """Fails (never skips) when the browser can't start: `make test` installs it first."""
    with mock.patch.dict(os.environ, driver_environment or {}):
        manager = sync_playwright()
        playwright = manager.start()
    try:
        # Playwright gives every launch a fresh temporary profile (user-data dir).
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=LAUNCH_ARGS)
        yield launched
        launched.close()
    finally:
        playwright.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with launched_chromium() as launched:
        yield launched


class WebPage:
    """One browser tab on Pheby Web, with the steps a person takes, and what its console said."""

    def __init__(self, page: Page, live: LiveServer) -> None:
        self.page = page
        self.live = live
        self.console_errors: list[str] = []
        self.dialogs: list[str] = []
        page.on("console", self._on_console)
        page.on("pageerror", lambda error: self.console_errors.append(f"pageerror: {error}"))
        page.on("dialog", self._on_dialog)
        self.confirm_dialogs = True

    def _on_console(self, message: ConsoleMessage) -> None:
        if message.type == "error" and not _expected_refusal(message):
            self.console_errors.append(message.text)

    def _on_dialog(self, dialog: Dialog) -> None:
        self.dialogs.append(f"{dialog.type}: {dialog.message}")
        if dialog.type == "confirm" and self.confirm_dialogs:
            dialog.accept()
        else:
            dialog.dismiss()

    def open(self) -> "WebPage":
        self.page.goto(self.live.base_url + "/")
        return self

    def stored(self) -> str:
        """Everything the page keeps in localStorage and sessionStorage, as one JSON text."""
        kept: str = self.page.evaluate("JSON.stringify([{...localStorage}, {...sessionStorage}])")
        return kept

    def session_cookie(self) -> str:
        """The value of the page's session cookie (HttpOnly: read from the browser, not the page)."""
        [value] = [
            c["value"] for c in self.page.context.cookies() if c["name"] in ("hope_session", "__Host-hope_session")
        ]
        return value

    def sign_in(self, secret: str | None = None) -> "WebPage":
        self.open()
        self.page.get_by_label("Owner secret or token").fill(secret or self.live.secret)
        self.page.get_by_role("button", name="Sign in").click()
        expect(self.page.get_by_role("button", name="New chat").first).to_be_visible()
        return self

    def new_chat(self) -> "WebPage":
        self.page.get_by_role("button", name="New chat").first.click()
        expect(self.page.get_by_label("Message")).to_be_visible()
        expect(self.page.locator(".empty-chat")).to_be_visible()
        return self

    def send(self, text: str) -> None:
        box = self.page.get_by_label("Message")
        box.fill(text)
        box.press("Enter")

    def assistant(self, index: int = -1) -> Any:
        turns = self.page.locator(".turn.assistant .bubble.assistant")
        return turns.last if index == -1 else turns.nth(index)

    def wait_idle(self) -> None:
        """The run is over: the Send button is back."""
        expect(self.page.get_by_role("button", name="Stop")).to_have_count(0, timeout=20000)

    def screenshot(self, name: str) -> Path:
        ARTIFACTS.mkdir(exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=False)
        return path

    def assert_no_console_errors(self, allow: str | None = None) -> None:
        unexpected = [e for e in self.console_errors if not (allow and re.search(allow, e))]
        assert unexpected == []


# The page asks whether its cookie still signs it in (`GET /api/me`: 401 when not), and a refused sign-in is
# said to the person: Chromium logs those answers as console errors, but they are the page's ordinary path.
SIGN_IN_PATHS = ("/api/me", "/api/auth/session", "/api/auth/login")


def _expected_refusal(message: ConsoleMessage) -> bool:
    url = message.location.get("url", "")
    refused = re.search(r"status of (401|429)\b", message.text) is not None
    return refused and any(url.endswith(path) for path in SIGN_IN_PATHS)


def wait_until(page: Page, condition: Callable[[], T], what: str, timeout_ms: int = 15_000) -> T:
    """The first true value of `condition()`, asked every 100 ms; fails with `what` after `timeout_ms`.

    It waits through Playwright (not `time.sleep`), which is when Playwright hands over the events
    (frames, DevTools events) that the condition may be looking at.
    """
    for _ in range(timeout_ms // 100):
        value = condition()
        if value:
            return value
        page.wait_for_timeout(100)
    value = condition()
    assert value, what
    return value


def open_page(browser: Browser, live: LiveServer, **context: Any) -> WebPage:
    ctx = browser.new_context(**context)
    return WebPage(ctx.new_page(), live)


def on_server_loop(live: LiveServer, work: Coroutine[Any, Any, T], timeout: float = 10) -> T:
    """Run `work` on the live server's own event loop (its services belong to that loop)."""
    loop = live.server.servers[0].get_loop()
    return asyncio.run_coroutine_threadsafe(work, loop).result(timeout)


async def drop_all_sockets(live: LiveServer) -> int:
    """Close every WebSocket from the server's side, as a restart or a network cut would."""
    connections = live.services.hub.all_connections()
    for connection in connections:
        await connection._close(1012, "service restart")
    return len(connections)


def hello_without(*features: str) -> Callable[[WebSocketRoute], None]:
    """A route between page and server taking `features` out of the page's hello; naming none, the hello asks
    for nothing, as an older page's did."""

    def route(socket: WebSocketRoute) -> None:
        server = socket.connect_to_server()

        def to_server(message: str | bytes) -> None:
            frame = json.loads(message)
            if frame.get("type") == "hello":
                if features:
                    frame["features"] = [name for name in frame.get("features", []) if name not in features]
                else:
                    frame.pop("features", None)
                message = json.dumps(frame)
            server.send(message)

        socket.on_message(to_server)

    return route


hello_without_features = hello_without()
