"""Pheby Web (the browser client at `/`) in a real headless Chromium against a live server on the
demo Hermes: sign-in, streaming, tools, decisions, files, stop, reconnect, sync, safety, layout."""

import asyncio
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, expect

from demo_hermes import DemoHermesServer
from pheby.protocol.frames import MessageComplete
from pheby.settings import Settings
from tests.browser import WebPage, drop_all_sockets, on_server_loop, open_page
from tests.demo_hermes_server import client_for
from tests.live_server import LiveServer

pytestmark = [pytest.mark.live, pytest.mark.xdist_group("browser")]


@pytest.fixture
def web(browser: Browser, live_server: LiveServer) -> Iterator[WebPage]:
    page = open_page(browser, live_server)
    yield page
    page.page.context.close()


@pytest.fixture
def second(browser: Browser, live_server: LiveServer) -> Iterator[WebPage]:
    page = open_page(browser, live_server)
    yield page
    page.page.context.close()


def test_the_shell_is_served_with_a_strict_csp_and_hashed_assets(live_server: LiveServer) -> None:
    page = httpx.get(live_server.base_url + "/")
    assert page.status_code == 200
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp
    assert "script-src 'self'" in csp
    assert "connect-src 'self'" in csp
    assert "unsafe-inline" not in csp
    assert "unsafe-eval" not in csp
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["referrer-policy"] == "no-referrer"
    assert page.headers["cache-control"] == "no-cache"
    script = page.text.split('<script type="module" src="', 1)[1].split('"', 1)[0]
    asset = httpx.get(live_server.base_url + script)
    assert asset.status_code == 200
    assert asset.headers["content-type"].startswith("text/javascript")
    assert "immutable" in asset.headers["cache-control"]
    base = script.rsplit("/", 1)[0]
    for escape in ("/../pyproject.toml", "/%2e%2e/pyproject.toml", "/vendor/VERSIONS", "/index.html"):
        assert httpx.get(live_server.base_url + base + escape).status_code == 404
    assert httpx.get(live_server.base_url + "/web/0000000000000000/app.js").status_code == 404


def test_sign_in_with_the_secret_and_a_message_streams_to_the_demo_reply(web: WebPage) -> None:
    web.sign_in().new_chat()
    web.send("hello there")
    expect(web.page.locator(".bubble.user").last).to_have_text("hello there")
    expect(web.assistant()).to_have_text("You said: hello there", timeout=15000)
    web.wait_idle()
    expect(web.page.locator(".conversation .when").first).to_have_text("just now")
    web.screenshot("conversation")
    web.assert_no_console_errors()


def test_a_wrong_secret_is_a_plain_sentence(web: WebPage) -> None:
    web.open()
    web.page.get_by_label("Owner secret or token").fill("not-the-secret-at-all")
    web.page.get_by_role("button", name="Sign in").click()
    expect(web.page.get_by_role("alert")).to_have_text("That secret or token was not accepted.")
    web.screenshot("sign-in-refused")
    web.assert_no_console_errors()


def test_sign_in_with_a_password_and_sign_out_revokes_it(web: WebPage, live_server: LiveServer) -> None:
    on_server_loop(live_server, live_server.services.accounts.create("alice", "correct horse battery"))
    web.open()
    web.page.get_by_role("tab", name="Password").click()
    web.page.get_by_label("Username").fill("alice")
    web.page.get_by_label("Password", exact=True).fill("correct horse battery")
    web.page.get_by_role("button", name="Sign in").click()
    web.new_chat()
    web.send("from alice")
    expect(web.assistant()).to_have_text("You said: from alice", timeout=15000)
    token = web.session_cookie()  # the page itself can't read it (HttpOnly), nor keeps it
    assert token not in web.stored()
    me = httpx.get(live_server.base_url + "/api/me", headers={"Authorization": f"Bearer {token}"})
    assert me.status_code == 200
    web.page.get_by_role("button", name="Sign out").click()
    expect(web.page.get_by_role("button", name="Sign in")).to_be_visible()
    assert [c for c in web.page.context.cookies() if c["name"] == "hope_session"] == []  # cleared by its name

    def revoked() -> bool:
        me = httpx.get(live_server.base_url + "/api/me", headers={"Authorization": f"Bearer {token}"})
        return me.status_code == 401

    for _ in range(50):
        if revoked():
            break
        web.page.wait_for_timeout(100)
    assert revoked()
    web.assert_no_console_errors()


def test_a_tool_card_goes_from_running_to_completed(web: WebPage) -> None:
    web.sign_in().new_chat()
    web.send("/demo tool")
    card = web.page.locator(".card.tool").first
    expect(card).to_be_visible(timeout=15000)
    expect(card.locator(".tool-name")).to_have_text("web_search")
    expect(card).to_have_attribute("data-status", "completed", timeout=15000)
    web.wait_idle()
    card.get_by_role("button", name="Details").click()
    details = card.locator("pre.args").first
    expect(details).to_contain_text("cats")
    assert "sk-demo-0000" not in card.inner_text()  # the secret-looking argument was redacted
    web.screenshot("tool-card")
    web.assert_no_console_errors()


def test_an_approval_is_approved_once_and_another_denied_with_a_reason(web: WebPage) -> None:
    web.sign_in().new_chat()
    web.send("/demo approve")
    card = web.page.locator(".card.approval").last
    expect(card).to_contain_text("rm -rf /tmp/build-output", timeout=15000)
    web.screenshot("approval")
    card.get_by_role("button", name="Approve once").click()
    expect(web.assistant()).to_contain_text("Approved (once)", timeout=15000)
    expect(card).to_contain_text("Approved")
    web.wait_idle()

    web.send("/demo approve")
    card = web.page.locator(".card.approval:not(.resolved)")
    expect(card).to_be_visible(timeout=15000)
    card.get_by_role("button", name="Deny…").click()
    card.get_by_label("Reason for denying").fill("not on a Friday")
    card.get_by_role("button", name="Deny", exact=True).click()
    expect(web.assistant()).to_contain_text("Denied", timeout=15000)
    expect(web.page.locator(".card.approval.resolved").last).to_contain_text("Denied")
    web.assert_no_console_errors()


def test_a_clarification_is_answered_with_a_choice_and_with_free_text(web: WebPage) -> None:
    web.sign_in().new_chat()
    web.send("/demo clarify")
    card = web.page.locator(".card.clarify:not(.resolved)")
    expect(card).to_contain_text("Deploy to staging or production?", timeout=15000)
    web.screenshot("clarify")
    card.get_by_role("button", name="production").click()
    expect(web.assistant()).to_have_text("You chose: production", timeout=15000)
    web.wait_idle()

    web.send("/demo clarify")
    card = web.page.locator(".card.clarify:not(.resolved)")
    expect(card).to_be_visible(timeout=15000)
    card.get_by_label("Other answer").fill("the canary cluster")
    card.get_by_role("button", name="Answer").click()
    expect(web.assistant()).to_have_text("You chose: the canary cluster", timeout=15000)
    web.assert_no_console_errors()


def test_an_agent_image_shows_inline_and_its_bytes_equal_the_download(web: WebPage, live_server: LiveServer) -> None:
    web.sign_in().new_chat()
    web.send("/demo image")
    image = web.page.locator(".inline-image img")
    expect(image).to_be_visible(timeout=15000)
    web.wait_idle()
    attachment_id = image.get_attribute("data-attachment-id")
    assert image.evaluate("img => img.naturalWidth") > 0
    assert image.evaluate("img => img.src").startswith("blob:")
    download = httpx.get(
        f"{live_server.base_url}/attachments/{attachment_id}",
        headers={"Authorization": f"Bearer {live_server.secret}"},
    )
    assert download.status_code == 200
    # The chip saves the very blob behind the inline image.
    with web.page.expect_download() as saved:
        web.page.locator(".inline-image .chip button").click()
    assert Path(saved.value.path()).read_bytes() == download.content
    expect(web.page.locator(".inline-image .chip")).to_contain_text("until")  # expires_at shown
    web.screenshot("image")
    web.assert_no_console_errors()


def test_an_uploaded_file_reaches_the_run(web: WebPage, tmp_path: Path) -> None:
    notes = tmp_path / "notes.md"
    notes.write_text("# Shopping\nthree lemons, one loaf\n", encoding="utf-8")
    web.sign_in().new_chat()
    web.page.get_by_label("Choose files").set_input_files(str(notes))
    expect(web.page.locator(".uploads li.done")).to_have_count(1, timeout=15000)
    web.send("/demo echo")
    expect(web.assistant()).to_contain_text("three lemons, one loaf", timeout=15000)
    expect(web.page.locator(".turn.user .chip")).to_contain_text("notes.md")
    web.screenshot("upload")
    web.assert_no_console_errors()


def test_stop_during_a_slow_run(web: WebPage) -> None:
    web.sign_in().new_chat()
    web.send("/demo slow")
    expect(web.assistant()).to_contain_text("tick 3", timeout=15000)
    web.page.get_by_label("Message").press("Escape")
    expect(web.page.locator(".run-status.cancelled")).to_have_text("Stopped.", timeout=15000)
    text = web.assistant().inner_text()
    assert "tick 99" not in text
    web.page.wait_for_timeout(500)
    assert web.assistant().inner_text() == text  # nothing more arrives
    web.assert_no_console_errors()


def test_a_dropped_socket_reconnects_and_shows_the_finished_answer(web: WebPage, live_server: LiveServer) -> None:
    web.sign_in().new_chat()
    web.send("/demo slow")
    expect(web.assistant()).to_contain_text("tick 2", timeout=15000)
    web.page.get_by_label("Message").fill("typed before the drop")
    assert on_server_loop(live_server, drop_all_sockets(live_server)) >= 1
    expect(web.page.locator(".connection")).to_have_text("Reconnecting…", timeout=5000)
    web.screenshot("reconnecting")
    expect(web.assistant()).to_contain_text("tick 99", timeout=30000)
    web.wait_idle()
    expect(web.page.locator(".connection")).to_have_count(0)
    expect(web.page.get_by_label("Message")).to_have_value("typed before the drop")
    assert web.page.locator(".bubble.user").count() == 1  # nothing was sent twice
    web.assert_no_console_errors()


def test_two_pages_of_one_account_stay_in_sync(web: WebPage, second: WebPage) -> None:
    web.sign_in().new_chat()
    second.sign_in()
    web.page.get_by_role("button", name="Rename New chat").click()
    web.page.get_by_label("Conversation name").fill("Shared plans")
    web.page.get_by_label("Conversation name").press("Enter")
    expect(second.page.locator(".conversation .name")).to_have_text(["Shared plans"])
    second.page.locator(".conversation .open").first.click()
    web.send("/demo approve")
    # The other tab sees the run, the user's text and the approval, and can answer it.
    card = second.page.locator(".card.approval:not(.resolved)")
    expect(card).to_be_visible(timeout=15000)
    expect(second.page.locator(".bubble.user")).to_have_text(["/demo approve"])
    card.get_by_role("button", name="Approve once").click()
    expect(web.page.locator(".card.approval.resolved")).to_be_visible(timeout=15000)
    expect(web.assistant()).to_contain_text("Approved (once)", timeout=15000)
    expect(second.assistant()).to_contain_text("Approved (once)", timeout=15000)
    web.page.get_by_role("button", name="Delete Shared plans").click()
    expect(web.page.locator(".conversation")).to_have_count(0)
    # The server answers a delete to the deleting socket only; the other tab finds out when it
    # looks again (here: coming back to the tab).
    second.page.evaluate("window.dispatchEvent(new Event('focus'))")
    expect(second.page.locator(".conversation")).to_have_count(0)
    web.assert_no_console_errors()
    second.assert_no_console_errors()


def test_html_and_script_links_in_messages_are_inert(web: WebPage) -> None:
    web.sign_in().new_chat()
    web.send("look <img src=x onerror=alert(1)> and [click me](javascript:alert(2)) <script>alert(3)</script>")
    reply = web.assistant()
    expect(reply).to_contain_text("You said: look", timeout=15000)
    web.wait_idle()
    web.page.wait_for_timeout(300)
    assert web.dialogs == []
    assert web.page.locator("[onerror]").count() == 0
    assert web.page.locator(".transcript img").count() == 0
    assert web.page.locator(".transcript script").count() == 0
    assert web.page.locator("a[href^='javascript']").count() == 0
    link = reply.get_by_text("click me")
    assert link.get_attribute("href") is None
    expect(reply).to_contain_text("<img src=x onerror=alert(1)>")  # shown as text
    expect(web.page.locator(".bubble.user")).to_contain_text("<img src=x onerror=alert(1)>")
    web.assert_no_console_errors()


def test_an_artifact_edit_conflict_shows_the_choice(web: WebPage, second: WebPage) -> None:
    web.sign_in()
    second.sign_in()
    web.page.get_by_role("button", name="Workspace").click()
    # Memory needs a Hermes home, which this server has not got: its tab is not offered.
    tabs = web.page.locator(".workspace [role=tab]")
    expect(tabs).to_have_text(["Artifacts", "Scheduled tasks", "Connectors & research"])
    web.page.get_by_label("New artifact title").fill("Plan")
    web.page.get_by_role("button", name="Create").click()
    expect(web.page.get_by_label("Artifact content")).to_be_visible()
    second.page.get_by_role("button", name="Workspace").click()
    second.page.get_by_role("button", name="Plan").click()
    second.page.get_by_label("Artifact content").fill("their words")
    second.page.get_by_role("button", name="Save", exact=True).click()
    expect(second.page.get_by_text("revision 2")).to_be_visible()

    web.page.get_by_label("Artifact content").fill("my words")
    web.page.get_by_role("button", name="Save", exact=True).click()
    conflict = web.page.locator(".conflict")
    expect(conflict).to_contain_text("revision 2")
    expect(conflict.locator(".theirs")).to_have_text("their words")
    web.screenshot("artifact-conflict")
    conflict.get_by_role("button", name="Keep mine (overwrite)").click()
    expect(web.page.get_by_text("revision 3")).to_be_visible()
    expect(conflict).to_have_count(0)
    web.page.get_by_role("button", name="Versions").click()
    expect(web.page.locator(".versions li")).to_have_count(3)
    with web.page.expect_download() as exported:
        web.page.get_by_role("button", name="Export").click()
    assert exported.value.suggested_filename == "Plan.md"
    assert Path(exported.value.path()).read_text(encoding="utf-8") == "my words"
    web.page.get_by_role("button", name="Revision 2").click()
    expect(web.page.get_by_label("Artifact content")).to_have_value("their words")
    web.assert_no_console_errors(allow=r"409 \(Conflict\)")


def test_a_phone_width_has_no_horizontal_scroll(browser: Browser, live_server: LiveServer) -> None:
    phone_size = {"width": 390, "height": 844}
    phone = open_page(browser, live_server, viewport=phone_size, is_mobile=True, has_touch=True, color_scheme="dark")
    try:
        phone.sign_in()
        phone.page.locator(".welcome").get_by_role("button", name="New chat").click()
        phone.send("/demo tool")
        expect(phone.page.locator(".card.tool")).to_have_attribute("data-status", "completed", timeout=15000)
        phone.wait_idle()
        phone.send("a long line " + "x" * 300)
        expect(phone.assistant()).to_contain_text("You said: a long line", timeout=15000)
        phone.wait_idle()
        phone.screenshot("phone-390")
        assert phone.page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        phone.page.get_by_role("button", name="Conversations").click()
        expect(phone.page.get_by_role("button", name="Sign out")).to_be_in_viewport(ratio=1)
        phone.page.wait_for_timeout(300)  # the slide-in transition
        phone.screenshot("phone-390-menu")
        assert phone.page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        phone.assert_no_console_errors()
    finally:
        phone.page.context.close()


def test_a_failed_tool_shows_its_error(web: WebPage) -> None:
    web.sign_in().new_chat()
    web.send("/demo tool-fail")
    card = web.page.locator(".card.tool").first
    expect(card).to_have_attribute("data-status", "failed", timeout=15000)
    expect(card.locator(".tool-status")).to_have_text("failed")
    expect(card.locator(".error")).not_to_be_empty()
    web.wait_idle()
    web.assert_no_console_errors()


def test_yolo_shows_a_warning_on_every_tab_and_skips_the_approval(web: WebPage, second: WebPage) -> None:
    web.sign_in().new_chat()
    second.sign_in()
    second.page.locator(".conversation .open").first.click()
    web.page.get_by_role("switch", name="YOLO").check()
    expect(web.page.locator(".yolo-warning")).to_contain_text("YOLO is on")
    expect(second.page.locator(".yolo-warning")).to_contain_text("YOLO is on")
    web.screenshot("yolo-on")
    web.send("/demo approve")
    expect(web.assistant()).to_contain_text("Approved (once)", timeout=15000)
    assert web.page.locator(".card.approval:not(.resolved)").count() == 0
    web.page.get_by_role("switch", name="YOLO").uncheck()
    expect(second.page.locator(".yolo-warning")).to_have_count(0)
    web.assert_no_console_errors()
    second.assert_no_console_errors()


@pytest.fixture
def demo_model_restored(demo_hermes: DemoHermesServer) -> Iterator[None]:
    """The test sets the shared demo Hermes's model and effort for every conversation: they are put back
    after it, passed or failed, so no later test of the session finds them changed."""
    yield

    async def restore() -> None:
        async with client_for(demo_hermes) as client:
            await client.set_model("demo", "demo-model")
            await client.put_config({"agent": {"reasoning_effort": "medium"}})

    with ThreadPoolExecutor(1) as thread:  # Playwright's loop runs in this thread
        thread.submit(asyncio.run, restore()).result(timeout=30)


@pytest.mark.usefixtures("demo_model_restored")
def test_model_and_reasoning_pickers_show_what_the_server_says(web: WebPage) -> None:
    web.sign_in().new_chat()
    web.page.get_by_role("button", name="Model and reasoning").click()
    model = web.page.get_by_label("Model", exact=True)
    expect(model.locator("option")).to_have_count(4)
    # The demo has no companion plugin: a change for one conversation is refused, and said so.
    model.select_option(label="demo-model-large")
    expect(web.page.locator(".settings-message")).to_contain_text("companion Hermes plugin")
    web.screenshot("settings-not-implemented")
    web.page.get_by_label("every conversation").check()
    model.select_option(label="alt-model")
    expect(web.page.locator(".settings-message")).to_have_text("Model set for every conversation.")
    expect(web.page.locator(".settings-panel")).to_contain_text("Now: alt-model")
    web.page.get_by_label("Reasoning effort").select_option("high")
    expect(web.page.locator(".settings-message")).to_have_text("Reasoning effort set.")
    expect(web.page.get_by_label("Reasoning effort")).to_have_value("high")
    web.assert_no_console_errors()


def test_history_pages_load_as_the_person_scrolls_up(web: WebPage) -> None:
    web.sign_in().new_chat()
    for number in range(1, 4):
        web.send(f"message {number}")
        expect(web.assistant()).to_have_text(f"You said: message {number}", timeout=15000)
        web.wait_idle()
    web.page.reload()  # the tab keeps its sign-in
    expect(web.page.get_by_role("button", name="Sign out")).to_be_visible()
    web.page.evaluate("window.pheby.client.historyPage = 2")
    web.page.locator(".conversation .open").first.click()
    expect(web.page.locator(".turn")).to_have_count(2)
    web.page.get_by_role("button", name="Load earlier messages").click()
    expect(web.page.locator(".turn")).to_have_count(4)
    web.page.locator(".transcript").evaluate("el => { el.scrollTop = 0; el.dispatchEvent(new Event('scroll')); }")
    expect(web.page.locator(".turn")).to_have_count(6)
    expect(web.page.locator(".bubble.user").first).to_have_text("message 1")
    expect(web.page.get_by_role("button", name="Load earlier messages")).to_have_count(0)
    web.assert_no_console_errors()


def test_a_sign_in_survives_a_new_tab_over_the_cookie(web: WebPage, live_server: LiveServer) -> None:
    web.sign_in()
    assert web.stored() == "[{},{}]"
    other = web.page.context.new_page()
    other.goto(live_server.base_url + "/")
    expect(other.get_by_role("button", name="Sign out")).to_be_visible()
    web.assert_no_console_errors()


def test_repeated_wrong_secrets_are_locked_out_in_a_plain_sentence(web: WebPage) -> None:
    web.open()
    box = web.page.get_by_label("Owner secret or token")
    for _ in range(6):
        box.fill("wrong-secret-wrong-secret")
        web.page.get_by_role("button", name="Sign in").click()
        expect(web.page.get_by_role("alert")).to_be_visible()
        if "Too many" in web.page.get_by_role("alert").inner_text():
            break
        expect(web.page.get_by_role("button", name="Sign in")).to_be_enabled()
    expect(web.page.get_by_role("alert")).to_have_text(
        "Too many failed attempts from here. Wait a minute, then try again."
    )
    web.assert_no_console_errors()


def test_files_dropped_and_pasted_are_sent_with_the_message(web: WebPage) -> None:
    web.sign_in().new_chat()
    web.page.locator(".composer").evaluate(
        """form => {
            const data = new DataTransfer();
            data.items.add(new File(["dropped lemon text"], "dropped.txt", { type: "text/plain" }));
            form.dispatchEvent(new DragEvent("drop", { dataTransfer: data, bubbles: true, cancelable: true }));
        }"""
    )
    web.page.get_by_label("Message").evaluate(
        """box => {
            const data = new DataTransfer();
            data.items.add(new File(["pasted lime text"], "pasted.txt", { type: "text/plain" }));
            box.dispatchEvent(new ClipboardEvent("paste", { clipboardData: data, bubbles: true, cancelable: true }));
        }"""
    )
    expect(web.page.locator(".uploads li.done")).to_have_count(2, timeout=15000)
    web.send("/demo echo")
    expect(web.assistant()).to_contain_text("dropped lemon text", timeout=15000)
    expect(web.assistant()).to_contain_text("pasted lime text")
    web.assert_no_console_errors()


def test_an_agent_document_is_a_download_chip_with_its_expiry(web: WebPage) -> None:
    web.sign_in().new_chat()
    web.send("/demo document")
    chip = web.page.locator(".turn.assistant .chip")
    expect(chip).to_be_visible(timeout=15000)
    expect(chip).to_contain_text(".md")
    expect(chip).to_contain_text("until")
    with web.page.expect_download() as saved:
        chip.get_by_role("button").click()
    assert saved.value.suggested_filename.endswith(".md")
    web.assert_no_console_errors()


def test_workspace_tasks_memory_and_statuses(
    browser: Browser,
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    tmp_path: Path,
) -> None:
    home = tmp_path / "hermes-home"
    (home / "memories").mkdir(parents=True)
    (home / "memories" / "MEMORY.md").write_text("likes tea", encoding="utf-8")
    live = start_live_server(live_settings(hermes_home=home))
    web, other = open_page(browser, live), open_page(browser, live)
    try:
        web.sign_in()
        web.page.get_by_role("button", name="Workspace").click()
        tabs = web.page.locator(".workspace [role=tab]")
        expect(tabs).to_have_text(["Artifacts", "Scheduled tasks", "Memory", "Connectors & research"])

        tabs.get_by_text("Scheduled tasks").click()
        web.page.get_by_role("button", name="New task").click()
        web.page.get_by_label("Name").fill("Morning note")
        web.page.get_by_label("Schedule").fill("every 1h")
        web.page.get_by_label("Prompt").fill("Say good morning")
        web.page.get_by_role("button", name="Create task").click()
        task = web.page.locator(".task")
        expect(task).to_contain_text("Morning note")
        task.get_by_role("button", name="Pause").click()
        expect(task).to_contain_text("paused")
        task.get_by_role("button", name="Resume").click()
        expect(task.get_by_role("button", name="Pause")).to_be_visible()
        task.get_by_role("button", name="Run now").click()
        task.get_by_role("button", name="Edit").click()
        web.page.get_by_label("Name").fill("Evening note")
        web.page.get_by_role("button", name="Save").click()
        expect(task).to_contain_text("Evening note")
        web.screenshot("workspace-tasks")
        task.get_by_role("button", name="Delete").click()
        expect(web.page.locator(".task")).to_have_count(0)

        tabs.get_by_text("Memory").click()
        memory = web.page.get_by_label("Agent memory (MEMORY.md)")
        expect(memory).to_have_value("likes tea")
        other.sign_in()
        other.page.get_by_role("button", name="Workspace").click()
        other.page.locator(".workspace [role=tab]").get_by_text("Memory").click()
        other.page.get_by_label("Agent memory (MEMORY.md)").fill("likes coffee")
        other.page.locator(".memory-section").first.get_by_role("button", name="Save").click()
        expect(other.page.locator(".memory-section").first).to_contain_text("Saved.")
        memory.fill("likes green tea")
        web.page.locator(".memory-section").first.get_by_role("button", name="Save").click()
        expect(web.page.locator(".memory-section").first.get_by_role("alert")).to_contain_text("Changed elsewhere")
        web.screenshot("workspace-memory-conflict")
        assert (home / "memories" / "MEMORY.md").read_text(encoding="utf-8") == "likes coffee"

        tabs.get_by_text("Connectors & research").click()
        expect(web.page.locator(".workspace-body")).to_contain_text("Connectors: not available")
        expect(web.page.locator(".workspace-body")).to_contain_text("Research mode: not available")
        web.assert_no_console_errors(allow=r"409 \(Conflict\)")
        other.assert_no_console_errors()
    finally:
        web.page.context.close()
        other.page.context.close()


def test_a_failed_run_and_a_gateway_notice_are_shown_as_such(web: WebPage, live_server: LiveServer) -> None:
    web.sign_in().new_chat()
    web.send("/demo fail")
    expect(web.page.locator(".run-status.failed")).to_contain_text("The run failed.", timeout=15000)
    web.wait_idle()
    conversation_id = web.page.evaluate("window.pheby.store.state.currentId")

    async def push_notice() -> None:
        owner = await live_server.services.accounts.ensure_owner()
        notice = MessageComplete(
            conversation_id=conversation_id, message_id="notice-1", text="Gateway restarted", kind="notice"
        )
        live_server.services.hub.broadcast(owner.id, notice)

    on_server_loop(live_server, push_notice())
    expect(web.page.locator(".notice-line")).to_have_text("Gateway restarted")
    assert web.page.locator(".bubble", has_text="Gateway restarted").count() == 0  # a quiet line, not a turn
    web.assert_no_console_errors()


def test_at_most_ten_files_go_with_one_message(web: WebPage, tmp_path: Path) -> None:
    files = []
    for number in range(11):
        path = tmp_path / f"note-{number}.txt"
        path.write_text(f"note {number}", encoding="utf-8")
        files.append(str(path))
    web.sign_in().new_chat()
    web.page.get_by_label("Choose files").set_input_files(files)
    expect(web.page.locator(".toast")).to_have_text("Up to 10 files per message.")
    expect(web.page.locator(".uploads li.done")).to_have_count(10)
    web.screenshot("uploads")
    web.send("ten files")
    expect(web.assistant()).to_contain_text("[End of note-9.txt]")  # all ten reached the run
    expect(web.page.locator(".turn.user .chip")).to_have_count(10)
    web.assert_no_console_errors()
