"""Unit tests of the pieces under the WebSocket: redaction, MEDIA: tags, paging, fan-out, cancel."""

import asyncio
import json
import random
from types import SimpleNamespace
from typing import Any, cast

import msgspec
import pytest

import hermes_client as hc
from handlers.ws import run_cancel
from handlers.ws.support.context import WsContext
from handlers.ws.support.registry import DECODER
from pheby.errors import NotFound, PhebyError, UpstreamFailure
from pheby.files.media_tags import GrowingDraft, media_paths, strip_media, visible_draft
from pheby.hermes.history import display_messages, history_messages, page, turn_message_ids
from pheby.protocol.frames import HistoryMessage, Pong
from pheby.protocol.hub import CLOSE_TRY_AGAIN_LATER, Connection, Hub
from pheby.redact import REDACTED, redact
from pheby.services import Services
from pheby.store.accounts import Account


def test_redaction_is_recursive_and_case_insensitive() -> None:
    args = {
        "query": "cats",
        "api_key": "sk-1",
        "Authorization": "Bearer x",
        "nested": {"clientSecret": "s", "list": [{"password": "p", "keep": 1}, {"X-Auth-Token": "t"}]},
        "Cookie": "c",
        "passwd": "p",
        "private_key": "k",
        "credentials": {"user": "u"},
        "keyword": "fine",
    }
    assert redact(args) == {
        "query": "cats",
        "api_key": REDACTED,
        "Authorization": REDACTED,
        "nested": {"clientSecret": REDACTED, "list": [{"password": REDACTED, "keep": 1}, {"X-Auth-Token": REDACTED}]},
        "Cookie": REDACTED,
        "passwd": REDACTED,
        "private_key": REDACTED,
        "credentials": REDACTED,
        "keyword": "fine",
    }


def test_media_tags_are_found_and_stripped() -> None:
    text = "Here is the chart.\nMEDIA:/tmp/out/chart.png\nAnd `MEDIA:/tmp/out/notes.md` too."
    assert media_paths(text) == ["/tmp/out/chart.png", "/tmp/out/notes.md"]
    assert strip_media(text) == "Here is the chart.\n\nAnd  too."
    assert "MEDIA" not in strip_media("MEDIA:/a.png")


@pytest.mark.parametrize(
    ("draft", "shown"),
    [
        ("Hello wor", "Hello wor"),
        ("Here it is: M", "Here it is:"),
        ("Here it is: MEDIA:/tmp/a", "Here it is:"),
        ("Here it is: MEDIA:/tmp/a.png and", "Here it is:  and"),
        ("Done.\nMEDIA:/tmp/a.png\n", "Done."),
    ],
)
def test_drafts_hold_back_streaming_tags(draft: str, shown: str) -> None:
    assert visible_draft(draft) == shown
    assert "MEDIA" not in visible_draft(draft)


_DELTA_PIECES = [" ", "\n", "\t", "`", '"', "'", "M", "ME", "EDI", "DIA", "A:", ":", "MEDIA:", "/tmp/a.png", "w", "x"]


def test_a_growing_draft_shows_what_visible_draft_shows_after_every_delta() -> None:
    rng = random.Random(14)  # fixed: the same 500 drafts every run
    for _ in range(500):
        deltas = ["".join(rng.choices(_DELTA_PIECES, k=rng.randint(0, 6))) for _ in range(rng.randint(0, 40))]
        draft = GrowingDraft()
        for delta in deltas:
            assert draft.add(delta) == visible_draft(draft.raw), deltas
        assert draft.raw == "".join(deltas)


def test_a_growing_draft_finds_a_tag_split_across_deltas() -> None:
    draft = GrowingDraft()
    shown = [draft.add(delta) for delta in ("Here: ME", "DI", "A:/tmp/a.png", " and", " more")]
    assert shown == [visible_draft(draft.raw[:n]) for n in (8, 10, 22, 26, 31)]
    assert shown[-1] == "Here:  and more"


def test_a_growing_draft_looks_past_a_long_run_of_quotes() -> None:
    draft = GrowingDraft()
    draft.add("see ")
    assert draft.add("'" * 40 + "MEDIA:/tmp/a") == visible_draft("see " + "'" * 40 + "MEDIA:/tmp/a") == "see"
    assert GrowingDraft().add("'" * 40 + "Mx") == ""  # a word starting with M is held back until it ends


def _messages(n: int) -> list[HistoryMessage]:
    return [HistoryMessage(message_id=f"m{i}", role="user", text=str(i), ts=None) for i in range(1, n + 1)]


def test_history_pages_newest_first_with_an_exclusive_cursor() -> None:
    messages = _messages(5)
    newest, more = page(messages, 2, None)
    assert [m.message_id for m in newest] == ["m4", "m5"]
    assert more
    earlier, more = page(messages, 2, "m4")
    assert [m.message_id for m in earlier] == ["m2", "m3"]
    assert more
    first, more = page(messages, 2, "m2")
    assert [m.message_id for m in first] == ["m1"]
    assert not more
    assert page(messages, 2, "m1") == ([], False)


def test_history_cursor_of_no_message_is_not_found() -> None:
    with pytest.raises(NotFound):
        page(_messages(5), 2, "m99")


@pytest.mark.anyio
async def test_slow_connection_is_closed_with_1013_without_delaying_others() -> None:
    stuck = asyncio.Event()
    closes: list[int] = []
    fast_frames: list[str] = []

    async def never_sends(_: str) -> None:
        await stuck.wait()

    async def fast_send(frame: str) -> None:
        fast_frames.append(frame)

    async def close(code: int, _: str) -> None:
        closes.append(code)

    hub = Hub()
    slow = Connection("acct", never_sends, close, max_frames=4)
    fast = Connection("acct", fast_send, close, max_frames=4)
    other = Connection("other", fast_send, close)
    for c in (slow, fast, other):
        hub.add(c)
        c.start()
    for _ in range(10):
        hub.broadcast("acct", Pong())
        await asyncio.sleep(0.01)
    assert slow.closed.is_set()
    assert closes == [CLOSE_TRY_AGAIN_LATER]
    assert len(fast_frames) == 10  # the other account got nothing; the fast one got everything
    stuck.set()
    for c in (slow, fast, other):
        await c.drain_and_stop()


class _SlowFailingRuns:
    """A run whose cancel fails only after a while, as when Hermes answers late that it can't stop it."""

    def __init__(self, failure: PhebyError) -> None:
        self.failure = failure

    def active(self, conversation_id: str) -> Any:
        return SimpleNamespace(run_id="run-1", account=SimpleNamespace(id="acct"))

    async def cancel(self, account_id: str, conversation_id: str, run_id: str) -> None:
        await asyncio.sleep(0.8)
        raise self.failure


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("failure", "code"),
    [(NotFound("The run can no longer be interrupted"), "not_found"), (UpstreamFailure("no"), "internal_error")],
)
async def test_a_late_cancel_failure_is_answered_with_the_request_id(failure: PhebyError, code: str) -> None:
    frames: list[str] = []

    async def send(frame: str) -> None:
        frames.append(frame)

    async def close(code: int, reason: str) -> None:
        pass

    background: set[asyncio.Task[Any]] = set()
    services = SimpleNamespace(runs=_SlowFailingRuns(failure), background=background.add)
    connection = Connection("acct", send, close)
    connection.start()
    ctx = WsContext(cast(Account, SimpleNamespace(id="acct")), cast(Services, services), connection)
    await run_cancel.handle(ctx, run_cancel.RunCancel(conversation_id="c1", run_id="run-1", request_id="cancel-1"))
    await asyncio.wait_for(asyncio.gather(*background), 5)
    await connection.drain_and_stop()
    errors = [json.loads(f) for f in frames]
    assert [(e["type"], e["error"]["code"], e["request_id"]) for e in errors] == [("error", code, "cancel-1")]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.parametrize(
    "frame",
    [
        {"type": "model.set", "model": "\u0000"},
        {"type": "model.set", "model": "x" * 257},
        {"type": "model.set", "model": "a\nb"},
        {"type": "model.set", "model": "gpt-4\n"},
        {"type": "model.set", "model": "ok", "provider": "\u007f"},
        {"type": "model.set", "model": ""},
    ],
)
def test_model_names_are_one_printable_line(frame: dict[str, str]) -> None:
    with pytest.raises(msgspec.ValidationError):
        DECODER.decode(msgspec.json.encode(frame))
    assert DECODER.decode(msgspec.json.encode({"type": "model.set", "model": "anthropic/claude-sonnet-4"}))


def test_compaction_summaries_are_not_shown_as_turns() -> None:
    summary = "[CONTEXT COMPACTION — REFERENCE ONLY] Earlier turns were compacted...\n## Active Task\nx"
    merged = (
        "[PRIOR CONTEXT — for reference only; not a new message]\nWhat about Friday?\n\n"
        "[END OF PRIOR CONTEXT — COMPACTION SUMMARY BELOW]\n\n" + summary + "\n\n--- END OF CONTEXT SUMMARY ---"
    )
    messages = [
        hc.SessionMessage(id=1, role="user", content=summary),
        hc.SessionMessage(id=2, role="user", content=merged),
        hc.SessionMessage(id=3, role="assistant", content="Friday works."),
    ]
    shown = display_messages(messages, {})
    assert [(m.message_id, m.role, m.text) for m in shown] == [
        ("m2", "user", "What about Friday?"),
        ("m3", "assistant", "Friday works."),
    ]


SUMMARY = "[CONTEXT COMPACTION — REFERENCE ONLY] Earlier turns were compacted into the summary below."


def stored(*rows: tuple[int, str, str]) -> list[hc.SessionMessage]:
    return [hc.SessionMessage(id=n, role=role, content=text) for n, role, text in rows]


def shown_as(messages: list[HistoryMessage]) -> list[tuple[str, str]]:
    return [(m.message_id, m.text) for m in messages]


def test_logged_messages_fill_in_what_compaction_hides() -> None:
    before = stored((1, "user", "hi"), (2, "assistant", "hello"), (3, "user", "yes"), (4, "assistant", "sure"))
    logged = history_messages(before, {}, [])
    assert history_messages(before, {}, logged) == logged  # nothing hidden: the transcript as it is
    # Compacted in place: a copy of the first message, the summary, copies of the last two, then a new
    # turn that says "yes" again: it is no copy and stays.
    after = stored(
        (5, "user", "hi"), (6, "user", SUMMARY), (7, "user", "yes"), (8, "assistant", "sure"),
        (9, "user", "yes"), (10, "assistant", "again"),
    )  # fmt: skip
    merged = history_messages(after, {}, logged)
    assert shown_as(merged) == [("m1", "hi"), ("m2", "hello"), ("m3", "yes"), ("m4", "sure"), ("m9", "yes"),
                                ("m10", "again")]  # fmt: skip

    # Logged as shown (copies left out), then compacted again: still every turn once.
    relogged = sorted({m.message_id: m for m in [*logged, *merged]}.values(), key=lambda m: m.number)
    twice = stored((11, "user", "hi"), (12, "user", SUMMARY), (13, "user", "yes"), (14, "assistant", "again"))
    assert shown_as(history_messages(twice, {}, relogged)) == shown_as(merged)


def test_a_turns_messages_are_found_after_where_it_started() -> None:
    messages = stored(
        (1, "user", "ok"), (2, "assistant", "first"), (3, "user", "ok"), (4, "assistant", ""),
        (5, "assistant", "MEDIA:/tmp/a.png"), (6, "assistant", "done"), (7, "user", "ok"), (8, "assistant", "next"),
    )  # fmt: skip
    shown = display_messages(messages, {})
    assert turn_message_ids(messages, shown, 2, "ok") == ("m3", "m6")  # not the next run's "ok", nor a MEDIA-only row
    assert turn_message_ids(messages, shown, 8, "ok") == (None, None)  # not stored: nothing is anchored


def test_a_turn_is_never_anchored_to_a_copy_hermes_made() -> None:
    messages = stored(
        (1, "user", "ok"), (2, "assistant", "first"),
        (3, "user", "ok"), (4, "user", SUMMARY),  # compacted during the run: a copy of the first message
        (5, "user", "ok"), (6, "assistant", "second"),  # the run's own turn
    )  # fmt: skip
    logged = history_messages(messages[:2], {}, [])
    listed = messages[2:]  # Hermes lists no archived message
    shown = history_messages(listed, {}, logged)
    assert shown_as(shown) == [("m1", "ok"), ("m2", "first"), ("m5", "ok"), ("m6", "second")]
    assert turn_message_ids(listed, shown, 2, "ok") == ("m5", "m6")
