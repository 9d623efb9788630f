"""Pheby Web's second factor in a real headless Chromium: the code step of a password sign-in, and the
Security page's two-step sign-in section (set up, recovery codes shown once, turned off with a code)."""

import time
from collections.abc import Iterator

import httpx
import pyotp
import pytest
from playwright.sync_api import Browser, expect

from tests.browser import WebPage, on_server_loop, open_page, wait_until
from tests.live_server import LiveServer

pytestmark = [pytest.mark.live, pytest.mark.xdist_group("browser-totp")]
PASSWORD = "correct horse battery"


@pytest.fixture
def web(browser: Browser, live_server: LiveServer) -> Iterator[WebPage]:
    page = open_page(browser, live_server)
    yield page
    page.page.context.close()


def alice_with_totp(live: LiveServer) -> str:
    """Alice, her password and TOTP on (the code that turned it on long used up); her key."""
    services = live.services
    account = on_server_loop(live, services.accounts.create("alice", PASSWORD))
    key = pyotp.random_base32()
    assert on_server_loop(live, services.second_factors.set_pending(account.id, key))
    confirmed_step = int(time.time()) // 30 - 2
    assert on_server_loop(live, services.second_factors.enable(account.id, key, confirmed_step, []))
    return key


def session_cookie(web: WebPage) -> str | None:
    for cookie in web.page.context.cookies():
        if cookie["name"] == "hope_session" and cookie["value"]:
            return cookie["value"]
    return None


def test_a_password_sign_in_asks_for_the_code_then_sets_the_session_cookie(
    web: WebPage, live_server: LiveServer
) -> None:
    key = alice_with_totp(live_server)
    web.open()
    web.page.get_by_role("tab", name="Password").click()
    web.page.get_by_label("Username").fill("alice")
    web.page.get_by_label("Password", exact=True).fill(PASSWORD)
    web.page.get_by_role("button", name="Sign in").click()
    expect(web.page.get_by_role("heading", name="Two-step sign-in")).to_be_visible()
    assert session_cookie(web) is None  # the password alone started nothing

    code = pyotp.TOTP(key).now()
    web.page.get_by_label("Code").fill(f"{(int(code) + 500_000) % 1_000_000:06d}")
    web.page.get_by_role("button", name="Verify").click()
    expect(web.page.get_by_role("alert")).to_contain_text("That code is wrong")
    web.screenshot("totp-code-step")

    web.page.get_by_label("Code").fill(pyotp.TOTP(key).now())
    with web.page.expect_navigation():  # a fresh load of `/`, which starts from the cookie
        web.page.get_by_role("button", name="Verify").click()
    token = wait_until(web.page, lambda: session_cookie(web), "the session cookie was set")
    me = httpx.get(live_server.base_url + "/api/me", cookies={"hope_session": token or ""})
    assert me.json()["name"] == "alice"
    web.assert_no_console_errors(allow="401")


def test_the_security_section_turns_totp_on_and_off(web: WebPage, live_server: LiveServer) -> None:
    web.sign_in()  # the owner, by the secret
    # The section alone, rendered by the page's own modules (the Security page is mounted elsewhere).
    web.page.evaluate(
        """async () => {
          const base = new URL(document.querySelector('script[type=module]').src).href.replace(/app\\.js$/, '');
          const { h, render } = await import(base + 'vendor/preact.mjs');
          const { TotpSection } = await import(base + 'views/security/totp.js');
          const host = document.createElement('div');
          host.id = 'totp-under-test';
          document.body.replaceChildren(host);
          render(h(TotpSection, null), host);
        }"""
    )
    section = web.page.locator("#totp-under-test")
    expect(section.get_by_text("Two-step sign-in is off")).to_be_visible()
    section.get_by_role("button", name="Set up an authenticator app").click()
    key = section.locator(".totp-key").inner_text().replace(" ", "")
    assert section.locator(".totp-uri").inner_text().startswith("otpauth://totp/")

    section.get_by_label("Code from the app").fill("000000" if pyotp.TOTP(key).now() != "000000" else "111111")
    section.get_by_role("button", name="Turn on").click()
    expect(section.get_by_role("alert")).to_be_visible()
    section.get_by_label("Code from the app").fill(pyotp.TOTP(key).now())
    section.get_by_role("button", name="Turn on").click()
    codes = section.get_by_role("group", name="Recovery codes").locator("code")
    expect(codes).to_have_count(10)
    expect(section.get_by_text("Keep these recovery codes somewhere safe")).to_be_visible()
    expect(section.get_by_text("10 of 10 recovery codes left")).to_be_visible()
    recovery_code = codes.first.inner_text()
    web.screenshot("totp-recovery-codes")

    section.get_by_role("button", name="I have kept them").click()
    expect(codes).to_have_count(0)  # shown once
    section.get_by_label("Code or recovery code to turn it off").fill(recovery_code)
    section.get_by_role("button", name="Turn off").click()
    expect(section.get_by_text("Two-step sign-in is off")).to_be_visible()
    web.assert_no_console_errors(allow="422")
