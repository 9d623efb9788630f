"""Active runs: one upstream SSE reader per Hermes run, translated into Pheby events.

Hermes allows a single consumer per run stream and no resume, so the server holds it and fans
the events out through the hub. The registry keeps each run's draft, tool states and pending
decisions so `conversation.open` can hand a reconnecting client the recoverable snapshot.
"""

import asyncio
import contextlib
import logging
import secrets
import sqlite3
import time
import uuid
from collections import Counter, OrderedDict, defaultdict, deque
from collections.abc import Awaitable, Callable, Iterator
from typing import NamedTuple, Protocol

from msgspec import UNSET, UnsetType

import hermes_client as hc
from pheby import events as ev
from pheby.accounts import Account
from pheby.conversations import Conversation, Conversations
from pheby.errors import (
    ApprovalNotFound,
    ClarifyNotFound,
    ConversationNotFound,
    NotFound,
    RunActive,
    Unavailable,
    UpstreamFailure,
)
from pheby.history import shown_history, transcript, turn_message_ids
from pheby.hub import Hub
from pheby.media_tags import media_paths, strip_media, visible_draft
from pheby.plugin_link import NO_EXTRAS, PluginExtras
from pheby.redact import redact
from pheby.tool_merge import ToolMerge

log = logging.getLogger("pheby.runs")

CANCEL_GRACE_SECONDS = 5.0
SHUTDOWN_START_WAIT_SECONDS = 3.0
SHUTDOWN_AFTER_TURN_SECONDS = 3.0
START_WAIT_SECONDS = 30.0  # a cancel of a run still starting waits this long for Hermes to name it
RUN_INSTRUCTIONS = (
    "You are talking with the user through the Pheby app, which renders Markdown. "
    "To hand the user a file, put MEDIA:/absolute/path/to/file on its own line."
)

# The companion plugin: how long a tool event of the stream waits for the plugin's push of the same
# call, how long a finished run waits for its pushed MEDIA: files, and how many finished runs late
# pushes can still find.
PLUGIN_TOOL_WINDOW_SECONDS = 2.5
PLUGIN_MEDIA_WAIT_SECONDS = 5.0
RECENT_RUNS = 256


class AssistantTurn(NamedTuple):
    """The assistant turn a run's (or a pushed output's) MEDIA: files belong to."""

    account_id: str
    conversation_id: str
    message_id: str


HermesFor = Callable[[Account], hc.HermesClient]
DeliverMedia = Callable[[AssistantTurn, list[str]], Awaitable[None]]
# (conversation id, {message id used during the run: the history's id of that message}) → re-anchor files.
AnchorTurn = Callable[[str, dict[str, str]], Awaitable[None]]


class RunPlugin(Protocol):
    """What runs need from the companion Hermes plugin (`pheby.conversation_settings`)."""

    async def prepare_run(self, account: Account, conversation: Conversation, session_id: str) -> PluginExtras:
        """Hand the plugin the conversation's settings; the extras this run may use."""
        ...

    async def answer_clarify(self, clarify_id: str, response: str) -> bool: ...


def session_key(conversation_id: str) -> str:
    return f"agent:main:pheby:dm:{conversation_id}"


def hermes_session_id(conversation: Conversation) -> str:
    """The Hermes session a conversation's next turn goes to."""
    return conversation.session_id or f"pheby_{conversation.id}"


class ApprovalAnswer(NamedTuple):
    choice: str
    request_id: str | UnsetType


class PendingApproval:
    def __init__(self, event: ev.ApprovalRequest, pattern_keys: list[str]) -> None:
        self.event = event
        self.pattern_keys = pattern_keys
        # A client's answer on its way to Hermes: from then on the answer, not the run, resolves it.
        self.answer: ApprovalAnswer | None = None


class ActiveRun:
    """The live state of one run, enough to rebuild a client's view after a reconnect."""

    def __init__(self, account: Account, conversation: Conversation, client: hc.HermesClient) -> None:
        self.run_id = uuid.uuid4().hex
        self.account = account
        self.conversation_id = conversation.id
        self.client = client
        self.hermes_run_id = ""
        self.message_id = f"draft-{self.run_id}"
        self.user_message_id = f"user-{self.run_id}"
        self.sent_text = ""  # the input as Hermes stores it (attachments inlined)
        self.stored_before = 0  # the newest Hermes message id when the run started: its turn comes after
        self.status = "running"
        self.raw_text = ""
        self.draft = ""
        self.tools: dict[str, ev.ToolState] = {}
        self.open_tools: defaultdict[str, deque[str]] = defaultdict(deque)
        self.approvals: dict[str, PendingApproval] = {}
        self.clarifications: dict[str, tuple[str, ev.ClarifyRequest]] = {}
        # Clarifications whose answer is on its way, with the responder's request_id.
        self.answering: dict[str, str | UnsetType] = {}
        self.finished = asyncio.Event()
        self.started = asyncio.Event()  # set once Hermes has made the run, or `release` ended the attempt
        self.message_completed = False  # after message.complete only attachment.added and run.finished follow
        self.cancel_requested = False
        self.reader: asyncio.Task[None] | None = None
        # The companion plugin's extras for this run (decided at start), and their state.
        self.extras: PluginExtras = NO_EXTRAS
        self.merge: ToolMerge | None = None
        self.media_done = asyncio.Event()
        self.media_fallback = False
        self.plugin_clarify: set[str] = set()

    @property
    def made(self) -> bool:
        """Whether Hermes has made the run (so it can be stopped)."""
        return bool(self.hermes_run_id)

    @property
    def turn(self) -> AssistantTurn:
        return AssistantTurn(self.account.id, self.conversation_id, self.message_id)

    def snapshot(self) -> ev.RunSnapshot:
        return ev.RunSnapshot(run_id=self.run_id, status=self.status, message_id=self.message_id, text=self.draft)


class RunManager:
    """Starts, translates, cancels and answers runs; one active run per conversation."""

    def __init__(
        self,
        hub: Hub,
        conversations: Conversations,
        hermes_for: HermesFor,
        deliver_media: DeliverMedia | None = None,
        plugin: RunPlugin | None = None,
        anchor_turn: AnchorTurn | None = None,
    ) -> None:
        self._hub = hub
        self._conversations = conversations
        self._hermes_for = hermes_for
        self._deliver_media = deliver_media
        self._plugin = plugin
        self._anchor_turn = anchor_turn
        self._by_hermes: dict[str, ActiveRun] = {}
        self._recent: OrderedDict[str, ActiveRun] = OrderedDict()
        self._by_conversation: dict[str, ActiveRun] = {}
        self._approvals: dict[str, ActiveRun] = {}
        self._clarifications: dict[str, ActiveRun] = {}
        self._last_tools: dict[str, list[ev.ToolState]] = {}
        self._transitions: Counter[str] = Counter()
        self._deleting: set[str] = set()  # conversations being deleted: no new run may start
        self._readers: set[asyncio.Task[None]] = set()  # each run's reader, with its after-turn work

    # --- queries -------------------------------------------------------------------------

    def active(self, conversation_id: str) -> ActiveRun | None:
        return self._by_conversation.get(conversation_id)

    def snapshot(
        self, conversation_id: str
    ) -> tuple[ev.RunSnapshot | None, list[ev.ToolState], list[ev.ApprovalRequest], list[ev.ClarifyRequest]]:
        run = self._by_conversation.get(conversation_id)
        if run is None:
            return None, list(self._last_tools.get(conversation_id, [])), [], []
        approvals = [p.event for p in run.approvals.values()]
        clarifications = [c for _, c in run.clarifications.values()]
        return run.snapshot(), list(run.tools.values()), approvals, clarifications

    def transitions(self, conversation_id: str) -> int:
        """How often a run of the conversation was accepted or finished; when it moves, so may the transcript."""
        return self._transitions[conversation_id]

    # --- starting ------------------------------------------------------------------------

    def reserve(self, account: Account, conversation: Conversation) -> ActiveRun:
        """Claim the conversation's run slot (synchronously, so two sends can't both win)."""
        if conversation.id in self._deleting:
            raise ConversationNotFound()
        if conversation.id in self._by_conversation:
            raise RunActive()
        run = ActiveRun(account, conversation, self._hermes_for(account))
        self._by_conversation[conversation.id] = run
        return run

    def release(self, run: ActiveRun) -> None:
        if self._by_conversation.get(run.conversation_id) is run:
            del self._by_conversation[run.conversation_id]
        run.started.set()  # a reserved run that never starts: whoever waits for its start stops waiting

    @contextlib.contextmanager
    def deleting(self, conversation_id: str) -> Iterator[None]:
        """While a conversation is deleted, sends to it are refused (`conversation_not_found`)."""
        self._deleting.add(conversation_id)
        try:
            yield
        finally:
            self._deleting.discard(conversation_id)

    async def start(
        self, run: ActiveRun, conversation: Conversation, hermes_input: str, request_id: str | UnsetType
    ) -> None:
        """Create the Hermes run for a reserved slot and start reading it; releases the slot on failure.

        `run.started` is set once Hermes has made the run, or by `release` when it never will."""
        try:
            session_id = hermes_session_id(conversation)
            run.extras = await self._plugin_extras(run, conversation, session_id)
            stored = await self._stored_turns(run, conversation)
            if stored is not None:
                run.sent_text, run.stored_before = hermes_input, max((m.id for m in stored), default=0)
                try:
                    await self._log_history(conversation.id, stored)  # before this run can compact it away
                except sqlite3.Error:
                    log.exception("logging the history of conversation %s failed", conversation.id)
            # With the plugin's tool-aware history, Hermes gets the stored turns; else the text-only ones.
            history = None if run.extras.history else _text_turns(stored or [])
            if conversation.id in self._deleting:  # don't make a run in a conversation being deleted
                raise ConversationNotFound()
            # Before the run is made: between its first plugin pushes and run.accepted nothing may await.
            if conversation.session_id is None:
                await self._conversations.add_session(conversation.id, session_id)
            handle = await run.client.create_run(
                hermes_input,
                session_id=session_id,
                conversation_history=history,
                instructions=RUN_INSTRUCTIONS,
            )
            self._watch_plugin(run, handle.run_id)
            run.started.set()  # from here a cancel can stop it
        except hc.HermesUnavailable:
            self.release(run)
            raise Unavailable("Hermes is unavailable right now; try again") from None
        except hc.HermesError as exc:
            self.release(run)
            raise UpstreamFailure(f"Hermes refused the run: {exc}") from None
        except BaseException:
            self.release(run)
            self._by_hermes.pop(run.hermes_run_id, None)
            raise
        self._transitions[conversation.id] += 1
        account_id = run.account.id
        self._hub.broadcast(
            account_id, ev.RunAccepted(conversation_id=conversation.id, run_id=run.run_id, request_id=request_id)
        )
        self._hub.broadcast(
            account_id,
            ev.MessageStart(conversation_id=conversation.id, run_id=run.run_id, message_id=run.message_id),
        )
        run.reader = asyncio.create_task(self._read_then_after_turn(run), name=f"run-{run.run_id}")
        self._readers.add(run.reader)
        run.reader.add_done_callback(self._readers.discard)
        await self._conversations.touch(conversation.id)  # after the reader starts: deltas wait for no one

    async def _plugin_extras(self, run: ActiveRun, conversation: Conversation, session_id: str) -> PluginExtras:
        if self._plugin is None:
            return NO_EXTRAS
        try:
            return await self._plugin.prepare_run(run.account, conversation, session_id)
        except Exception:
            log.exception("preparing the companion plugin for run %s failed; running without it", run.run_id)
            return NO_EXTRAS

    def _watch_plugin(self, run: ActiveRun, hermes_run_id: str) -> None:
        """Let the plugin's pushes find the run (they arrive keyed by Hermes's run id)."""
        run.hermes_run_id = hermes_run_id
        self._by_hermes[hermes_run_id] = run
        if run.extras.tool_events:
            run.merge = ToolMerge(
                PLUGIN_TOOL_WINDOW_SECONDS,
                lambda event: self._tool_started(run, event),
                lambda event: self._tool_completed(run, event),
            )

    async def _stored_turns(self, run: ActiveRun, conversation: Conversation) -> list[hc.SessionMessage] | None:
        """The transcript before the run. Without it the run can't be sent (no history), unless the
        plugin supplies the history: then the run goes ahead, unlogged and its files unanchored (None)."""
        try:
            return await transcript(run.client, conversation.session_ids)
        except hc.HermesError:
            if not run.extras.history:
                raise
            log.warning(
                "conversation %s: transcript unreadable before a run; running without logging it", conversation.id
            )
            return None

    async def _log_history(self, conversation_id: str, stored: list[hc.SessionMessage]) -> list[ev.HistoryMessage]:
        """Keep what history shows now (see `pheby.history.with_logged`); return it."""
        shown = await shown_history(self._conversations, conversation_id, stored)
        await self._conversations.log_history(conversation_id, shown)
        return shown

    # --- the reader ----------------------------------------------------------------------

    async def _read_then_after_turn(self, run: ActiveRun) -> None:
        await self._read(run)
        try:
            await self._after_turn(run)
        except Exception:
            log.exception("after run %s: logging its history or anchoring its files failed", run.run_id)

    async def _after_turn(self, run: ActiveRun) -> None:
        """Once Hermes has stored the turn: log what history shows, and anchor the turn's files.

        The log keeps turns that Hermes's context compression later stops listing. During a run the
        user's turn is `user-<run id>` and the answer `draft-<run id>`; history calls them
        `m<Hermes id>`, and a reconnecting client must be able to put each file under its message.
        """
        try:
            conversation = await self._conversations.get(run.account.id, run.conversation_id)
            stored = await transcript(run.client, conversation.session_ids)
            shown = await self._log_history(conversation.id, stored)
        except (NotFound, hc.HermesError, sqlite3.IntegrityError):
            return  # deleted meanwhile, or Hermes can't say: the run's ids stay
        user_id, answer_id = turn_message_ids(stored, shown, run.stored_before, run.sent_text)
        ids = {run.user_message_id: user_id} if user_id else {}
        if answer_id and run.message_completed:
            ids[run.message_id] = answer_id
        if ids and self._anchor_turn is not None:
            await self._anchor_turn(run.conversation_id, ids)
            self._transitions[run.conversation_id] += 1  # a snapshot read meanwhile is read again

    async def _read(self, run: ActiveRun) -> None:
        try:
            async for event in run.client.run_events(run.hermes_run_id):
                await self._on_event(run, event)
                if run.finished.is_set():
                    return
            await self._finish_from_status(run)
        except asyncio.CancelledError:
            raise
        except hc.HermesError as exc:
            log.warning("run %s stream failed: %s", run.run_id, exc)
            await self._finish_from_status(run)
        except Exception:
            log.exception("run %s reader crashed", run.run_id)
            self._finish(run, "failed", "Internal error while streaming the run")
        finally:
            if not run.finished.is_set():
                self._finish(run, "cancelled" if run.cancel_requested else "failed", "The run stream ended")

    async def _finish_from_status(self, run: ActiveRun) -> None:
        """The stream ended without a terminal event: ask Hermes how the run ended."""
        if run.finished.is_set():
            return
        try:
            status = await run.client.get_run(run.hermes_run_id)
        except hc.HermesError:
            self._finish(run, "cancelled" if run.cancel_requested else "failed", "Lost the connection to Hermes")
            return
        if status.status == "completed":
            await self._complete(run, status.output or "")
        elif status.status == "cancelled":
            self._finish(run, "cancelled")
        else:
            self._finish(run, "failed", status.error or "The run stream ended early")

    async def _on_event(self, run: ActiveRun, event: hc.RunEvent) -> None:
        account_id, cid = run.account.id, run.conversation_id
        match event:
            case hc.MessageDelta(delta=delta):
                run.raw_text += delta
                visible = visible_draft(run.raw_text)
                if visible != run.draft:
                    run.draft = visible
                    self._hub.broadcast(
                        account_id, ev.MessageDelta(conversation_id=cid, message_id=run.message_id, text=visible)
                    )
            case hc.ToolStarted():
                if run.merge is not None:
                    run.merge.stream_started(event)
                else:
                    self._tool_started(run, event)
            case hc.ToolCompleted():
                if run.merge is not None:
                    run.merge.stream_completed(event)
                else:
                    self._tool_completed(run, event)
            case hc.ApprovalRequest():
                await self._approval_requested(run, event)
            case hc.ClarifyRequest():
                self._clarify_requested(run, event)
            case hc.ClarifyRetired(clarify_id=hermes_clarify_id):
                self._clarify_retired(run, hermes_clarify_id, by_plugin=False)
            case hc.RunCompleted(output=output):
                await self._complete(run, output)
            case hc.RunFailed(error=error):
                self._finish(run, "failed", _short(error))
            case hc.RunCancelled():
                self._finish(run, "cancelled")
            case _:
                pass  # reasoning.available repeats the text; approval.responded is echoed by us

    def _tool_started(self, run: ActiveRun, event: hc.ToolStarted) -> None:
        call_id = event.tool_call_id or f"t-{secrets.token_hex(6)}"
        run.open_tools[event.tool].append(call_id)
        args = redact(event.args) if isinstance(event.args, dict) else {}
        state = ev.ToolState(
            tool_call_id=call_id,
            tool_name=event.tool,
            status="running",
            run_id=run.run_id,
            args_redacted=args,
            preview=_short(event.preview or "", 200),
        )
        run.tools[call_id] = state
        self._broadcast_tool(run, state)

    def _tool_completed(self, run: ActiveRun, event: hc.ToolCompleted) -> None:
        pending = run.open_tools[event.tool]
        call_id = event.tool_call_id or (pending.popleft() if pending else f"t-{secrets.token_hex(6)}")
        if event.tool_call_id and call_id in pending:
            pending.remove(call_id)
        started = run.tools.get(call_id)
        failed = bool(event.error)
        status = _tool_outcome(event, cancelling=run.cancel_requested)
        state = ev.ToolState(
            tool_call_id=call_id,
            tool_name=event.tool,
            status=status,
            run_id=run.run_id,
            args_redacted=started.args_redacted if started else {},
            duration_ms=round(event.duration * 1000) if event.duration is not None else None,
            error=_short(event.error_message or "Tool failed") if status == "failed" else UNSET,
        )
        run.tools[call_id] = state
        self._broadcast_tool(run, state)
        if run.approvals and failed:
            # Hermes fails an unanswered approval closed after its own timeout, with no event of its own.
            # An approval being answered is left to its responder: the failure may be its own deny.
            for approval_id, approval in list(run.approvals.items()):
                if approval.answer is None:
                    self._resolve_approval(run, approval_id, "deny", accepted=False)
        if event.tool == "clarify":
            # The clarify call ended: a question of the plugin's still pending here went unanswered.
            for clarify_id in list(run.plugin_clarify & run.clarifications.keys()):
                if clarify_id not in run.answering:
                    self._resolve_clarify(run, clarify_id, accepted=False, expired=True)

    def _broadcast_tool(self, run: ActiveRun, state: ev.ToolState) -> None:
        self._hub.broadcast(
            run.account.id,
            ev.ToolEvent(
                conversation_id=run.conversation_id,
                run_id=run.run_id,
                tool_call_id=state.tool_call_id,
                tool_name=state.tool_name,
                status=state.status,
                args_redacted=state.args_redacted if state.status == "running" else UNSET,
                duration_ms=state.duration_ms,
                error=state.error,
                preview=state.preview,
            ),
        )

    async def _approval_requested(self, run: ActiveRun, event: hc.ApprovalRequest) -> None:
        conversation = await self._conversations.get(run.account.id, run.conversation_id)
        keys = list(event.pattern_keys or ([event.pattern_key] if event.pattern_key else []))
        if conversation.yolo or (keys and set(keys) <= await self._conversations.approved_patterns(conversation.id)):
            # YOLO, or a pattern approved for the session earlier: answer "once" without asking.
            try:
                await run.client.respond_approval(run.hermes_run_id, "once")
            except hc.HermesError as exc:
                log.warning("auto-approval for run %s failed: %s", run.run_id, exc)
            return
        approval = ev.ApprovalRequest(
            approval_id=secrets.token_hex(6),
            session_key=session_key(run.conversation_id),
            conversation_id=run.conversation_id,
            run_id=run.run_id,
            command=event.command,
            description=event.description or "",
            choices=list(event.choices or ["once", "session", "always", "deny"]),
        )
        run.approvals[approval.approval_id] = PendingApproval(approval, keys)
        self._approvals[approval.approval_id] = run
        run.status = "waiting_for_approval"
        self._hub.broadcast(run.account.id, approval)

    def _clarify_requested(self, run: ActiveRun, event: hc.ClarifyRequest) -> str:
        clarify = ev.ClarifyRequest(
            clarify_id=secrets.token_hex(5),
            session_key=session_key(run.conversation_id),
            conversation_id=run.conversation_id,
            run_id=run.run_id,
            question=event.question,
            choices=list(event.choices) if event.choices else None,
        )
        run.clarifications[clarify.clarify_id] = (event.clarify_id, clarify)
        self._clarifications[clarify.clarify_id] = run
        run.status = "waiting_for_clarification"
        self._hub.broadcast(run.account.id, clarify)
        return clarify.clarify_id

    def _clarify_retired(self, run: ActiveRun, held_id: str, *, by_plugin: bool) -> None:
        """Hermes (or the plugin) stopped waiting for an answer: unless a client's answer is on its way
        (its reply resolves it), the question expired."""
        for clarify_id, (held, _) in list(run.clarifications.items()):
            if held == held_id and (clarify_id in run.plugin_clarify) == by_plugin and clarify_id not in run.answering:
                self._resolve_clarify(run, clarify_id, accepted=False, expired=True)

    async def _complete(self, run: ActiveRun, output: str) -> None:
        if run.merge is not None:
            run.merge.flush()
            run.merge = None  # tool events the plugin pushes from now on would follow message.complete
        run.message_completed = True
        paths = media_paths(output)
        final = strip_media(output)
        run.draft = final
        self._hub.broadcast(
            run.account.id,
            ev.MessageComplete(conversation_id=run.conversation_id, message_id=run.message_id, text=final),
        )
        if paths and not (run.extras.media and await self._plugin_media_arrived(run)):
            await self._media_from_disk(run.turn, paths)
        self._finish(run, "completed")

    async def _plugin_media_arrived(self, run: ActiveRun) -> bool:
        """The plugin pushes the files' bytes; without its word in time, they are read from disk after all."""
        try:
            await asyncio.wait_for(run.media_done.wait(), PLUGIN_MEDIA_WAIT_SECONDS)
        except TimeoutError:
            log.warning("the plugin did not deliver the MEDIA: files of run %s; reading them from disk", run.run_id)
            run.media_fallback = True
            return False
        return True

    async def _media_from_disk(self, turn: AssistantTurn, paths: list[str]) -> None:
        if self._deliver_media is None or not paths:
            return
        try:
            await self._deliver_media(turn, paths)
        except Exception:
            log.exception("delivering the MEDIA: files of %s failed", turn.message_id)

    def _finish(self, run: ActiveRun, status: ev.RunStatus, error: str | None = None) -> None:
        """Emit the run's one `run.finished` and clear its state."""
        if run.finished.is_set():
            return
        if run.merge is not None:
            run.merge.flush()
        run.finished.set()
        if self._by_hermes.pop(run.hermes_run_id, None) is not None:
            self._recent[run.hermes_run_id] = run  # late plugin pushes (MEDIA: files) still find it
            while len(self._recent) > RECENT_RUNS:
                self._recent.popitem(last=False)
        for call_id, state in list(run.tools.items()):
            if state.status == "running":
                ended = ev.ToolState(
                    tool_call_id=call_id, tool_name=state.tool_name, status="cancelled", run_id=run.run_id
                )
                run.tools[call_id] = ended
                self._broadcast_tool(run, ended)
        for approval_id, pending in list(run.approvals.items()):
            self._resolve_at_finish(run, approval_id, pending.answer)
        for clarify_id in list(run.clarifications):
            if clarify_id in run.answering:  # its answer is on its way: the responder's, as for approvals
                self._resolve_clarify(run, clarify_id, accepted=True, request_id=run.answering[clarify_id])
            else:
                self._resolve_clarify(run, clarify_id, accepted=False, expired=True)
        self._last_tools[run.conversation_id] = list(run.tools.values())
        if not run.message_completed:  # cancelled or failed: the turn still ends with its message, as drafted
            run.message_completed = True
            self._hub.broadcast(
                run.account.id,
                ev.MessageComplete(conversation_id=run.conversation_id, message_id=run.message_id, text=run.draft),
            )
        self.release(run)
        self._transitions[run.conversation_id] += 1
        self._hub.broadcast(
            run.account.id,
            ev.RunFinished(
                conversation_id=run.conversation_id,
                run_id=run.run_id,
                status=status,
                error=_short(error) if status == "failed" and error else UNSET,
            ),
        )

    def _resolve_at_finish(self, run: ActiveRun, approval_id: str, answer: ApprovalAnswer | None) -> None:
        """The run ended: an unanswered approval was denied; one being answered keeps its responder's choice."""
        if answer is None:
            self._resolve_approval(run, approval_id, "deny", accepted=False)
        else:
            self._resolve_approval(run, approval_id, answer.choice, accepted=True, request_id=answer.request_id)

    # --- client decisions ----------------------------------------------------------------

    async def cancel(self, account_id: str, conversation_id: str, run_id: str) -> None:
        run = self._by_conversation.get(conversation_id)
        if run is None or run.run_id != run_id or run.account.id != account_id or run.finished.is_set():
            raise NotFound("No such active run")
        if not run.made:  # reserved, no Hermes run made yet
            if conversation_id not in self._deleting:
                raise NotFound("The run has not started yet")
            # A delete: the start sees the conversation going and makes no run, or made one just now.
            if not await _made_in_time(run) or self._by_conversation.get(conversation_id) is not run:
                raise NotFound("The run did not start")
        run.cancel_requested = True
        try:
            await run.client.stop_run(run.hermes_run_id)
        except hc.HermesNotFound:
            raise NotFound("The run can no longer be interrupted") from None
        except hc.HermesError as exc:
            raise UpstreamFailure(f"Hermes did not stop the run: {exc}") from None
        run.status = "cancelling"
        try:
            await asyncio.wait_for(asyncio.shield(run.finished.wait()), timeout=CANCEL_GRACE_SECONDS)
        except TimeoutError:
            if run.reader is not None:
                run.reader.cancel()
            self._finish(run, "cancelled")

    async def respond_approval(
        self, account_id: str, approval_id: str, choice: str, request_id: str | UnsetType
    ) -> None:
        run = self._approvals.get(approval_id)
        pending = run.approvals.get(approval_id) if run is not None and run.account.id == account_id else None
        if run is None or pending is None or pending.answer is not None:
            raise ApprovalNotFound()  # unknown, stale, or another client's answer is already on its way
        pending.answer = ApprovalAnswer(choice, request_id)
        try:
            await run.client.respond_approval(run.hermes_run_id, choice)
        except (hc.HermesNotFound, hc.HermesRejected):
            if approval_id not in run.approvals:
                return  # the run ended meanwhile and resolved it with this answer
            self._resolve_approval(run, approval_id, "deny", accepted=False)
            raise ApprovalNotFound() from None
        except BaseException as exc:
            if isinstance(exc, Exception) and approval_id not in run.approvals:
                return  # the run ended meanwhile and resolved it with this answer
            pending.answer = None  # Hermes never took it: the approval waits for an answer again
            raise
        if choice == "session":
            for key in pending.pattern_keys:
                await self._conversations.approve_pattern(run.conversation_id, key)
        self._resolve_approval(run, approval_id, choice, accepted=True, request_id=request_id)

    def _resolve_approval(
        self,
        run: ActiveRun,
        approval_id: str,
        choice: str,
        *,
        accepted: bool,
        request_id: str | UnsetType = UNSET,
    ) -> None:
        if run.approvals.pop(approval_id, None) is None:
            return
        self._approvals.pop(approval_id, None)
        if not run.approvals and not run.clarifications and not run.finished.is_set():
            run.status = "running"
        self._hub.broadcast(
            run.account.id,
            ev.ApprovalResolved(approval_id=approval_id, choice=choice, accepted=accepted, request_id=request_id),
        )

    async def respond_clarify(
        self, account_id: str, clarify_id: str, response: str, request_id: str | UnsetType
    ) -> None:
        run = self._clarifications.get(clarify_id)
        if run is None or run.account.id != account_id or clarify_id not in run.clarifications:
            raise ClarifyNotFound()
        if clarify_id in run.answering:
            raise ClarifyNotFound()  # another client's answer is already on its way
        held_id, _ = run.clarifications[clarify_id]
        run.answering[clarify_id] = request_id  # the question may be retired before the answer's reply is back
        try:
            answered = await self._answer_clarify(run, clarify_id, held_id, response)
        except Exception:
            if clarify_id not in run.clarifications:
                return  # the run ended meanwhile and resolved it with this answer
            raise
        finally:
            run.answering.pop(clarify_id, None)
        if clarify_id not in run.clarifications:
            return  # the run ended meanwhile and resolved it with this answer
        if not answered:
            self._resolve_clarify(run, clarify_id, accepted=False, expired=True)
            raise ClarifyNotFound()
        self._resolve_clarify(run, clarify_id, accepted=True, request_id=request_id)

    async def _answer_clarify(self, run: ActiveRun, clarify_id: str, held_id: str, response: str) -> bool:
        """Hand the answer to whoever holds the question (the plugin or Hermes); False if it no longer waits."""
        if clarify_id in run.plugin_clarify and self._plugin is not None:
            return await self._plugin.answer_clarify(held_id, response)
        try:
            await run.client.respond_clarify(run.hermes_run_id, held_id, response)
        except (hc.HermesNotFound, hc.HermesRejected):
            return False
        return True

    def _resolve_clarify(
        self,
        run: ActiveRun,
        clarify_id: str,
        *,
        accepted: bool,
        expired: bool = False,
        request_id: str | UnsetType = UNSET,
    ) -> None:
        if run.clarifications.pop(clarify_id, None) is None:
            return
        self._clarifications.pop(clarify_id, None)
        if not run.approvals and not run.clarifications and not run.finished.is_set():
            run.status = "running"
        self._hub.broadcast(
            run.account.id,
            ev.ClarifyResolved(
                clarify_id=clarify_id, accepted=accepted, expired=expired or UNSET, request_id=request_id
            ),
        )

    # --- pushes of the companion plugin (keyed by Hermes's run id) ----------------------------

    def plugin_run(self, hermes_run_id: str) -> ActiveRun | None:
        """The active, or recently finished, run behind a Hermes run id."""
        return self._by_hermes.get(hermes_run_id) or self._recent.get(hermes_run_id)

    def plugin_tool_started(self, hermes_run_id: str, tool_call_id: str, tool: str, args: dict[str, object]) -> None:
        run = self._by_hermes.get(hermes_run_id)
        if run is None or run.merge is None:
            return
        run.merge.plugin_started(
            hc.ToolStarted(
                run_id=hermes_run_id, timestamp=time.time(), tool=tool, tool_call_id=tool_call_id, args=dict(args)
            )
        )

    def plugin_tool_completed(
        self,
        hermes_run_id: str,
        tool_call_id: str,
        tool: str,
        duration_ms: int | None,
        outcome: ev.ToolStatus,
        error: str | None,
    ) -> None:
        run = self._by_hermes.get(hermes_run_id)
        if run is None or run.merge is None:
            return
        run.merge.plugin_completed(
            hc.ToolCompleted(
                run_id=hermes_run_id, timestamp=time.time(), tool=tool,
                duration=duration_ms / 1000 if duration_ms is not None else None,
                error=outcome != "completed", tool_call_id=tool_call_id,
                error_message=error or UNSET, cancelled=outcome == "cancelled",
            )
        )  # fmt: skip

    def plugin_clarify_requested(
        self, hermes_run_id: str, plugin_clarify_id: str, question: str, choices: list[str] | None
    ) -> bool:
        """A clarify question the plugin holds the run for; False when no client can be asked."""
        run = self._by_hermes.get(hermes_run_id)
        if run is None or run.message_completed or run.finished.is_set() or not run.extras.clarify:
            return False
        clarify_id = self._clarify_requested(
            run,
            hc.ClarifyRequest(
                run_id=hermes_run_id,
                timestamp=time.time(),
                clarify_id=plugin_clarify_id,
                question=question,
                choices=choices,
            ),
        )
        run.plugin_clarify.add(clarify_id)
        return True

    def plugin_clarify_expired(self, hermes_run_id: str, plugin_clarify_id: str) -> None:
        run = self._by_hermes.get(hermes_run_id)
        if run is not None:
            self._clarify_retired(run, plugin_clarify_id, by_plugin=True)

    def plugin_media_done(self, hermes_run_id: str) -> None:
        run = self.plugin_run(hermes_run_id)
        if run is not None:
            run.media_done.set()

    # --- unsolicited output and shutdown -------------------------------------------------

    async def push_unsolicited(self, account_id: str, conversation_id: str, text: str) -> str:
        """Emit a finished turn that no client asked for (a cron run's output); its MEDIA: files are
        stored and announced as the turn's deliverables, like a run's."""
        run_id = uuid.uuid4().hex
        turn = AssistantTurn(account_id, conversation_id, f"draft-{run_id}")
        self._transitions[conversation_id] += 1
        for event in (
            ev.RunAccepted(conversation_id=conversation_id, run_id=run_id),
            ev.MessageStart(conversation_id=conversation_id, run_id=run_id, message_id=turn.message_id),
            ev.MessageComplete(conversation_id=conversation_id, message_id=turn.message_id, text=strip_media(text)),
        ):
            self._hub.broadcast(account_id, event)
        await self._media_from_disk(turn, media_paths(text))
        self._transitions[conversation_id] += 1
        self._hub.broadcast(
            account_id, ev.RunFinished(conversation_id=conversation_id, run_id=run_id, status="completed")
        )
        return run_id

    async def shutdown(self) -> None:
        """Stop every active run, all at once, so each client sees its `run.finished`."""
        starting = [run.started.wait() for run in self._by_conversation.values() if not run.made]
        with contextlib.suppress(TimeoutError):  # a run being made now is stopped too, once Hermes names it
            await asyncio.wait_for(asyncio.gather(*starting), timeout=SHUTDOWN_START_WAIT_SECONDS)
        runs = [run for run in self._by_conversation.values() if run.made]

        async def stop(run: ActiveRun) -> None:
            try:
                await self.cancel(run.account.id, run.conversation_id, run.run_id)
            except Exception:  # noqa: BLE001 - shutting down regardless
                self._finish(run, "cancelled")

        await asyncio.gather(*(stop(run) for run in runs))
        readers = list(self._readers)  # also those of runs just finished, still logging their turn
        if readers:  # a moment for that work (a transcript read, a few rows), then whatever is left stops
            await asyncio.wait(readers, timeout=SHUTDOWN_AFTER_TURN_SECONDS)
        for reader in readers:
            reader.cancel()
        await asyncio.gather(*readers, return_exceptions=True)


async def _made_in_time(run: ActiveRun) -> bool:
    """Wait (bounded) for a reserved run's start to end; whether it made the Hermes run."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(run.started.wait(), timeout=START_WAIT_SECONDS)
    return run.made


def _tool_outcome(event: hc.ToolCompleted, *, cancelling: bool) -> ev.ToolStatus:
    """A call that ended with an error while its run was being cancelled was interrupted, not failed."""
    if not event.error:
        return "completed"
    return "cancelled" if event.cancelled is True or cancelling else "failed"


def _short(text: str, limit: int = 500) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _text_turns(stored: list[hc.SessionMessage]) -> list[dict[str, str]]:
    """User/assistant turns with text, oldest first (0.19.0 doesn't load history for /v1/runs)."""
    return [
        {"role": message.role, "content": message.content}
        for message in stored
        if message.role in ("user", "assistant") and isinstance(message.content, str) and message.content.strip()
    ]
