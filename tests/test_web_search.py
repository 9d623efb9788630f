"""Pheby Web's search box and Export menu in headless Chromium against a live server on the demo Hermes:
type a word, see the highlighted hit (text, never markup), click it, land on the message; export a
conversation as Markdown and JSON."""

import json
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, expect

from tests.browser import WebPage, open_page
from tests.live_server import LiveServer

pytestmark = [pytest.mark.live, pytest.mark.xdist_group("browser-search")]


@pytest.fixture
def web(browser: Browser, live_server: LiveServer) -> Iterator[WebPage]:
    page = open_page(browser, live_server)
    yield page
    page.page.context.close()


def chat(web: WebPage, text: str) -> None:
    web.send(text)
    expect(web.assistant()).to_have_text(f"You said: {text}", timeout=15000)
    web.wait_idle()


def test_typing_shows_highlighted_hits_and_a_click_lands_on_the_message(web: WebPage) -> None:
    web.sign_in().new_chat()
    chat(web, "the <b>narwhal</b> tusk")
    for number in range(1, 5):
        chat(web, f"filler {number}")
    web.new_chat()
    chat(web, "something else")
    web.page.evaluate("window.pheby.client.historyPage = 2")  # the hit is pages back: earlier ones load

    web.page.get_by_label("Search conversations").fill("narwh")
    expect(web.page.locator(".search-results")).to_contain_text("No matches.")  # a word, not a prefix
    web.page.get_by_label("Search conversations").fill("narwhal")
    answer = web.page.locator(".search-result", has_text="Assistant")
    expect(answer).to_have_count(1)
    expect(answer.locator("mark")).to_have_text("narwhal")
    expect(answer.locator(".snippet")).to_have_text("You said: the <b>narwhal</b> tusk")
    expect(answer.locator(".snippet b")).to_have_count(0)  # the snippet is text, never HTML
    web.screenshot("search-results")

    answer.click()
    hit = web.page.locator(".transcript .turn.assistant.search-hit")
    expect(hit).to_have_count(1)
    expect(hit).to_contain_text("You said: the <b>narwhal</b> tusk")
    expect(hit).to_be_in_viewport()
    web.screenshot("search-landed")
    web.assert_no_console_errors()


def test_a_conversation_exports_as_markdown_and_json(web: WebPage) -> None:
    web.sign_in().new_chat()
    chat(web, "export me")
    web.page.locator(".conversation .open").first.hover()
    web.page.get_by_role("button", name="Export New chat").first.click()
    with web.page.expect_download() as markdown:
        web.page.get_by_role("menuitem", name="Export Markdown").click()
    assert markdown.value.suggested_filename == "New chat.md"
    path = markdown.value.path()
    assert "You said: export me" in path.read_text(encoding="utf-8")
    web.page.get_by_role("button", name="Export New chat").first.click()
    with web.page.expect_download() as exported:
        web.page.get_by_role("menuitem", name="Export JSON").click()
    messages = json.loads(exported.value.path().read_text(encoding="utf-8"))["messages"]
    assert [m["text"] for m in messages] == ["export me", "You said: export me"]
    web.assert_no_console_errors()
