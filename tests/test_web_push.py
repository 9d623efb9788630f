"""Web Push in Pheby Web, in a real headless Chromium against a live server on the demo Hermes: the
manifest and the service worker under the page's CSP, installability, a push shown and dismissed
through the DevTools protocol, the worker answering a notification's button, the notifications
switch, the whole path from a decision to its answer from the notification, the conversation a
notification opens, and presence.

Headless Chromium can reach no push service. Its `PushManager` is replaced by an init script that
hands out a subscription of the loopback push service (`tests/push_service.py`), which checks and
decrypts what the server sends to it, as a browser's push service and the browser would; what it
received is handed to the page's service worker by `ServiceWorker.deliverPushMessage`.
"""

import base64
import json
import re
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, CDPSession, Page, Request, Route, WebSocket, Worker, expect

from pheby.push.vapid import subject_of
from pheby.settings import Settings
from pheby.web_client import WEB_ROOT
from tests.browser import (
    CHROMIUM,
    LAUNCH_ARGS,
    SERVICE_WORKER_REQUESTS,
    WebPage,
    drop_all_sockets,
    launched_chromium,
    on_server_loop,
    open_page,
    wait_until,
)
from tests.live_server import LiveServer
from tests.push_service import BrowserSubscription, PushService

pytestmark = [pytest.mark.live, pytest.mark.xdist_group("browser-push")]

PUSH_SUBSCRIPTION_KEY = "pheby.push-subscription"  # web/lib/push.js

# The browser's push subscription, made by the loopback push service: `subscribe` records what it
# was asked and resolves with a subscription whose toJSON() is that one's. It is kept in
# localStorage, as a browser keeps its own.
FAKE_PUSH_MANAGER = """(() => {
  const KEY = "test.push-subscription";
  const made = SUBSCRIPTION_JSON;
  const subscription = {
    endpoint: made.endpoint,
    expirationTime: null,
    toJSON: () => made,
    unsubscribe: async () => {
      localStorage.removeItem(KEY);
      localStorage.setItem("test.unsubscribed", String(Number(localStorage.getItem("test.unsubscribed") || 0) + 1));
      return true;
    },
  };
  PushManager.prototype.subscribe = async function (options) {
    const key = Array.from(new Uint8Array(options.applicationServerKey));
    localStorage.setItem("test.subscribed-with", JSON.stringify({ userVisibleOnly: options.userVisibleOnly, key }));
    localStorage.setItem(KEY, "1");
    return subscription;
  };
  PushManager.prototype.getSubscription = async function () {
    return localStorage.getItem(KEY) ? subscription : null;
  };
})();"""


def approval_push(conversation_id: str = "c-push", tag: str = "approval-a1") -> dict[str, Any]:
    return {
        "type": "approval",
        "tag": tag,
        "conversation_id": conversation_id,
        "title": "Approval needed",
        "body": "rm -rf /tmp/build-output",
        "url": f"/?conversation={conversation_id}",
        "approval_id": "a1",
        "actions": [
            {"action": "approve", "title": "Approve once", "token": "token-approve-a1"},
            {"action": "deny", "title": "Deny", "token": "token-deny-a1"},
        ],
    }


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    from_worker: bool
    status: int


class PushRequests:
    """The requests of one page's context to `/api/push/`, the service worker's included, in order,
    each with the server's answer."""

    def __init__(self, page: Page) -> None:
        self.seen: list[Seen] = []
        page.context.route(re.compile(r"/api/push/"), self._pass_on)

    def _pass_on(self, route: Route, request: Request) -> None:
        response = route.fetch()
        route.fulfill(response=response)
        path = "/" + request.url.split("://", 1)[1].split("/", 1)[1].split("?", 1)[0]
        body = request.post_data_json if request.post_data else None
        from_worker = request.service_worker is not None
        self.seen.append(Seen(request.method, path, request.headers, body, from_worker, response.status))

    def to(self, method: str, path: str) -> list[Seen]:
        return [seen for seen in self.seen if seen.method == method and seen.path.startswith(path)]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with launched_chromium(SERVICE_WORKER_REQUESTS) as launched:
        yield launched


@pytest.fixture
def web(browser: Browser, live_server: LiveServer) -> Iterator[WebPage]:
    page = open_page(browser, live_server, permissions=["notifications"])
    yield page
    page.page.context.close()


@pytest.fixture
def push_server(
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    push_service: PushService,
) -> LiveServer:
    """A live server whose pushes may go to the loopback push service, which checks its VAPID key."""
    server = start_live_server(live_settings(push_allow_hosts=("127.0.0.1",)))
    push_service.expect_vapid(server.services.push.identity.public_key, subject_of(server.settings))
    return server


@dataclass
class Pushable:
    """A page whose browser subscribes at the loopback push service, and what it asks of `/api/push/`."""

    web: WebPage
    subscription: BrowserSubscription
    requests: PushRequests


@pytest.fixture
def pushable(browser: Browser, push_server: LiveServer, push_service: PushService) -> Iterator[Pushable]:
    web = open_page(browser, push_server, permissions=["notifications"])
    subscription = push_service.subscribe()
    web.page.context.add_init_script(FAKE_PUSH_MANAGER.replace("SUBSCRIPTION_JSON", json.dumps(subscription.to_json())))
    yield Pushable(web, subscription, PushRequests(web.page))
    web.page.context.close()


def api_get(live: LiveServer, path: str) -> Any:
    response = httpx.get(live.base_url + path, headers={"Authorization": f"Bearer {live.secret}"})
    assert response.status_code == 200, response.text
    return response.json()


def turn_notifications_on(web: WebPage) -> None:
    switch = web.page.get_by_role("switch", name="Notifications")
    switch.click()
    expect(switch).to_be_checked()
    expect(switch).to_be_enabled()


def wait_for_controller(page: Page) -> None:
    """The worker is active and, after a reload, in charge of the page."""
    page.evaluate("navigator.serviceWorker.ready.then(() => true)")
    if not page.evaluate("Boolean(navigator.serviceWorker.controller)"):
        page.reload()
    expect(page.get_by_role("button", name="Sign out")).to_be_visible()
    assert page.evaluate("Boolean(navigator.serviceWorker.controller)")


class PushDelivery:
    """Hands pushes to the page's service worker, as a push service would, through the DevTools protocol.

    A push is handed over only once the registration's active worker is running (started first if it
    was stopped): handed to a worker still starting, Chromium can drop it when the machine is loaded,
    and no notification ever shows.
    """

    def __init__(self, page: Page, origin: str) -> None:
        self.page = page
        self.origin = origin
        self.session: CDPSession = page.context.new_cdp_session(page)
        self.registrations: list[dict[str, Any]] = []
        self.versions: dict[str, dict[str, Any]] = {}  # by versionId, the newest state of each
        self.session.on("ServiceWorker.workerRegistrationUpdated", self._updated)
        self.session.on("ServiceWorker.workerVersionUpdated", self._versions)
        self.session.send("ServiceWorker.enable")

    def _updated(self, event: dict[str, Any]) -> None:
        self.registrations.extend(event["registrations"])

    def _versions(self, event: dict[str, Any]) -> None:
        for version in event["versions"]:
            self.versions[version["versionId"]] = version

    def registration_id(self) -> str:
        def at_the_root() -> list[dict[str, Any]]:
            return [r for r in self.registrations if not r["isDeleted"] and r["scopeURL"] == self.origin + "/"]

        return str(
            wait_until(self.page, at_the_root, "a service worker registration at the root")[-1]["registrationId"]
        )

    def _running(self, registration_id: str) -> bool:
        return any(
            v["registrationId"] == registration_id and v["status"] == "activated" and v["runningStatus"] == "running"
            for v in self.versions.values()
        )

    def deliver(self, payload: dict[str, Any]) -> None:
        registration_id = self.registration_id()
        if not self._running(registration_id):
            self.session.send("ServiceWorker.startWorker", {"scopeURL": self.origin + "/"})
            wait_until(self.page, lambda: self._running(registration_id), "the service worker running")
        service_worker(self.page)  # counting what it shows before the push can show anything
        data = {"origin": self.origin, "registrationId": registration_id, "data": json.dumps(payload)}
        self.session.send("ServiceWorker.deliverPushMessage", data)


# Chromium's getNotifications() deletes from its database every notification written before the call
# that is not yet on display: read while a showNotification() is under way, a notification is lost to
# every later read. So the worker counts the showNotification() calls under way, and is read only
# when there are none.
COUNT_SHOWS_UNDER_WAY = """() => {
  if (self.showsUnderWay !== undefined) return;
  self.showsUnderWay = 0;
  const show = self.registration.showNotification.bind(self.registration);
  self.registration.showNotification = async (...args) => {
    self.showsUnderWay += 1;
    try {
      return await show(...args);
    } finally {
      self.showsUnderWay -= 1;
    }
  };
}"""

NOTIFICATIONS = """async () => self.showsUnderWay ? null : (await self.registration.getNotifications()).map((n) => ({
  tag: n.tag, title: n.title, body: n.body, actions: n.actions.map((a) => [a.action, a.title]),
  requireInteraction: n.requireInteraction, data: n.data,
}))"""


def service_worker(page: Page) -> Worker:
    """The page's service worker (the newest, once it runs), counting its notifications under way."""
    running = wait_until(page, lambda: page.context.service_workers, "a running service worker")[-1]
    running.evaluate(COUNT_SHOWS_UNDER_WAY)
    return running


def notifications(page: Page) -> list[dict[str, Any]] | None:
    """The notifications on display, or None while one is being shown."""
    shown: list[dict[str, Any]] | None = service_worker(page).evaluate(NOTIFICATIONS)
    return shown


def wait_for_notifications(page: Page, count: int) -> list[dict[str, Any]]:
    shown: list[dict[str, Any]] = []

    def counted() -> bool:
        read = notifications(page)
        if read is None:
            return False
        shown[:] = read
        return len(shown) == count

    wait_until(page, counted, f"{count} notifications shown")
    return shown


def csp_directives(header: str) -> dict[str, list[str]]:
    parts = (part.split() for part in header.split(";") if part.strip())
    return {words[0]: words[1:] for words in parts}


def png_size(body: bytes) -> tuple[int, int]:
    assert body[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", body[16:24])  # IHDR, the first chunk
    return width, height


def css_custom_property(name: str) -> str:
    root = (WEB_ROOT / "app.css").read_text(encoding="utf-8").split(":root {", 1)[1].split("}", 1)[0]
    match = re.search(rf"{re.escape(name)}:\s*([^;]+);", root)
    assert match, name
    return match.group(1).strip()


# --- served under the CSP --------------------------------------------------------------------------


def test_the_manifest_and_the_worker_are_served_at_the_root_under_the_same_csp(live_server: LiveServer) -> None:
    shell = httpx.get(live_server.base_url + "/")
    directives = csp_directives(shell.headers["content-security-policy"])
    assert directives["script-src"] == ["'self'"]  # not loosened for the worker
    assert directives["worker-src"] == ["'self'"]
    assert directives["manifest-src"] == ["'self'"]
    assert directives["default-src"] == ["'none'"]
    assert '<link rel="manifest" href="/manifest.webmanifest">' in shell.text

    manifest = httpx.get(live_server.base_url + "/manifest.webmanifest")
    assert manifest.status_code == 200
    assert manifest.headers["content-type"] == "application/manifest+json"
    assert manifest.headers["cache-control"] == "no-cache"

    worker = httpx.get(live_server.base_url + "/sw.js")
    assert worker.status_code == 200
    assert worker.headers["content-type"].startswith("text/javascript")
    assert worker.headers["cache-control"] == "no-cache"
    assert csp_directives(worker.headers["content-security-policy"])["script-src"] == ["'self'"]
    assert "%ASSET_BASE%" not in worker.text
    version = shell.text.split('src="/web/', 1)[1].split("/", 1)[0]
    assert f"/web/{version}/icons/icon-192.png" in worker.text  # the notifications' icon, of this version


def test_the_manifest_names_the_app_and_its_icons(live_server: LiveServer) -> None:
    manifest = httpx.get(live_server.base_url + "/manifest.webmanifest").json()
    assert manifest["name"] == "Pheby"
    assert manifest["short_name"] == "Pheby"
    assert (manifest["start_url"], manifest["scope"], manifest["display"]) == ("/", "/", "standalone")
    assert manifest["theme_color"] == css_custom_property("--accent")
    assert manifest["background_color"] == css_custom_property("--bg")
    sizes = set()
    for icon in manifest["icons"]:
        served = httpx.get(live_server.base_url + icon["src"])
        assert served.status_code == 200, icon
        assert served.headers["content-type"] == "image/png" == icon["type"]
        width, height = png_size(served.content)
        assert icon["sizes"] == f"{width}x{height}"
        sizes.add((icon["sizes"], icon["purpose"]))
    assert {("192x192", "any"), ("512x512", "any")} <= sizes


def test_the_page_is_installable_and_its_worker_controls_it(
    browser: Browser, live_server: LiveServer, tmp_path: Path
) -> None:
    # Chromium never offers to install from an incognito profile, which is what a new context is.
    context = browser.browser_type.launch_persistent_context(
        tmp_path / "profile", executable_path=CHROMIUM, headless=True, args=LAUNCH_ARGS
    )
    try:
        web = WebPage(context.new_page(), live_server)
        web.sign_in()
        wait_for_controller(web.page)
        session = context.new_cdp_session(web.page)
        manifest = session.send("Page.getAppManifest")
        assert manifest["url"] == live_server.base_url + "/manifest.webmanifest"
        assert manifest["errors"] == []
        assert session.send("Page.getInstallabilityErrors")["installabilityErrors"] == []
        assert [worker.url for worker in context.service_workers] == [live_server.base_url + "/sw.js"]
        web.assert_no_console_errors()
    finally:
        context.close()


# --- pushes ----------------------------------------------------------------------------------------


def test_a_push_shows_its_notification_and_a_dismiss_closes_it(web: WebPage, live_server: LiveServer) -> None:
    web.sign_in()
    wait_for_controller(web.page)
    pushes = PushDelivery(web.page, live_server.base_url)
    pushes.deliver(approval_push())
    [shown] = wait_for_notifications(web.page, 1)
    assert shown["tag"] == "approval-a1"
    assert shown["title"] == "Approval needed"
    assert shown["body"] == "rm -rf /tmp/build-output"
    assert shown["actions"] == [["approve", "Approve once"], ["deny", "Deny"]]
    assert shown["requireInteraction"] is True
    assert shown["data"]["actions"][0]["token"] == "token-approve-a1"  # kept for the button's answer

    pushes.deliver(approval_push(tag="approval-other"))
    wait_for_notifications(web.page, 2)
    pushes.deliver({"type": "dismiss", "tag": "approval-a1"})
    [left] = wait_for_notifications(web.page, 1)
    assert left["tag"] == "approval-other"  # only the dismissed tag is closed
    web.assert_no_console_errors()


# What the worker does on a click of one of a notification's buttons.
CLICK = """async ([tag, action]) => {
  const [notification] = await self.registration.getNotifications({ tag });
  await handleClick(notification, action);
}"""


def test_a_refused_answer_is_said_in_a_notification_of_its_own(web: WebPage, live_server: LiveServer) -> None:
    requests = PushRequests(web.page)
    web.sign_in()
    wait_for_controller(web.page)
    PushDelivery(web.page, live_server.base_url).deliver(approval_push())  # tokens the server never made
    wait_for_notifications(web.page, 1)
    [worker] = web.page.context.service_workers
    worker.evaluate(CLICK, ["approval-a1", "deny"])
    [answer] = requests.to("POST", "/api/push/actions")
    assert answer.body == {"token": "token-deny-a1", "action": "deny"}
    assert answer.status == 404
    [told] = wait_for_notifications(web.page, 1)
    assert told["title"] == "Not answered"
    assert told["tag"] == "approval-a1"  # in the place of the one answered
    assert told["actions"] == []
    assert len(web.page.context.pages) == 1  # no page was opened
    # The answer function itself, as the worker exposes it: an action the push did not offer sends nothing.
    offered_not = worker.evaluate("([payload, action]) => answerAction(payload, action)", [approval_push(), "always"])
    assert offered_not is False
    assert len(requests.to("POST", "/api/push/actions")) == 1
    web.assert_no_console_errors()


def test_a_click_on_a_notification_takes_the_app_to_its_conversation(web: WebPage, live_server: LiveServer) -> None:
    web.sign_in().new_chat()
    web.send("the first conversation")
    expect(web.assistant()).to_have_text("You said: the first conversation")
    web.wait_idle()
    first = web.page.evaluate("window.pheby.store.state.currentId")
    web.new_chat()
    wait_for_controller(web.page)
    assert web.page.evaluate("window.pheby.store.state.currentId") != first

    PushDelivery(web.page, live_server.base_url).deliver({**approval_push(first), "actions": []})
    wait_for_notifications(web.page, 1)
    [worker] = web.page.context.service_workers
    worker.evaluate(
        """async (tag) => {
          const [notification] = await self.registration.getNotifications({ tag });
          await handleClick(notification, "");
        }""",
        "approval-a1",
    )
    expect(web.assistant()).to_have_text("You said: the first conversation")
    assert web.page.evaluate("window.pheby.store.state.currentId") == first
    assert web.page.evaluate("location.pathname + location.search") == "/"  # a reload later shows the person's pick
    wait_for_notifications(web.page, 0)
    web.assert_no_console_errors()


def test_an_address_naming_a_conversation_opens_it_after_sign_in(
    web: WebPage, browser: Browser, live_server: LiveServer
) -> None:
    web.sign_in().new_chat()
    web.send("the linked conversation")
    expect(web.assistant()).to_have_text("You said: the linked conversation")
    web.wait_idle()
    linked = web.page.evaluate("window.pheby.store.state.currentId")
    other = open_page(browser, live_server)
    try:
        other.page.goto(f"{live_server.base_url}/?conversation={linked}")
        other.page.get_by_label("Owner secret or token").fill(live_server.secret)
        other.page.get_by_role("button", name="Sign in").click()
        expect(other.assistant()).to_have_text("You said: the linked conversation")
        assert other.page.evaluate("window.pheby.store.state.currentId") == linked

        other.page.goto(f"{live_server.base_url}/?conversation=c-gone")  # still signed in (this tab)
        expect(other.page.locator(".toast")).to_have_text("That conversation no longer exists.")
        expect(other.page.locator(".welcome")).to_be_visible()
        other.assert_no_console_errors()
    finally:
        other.page.context.close()


# --- the notifications switch ----------------------------------------------------------------------


def base64url_bytes(text: str) -> list[int]:
    return list(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def test_the_switch_subscribes_this_browser_and_off_and_sign_out_unsubscribe(
    pushable: Pushable, push_server: LiveServer, push_service: PushService
) -> None:
    web, requests = pushable.web, pushable.requests
    web.sign_in()
    switch = web.page.get_by_role("switch", name="Notifications")
    expect(switch).not_to_be_checked()
    turn_notifications_on(web)

    [config] = requests.to("GET", "/api/push/config")
    assert "authorization" not in config.headers  # the session cookie is the credential
    subscribed_with = json.loads(web.page.evaluate("localStorage.getItem('test.subscribed-with')"))
    assert subscribed_with["userVisibleOnly"] is True
    assert subscribed_with["key"] == base64url_bytes(api_get(push_server, "/api/push/config")["vapid_public_key"])
    [posted] = requests.to("POST", "/api/push/subscriptions")
    made = pushable.subscription.to_json()
    assert posted.body == {"endpoint": made["endpoint"], "keys": made["keys"]}
    assert "authorization" not in posted.headers
    assert posted.status == 201
    subscription_id = web.page.evaluate(f"localStorage.getItem('{PUSH_SUBSCRIPTION_KEY}')")
    [kept] = api_get(push_server, "/api/push/subscriptions")["subscriptions"]
    assert (kept["id"], kept["endpoint_origin"]) == (subscription_id, push_service.origin)

    web.page.reload()  # the switch shows what this browser has
    expect(switch).to_be_checked()

    switch.click()
    expect(switch).not_to_be_checked()
    expect(switch).to_be_enabled()
    [deleted] = requests.to("DELETE", "/api/push/subscriptions/")
    assert (deleted.path, deleted.status) == (f"/api/push/subscriptions/{subscription_id}", 204)
    assert web.page.evaluate("localStorage.getItem('test.unsubscribed')") == "1"
    assert web.page.evaluate(f"localStorage.getItem('{PUSH_SUBSCRIPTION_KEY}')") is None
    assert api_get(push_server, "/api/push/subscriptions")["subscriptions"] == []

    turn_notifications_on(web)
    again = web.page.evaluate(f"localStorage.getItem('{PUSH_SUBSCRIPTION_KEY}')")
    web.page.get_by_role("button", name="Sign out").click()
    expect(web.page.get_by_role("button", name="Sign in")).to_be_visible()
    assert requests.to("DELETE", "/api/push/subscriptions/")[-1].path == f"/api/push/subscriptions/{again}"
    assert web.page.evaluate("localStorage.getItem('test.unsubscribed')") == "2"
    assert api_get(push_server, "/api/push/subscriptions")["subscriptions"] == []
    web.assert_no_console_errors()


def test_a_subscription_the_server_refuses_leaves_the_switch_off_and_says_why(
    browser: Browser, live_server: LiveServer, push_service: PushService
) -> None:
    # This server pushes to public hosts only: the loopback push service's endpoint is refused (400).
    web = open_page(browser, live_server, permissions=["notifications"])
    try:
        made = push_service.subscribe().to_json()
        web.page.context.add_init_script(FAKE_PUSH_MANAGER.replace("SUBSCRIPTION_JSON", json.dumps(made)))
        web.sign_in()
        switch = web.page.get_by_role("switch", name="Notifications")
        switch.click()
        note = web.page.locator("#notifications-note")
        expect(note).to_contain_text("The server refused this browser's subscription")
        expect(switch).not_to_be_checked()
        expect(switch).to_be_enabled()  # to try again
        assert web.page.evaluate("localStorage.getItem('test.unsubscribed')") == "1"  # not left subscribed
        assert web.page.evaluate(f"localStorage.getItem('{PUSH_SUBSCRIPTION_KEY}')") is None
        web.assert_no_console_errors(allow=r"400 \(Bad Request\)")
    finally:
        web.page.context.close()


def test_a_decision_pushed_while_the_tab_is_hidden_is_answered_from_its_notification(
    pushable: Pushable, push_server: LiveServer
) -> None:
    web, subscription, requests = pushable.web, pushable.subscription, pushable.requests
    frames = SocketFrames(web.page)
    web.sign_in()
    wait_for_controller(web.page)
    turn_notifications_on(web)
    web.new_chat()
    conversation_id = web.page.evaluate("window.pheby.store.state.currentId")
    set_visibility(web.page, "hidden")  # so that the server pushes: no tab of the account is in front
    wait_until(web.page, lambda: frames.presence()[-1:] == ["background"], "background")
    frames.wait_for_presence_answers(web.page)
    web.send("/demo approve")
    expect(web.page.locator(".card.approval:not(.resolved)")).to_be_visible()

    [push] = subscription.wait_for_blocking(1)  # checked and decrypted by the push service
    assert push.payload["type"] == "approval"
    assert push.payload["url"] == f"/?conversation={conversation_id}"
    pushes = PushDelivery(web.page, push_server.base_url)
    pushes.deliver(push.payload)
    [shown] = wait_for_notifications(web.page, 1)
    assert shown["tag"] == push.payload["tag"]
    assert shown["actions"] == [["once", "Approve once"], ["deny", "Deny"]]
    assert shown["requireInteraction"] is True

    [worker] = web.page.context.service_workers
    worker.evaluate(CLICK, [shown["tag"], "once"])
    [answer] = requests.to("POST", "/api/push/actions")
    token = next(a["token"] for a in push.payload["actions"] if a["action"] == "once")
    assert answer.body == {"token": token, "action": "once"}
    assert answer.from_worker
    assert answer.headers["content-type"] == "application/json"
    assert "authorization" not in answer.headers  # the token is the credential
    assert answer.status == 200
    wait_for_notifications(web.page, 0)
    assert len(web.page.context.pages) == 1  # no page was opened
    expect(web.page.locator(".card.approval.resolved")).to_contain_text("Approved")
    expect(web.assistant()).to_contain_text("Approved (once)")

    # The server then tells the account's other devices that the question is gone.
    _, dismiss = subscription.wait_for_blocking(2)
    assert (dismiss.payload["type"], dismiss.payload["tag"]) == ("dismiss", push.payload["tag"])
    pushes.deliver(push.payload)  # as another device would still show it
    wait_for_notifications(web.page, 1)
    pushes.deliver(dismiss.payload)
    wait_for_notifications(web.page, 0)
    web.assert_no_console_errors()


def test_blocked_notifications_are_said_so_and_the_switch_stays_off(browser: Browser, live_server: LiveServer) -> None:
    web = open_page(browser, live_server)
    try:
        # As a person who once answered "Block" would have it.
        web.page.context.add_init_script(
            """Object.defineProperty(Notification, "permission", { get: () => "denied" });
            Notification.requestPermission = async () => "denied";"""
        )
        web.sign_in()
        switch = web.page.get_by_role("switch", name="Notifications")
        expect(switch).to_be_disabled()
        expect(switch).not_to_be_checked()
        expect(web.page.locator("#notifications-note")).to_contain_text(
            "blocked for this site in the browser's settings"
        )
        web.assert_no_console_errors()
    finally:
        web.page.context.close()


def test_a_browser_without_web_push_is_said_so(browser: Browser, live_server: LiveServer) -> None:
    web = open_page(browser, live_server)
    try:
        web.page.context.add_init_script("delete window.PushManager;")
        web.sign_in()
        expect(web.page.get_by_role("switch", name="Notifications")).to_be_disabled()
        expect(web.page.locator("#notifications-note")).to_have_text(
            "This browser can't show notifications from web apps."
        )
        web.assert_no_console_errors()
    finally:
        web.page.context.close()


# --- presence --------------------------------------------------------------------------------------


class SocketFrames:
    """Every frame the page's WebSockets sent and received, parsed."""

    def __init__(self, page: Page) -> None:
        self.sent: list[dict[str, Any]] = []
        self.received: list[dict[str, Any]] = []
        page.on("websocket", self._watch)

    def _watch(self, socket: WebSocket) -> None:
        socket.on("framesent", lambda payload: self.sent.append(json.loads(payload)))
        socket.on("framereceived", lambda payload: self.received.append(json.loads(payload)))

    def presence(self) -> list[str]:
        return [frame["state"] for frame in self.sent if frame["type"] == "presence.set"]

    def wait_for_presence_answers(self, page: Page) -> None:
        def answered() -> bool:
            asked = {frame["request_id"] for frame in self.sent if frame["type"] == "presence.set"}
            return asked <= {frame.get("request_id") for frame in self.received}

        wait_until(page, answered, "an answer to each presence.set")


def set_visibility(page: Page, state: str) -> None:
    page.evaluate(
        """(state) => {
          Object.defineProperty(document, "visibilityState", { value: state, configurable: true });
          document.dispatchEvent(new Event("visibilitychange"));
        }""",
        state,
    )


def test_presence_follows_the_tab_and_is_said_again_after_each_ready(web: WebPage, live_server: LiveServer) -> None:
    frames = SocketFrames(web.page)
    web.sign_in()
    wait_until(web.page, lambda: frames.presence() == ["foreground"], "foreground after ready")
    set_visibility(web.page, "hidden")
    wait_until(web.page, lambda: frames.presence() == ["foreground", "background"], "background when hidden")
    set_visibility(web.page, "visible")
    wait_until(web.page, lambda: frames.presence() == ["foreground", "background", "foreground"], "foreground again")
    # Whatever the server answers (presence.state, or unknown_type from a server without it), the page goes on.
    frames.wait_for_presence_answers(web.page)

    set_visibility(web.page, "hidden")
    frames.wait_for_presence_answers(web.page)
    assert on_server_loop(live_server, drop_all_sockets(live_server)) >= 1
    wait_until(web.page, lambda: frames.presence()[-2:] == ["background", "background"], "presence after the new ready")
    frames.wait_for_presence_answers(web.page)
    set_visibility(web.page, "visible")
    web.new_chat()
    web.send("still here")
    expect(web.assistant()).to_have_text("You said: still here")
    expect(web.page.locator(".toast")).to_have_count(0)
    web.assert_no_console_errors()
