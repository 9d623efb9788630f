"""The run-recovery scenarios, with a TCP proxy (tests/tcp_proxy.py) between the server and Hermes.

Shared by ``test_run_recovery.py`` (the demo Hermes) and ``test_run_recovery_real_hermes.py`` (the
real 0.19.0 and 0.22-era gateways); the Hermes-specific parts (prompts, how to crash and revive
Hermes) come in as arguments.

- :func:`stream_cut_scenario`: the run's event stream is cut mid-run while Hermes goes on running it.
  The conversation stays busy until Hermes's run really ends (no `run.finished` before, a second
  `chat.send` gets `run_active`, `conversation.open` shows the run active with its draft so far,
  Hermes runs one run only); then the client gets the run's real final text and `completed`, once
  each, and the conversation has no run any more. With ``resumed`` (a gateway that replays its
  numbered events), the server picks the stream back up: deltas keep coming after the cut, each
  one's text extends the previous one's (nothing lost or repeated) and the last is the final text.
- :func:`killed_hermes_scenario`: Hermes dies mid-run: `run.finished` `failed` within 10 s of the
  kill (optionally with a given error, and a `chat.send` while Hermes is down is refused); once
  Hermes is back, the same conversation runs a turn normally. With ``cut_first``, the stream is cut
  before the kill: Hermes dies while the server waits on a run it can't stream.
"""

import asyncio
import contextlib
import itertools
import json
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Final

from hermes_client import HermesClient
from tests.tcp_proxy import TcpProxy
from tests.ws_client import Frame, PhebyClient

__all__ = [
    "EVENTS_STREAM",
    "KILL_DEADLINE_S",
    "Started",
    "assert_resumed_deltas",
    "hermes_turns",
    "killed_hermes_scenario",
    "stream_cut_scenario",
]

EVENTS_STREAM: Final = r"/v1/runs/[^/]+/events"  # what `cut_requests("GET", …)` cuts: runs' SSE streams
KILL_DEADLINE_S: Final = 10.0  # the acceptance point: run.finished failed within 10 s of Hermes dying
# After the cut, this long without run.finished shows the server waits for Hermes's run (which still
# has seconds to go) instead of giving up on it.
QUIET_AFTER_CUT_S: Final = 2.0
SETTLE_S: Final = 0.5  # after run.finished: time for a duplicate frame to show up, if one were sent


@dataclass(frozen=True)
class Started:
    conversation_id: str
    run_id: str
    message_id: str


async def start_run(client: PhebyClient, text: str, *, first_delta_timeout: float) -> Started:
    """A new conversation, a `chat.send` of ``text`` in it, and its first streamed delta."""
    created = await client.request("conversation.create", "conversation.created", name="Run recovery")
    conversation_id = created["conversation_id"]
    accepted = await client.request("chat.send", "run.accepted", conversation_id=conversation_id, text=text, timeout=30)
    assert accepted["type"] == "run.accepted", accepted
    start = await client.expect("message.start", run_id=accepted["run_id"])
    try:
        await client.expect("message.delta", message_id=start["message_id"], timeout=first_delta_timeout)
    except TimeoutError:
        raise AssertionError(f"no message.delta within {first_delta_timeout} s; frames: {client.frames[-5:]}") from None
    return Started(conversation_id, accepted["run_id"], start["message_id"])


async def frame_within(client: PhebyClient, type_: str, timeout: float, **fields: object) -> Frame | None:
    """The next such frame, or None if none came in ``timeout`` seconds."""
    with contextlib.suppress(TimeoutError):
        return await client.expect(type_, timeout=timeout, **fields)
    return None


async def hermes_turns(hermes: HermesClient, marker: str) -> tuple[list[str], list[str]]:
    """The user and assistant texts Hermes stored in the sessions (the newest 20) whose user turns name
    ``marker``: how many runs Hermes ran there, and what they answered."""
    users: list[str] = []
    answers: list[str] = []
    for session in (await hermes.list_sessions(limit=20)).data:
        messages = await hermes.session_messages(session.id)
        texts = [(m.role, m.content) for m in messages if isinstance(m.content, str) and m.content.strip()]
        if not any(role == "user" and marker in text for role, text in texts):
            continue
        users += [text for role, text in texts if role == "user"]
        answers += [text for role, text in texts if role == "assistant"]
    return users, answers


async def stream_cut_scenario(
    client: PhebyClient,
    proxy: TcpProxy,
    hermes: HermesClient,
    *,
    marker: str,
    slow_text: str,
    final_text: str,
    second_text: str,
    first_delta_timeout: float,
    finish_timeout: float,
    resumed: bool = False,
) -> Started:
    """Cut the event stream of a slow run (``slow_text``, answered ``final_text``, marked ``marker``), check
    what the client gets until the run's end, and what Hermes ran. ``hermes`` reaches Hermes directly;
    ``resumed``: the gateway replays its events, so the stream must be resumed rather than polled."""
    run = await start_run(client, slow_text, first_delta_timeout=first_delta_timeout)
    seen_before_cut = len(client.frames)
    cut = proxy.cut_requests("GET", EVENTS_STREAM)
    assert cut == 1, f"expected to cut the run's one event stream; cut {cut}, carrying {proxy.connections()}"
    cut_at = time.monotonic()

    early = await frame_within(client, "run.finished", QUIET_AFTER_CUT_S, run_id=run.run_id)
    assert early is None, (
        f"run.finished came {time.monotonic() - cut_at:.1f} s after the stream was cut, while Hermes was still "
        f"running the run: {early}; message.complete sent: {client.seen('message.complete')}"
    )

    busy = await client.request("chat.send", "run.accepted", conversation_id=run.conversation_id, text=second_text)
    assert busy["type"] == "error", f"a second run started while Hermes still ran the first: {busy}"
    assert busy["error"]["code"] == "run_active", busy
    assert run.message_id == f"draft-{run.run_id}", run
    opened = await client.request("conversation.open", "conversation.history", conversation_id=run.conversation_id)
    assert opened["run"] is not None, "conversation.open shows no active run while Hermes still runs it"
    assert opened["run"]["run_id"] == run.run_id, opened["run"]
    assert opened["run"]["message_id"] == run.message_id, opened["run"]
    assert opened["run"]["text"], f"the active run shows no draft: {opened['run']}"

    finished = await frame_within(client, "run.finished", finish_timeout, run_id=run.run_id)
    assert finished is not None, (
        f"no run.finished within {finish_timeout} s after the cut (Hermes's run ends well before); "
        f"last frames: {client.frames[-5:]}"
    )
    assert finished["status"] == "completed", finished
    # Hermes's run really is over by now: its answer is stored, and it is the text the client got.
    users, answers = await hermes_turns(hermes, marker)
    assert [answer.strip() for answer in answers[-1:]] == [final_text], f"Hermes stored {answers!r}"
    await asyncio.sleep(SETTLE_S)
    completes = client.seen("message.complete", message_id=run.message_id)
    assert [frame["text"] for frame in completes] == [final_text], completes
    assert len(client.seen("run.finished", run_id=run.run_id)) == 1, client.seen("run.finished")
    frames = [
        f["type"] for f in client.frames if f.get("run_id") == run.run_id or f.get("message_id") == run.message_id
    ]
    assert frames[-2:] == ["message.complete", "run.finished"], frames[-6:]
    if resumed:
        assert_resumed_deltas(client, run, final_text, seen_before_cut)
        streams = [request for request in proxy.requests() if request[0] == "GET" and "/events" in request[1]]
        assert len(streams) >= 2, f"the stream was not reopened: {proxy.requests()}"

    # One run only: one user turn in Hermes, one run made through the proxy.
    assert [marker in text and second_text not in text for text in users] == [True], f"Hermes ran: {users!r}"
    made = [request for request in proxy.requests() if request == ("POST", "/v1/runs")]
    assert len(made) == 1, f"the server asked Hermes for {len(made)} runs: {proxy.requests()}"

    history = await client.request("conversation.open", "conversation.history", conversation_id=run.conversation_id)
    assert history["type"] == "conversation.history", history
    assert [(m["role"], m["text"]) for m in history["messages"]][-1] == ("assistant", final_text), history
    assert history["run"] is None, history["run"]
    return run


def assert_resumed_deltas(client: PhebyClient, run: Started, final_text: str, seen_before_cut: int) -> None:
    """The run's deltas are cumulative across the cut (none lost, none repeated), end at the final text,
    and some came after the cut (the stream was resumed, not replaced by asking for the run's end)."""
    deltas = [f for f in client.frames if f["type"] == "message.delta" and f.get("message_id") == run.message_id]
    texts = [str(f["text"]) for f in deltas]
    for previous, current in itertools.pairwise(texts):
        assert current.startswith(previous), f"delta {current!r} after {previous!r}: text lost"
        assert current != previous, f"delta {current!r} repeated"
    assert texts, "no deltas"
    assert texts[-1].strip() == final_text, f"the last delta is {texts[-1]!r}, not the final text"
    after_cut = [f for f in client.frames[seen_before_cut:] if f in deltas]
    assert len(after_cut) >= 2, f"no deltas after the cut: the stream was not resumed ({len(texts)} deltas)"


async def killed_hermes_scenario(
    client: PhebyClient,
    *,
    slow_text: str,
    kill: Callable[[], Coroutine[Any, Any, None]],
    revive: Callable[[], Coroutine[Any, Any, None]],
    after_text: str,
    after_replies: tuple[str, ...],
    first_delta_timeout: float,
    after_timeout: float,
    forbidden: list[str],
    cut_first: TcpProxy | None = None,
    failed_error: str | None = None,
    refused_while_down: str | None = None,
) -> Started:
    """Kill Hermes mid-run (``kill``), expect `failed` in time, bring it back (``revive``), run another turn
        (``after_text``, answered with one of ``after_replies``) in the same conversation. ``forbidden`` texts (Hermes's
        address) must not reach the client. With ``cut_first`` (the proxy), the run's event stream is cut first
        and the run must stay unfinished until the kill. ``failed_error``: the error `run.finished` must give;
    ``refused_while_down``: how the refusal of a `chat.send` sent while Hermes is down must begin."""
    run = await start_run(client, slow_text, first_delta_timeout=first_delta_timeout)
    if cut_first is not None:
        cut = cut_first.cut_requests("GET", EVENTS_STREAM)
        assert cut == 1, f"expected to cut the run's one event stream; cut {cut}, carrying {cut_first.connections()}"
        early = await frame_within(client, "run.finished", QUIET_AFTER_CUT_S, run_id=run.run_id)
        assert early is None, f"run.finished came after the cut, before Hermes died (it still ran the run): {early}"
    killed_at = time.monotonic()
    killing = asyncio.create_task(kill())
    try:
        finished = await frame_within(client, "run.finished", KILL_DEADLINE_S, run_id=run.run_id)
    finally:
        await killing
    assert finished is not None, (
        f"no run.finished within {KILL_DEADLINE_S} s of killing Hermes; last frames: {client.frames[-5:]}"
    )
    took = time.monotonic() - killed_at
    assert finished["status"] == "failed", f"{finished} ({took:.1f} s after the kill)"
    assert str(finished.get("error") or "").strip(), f"run.finished failed says no why: {finished}"
    if failed_error is not None:
        assert finished["error"] == failed_error, finished
    for text in forbidden:
        assert text not in json.dumps(finished), f"run.finished names {text!r}: {finished}"
    await asyncio.sleep(SETTLE_S)
    assert len(client.seen("run.finished", run_id=run.run_id)) == 1, client.seen("run.finished")

    if refused_while_down is not None:
        refused = await client.request("chat.send", "run.accepted", conversation_id=run.conversation_id, text="hi")
        assert refused["type"] == "error", f"a run was accepted while Hermes was down: {refused}"
        assert refused["error"]["message"].startswith(refused_while_down), refused
    await revive()
    accepted = await client.request(
        "chat.send", "run.accepted", conversation_id=run.conversation_id, text=after_text, timeout=30
    )
    assert accepted["type"] == "run.accepted", f"the conversation does not work after Hermes is back: {accepted}"
    after = await frame_within(client, "run.finished", after_timeout, run_id=accepted["run_id"])
    assert after is not None, f"the run after Hermes came back did not finish; last frames: {client.frames[-5:]}"
    assert after["status"] == "completed", after
    complete = client.seen("message.complete", conversation_id=run.conversation_id)[-1]
    assert complete["text"] in after_replies, complete
    return run
