"""Pheby Web's password section (`web/views/security/password.js`) in a real Chromium on a live server.

The section is rendered on its own into the page, after a sign-in that leaves the session cookie in
the browser (as the cookie-only page's does): it works with that cookie alone, no bearer token.
"""

from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import Browser, expect

from pheby.store.password_policy import refusal
from tests.browser import WebPage, on_server_loop, open_page
from tests.live_server import LiveServer
from tests.passwords import OTHER_PASSWORD, PASSWORD

pytestmark = [pytest.mark.live, pytest.mark.xdist_group("browser")]

SIGN_IN_WITH_COOKIE = """async ([username, password]) => {
  const response = await fetch("/api/auth/login", {
    method: "POST", headers: { "Content-Type": "application/json" }, credentials: "same-origin",
    body: JSON.stringify({ username, password }),
  });
  return response.status;
}"""
ME_STATUS = """async () => (await fetch("/api/me", { credentials: "same-origin" })).status"""
MOUNT_SECTION = """async () => {
  const base = new URL(document.querySelector('script[type="module"]').src).pathname.replace(/\\/[^/]*$/, "");
  const { PasswordSection } = await import(`${base}/views/security/password.js`);
  const { html, render } = await import(`${base}/lib/html.js`);
  const host = document.createElement("div");
  document.body.prepend(host);
  render(html`<${PasswordSection} />`, host);
}"""


@pytest.fixture
def web(browser: Browser, live_server: LiveServer) -> Iterator[WebPage]:
    page = open_page(browser, live_server)
    yield page
    page.page.context.close()


def login_status(live_server: LiveServer, password: str) -> int:
    body = {"username": "alice", "password": password}
    return httpx.post(live_server.base_url + "/api/auth/login", json=body, timeout=30).status_code


def test_the_password_section_changes_the_password_and_shows_the_servers_refusals(
    web: WebPage, live_server: LiveServer
) -> None:
    on_server_loop(live_server, live_server.services.accounts.create("alice", PASSWORD), timeout=30)
    web.open()
    assert web.page.evaluate(SIGN_IN_WITH_COOKIE, ["alice", PASSWORD]) == 200
    assert web.page.evaluate(ME_STATUS) == 200
    web.page.evaluate(MOUNT_SECTION)
    form = web.page.get_by_role("form", name="Change password")
    current, new = form.get_by_label("Current password"), form.get_by_label("New password", exact=True)
    confirm, submit = form.get_by_label("Confirm new password"), form.get_by_role("button", name="Change password")

    current.fill("not-the-password-at-all")
    new.fill(OTHER_PASSWORD)
    confirm.fill(OTHER_PASSWORD)
    submit.click()
    expect(form.get_by_role("alert")).to_have_text("The current password is wrong")

    current.fill(PASSWORD)
    new.fill("password123456")
    confirm.fill("password123456")
    submit.click()
    expect(form.get_by_role("alert")).to_have_text(refusal("password123456", "alice") or "")

    new.fill(OTHER_PASSWORD)
    confirm.fill(OTHER_PASSWORD + "x")
    submit.click()
    expect(form.get_by_role("alert")).to_have_text("The new password and its confirmation differ.")
    assert login_status(live_server, PASSWORD) == 200  # nothing changed so far

    confirm.fill(OTHER_PASSWORD)
    submit.click()
    expect(form.get_by_role("status")).to_contain_text("Password changed.")
    expect(current).to_have_value("")
    assert login_status(live_server, OTHER_PASSWORD) == 200
    assert login_status(live_server, PASSWORD) == 401
    assert web.page.evaluate(ME_STATUS) == 200  # this session stays signed in
    web.assert_no_console_errors(allow="status of (403|422)")
