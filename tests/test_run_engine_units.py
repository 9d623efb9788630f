"""The run engine's parts without sockets or Hermes: phases, decisions, the translation, recovery, kept turns."""

import asyncio
import itertools
from collections.abc import AsyncIterator, Sequence
from typing import Any, Literal

import pytest
from msgspec import UNSET

import hermes_client as hc
from pheby.protocol import frames as ev
from pheby.runs import translate as tr
from pheby.runs.decisions import Answer, Decision, Decisions
from pheby.runs.phase import ALLOWED, RunPhase
from pheby.runs.reader import (
    LOST_ERROR,
    Contact,
    Outcome,
    ReadNow,
    RecoveryTiming,
    ReplayLost,
    pause_while_held,
    resumed_event_batches,
    settle,
    watch_stream,
)
from pheby.runs.settled import SettledTurn, SettledTurns

pytestmark = pytest.mark.anyio

# --- phases --------------------------------------------------------------------------------------------


def test_a_cancelling_run_never_falls_back_to_running() -> None:
    phase = RunPhase()
    assert phase.move("running")
    assert phase.move("awaiting_decision")
    assert phase.move("cancelling")
    assert not phase.move("running")  # an approval resolving now changes nothing
    assert not phase.move("awaiting_decision")
    assert phase.wire_status(approvals_pending=True, clarifications_pending=False) == "cancelling"
    assert phase.move("finished")
    assert phase.finished
    assert not any(phase.move(target) for target in ("starting", "running", "cancelling"))


def test_the_phase_table_ends_everywhere_and_only_in_finished() -> None:
    assert all("finished" in targets for phase, targets in ALLOWED.items() if phase != "finished")
    assert ALLOWED["finished"] == frozenset()
    assert RunPhase().current == "starting"


def test_wire_status_follows_the_pending_decision() -> None:
    phase = RunPhase()
    phase.move("running")
    assert phase.wire_status(approvals_pending=False, clarifications_pending=False) == "running"
    phase.move("awaiting_decision")
    assert phase.wire_status(approvals_pending=True, clarifications_pending=True) == "waiting_for_approval"
    assert phase.wire_status(approvals_pending=False, clarifications_pending=True) == "waiting_for_clarification"


# --- decisions -----------------------------------------------------------------------------------------


def approval(approval_id: str = "a1") -> Decision:
    request = ev.ApprovalRequest(
        approval_id=approval_id, session_key="k", conversation_id="c", run_id="r", command="ls", description="",
        choices=["once", "deny"],
    )  # fmt: skip
    return Decision(approval_id, request, pattern_keys=["p"])


def clarification(clarify_id: str = "q1", held_id: str = "h1") -> Decision:
    request = ev.ClarifyRequest(
        clarify_id=clarify_id, session_key="k", conversation_id="c", run_id="r", question="?", choices=None
    )
    return Decision(clarify_id, request, held_id=held_id)


def test_one_answer_at_a_time_and_an_answer_not_taken_waits_again() -> None:
    decisions = Decisions()
    decisions.ask(approval())
    assert decisions.begin_answer("a1", "clarify", Answer("x", UNSET)) is None  # not a clarification
    assert decisions.begin_answer("a1", "approval", Answer("once", "r1")) is not None
    assert decisions.begin_answer("a1", "approval", Answer("deny", "r2")) is None  # another answer is on its way
    decisions.answer_not_taken("a1")
    assert decisions.begin_answer("a1", "approval", Answer("deny", "r2")) is not None
    resolved = decisions.resolve("a1", Answer("deny", "r2"))
    assert isinstance(resolved, ev.ApprovalResolved)
    assert (resolved.choice, resolved.accepted, resolved.request_id) == ("deny", True, "r2")
    assert decisions.resolve("a1", Answer("deny", "r2")) is None  # once only
    assert not decisions


def test_at_the_end_answers_on_their_way_count_and_the_rest_expire() -> None:
    decisions = Decisions()
    decisions.ask(approval("a1"))
    decisions.ask(approval("a2"))
    decisions.ask(clarification("q1"))
    decisions.ask(clarification("q2", "h2"))
    decisions.begin_answer("a1", "approval", Answer("once", "r1"))
    decisions.begin_answer("q1", "clarify", Answer("staging", "r3"))
    settled = {(type(e).__name__, e.accepted, getattr(e, "choice", None), e.request_id) for e in decisions.settle_all()}
    assert settled == {
        ("ApprovalResolved", True, "once", "r1"),
        ("ApprovalResolved", False, "deny", UNSET),
        ("ClarifyResolved", True, None, "r3"),
        ("ClarifyResolved", False, None, UNSET),
    }
    assert not decisions


def test_an_expired_clarification_says_so() -> None:
    decisions = Decisions()
    decisions.ask(clarification())
    expired = decisions.expire("q1")
    assert isinstance(expired, ev.ClarifyResolved)
    assert (expired.accepted, expired.expired) == (False, True)


# --- the translation -----------------------------------------------------------------------------------


def view(**kwargs: Any) -> tr.RunView:
    ids = itertools.count(1)
    return tr.RunView("run", "conv", "draft-run", mint=lambda: f"t-{next(ids)}", **kwargs)


def emitted(outputs: list[tr.Output]) -> list[ev.Event]:
    return [o.event for o in outputs if isinstance(o, tr.Emit)]


def delta(text: str) -> hc.MessageDelta:
    return hc.MessageDelta(run_id="h", timestamp=0.0, delta=text)


def test_deltas_become_the_visible_draft_without_media_tags() -> None:
    state = view()
    [first] = emitted(tr.translate(state, delta("Here it is.\nMEDIA:/srv/x.png")))
    assert isinstance(first, ev.MessageDelta)
    assert "MEDIA:" not in first.text
    assert "/srv" not in first.text
    assert tr.translate(state, hc.ReasoningAvailable(run_id="h", timestamp=0.0, text="Here")) == []


def test_completion_strips_media_and_hands_the_paths_on() -> None:
    state = view()
    [complete] = tr.translate(state, hc.RunCompleted(run_id="h", timestamp=0.0, output="Done.\nMEDIA:/srv/a.png"))
    assert isinstance(complete, tr.Complete)
    assert complete.message.text == "Done."
    assert complete.paths == ["/srv/a.png"]
    assert state.message_completed
    assert state.draft == "Done."


def test_tool_calls_without_ids_pair_by_name_and_args_are_redacted() -> None:
    state = view()
    started = hc.ToolStarted(run_id="h", timestamp=0.0, tool="web_search", preview="cats",
                             args={"query": "cats", "api_key": "sk-secret-1234"})  # fmt: skip
    [running] = emitted(tr.translate(state, started))
    assert isinstance(running, ev.ToolEvent)
    assert (running.tool_call_id, running.status, running.args_redacted) == (
        "t-1", "running", {"query": "cats", "api_key": "[redacted]"},
    )  # fmt: skip
    message = "boom at /srv/hermes/tool.py calling https://internal.example.com/x"
    ended = hc.ToolCompleted(
        run_id="h", timestamp=0.0, tool="web_search", duration=0.25, error=True, error_message=message
    )
    outputs = tr.translate(state, ended)
    [failed] = emitted(outputs)
    assert isinstance(failed, ev.ToolEvent)
    assert (failed.tool_call_id, failed.status, failed.duration_ms) == ("t-1", "failed", 250)
    assert isinstance(failed.error, str)
    assert "/srv" not in failed.error
    assert "example.com" not in failed.error
    assert tr.ExpireUnansweredApprovals() in outputs


def test_a_call_failing_while_cancelling_was_interrupted() -> None:
    state = view(cancelling=True)
    tr.translate(state, hc.ToolStarted(run_id="h", timestamp=0.0, tool="terminal"))
    [ended] = emitted(tr.translate(state, hc.ToolCompleted(run_id="h", timestamp=0.0, tool="terminal",
                                                             duration=1.0, error=True)))  # fmt: skip
    assert isinstance(ended, ev.ToolEvent)
    assert ended.status == "cancelled"


def test_with_the_plugin_tool_events_go_to_the_merge() -> None:
    state = view(merged=True)
    [out] = tr.translate(state, hc.ToolStarted(run_id="h", timestamp=0.0, tool="terminal"))
    assert out == tr.StreamTool(tr.ToolBegan("terminal", None, UNSET, None))
    assert state.tools == {}


def test_running_tools_end_cancelled_with_the_run() -> None:
    state = view()
    tr.translate(state, hc.ToolStarted(run_id="h", timestamp=0.0, tool="terminal"))
    [ended] = emitted(tr.end_running_tools(state))
    assert isinstance(ended, ev.ToolEvent)
    assert ended.status == "cancelled"
    assert tr.end_running_tools(state) == []


def test_terminal_events_finish_and_failures_are_scrubbed() -> None:
    failed = tr.translate(
        view(), hc.RunFailed(run_id="h", timestamp=0.0, error="401 from https://api.x.com key sk-abcdef123456")
    )
    [finish] = failed
    assert isinstance(finish, tr.Finish)
    assert finish.status == "failed"
    assert finish.error is not None
    assert "https" not in finish.error
    assert "sk-abcdef" not in finish.error
    assert tr.translate(view(), hc.RunCancelled(run_id="h", timestamp=0.0)) == [tr.Finish("cancelled")]


def test_questions_become_effects() -> None:
    state = view()
    clarify = hc.ClarifyRequest(run_id="h", timestamp=0.0, clarify_id="h1", question="Which?", choices=["a", "b"])
    assert tr.translate(state, clarify) == [tr.AskClarify("h1", "Which?", ["a", "b"])]
    assert tr.translate(state, hc.ClarifyRetired(run_id="h", timestamp=0.0, clarify_id="h1")) == [
        tr.RetireClarify("h1")
    ]


# --- recovery of a lost stream ------------------------------------------------------------------------


class StatusClient:
    """`get_run` answers from a script: a status word, or an exception to raise."""

    def __init__(self, script: Sequence[str | Exception], clock: list[float]) -> None:
        self.script = script
        self.calls = 0
        self.clock = clock

    async def get_run(self, run_id: str) -> hc.RunStatus:
        step = self.script[min(self.calls, len(self.script) - 1)]
        self.calls += 1
        if isinstance(step, Exception):
            raise step
        output = "final text" if step == "completed" else UNSET
        error = "it broke" if step == "failed" else UNSET
        return hc.RunStatus(run_id=run_id, status=step, output=output, error=error)


async def run_settle(script: Sequence[str | Exception]) -> tuple[Outcome, StatusClient, list[float]]:
    now = [0.0]
    client = StatusClient(script, now)
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    outcome = await settle(client, "h", RecoveryTiming(), clock=lambda: now[0], sleep=sleep)  # type: ignore[arg-type]
    return outcome, client, sleeps


async def test_recovery_asks_with_backoff_until_the_run_ends() -> None:
    outcome, client, sleeps = await run_settle(["running"] * 6 + ["completed"])
    assert outcome == Outcome("completed", "final text")
    assert sleeps == [0.25, 0.5, 1.0, 2.0, 2.0, 2.0]
    assert client.calls == 7


async def test_recovery_reports_hermes_status() -> None:
    assert (await run_settle(["running", "cancelled"]))[0] == Outcome("cancelled")
    assert (await run_settle(["failed"]))[0] == Outcome("failed", error="it broke")


async def test_unreachable_for_five_seconds_in_a_row_is_lost() -> None:
    down = hc.HermesUnavailable("cannot reach Hermes")
    outcome, _, sleeps = await run_settle([down, down, "running", *([down] * 20)])
    assert outcome == Outcome("lost")
    assert 5.0 <= sum(sleeps) <= 10.0


async def test_a_run_hermes_forgot_is_lost_at_once() -> None:
    outcome, client, _ = await run_settle([hc.HermesNotFound("no such run", status=404)])
    assert outcome == Outcome("lost")
    assert client.calls == 1
    assert "Lost contact with Hermes" in LOST_ERROR


async def test_a_quiet_stream_is_watched_and_a_silent_hermes_noticed() -> None:
    now = [0.0]
    down = hc.HermesUnavailable("cannot reach Hermes")
    client = StatusClient(["running"] * 10 + [down] * 20, now)

    async def sleep(seconds: float) -> None:
        now[0] += seconds

    def quiet_since() -> float | None:
        return 0.0  # the reader has waited for an event since the start

    gone = await watch_stream(client, "h", quiet_since, RecoveryTiming(), clock=lambda: now[0], sleep=sleep)  # type: ignore[arg-type]
    assert gone is True
    last_answer = 11.0  # the 10th status request, at t = 2 + 9 s
    assert 5.0 <= now[0] - last_answer <= 7.0


async def test_a_quiet_stream_of_a_run_hermes_says_ended_is_left_for_its_status() -> None:
    """0.19.0 after a restart: a second reader of a run's stream gets nothing once the first, dead, one took the
    next event, though Hermes says the run completed. The watch ends on that word, not only on silence."""
    now = [0.0]
    client = StatusClient(["waiting_for_approval"] * 3 + ["completed"], now)

    async def sleep(seconds: float) -> None:
        now[0] += seconds

    gone = await watch_stream(client, "h", lambda: 0.0, RecoveryTiming(), clock=lambda: now[0], sleep=sleep)  # type: ignore[arg-type]
    assert gone is False
    assert client.calls == 4


async def test_a_busy_stream_is_left_alone() -> None:
    now = [0.0]
    client = StatusClient([hc.HermesUnavailable("down")], now)
    sleeps = 0

    async def sleep(seconds: float) -> None:
        nonlocal sleeps
        sleeps += 1
        now[0] += seconds
        if sleeps > 30:
            raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await watch_stream(client, "h", lambda: None, RecoveryTiming(), clock=lambda: now[0], sleep=sleep)  # type: ignore[arg-type]
    assert client.calls == 0


# --- finished turns kept for snapshots ----------------------------------------------------------------


def shown(*texts: tuple[Literal["user", "assistant"], str]) -> list[ev.HistoryMessage]:
    return [ev.HistoryMessage(message_id=f"m{i + 1}", role=r, text=t, ts=None) for i, (r, t) in enumerate(texts)]


def turn(run_id: str, user: str, answer: str, stored_before: int = 0) -> SettledTurn:
    return SettledTurn(run_id, f"user-{run_id}", f"draft-{run_id}", user, answer, stored_before, finished_at=0.0)


def test_a_stale_transcript_gets_the_finished_turns_it_lacks_in_order() -> None:
    kept = SettledTurns(clock=lambda: 0.0)
    kept.add("c", turn("r1", "hi", "You said: hi"))
    kept.add("c", turn("r2", "hi", "You said: hi", stored_before=2))
    stale = shown(("user", "hi"), ("assistant", "You said: hi"))  # holds r1 only
    merged = kept.merged("c", stale)
    assert [(m.message_id, m.text) for m in merged] == [
        ("m1", "hi"), ("m2", "You said: hi"), ("user-r2", "hi"), ("draft-r2", "You said: hi"),
    ]  # fmt: skip
    fresh = shown(("user", "hi"), ("assistant", "You said: hi"), ("user", "hi"), ("assistant", "You said: hi"))
    assert kept.merged("c", fresh) == fresh  # no duplicates


def test_a_stored_turn_is_kept_while_a_read_that_began_before_is_under_way() -> None:
    kept = SettledTurns(clock=lambda: 0.0)
    kept.add("c", turn("r1", "hi", "You said: hi"))
    with kept.reading("c"):
        kept.stored("c", "r1", "m1", "m2")
        assert len(kept) == 1  # this read may predate the turn's storage
        assert [m.message_id for m in kept.merged("c", [])] == ["m1", "m2"]
    assert len(kept) == 0
    with kept.reading("c"):
        assert kept.merged("c", []) == []


def test_kept_turns_are_bounded() -> None:
    now = [0.0]
    kept = SettledTurns(per_conversation=3, max_age=10.0, clock=lambda: now[0])
    for i in range(5):
        kept.add("c", turn(f"r{i}", "q", "a"))
    assert len(kept) == 3
    now[0] = 11.0
    kept.merged("c", [])
    assert len(kept) == 0


def test_turns_of_conversations_nobody_opens_are_bounded_in_all() -> None:
    now = [0.0]
    kept = SettledTurns(total=4, max_age=10.0, clock=lambda: now[0])
    for i in range(6):
        kept.add(f"c{i}", turn(f"r{i}", "q", "a"))
    assert len(kept) == 4
    assert kept.merged("c0", []) == []  # the stalest went first
    now[0] = 20.0
    kept.add("c9", SettledTurn("r9", "user-r9", "draft-r9", "q", "a", 0, finished_at=20.0))
    assert len(kept) == 1  # the others grew too old


async def test_recovery_counts_an_interrupted_run_as_failed() -> None:
    """0.22-era: a gateway that shut down under the run reports it `interrupted`."""
    outcome, _, _ = await run_settle(["running", "interrupted"])
    assert outcome.status == "failed"


# --- resumption of a numbered stream --------------------------------------------------------------------


class StreamsClient:
    """`run_event_batches` plays one script per subscription: events (each a read of its own, or a list:
    one read's), then (optionally) an exception."""

    def __init__(
        self, streams: Sequence[Sequence[hc.RunEvent | list[hc.RunEvent] | Exception]], numbered: bool | None = True
    ) -> None:
        self.streams = list(streams)
        self.asked: list[int | str | None] = []  # the last_event_id of each subscription
        self.stream_numbered = numbered

    async def run_event_batches(
        self, run_id: str, last_event_id: int | str | None = None, *, read_pause: hc.ReadPause | None = None
    ) -> AsyncIterator[list[hc.RunEvent]]:
        self.asked.append(last_event_id)
        for step in self.streams.pop(0) if self.streams else [hc.HermesUnavailable("no more streams")]:
            if isinstance(step, Exception):
                raise step
            yield step if isinstance(step, list) else [step]


def numbered(text: str, seq: int | None) -> hc.MessageDelta:
    return hc.MessageDelta(run_id="h", timestamp=0.0, delta=text, seq=UNSET if seq is None else seq)


async def resumed(client: StreamsClient, tries: int = 5) -> tuple[list[hc.RunEvent], list[float], Exception | None]:
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    events: list[hc.RunEvent] = []
    try:
        stream = resumed_event_batches(client, "h", RecoveryTiming(resume_tries=tries), sleep=sleep)  # type: ignore[arg-type]
        async for batch in stream:
            assert batch, "an empty batch"
            events.extend(batch)
    except hc.HermesError as exc:
        return events, sleeps, exc
    return events, sleeps, None


BROKE = hc.HermesUnavailable("the run event stream broke (ReadError)")


async def test_a_broken_numbered_stream_is_reopened_after_the_last_seq_and_repeats_are_dropped() -> None:
    done = hc.RunCompleted(run_id="h", timestamp=0.0, output="abcd", seq=4)
    client = StreamsClient(
        [
            [numbered("a", 0), numbered("b", 1), BROKE],
            [BROKE],  # a reopening that breaks at once
            # a gateway replaying one too many, in one read with a new one
            [[numbered("b", 1), numbered("c", 2)], numbered("d", 3), done],
        ]
    )
    events, sleeps, error = await resumed(client)
    assert error is None
    assert [e.seq for e in events] == [0, 1, 2, 3, 4]
    assert "".join(e.delta for e in events if isinstance(e, hc.MessageDelta)) == "abcd"
    assert client.asked == [None, 1, 1]
    assert sleeps == [0.25, 0.5]


async def test_a_stream_that_cannot_be_resumed_without_loss_gives_way_to_the_fallback() -> None:
    truncated = hc.ReplayTruncated(run_id="h", timestamp=0.0, oldest_retained_seq=5, requested_seq=1)
    events, _, error = await resumed(
        StreamsClient([[numbered("a", 0), numbered("b", 1), BROKE], [truncated, numbered("f", 5)]])
    )
    assert isinstance(error, ReplayLost)
    assert [e.seq for e in events] == [0, 1]
    # 0.19.0: events carry no seq, the stream can't be resumed: the break is raised at once.
    plain = StreamsClient([[numbered("a", None), BROKE]], numbered=False)
    events, sleeps, error = await resumed(plain)
    assert error is BROKE
    assert (len(events), sleeps, plain.asked) == (1, [], [None])
    # Tries used up (no event in between): raised after the last one.
    stubborn = StreamsClient([[numbered("a", 0), BROKE], *([[BROKE]] * 5)])
    _, sleeps, error = await resumed(stubborn, tries=3)
    assert error is BROKE
    assert sleeps == [0.25, 0.5, 1.0]
    assert stubborn.asked == [None, 0, 0, 0]


async def test_a_run_is_lost_five_seconds_after_its_stream_first_failed_however_that_time_was_spent() -> None:
    """Through a proxy a dead Hermes looks like a reopening that connects and breaks at once: the tries to
    resume count toward the same `unreachable_for` window as the status requests that follow."""
    now = [0.0]

    async def sleep(seconds: float) -> None:
        now[0] += seconds

    timing = RecoveryTiming()
    contact = Contact(clock=lambda: now[0])
    client = StreamsClient([[numbered("a", 0), BROKE], *([[BROKE]] * 10)])
    with pytest.raises(hc.HermesUnavailable):
        async for _ in resumed_event_batches(client, "h", timing, contact=contact, sleep=sleep):  # type: ignore[arg-type]
            pass
    broke_at = 0.0  # the first failure: the stream's break, before any sleep
    status = StatusClient([hc.HermesUnavailable("cannot reach Hermes")], now)
    outcome = await settle(status, "h", timing, contact=contact, clock=lambda: now[0], sleep=sleep)  # type: ignore[arg-type]
    assert outcome == Outcome("lost")
    assert now[0] - broke_at <= timing.unreachable_for + timing.max_delay


# --- the reader's pause while the run's text is held back ------------------------------------------------


async def test_the_reader_waits_until_just_before_the_window_ends_then_sends_the_held_text_itself() -> None:
    waits: list[float] = []
    sends: list[float] = []  # when the held text was sent: at what `held_for` answered

    class RecordingReadNow(ReadNow):
        async def sleep(self, seconds: float) -> None:
            waits.append(seconds)  # no real waiting

    held: list[float] = []  # what `held_for` answers, in turn
    pause = pause_while_held(lambda: held.pop(0), lambda: sends.append(held[0]), RecordingReadNow(), lead=0.005)

    held[:] = [0.0]
    await pause()
    assert waits == []
    assert sends == []
    held[:] = [0.08]
    await pause()
    assert waits == [pytest.approx(0.075)]
    assert sends == []
    waits.clear()
    held[:] = [0.004, 0.104]  # read: the text goes out now, and the next window ends one window on
    await pause()
    assert sends == [0.104]
    assert waits == [pytest.approx(0.099)]  # one wake-up a window: the next just before that one ends
    waits.clear()
    sends.clear()
    held[:] = [0.004, 0.004, 0.0]  # nothing was held (the window's end did not move): it ends quiet
    await pause()
    assert waits == [pytest.approx(0.004)]  # ... and the reader reads at once after it
    assert held == []


async def test_a_cancel_ends_the_readers_pause_at_once() -> None:
    read_now = ReadNow()
    pause = asyncio.ensure_future(pause_while_held(lambda: 3600.0, lambda: None, read_now)())
    await asyncio.sleep(0)
    assert not pause.done()  # waiting for text held back for an hour
    read_now.set()
    await asyncio.wait_for(pause, timeout=10)
    await asyncio.wait_for(pause_while_held(lambda: 3600.0, lambda: None, read_now)(), timeout=10)  # never again


async def test_a_pause_that_is_cancelled_leaves_nothing_behind() -> None:
    read_now = ReadNow()
    pause = asyncio.ensure_future(read_now.sleep(3600.0))
    await asyncio.sleep(0)
    pause.cancel()  # the reader's task cancelled mid-pause (a cancel that gave up waiting, a shutdown)
    with pytest.raises(asyncio.CancelledError):
        await pause
    read_now.set()  # nothing sleeping: no error
    assert read_now.is_set


async def test_a_resumed_stream_hands_the_pause_to_every_subscription() -> None:
    pauses: list[hc.ReadPause | None] = []

    class PauseRecordingClient(StreamsClient):
        async def run_event_batches(
            self, run_id: str, last_event_id: int | str | None = None, *, read_pause: hc.ReadPause | None = None
        ) -> AsyncIterator[list[hc.RunEvent]]:
            pauses.append(read_pause)
            async for batch in super().run_event_batches(run_id, last_event_id):
                yield batch

    async def pause() -> None:
        return None

    done = hc.RunCompleted(run_id="h", timestamp=0.0, output="ab", seq=2)
    client = PauseRecordingClient([[numbered("a", 0), BROKE], [numbered("b", 1), done]])

    async def no_sleep(seconds: float) -> None:
        return None

    stream = resumed_event_batches(client, "h", sleep=no_sleep, read_pause=pause)  # type: ignore[arg-type]
    got = [event async for batch in stream for event in batch]
    assert [e.seq for e in got] == [0, 1, 2]
    assert pauses == [pause, pause]  # the resumed stream waits the same way


# --- one read's deltas, joined ----------------------------------------------------------------------------


def test_a_reads_consecutive_deltas_are_joined_and_the_draft_ends_as_delta_by_delta() -> None:
    def text(piece: str, seq: int) -> hc.MessageDelta:
        return hc.MessageDelta(run_id="h", timestamp=float(seq), delta=piece, seq=seq)

    tool = hc.ToolStarted(run_id="h", timestamp=3.0, tool="terminal", seq=3)
    # A MEDIA: tag cut across deltas, a tool call between two runs of text.
    read: list[hc.RunEvent] = [
        text("Here ", 0),
        text("it is MED", 1),
        text("IA:/tmp/a.png\n", 2),
        tool,
        text("Done", 4),
    ]
    joined = tr.joined_deltas(read)
    assert [type(e) for e in joined] == [hc.MessageDelta, hc.ToolStarted, hc.MessageDelta]
    first = joined[0]
    assert isinstance(first, hc.MessageDelta)
    assert (first.delta, first.seq, first.timestamp) == ("Here it is MEDIA:/tmp/a.png\n", 2, 2.0)  # the last's
    assert joined[1] is tool
    assert joined[2] is read[4]
    assert tr.joined_deltas(read[:1]) == read[:1]

    def drafts(events: list[hc.RunEvent]) -> list[str]:
        view = tr.RunView(run_id="r", conversation_id="c", message_id="m")
        shown = []
        for event in events:
            for output in tr.translate(view, event):
                if isinstance(output, tr.Emit) and isinstance(output.event, ev.MessageDelta):
                    shown.append(output.event.text)
        return shown

    # One broadcast per run of text, not one per delta; and the client is shown the same draft in the end,
    # before the tool call as after it.
    one_by_one, at_once = drafts(read), drafts(joined)
    assert len(at_once) <= 2 < len(one_by_one)
    assert at_once[-1] == one_by_one[-1]
    assert drafts(read[:3])[-1] == drafts(tr.joined_deltas(read[:3]))[-1]
