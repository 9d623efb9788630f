"""Pheby Web streaming an answer (issue 23) in a real headless Chromium against a live server on the demo
Hermes: the page asks for append deltas and builds the draft from them (a retraction included), renders
an answer block by block (finished blocks keep their nodes; the blocks render what the whole text
renders), and draws a fast stream at most once per animation frame."""

import itertools
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, WebSocket, expect

from demo_hermes import DemoHermesServer
from pheby.settings import Settings
from tests.browser import WebPage, hello_without_features, open_page, wait_until
from tests.live_server import LiveServer
from tests.ws_client import PackedStreams

pytestmark = [pytest.mark.live, pytest.mark.xdist_group("browser-streaming")]


@pytest.fixture
def unwindowed(
    start_live_server: Callable[[Settings], LiveServer], live_settings: Callable[..., Settings]
) -> LiveServer:
    """A live server that forwards every delta at once (no coalescing window): each demo delta reaches
    the page as a frame of its own, 10 ms apart for plain text, 50 ms for `/demo chunks`."""
    return start_live_server(live_settings(ws_delta_window_ms=0, ws_append_window_ms=0))


@pytest.fixture
def web(browser: Browser, unwindowed: LiveServer) -> Iterator[WebPage]:
    page = open_page(browser, unwindowed)
    yield page
    page.page.context.close()


class Frames:
    """The JSON frames the page's WebSockets sent and received (as Playwright sees them, decompressed); a
    packed append delta as the `message.delta` it stands for, marked `"packed": True`."""

    def __init__(self, web: WebPage) -> None:
        self._page = web.page
        self.sent: list[dict[str, Any]] = []
        self.received: list[dict[str, Any]] = []
        web.page.on("websocket", self._watch)

    def _watch(self, socket: WebSocket) -> None:
        socket.on("framesent", lambda payload: self.sent.append(json.loads(payload)))
        streams = PackedStreams()
        socket.on("framereceived", lambda payload: self.received.append(streams.frame(json.loads(payload))))

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [frame for frame in self.received if frame.get("type") == kind]

    def wait_for(self, kind: str) -> list[dict[str, Any]]:
        """The frames of `kind` received, once there is one. Playwright can report a frame after the page
        has acted on it (a run's end shown before its `message.complete` is reported), so a test waits
        for the frames it reads."""
        return wait_until(self._page, lambda: self.of_type(kind), f"a {kind} frame")


# What the store held for a message after each `message.delta` it applied (the test's view of the drafts).
RECORD_DRAFTS = """() => {
    const store = window.pheby.store;
    const apply = store.apply.bind(store);
    window.drafts = [];
    store.apply = (frame) => {
        apply(frame);
        if (frame.type !== "message.delta") return;
        const message = store.chat(frame.conversation_id).messages.find((m) => m.message_id === frame.message_id);
        window.drafts.push(message ? message.text : null);
    };
}"""

# The answer's blocks as shown, against the same text rendered whole by the page's own markdown module.
COMPARE_WITH_WHOLE = """async (text) => {
    const script = document.querySelector("script[type=module]").src;
    const { renderMarkdown } = await import(script.replace(/app\\.js$/, "lib/markdown.js"));
    const shown = document.querySelector(".bubble.assistant .markdown");
    const joined = document.createElement("div");
    joined.innerHTML = [...shown.querySelectorAll(".md-block")].map((b) => b.innerHTML).join("");
    const whole = document.createElement("div");
    whole.innerHTML = renderMarkdown(text);
    return { same: joined.isEqualNode(whole), shown: joined.innerHTML, whole: whole.innerHTML,
             blocks: shown.querySelectorAll(".md-block").length };
}"""


def test_append_deltas_with_a_retraction_and_a_code_fence_render_like_the_whole_text(
    web: WebPage, demo_hermes: DemoHermesServer
) -> None:
    frames = Frames(web)
    web.sign_in().new_chat()
    asked = ["delta_append", "delta_packed", "delta_paced"]
    assert frames.wait_for("ready")[0]["features"] == asked
    hello = next(frame for frame in frames.sent if frame["type"] == "hello")  # reported before its ready
    assert hello["features"] == asked
    assert web.page.evaluate("window.pheby.client.connection.features") == asked
    web.page.evaluate(RECORD_DRAFTS)
    # Streamed verbatim, 50 ms apart. The quote before the MEDIA: tag is shown, then hidden with the
    # tag once the tag is complete: the visible draft shrinks, a retraction. The stream holds after the
    # quote until the page has it: read in one go with the tag, the quote would never be shown (and
    # nothing retracted). The fence holds a blank line.
    pieces = [
        "Intro with **bold** text.\\n\\n",
        "```python\\nprint(1)\\n",
        "\\nx = 2\\n```\\n\\nSee '",
        "<hold>",
        "MEDIA:/nonexistent/a.png' and done.",
    ]
    web.send("/demo chunks " + "|".join(pieces))
    shows_the_quote = '() => window.drafts.length > 0 && window.drafts.at(-1).endsWith("See \'")'
    wait_until(web.page, lambda: web.page.evaluate(shows_the_quote), "the quote shown")
    demo_hermes.release()
    web.wait_idle()
    expect(web.assistant()).to_contain_text("and done.")
    final = frames.wait_for("message.complete")[-1]["text"]
    assert "```python" in final
    assert "MEDIA:" not in final

    deltas = frames.of_type("message.delta")
    assert deltas
    assert all("offset" in d and "append" in d and "text" not in d for d in deltas)
    assert deltas[0]["offset"] == 0
    assert "stream" in deltas[0]
    assert all(d.get("packed") for d in deltas[1:])  # after the first, positional
    draft, retractions = "", 0
    for delta in deltas:  # the drafts the server meant, in code points (Python's len)
        assert delta["offset"] <= len(draft)
        retractions += delta["offset"] < len(draft)
        draft = draft[: delta["offset"]] + delta["append"]
    assert retractions >= 1
    assert draft == final

    drafts = web.page.evaluate("window.drafts")  # what the page built, delta by delta
    assert drafts[-1] == final
    assert any(not later.startswith(earlier) for earlier, later in itertools.pairwise(drafts))

    compared = web.page.evaluate(COMPARE_WITH_WHOLE, final)
    assert compared["same"], compared
    assert compared["blocks"] >= 3  # the intro, the fence (one block for all its lines), the last paragraph
    assert web.assistant().locator("pre code").count() == 1
    web.assert_no_console_errors()


# Remember the answer's first paragraph (a finished block) and every change to it from now on.
WATCH_FIRST_BLOCK = """() => {
    const first = document.querySelector(".bubble.assistant .markdown p");
    window.firstBlock = { node: first, text: first.textContent, changes: 0 };
    new MutationObserver((records) => { window.firstBlock.changes += records.length; })
        .observe(first.parentNode, { subtree: true, childList: true, characterData: true, attributes: true });
    return first.parentNode.closest(".markdown").textContent.length;
}"""


def test_finished_blocks_keep_their_nodes_while_the_answer_streams(web: WebPage) -> None:
    # With cumulative deltas (the feature not granted): the page renders both forms alike.
    web.page.route_web_socket(re.compile(r"/ws$"), hello_without_features)
    web.sign_in().new_chat()
    assert web.page.evaluate("window.pheby.client.connection.features") == []
    words = [f"word{n} " for n in range(12)]
    web.send("/demo chunks First paragraph stays.\\n\\n|" + "|".join(words) + "|\\n\\nThird paragraph.")
    # The second paragraph has begun: the first is finished.
    wait_until(
        web.page,
        lambda: web.assistant().locator(".markdown p").count() >= 2,
        "the second paragraph did not start",
    )
    shown_then = web.page.evaluate(WATCH_FIRST_BLOCK)
    web.wait_idle()
    expect(web.assistant()).to_contain_text("Third paragraph.")
    assert len(web.assistant().locator(".markdown").inner_text()) > shown_then  # more text streamed since
    kept = web.page.evaluate(
        """() => {
            const first = document.querySelector(".bubble.assistant .markdown p");
            return { same: first.isSameNode(window.firstBlock.node), text: first.textContent,
                     before: window.firstBlock.text, changes: window.firstBlock.changes };
        }"""
    )
    assert kept["same"], kept
    assert kept["text"] == kept["before"] == "First paragraph stays."
    assert kept["changes"] == 0, kept
    web.assert_no_console_errors()


# Where the answer's blocks are: the finished ones in the contained box, the growing one after it.
BLOCK_LAYOUT = """() => {
    const markdown = document.querySelector(".bubble.assistant .markdown");
    const done = markdown.querySelector(":scope > .md-done");
    const blocks = [...markdown.querySelectorAll(".md-block")];
    const last = blocks[blocks.length - 1];
    window.lastBlocks = window.lastBlocks || new Set();
    window.lastBlocks.add(last);
    return {
        blocks: blocks.length,
        in_done: done ? done.querySelectorAll(":scope > .md-block").length : -1,
        last_after_done: last.parentNode === markdown && markdown.lastElementChild === last,
        contain: done ? getComputedStyle(done).contain : null,
        last_elements: window.lastBlocks.size,
    };
}"""


def test_finished_blocks_are_one_contained_box_before_the_growing_block(web: WebPage) -> None:
    # Layout and paint take the finished blocks as one box while the last block grows, and the growing
    # block keeps its element: a new last child would restyle the blocks before it (:last-child).
    web.sign_in().new_chat()
    words = [f"word{n} " for n in range(24)]  # 1.2 s of growth, 50 ms a word
    web.send("/demo chunks One.\\n\\n|Two.\\n\\n|" + "|".join(words) + "|\\n\\nLast.")
    wait_until(
        web.page,
        lambda: web.assistant().locator(".markdown p").count() >= 3,
        "the third paragraph did not start",
    )
    seen: list[dict[str, Any]] = []
    for _ in range(3):  # while the third paragraph grows
        seen.append(web.page.evaluate(BLOCK_LAYOUT))
        web.page.wait_for_timeout(100)
    web.wait_idle()
    expect(web.assistant()).to_contain_text("Last.")
    final = web.page.evaluate(BLOCK_LAYOUT)
    for layout in [*seen, final]:
        assert layout["in_done"] == layout["blocks"] - 1, layout
        assert layout["last_after_done"], layout
        contain = set(str(layout["contain"]).split())
        assert contain & {"content", "strict"} or {"layout", "paint"} <= contain, layout
    assert [layout["blocks"] for layout in seen] == [3, 3, 3], seen
    assert seen[-1]["last_elements"] == 1, seen  # the growing block kept its element
    assert final["blocks"] == 4, final
    web.assert_no_console_errors()


# Count, per animation frame, the DOM changes (MutationObserver callbacks) inside answers' Markdown.
COUNT_RENDERS_PER_FRAME = """() => {
    window.frameNumber = 0;
    window.rendersPerFrame = {};
    const tick = () => { window.frameNumber += 1; requestAnimationFrame(tick); };
    requestAnimationFrame(tick);
    const inAnswer = (node) => (node.closest ? node : node.parentElement)?.closest(".bubble.assistant .markdown");
    const frames = window.rendersPerFrame;
    new MutationObserver((records) => {
        // Drawings of the stream only: the one that shows message.complete (at once, as every event
        // other than a delta) ends the answer's streaming state.
        if (!document.querySelector(".bubble.assistant.streaming")) return;
        if (records.some((r) => inAnswer(r.target))) frames[window.frameNumber] = (frames[window.frameNumber] || 0) + 1;
    }).observe(document.querySelector(".transcript"), { subtree: true, childList: true, characterData: true });
}"""


def test_a_fast_stream_renders_at_most_once_per_animation_frame(web: WebPage) -> None:
    web.sign_in().new_chat()
    web.page.evaluate(COUNT_RENDERS_PER_FRAME)
    text = " ".join(f"w{n}" for n in range(150))
    web.send(text)  # "You said: …", one word per delta, 10 ms apart: often two deltas to a frame
    web.wait_idle()
    expect(web.assistant()).to_have_text(f"You said: {text}")
    renders: dict[str, int] = web.page.evaluate("window.rendersPerFrame")
    assert len(renders) >= 10  # the answer was drawn as it streamed, not only at the end
    assert max(renders.values()) == 1, {frame: n for frame, n in renders.items() if n > 1}
    web.assert_no_console_errors()
