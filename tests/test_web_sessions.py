"""Pheby Web over its session cookie only, in a real headless Chromium against a live server: nothing
kept in the page's storage, the WebSocket's hello authenticated by the cookie (and refused from another
origin), the Security page's session list, and an ended session's page back at the sign-in screen."""

import json
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Route, WebSocket, expect
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect
from websockets.typing import Origin

from tests.browser import WebPage, open_page
from tests.live_server import LiveServer

pytestmark = [pytest.mark.live, pytest.mark.xdist_group("browser")]


@pytest.fixture
def web(browser: Browser, live_server: LiveServer) -> Iterator[WebPage]:
    page = open_page(browser, live_server)
    yield page
    page.page.context.close()


def sent_hellos(web: WebPage) -> list[dict[str, object]]:
    """Every hello the page sends from now on, as the server receives it."""
    hellos: list[dict[str, object]] = []

    def watch(socket: WebSocket) -> None:
        def sent(payload: str | bytes) -> None:
            frame = json.loads(payload)
            if isinstance(frame, dict) and frame.get("type") == "hello":
                hellos.append(frame)

        socket.on("framesent", sent)

    web.page.on("websocket", watch)
    return hellos


def test_the_secret_signs_in_and_the_page_keeps_no_credential(web: WebPage, live_server: LiveServer) -> None:
    hellos = sent_hellos(web)
    web.sign_in().new_chat()
    web.send("over the cookie")
    expect(web.assistant()).to_have_text("You said: over the cookie", timeout=15000)
    stored = web.stored()
    assert live_server.secret not in stored
    assert web.session_cookie() not in stored
    assert "phb_" not in stored
    assert hellos
    assert all("secret" not in hello for hello in hellos)  # the cookie authenticated them
    web.page.reload()  # a fresh load starts from the cookie: GET /api/me, then the socket
    expect(web.page.get_by_role("button", name="Sign out")).to_be_visible()
    web.assert_no_console_errors()


def test_the_sign_in_form_works_while_the_pages_own_session_check_hangs(web: WebPage, live_server: LiveServer) -> None:
    """On load the page asks `GET /api/me` whether its cookie still works. Held up (a dead connection, a server
    busy or restarting), that question must not hold the form: it reads "Sign in" and signs in, and its late
    answer (401: the question went before the cookie) does not sign the person out again."""
    held: list[Route] = []

    def hold_the_first(route: Route) -> None:
        if held:
            route.continue_()
        else:
            held.append(route)

    web.page.route("**/api/me", hold_the_first)
    web.open()
    sign_in = web.page.get_by_role("button", name="Sign in", exact=True)
    expect(sign_in).to_be_enabled(timeout=5000)
    web.page.get_by_label("Owner secret or token").fill(live_server.secret)
    sign_in.click()
    expect(web.page.get_by_role("button", name="New chat").first).to_be_visible()

    held[0].continue_()  # the load's own question, answered now: 401
    web.page.wait_for_timeout(500)
    expect(web.page.get_by_role("button", name="New chat").first).to_be_visible()
    expect(web.page.get_by_label("Owner secret or token")).to_have_count(0)


def test_the_pages_cookie_opens_no_socket_from_another_origin(web: WebPage, live_server: LiveServer) -> None:
    web.sign_in()
    cookie = {"Cookie": f"hope_session={web.session_cookie()}"}
    with pytest.raises(InvalidStatus) as refused:
        connect(live_server.ws_url, origin=Origin("http://evil.example"), additional_headers=cookie, open_timeout=10)
    assert refused.value.response.status_code == 403
    with connect(live_server.ws_url, origin=Origin(live_server.base_url), additional_headers=cookie) as socket:
        socket.send(json.dumps({"type": "hello", "protocol_version": 1}))
        assert json.loads(socket.recv(timeout=10))["type"] == "ready"


def test_the_security_page_lists_sessions_and_ends_others(browser: Browser, live_server: LiveServer) -> None:
    pages = [open_page(browser, live_server).sign_in() for _ in range(3)]
    here, *others = pages
    try:
        here.page.get_by_role("button", name="Security").click()
        sessions = here.page.get_by_role("list", name="Sessions").get_by_role("listitem")
        expect(sessions).to_have_count(3)
        expect(sessions.last).to_contain_text("This device")  # newest first: this page signed in first
        expect(here.page.get_by_text("This device")).to_have_count(1)
        expect(sessions.first).to_contain_text("Chrome on Linux")

        here.page.get_by_role("button", name="End the session of").first.click()
        expect(sessions).to_have_count(2)
        expect(here.page.get_by_role("status")).to_have_text("Session ended.")

        def signed_out(page: WebPage) -> bool:
            return page.page.get_by_role("button", name="Sign in").is_visible()

        # The ended session's page is back at the sign-in screen (its socket closed, its hello refused).
        for _ in range(150):
            if any(signed_out(page) for page in others):
                break
            here.page.wait_for_timeout(100)
        [ended] = [page for page in others if signed_out(page)]
        [still] = [page for page in others if page is not ended]
        expect(ended.page.get_by_role("alert")).to_have_text("Your session has ended. Sign in again.")
        expect(still.page.get_by_role("button", name="Sign out")).to_be_visible()

        here.page.get_by_role("button", name="End all other sessions").click()
        expect(sessions).to_have_count(1)
        expect(still.page.get_by_role("button", name="Sign in")).to_be_visible()
        ended.page.reload()  # a fresh load with an ended session: GET /api/me is 401, so the sign-in screen
        expect(ended.page.get_by_role("button", name="Sign in")).to_be_visible()
        expect(here.page.get_by_role("button", name="Sign out")).to_be_visible()
        here.page.get_by_role("button", name="Back to the conversation").click()
        expect(here.page.get_by_role("button", name="New chat").first).to_be_visible()
        for page in pages:
            page.assert_no_console_errors()
    finally:
        for page in pages:
            page.page.context.close()
