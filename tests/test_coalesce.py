"""`pheby.protocol.coalesce.DeltaCoalescer` without sockets: a fake clock drives its windows."""

import asyncio
import heapq
import itertools
from collections.abc import Callable
from typing import Any, cast

import pytest

from pheby.protocol.coalesce import CoalescingHub, DeltaCoalescer
from pheby.protocol.frames import (
    ApprovalRequest,
    Event,
    MessageComplete,
    MessageDelta,
    RunFinished,
    ToolEvent,
)
from pheby.protocol.hub import Connection

WINDOW = 0.1


class _Handle:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeLoop:
    """Just `time()` and `call_later()`; `advance()` runs what falls due, in time order."""

    def __init__(self) -> None:
        self.now = 0.0
        self._timers: list[tuple[float, int, _Handle, Callable[..., None], tuple[Any, ...]]] = []
        self._order = itertools.count()

    def time(self) -> float:
        return self.now

    def call_later(self, delay: float, callback: Callable[..., None], *args: Any) -> _Handle:
        return self.call_at(self.now + delay, callback, *args)

    def call_at(self, when: float, callback: Callable[..., None], *args: Any) -> _Handle:
        handle = _Handle()
        heapq.heappush(self._timers, (when, next(self._order), handle, callback, args))
        return handle

    def advance(self, seconds: float) -> None:
        end = self.now + seconds
        while self._timers and self._timers[0][0] <= end:
            when, _, handle, callback, args = heapq.heappop(self._timers)
            self.now = when
            if not handle.cancelled:
                callback(*args)
        self.now = end

    def live_timers(self) -> int:
        return sum(1 for timer in self._timers if not timer[2].cancelled)


TS = "2026-12-01T00:00:00.000+00:00"  # fixed, so events made apart compare equal (ts is part of equality)


def delta(text: str, message_id: str = "m1", conversation_id: str = "c1") -> MessageDelta:
    return MessageDelta(conversation_id=conversation_id, message_id=message_id, text=text, ts=TS)


def tool_event(conversation_id: str = "c1") -> ToolEvent:
    return ToolEvent(
        conversation_id=conversation_id, run_id="r1", tool_call_id="t1", tool_name="web_search", status="running", ts=TS
    )


@pytest.fixture
def loop() -> FakeLoop:
    return FakeLoop()


@pytest.fixture
def sent() -> list[tuple[str, Event]]:
    return []


@pytest.fixture
def coalescer(loop: FakeLoop, sent: list[tuple[str, Event]]) -> DeltaCoalescer:
    return DeltaCoalescer(lambda account, event: sent.append((account, event)), WINDOW, cast(Any, loop))


def texts(sent: list[tuple[str, Event]]) -> list[str]:
    return [e.text if isinstance(e, MessageDelta) else type(e).__name__ for _, e in sent]


def test_the_first_delta_goes_out_at_once_then_one_per_window_with_the_newest_text(
    coalescer: DeltaCoalescer, loop: FakeLoop, sent: list[tuple[str, Event]]
) -> None:
    draft = ""
    for index in range(100):  # 1 s of deltas 10 ms apart
        draft += f"w{index} "
        coalescer.broadcast("a1", delta(draft))
        if index == 0:
            assert texts(sent) == ["w0 "]
        loop.advance(0.01)
    loop.advance(WINDOW)
    frames = texts(sent)
    assert len(frames) <= 1 + 1 / WINDOW + 1
    assert frames[-1] == draft  # the newest text, after the last window ends
    assert all(later.startswith(earlier) for earlier, later in itertools.pairwise(frames))
    loop.advance(WINDOW)
    assert coalescer.pending_messages() == 0
    assert loop.live_timers() == 0


def test_any_other_event_first_sends_the_pending_delta(
    coalescer: DeltaCoalescer, loop: FakeLoop, sent: list[tuple[str, Event]]
) -> None:
    approval = ApprovalRequest(
        approval_id="ap1",
        session_key="s",
        conversation_id="c1",
        run_id="r1",
        command="rm",
        description="d",
        choices=["once"],
    )
    coalescer.broadcast("a1", delta("one "))
    coalescer.broadcast("a1", delta("one two "))
    coalescer.broadcast("a1", tool_event())
    coalescer.broadcast("a1", delta("one two three "))
    coalescer.broadcast("a1", approval)
    coalescer.broadcast("a1", delta("one two three four "))
    coalescer.broadcast("a1", MessageComplete(conversation_id="c1", message_id="m1", text="one two three four"))
    assert texts(sent) == [
        "one ",
        "one two ",
        "ToolEvent",
        "one two three ",
        "ApprovalRequest",
        "one two three four ",
        "MessageComplete",
    ]
    assert coalescer.pending_messages() == 0
    assert loop.live_timers() == 0


def test_run_finished_clears_the_conversations_entries(
    coalescer: DeltaCoalescer, loop: FakeLoop, sent: list[tuple[str, Event]]
) -> None:
    coalescer.broadcast("a1", delta("a ", "m1", "c1"))
    coalescer.broadcast("a1", delta("b ", "m2", "c2"))
    coalescer.broadcast("a1", delta("a b ", "m1", "c1"))
    coalescer.broadcast("a1", RunFinished(conversation_id="c1", run_id="r1", status="cancelled"))
    assert texts(sent) == ["a ", "b ", "a b ", "RunFinished"]
    assert coalescer.pending_messages() == 1  # c2's run goes on
    loop.advance(WINDOW * 2)
    assert coalescer.pending_messages() == 0
    assert loop.live_timers() == 0


def test_accounts_are_apart_and_an_other_accounts_event_sends_nothing_early(
    coalescer: DeltaCoalescer, loop: FakeLoop, sent: list[tuple[str, Event]]
) -> None:
    coalescer.broadcast("a1", delta("x ", "m1"))
    coalescer.broadcast("a1", delta("x y ", "m1"))
    coalescer.broadcast("a2", tool_event("c9"))
    assert sent == [("a1", delta("x ", "m1")), ("a2", tool_event("c9"))]
    loop.advance(WINDOW)
    assert sent[-1] == ("a1", delta("x y ", "m1"))


def test_two_runs_of_one_account_each_get_their_own_window(
    coalescer: DeltaCoalescer, loop: FakeLoop, sent: list[tuple[str, Event]]
) -> None:
    coalescer.broadcast("a1", delta("a ", "m1", "c1"))
    coalescer.broadcast("a1", delta("b ", "m2", "c2"))  # m2's first text is not held back by m1's window
    assert texts(sent) == ["a ", "b "]


def test_window_zero_forwards_every_delta(sent: list[tuple[str, Event]]) -> None:
    coalescer = DeltaCoalescer(lambda account, event: sent.append((account, event)), 0)
    for text in ("a ", "a b ", "a b c "):
        coalescer.broadcast("a1", delta(text))
    assert texts(sent) == ["a ", "a b ", "a b c "]
    assert coalescer.pending_messages() == 0


def test_a_quiet_gap_longer_than_the_window_lets_the_next_delta_out_at_once(
    coalescer: DeltaCoalescer, loop: FakeLoop, sent: list[tuple[str, Event]]
) -> None:
    coalescer.broadcast("a1", delta("a "))
    loop.advance(WINDOW * 3)
    coalescer.broadcast("a1", delta("a b "))
    assert texts(sent) == ["a ", "a b "]


@pytest.mark.anyio
async def test_coalescing_hub_with_a_real_loop_and_connection() -> None:
    frames: list[str] = []

    async def send_text(frame: str) -> None:
        frames.append(frame)

    async def close(code: int, reason: str) -> None:
        return None

    hub = CoalescingHub(delta_window_seconds=0.05)
    connection = Connection("a1", send_text, close)
    connection.start()
    hub.add(connection)
    hub.broadcast("a1", delta("a "))
    hub.broadcast("a1", delta("a b "))
    hub.broadcast("a1", delta("a b c "))
    await asyncio.sleep(0.2)
    await connection.drain_and_stop()
    assert len(frames) == 2
    assert '"a b c "' in frames[-1]
    assert hub.coalescer.pending_messages() == 0


# --- how long a message's text is held back (what its run's reader waits for) ------------------------


def test_held_for_is_the_time_left_in_the_messages_window_else_none(
    coalescer: DeltaCoalescer, loop: FakeLoop, sent: list[tuple[str, Event]]
) -> None:
    assert coalescer.held_for("m1") is None  # before the first text: it would go out at once
    coalescer.broadcast("a1", delta("one "))
    assert coalescer.held_for("m1") == pytest.approx(WINDOW)  # sent at once; the next waits for the window
    loop.advance(0.03)
    coalescer.broadcast("a1", delta("one two "))
    assert coalescer.held_for("m1") == pytest.approx(WINDOW - 0.03)
    assert coalescer.held_for("m2") is None  # another message's window is its own
    loop.advance(WINDOW - 0.03)  # the window ends: the delta goes out and a new window starts
    assert texts(sent) == ["one ", "one two "]
    assert coalescer.held_for("m1") == pytest.approx(WINDOW)
    loop.advance(0.05)
    coalescer.broadcast("a1", delta("one two three "))
    coalescer.broadcast("a1", tool_event())  # another event sends it first, and starts a new window
    assert texts(sent)[-2:] == ["one two three ", "ToolEvent"]
    assert coalescer.held_for("m1") == pytest.approx(WINDOW)
    loop.advance(WINDOW)  # a window with nothing new: the next text would go out at once
    assert coalescer.held_for("m1") is None


def test_a_held_delta_sent_just_before_its_window_ends_keeps_the_pace_of_one_a_window(
    coalescer: DeltaCoalescer, loop: FakeLoop, sent: list[tuple[str, Event]]
) -> None:
    coalescer.broadcast("a1", delta("one "))
    coalescer.send_window_early("m1")  # nothing held: nothing sent, the window unchanged
    assert texts(sent) == ["one "]
    assert coalescer.held_for("m1") == pytest.approx(WINDOW)
    loop.advance(WINDOW - 0.004)
    coalescer.broadcast("a1", delta("one two "))
    coalescer.send_window_early("m1")  # its reader has read the window: out now, 4 ms early
    assert texts(sent) == ["one ", "one two "]
    assert coalescer.held_for("m1") == pytest.approx(WINDOW + 0.004)  # the next ends one window after this one
    loop.advance(0.004)
    assert texts(sent) == ["one ", "one two "]  # nothing more at the old window's end
    for _ in range(20):  # 2 s more, each window's text sent early: still one a window
        loop.advance(WINDOW - 0.004)
        coalescer.broadcast("a1", delta(f"{texts(sent)[-1]}x "))
        coalescer.send_window_early("m1")
        loop.advance(0.004)
    assert len(sent) == 22
    loop.advance(WINDOW)  # a quiet window ends the message's entry, as always
    assert coalescer.pending_messages() == 0
    assert loop.live_timers() == 0


def test_held_for_is_none_at_window_zero(sent: list[tuple[str, Event]], loop: FakeLoop) -> None:
    coalescer = DeltaCoalescer(lambda account, event: sent.append((account, event)), 0, cast(Any, loop))
    for text in ("one ", "one two "):
        coalescer.broadcast("a1", delta(text))
        assert coalescer.held_for("m1") is None
    assert texts(sent) == ["one ", "one two "]
