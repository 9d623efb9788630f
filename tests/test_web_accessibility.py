"""Pheby Web's accessibility, in a real headless Chromium against a live server on the demo Hermes:
axe-core (through axe-playwright-python) finds no serious or critical violation in the main states,
light and dark and at phone width; the phone layout's closed drawer is out of reach of the keyboard
and of assistive technology; focus follows the drawer and the workspace as they open and close."""

from collections.abc import Iterator
from typing import Any

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import Browser, Page, expect

from tests.browser import WebPage, open_page
from tests.live_server import LiveServer

pytestmark = [pytest.mark.live, pytest.mark.xdist_group("browser-accessibility")]

PHONE = {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True}
AXE = Axe()


def serious_violations(page: Page) -> list[str]:
    """axe-core's serious and critical findings on the page as it is now, one line each."""
    results: Any = AXE.run(page)
    return [
        f"{violation['id']} ({violation['impact']}): {violation['help']} at {[n['target'] for n in violation['nodes']]}"
        for violation in results.response["violations"]
        if violation["impact"] in ("serious", "critical")
    ]


def focused(page: Page) -> str:
    """What has the keyboard's focus: its accessible name, or its tag, and whether it is in the sidebar."""
    described: str = page.evaluate(
        """() => {
          const el = document.activeElement;
          if (!el || el === document.body) return "body";
          const where = el.closest(".sidebar") ? "sidebar" : el.closest(".main") ? "main" : "elsewhere";
          return `${where}: ${el.getAttribute("aria-label") || el.textContent.trim() || el.tagName}`;
        }"""
    )
    return described


def accessible_names(page: Page) -> set[str]:
    """The names in the page's accessibility tree as Chromium gives it to assistive technology."""
    session = page.context.new_cdp_session(page)
    try:
        nodes = session.send("Accessibility.getFullAXTree")["nodes"]
    finally:
        session.detach()
    return {node["name"]["value"] for node in nodes if not node.get("ignored") and node.get("name", {}).get("value")}


def tab_through(page: Page, presses: int = 40) -> list[str]:
    stops = []
    for _ in range(presses):
        page.keyboard.press("Tab")
        stops.append(focused(page))
    return stops


@pytest.fixture
def phone(browser: Browser, live_server: LiveServer) -> Iterator[WebPage]:
    page = open_page(browser, live_server, **PHONE)
    yield page
    page.page.context.close()


@pytest.mark.parametrize("color_scheme", ["light", "dark"])
def test_axe_finds_nothing_serious_from_sign_in_to_the_workspace(
    browser: Browser, live_server: LiveServer, color_scheme: str
) -> None:
    web = open_page(browser, live_server, color_scheme=color_scheme)
    try:
        web.open()
        expect(web.page.get_by_label("Owner secret or token")).to_be_visible()
        assert serious_violations(web.page) == [], "sign-in"

        web.sign_in().new_chat()
        web.send("hello **there**, a streamed answer")
        expect(web.assistant()).to_have_text("You said: hello there, a streamed answer")
        web.wait_idle()
        assert serious_violations(web.page) == [], "a conversation with an answer"

        web.send("/demo approve")
        expect(web.page.locator(".card.approval:not(.resolved)")).to_be_visible()
        assert serious_violations(web.page) == [], "an approval card, the agent waiting"

        web.page.get_by_role("button", name="Model and reasoning").click()
        expect(web.page.locator(".settings-panel")).to_be_visible()
        assert serious_violations(web.page) == [], "the conversation's settings"

        web.page.get_by_role("button", name="Workspace", exact=True).click()
        expect(web.page.get_by_role("tab", name="Artifacts")).to_be_visible()
        expect(web.page.locator(".workspace-body")).not_to_contain_text("Loading")
        assert serious_violations(web.page) == [], "the workspace"

        web.page.get_by_role("button", name="Security", exact=True).click()
        expect(web.page.get_by_role("list", name="Sessions").get_by_role("listitem")).to_have_count(1)
        assert serious_violations(web.page) == [], "the Security page"
        web.assert_no_console_errors()
    finally:
        web.page.context.close()


def test_axe_finds_nothing_serious_at_phone_width(browser: Browser, live_server: LiveServer) -> None:
    phone = open_page(browser, live_server, color_scheme="dark", **PHONE)
    try:
        phone.sign_in()
        phone.page.locator(".welcome").get_by_role("button", name="New chat").click()
        phone.send("/demo tool")
        expect(phone.page.locator(".card.tool")).to_have_attribute("data-status", "completed")
        phone.wait_idle()
        assert serious_violations(phone.page) == [], "a conversation, the drawer closed"

        phone.page.get_by_role("button", name="Conversations").click()
        expect(phone.page.get_by_role("button", name="Sign out")).to_be_in_viewport(ratio=1)
        assert serious_violations(phone.page) == [], "the drawer open"

        phone.page.get_by_role("button", name="Workspace", exact=True).click()
        expect(phone.page.get_by_role("tab", name="Artifacts")).to_be_visible()
        assert serious_violations(phone.page) == [], "the workspace over the page"
        phone.assert_no_console_errors()
    finally:
        phone.page.context.close()


def test_at_phone_width_the_closed_drawer_is_out_of_reach(phone: WebPage) -> None:
    phone.sign_in()
    phone.page.locator(".welcome").get_by_role("button", name="New chat").click()
    expect(phone.page.get_by_label("Message")).to_be_focused()
    stops = tab_through(phone.page)
    assert [stop for stop in stops if stop.startswith("sidebar")] == []
    assert "main: Conversations" in stops  # Tab went round the page, past the drawer's button
    assert "main: Message" in stops
    # Out of the accessibility tree too: a screen reader finds none of the drawer's buttons.
    assert not {"Sign out", "Workspace", "Notifications"} & accessible_names(phone.page)
    expect(phone.page.locator(".sidebar")).to_have_js_property("inert", True)
    phone.assert_no_console_errors()


def test_focus_follows_the_drawer_as_it_opens_and_closes(phone: WebPage) -> None:
    phone.sign_in()
    phone.page.locator(".welcome").get_by_role("button", name="New chat").click()
    current = phone.page.locator(".conversation.current .open")
    expect(current).to_have_count(1)
    menu = phone.page.get_by_role("button", name="Conversations")
    menu.focus()
    phone.page.keyboard.press("Enter")
    expect(phone.page.locator(".sidebar")).to_have_js_property("inert", False)
    expect(menu).to_have_attribute("aria-expanded", "true")
    expect(current).to_be_focused()  # the keyboard starts where the person is
    assert {"Sign out", "Workspace", "Notifications"} <= accessible_names(phone.page)
    # While the drawer covers the page, the page under it is out of reach.
    assert [stop for stop in tab_through(phone.page, 20) if stop.startswith("main")] == []

    phone.page.keyboard.press("Escape")
    expect(phone.page.locator(".sidebar")).to_have_js_property("inert", True)
    expect(menu).to_be_focused()
    expect(menu).to_have_attribute("aria-expanded", "false")

    menu.click()
    phone.page.get_by_role("button", name="New chat").first.click()
    expect(phone.page.locator(".sidebar")).to_have_js_property("inert", True)
    expect(phone.page.get_by_label("Message")).to_be_focused()  # the new conversation's composer
    phone.assert_no_console_errors()


def test_focus_moves_into_the_workspace_and_back_to_what_opened_it(
    browser: Browser, live_server: LiveServer, phone: WebPage
) -> None:
    web = open_page(browser, live_server)
    try:
        web.sign_in()
        opener = web.page.get_by_role("button", name="Workspace", exact=True)
        opener.click()
        expect(web.page.get_by_role("heading", name="Workspace")).to_be_focused()
        expect(opener).to_have_attribute("aria-expanded", "true")
        web.page.get_by_role("button", name="Close workspace").click()
        expect(opener).to_be_focused()
        web.assert_no_console_errors()
    finally:
        web.page.context.close()

    phone.sign_in()
    phone.page.get_by_role("button", name="Conversations").click()
    phone.page.get_by_role("button", name="Workspace", exact=True).click()
    expect(phone.page.get_by_role("heading", name="Workspace")).to_be_focused()
    # The workspace covers the whole page: the page and the drawer under it are out of reach.
    expect(phone.page.locator(".sidebar")).to_have_js_property("inert", True)
    expect(phone.page.locator(".main")).to_have_js_property("inert", True)
    phone.page.get_by_role("button", name="Close workspace").click()
    expect(phone.page.get_by_role("button", name="Conversations")).to_be_focused()
    phone.assert_no_console_errors()
