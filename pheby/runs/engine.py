"""`RunManager`: the run engine's wiring, one active run per conversation.

It starts runs (`send`), feeds each Hermes event through the pure translation (`translate`) and
performs what comes out, keeps the pending decisions, takes the companion plugin's pushes
(`plugin_push`), resumes a broken stream or recovers a lost one by asking Hermes (`reader`), logs the
turn afterwards (`turn_log`), delivers its files (`media`) and keeps finished turns for snapshots
(`settled`).
"""

import asyncio
import contextlib
import logging
import secrets
import time
import uuid
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from msgspec import UNSET, UnsetType

import hermes_client as hc
from pheby import metrics
from pheby.errors import (
    ApprovalNotFound,
    BadRequest,
    ClarifyNotFound,
    ConversationNotFound,
    NotFound,
    RateLimited,
    RunActive,
)
from pheby.files.media_tags import media_paths, strip_media
from pheby.hermes.failures import hermes_failure
from pheby.hermes.features import NO_RUN_OPTIONS, HermesFeatures, RunOptions
from pheby.hermes.history_pages import HistoryPages
from pheby.plugin.extras import NO_EXTRAS, PluginExtras
from pheby.protocol import frames as ev
from pheby.protocol.hub import EVENT_ARRIVED, Hub
from pheby.redact import sanitize_error
from pheby.runs import translate as tr
from pheby.runs.active import ActiveRun, AssistantTurn
from pheby.runs.decisions import Answer, Decision, Kind, Resolved, resolved_id
from pheby.runs.journal import RunJournal
from pheby.runs.media import DeliverMedia, MediaDelivery
from pheby.runs.plugin_inputs import (
    PluginClarifyAsked,
    PluginClarifyExpired,
    PluginInput,
    PluginMediaDone,
    PluginToolEnded,
    PluginToolStarted,
)
from pheby.runs.reader import (
    DEFAULT_TIMING,
    LOST_ERROR,
    READ_LEAD_SECONDS,
    Contact,
    RecoveryTiming,
    pause_while_held,
    resumed_event_batches,
    settle,
    stop_lost,
    watch_stream,
)
from pheby.runs.settled import SettledTurn, SettledTurns
from pheby.runs.tool_merge import ToolMerge
from pheby.runs.turn_log import AnchorTurn, TurnLog
from pheby.runs.unseen import UnseenApprovals, unseen_request
from pheby.store.accounts import Account
from pheby.store.attachments import Attachments, attachment_added
from pheby.store.conversations import Conversation, Conversations, TranscriptTurn

log = logging.getLogger("pheby.runs")

CANCEL_GRACE_SECONDS = 5.0
SHUTDOWN_START_WAIT_SECONDS = 3.0
SHUTDOWN_AFTER_TURN_SECONDS = 1.0
CREATE_TRIES = 3  # sends of one run's POST /v1/runs where the gateway makes a run once per Idempotency-Key
CREATE_RETRY_SECONDS = 0.5  # times the try number
START_WAIT_SECONDS = 30.0  # a cancel of a run still starting waits this long for Hermes to name it
RUN_INSTRUCTIONS = (
    "You are talking with the user through the Pheby app, which renders Markdown. "
    "To hand the user a file, put MEDIA:/absolute/path/to/file on its own line."
)

# The companion plugin: how long a tool event of the stream waits for the plugin's push of the same
# call, and how many finished runs late pushes (MEDIA: files) can still find.
PLUGIN_TOOL_WINDOW_SECONDS = 2.5
RECENT_RUNS = 256

HermesFor = Callable[[Account], hc.HermesClient]
Snapshot = tuple[ev.RunSnapshot | None, list[ev.ToolState], list[ev.ApprovalRequest], list[ev.ClarifyRequest]]


class RunPlugin(Protocol):
    """What runs need from the companion Hermes plugin (`pheby.plugin.conversation_settings`)."""

    async def prepare_run(self, account: Account, conversation: Conversation, session_id: str) -> PluginExtras:
        """Hand the plugin the conversation's settings; the extras this run may use."""
        ...

    async def answer_clarify(self, clarify_id: str, response: str) -> bool: ...

    async def run_options(self, account: Account, conversation: Conversation) -> RunOptions:
        """The conversation's own model and effort for `POST /v1/runs` (nothing unless Hermes takes them)."""
        ...


def session_key(conversation_id: str) -> str:
    return f"agent:main:pheby:dm:{conversation_id}"


def hermes_session_id(conversation: Conversation) -> str:
    """The Hermes session a conversation's next turn goes to."""
    return conversation.session_id or f"pheby_{conversation.id}"


class RunManager:
    """Starts, translates, cancels and answers runs; one active run per conversation."""

    def __init__(
        self,
        hub: Hub,
        conversations: Conversations,
        hermes_for: HermesFor,
        history: HistoryPages,
        deliver_media: DeliverMedia | None = None,
        plugin: RunPlugin | None = None,
        anchor_turn: AnchorTurn | None = None,
        attachments: Attachments | None = None,
        recovery: RecoveryTiming = DEFAULT_TIMING,
        features: HermesFeatures | None = None,
        *,
        journal: RunJournal,
    ) -> None:
        self._hub = hub
        self._journal = journal  # what a restart needs to carry the runs on
        self._handing_over = False  # a graceful stop: runs go on in Hermes, for the next process
        self._features = features  # what each gateway advertises (None: nothing)
        self._conversations = conversations
        self._hermes_for = hermes_for
        self._media = MediaDelivery(deliver_media)
        self._plugin = plugin
        self._attachments = attachments
        self._recovery = recovery
        self._by_hermes: dict[str, ActiveRun] = {}
        self._recent: OrderedDict[str, ActiveRun] = OrderedDict()
        self._by_conversation: dict[str, ActiveRun] = {}
        self._decision_runs: dict[str, ActiveRun] = {}  # approval and clarify ids → their run
        self._last_tools: dict[str, list[ev.ToolState]] = {}
        self._transitions: Counter[str] = Counter()
        self._settled = SettledTurns()
        self._history = history
        self._turn_log = TurnLog(conversations, self._settled, anchor_turn, self._transitions, history)
        self._deleting: set[str] = set()  # conversations being deleted: no new run may start
        self._readers: set[asyncio.Task[None]] = set()  # each run's reader, with its after-turn work

    # --- queries -------------------------------------------------------------------------

    def active_count(self) -> int:
        return len(self._by_conversation)

    def active(self, conversation_id: str) -> ActiveRun | None:
        return self._by_conversation.get(conversation_id)

    def snapshot(self, conversation_id: str) -> Snapshot:
        run = self._by_conversation.get(conversation_id)
        if run is None:
            return None, list(self._last_tools.get(conversation_id, [])), [], []
        approvals = [r for r in run.decisions.requests("approval") if isinstance(r, ev.ApprovalRequest)]
        clarifications = [r for r in run.decisions.requests("clarify") if isinstance(r, ev.ClarifyRequest)]
        return run.snapshot(), list(run.tools.values()), approvals, clarifications

    def transitions(self, conversation_id: str) -> int:
        """How often a run of the conversation was accepted or finished."""
        return self._transitions[conversation_id]

    def reading(self, conversation_id: str) -> contextlib.AbstractContextManager[None]:
        """Around a snapshot's read of the stored transcript (see `with_finished_turns`)."""
        return self._settled.reading(conversation_id)

    def finished_turns_after(self, conversation_id: str) -> int | None:
        """The Hermes id every finished turn kept for snapshots comes after (None: none kept); a history
        window given to `with_finished_turns` holds every message after it, so none is taken for missing."""
        return self._settled.kept_after(conversation_id)

    def with_finished_turns(self, conversation_id: str, shown: Sequence[ev.HistoryMessage]) -> list[ev.HistoryMessage]:
        """The transcript `shown` (read inside `reading`) with every finished turn it lacks, in order.

        Call it, take `snapshot` and queue the reply without an await between: then the reply holds
        every turn whose `run.finished` went out before it."""
        return self._settled.merged(conversation_id, shown)

    # --- starting ------------------------------------------------------------------------

    async def send(
        self,
        account: Account,
        conversation_id: str,
        text: str,
        attachment_ids: Sequence[str],
        request_id: str | UnsetType,
        *,
        judged_at: float = 0.0,
    ) -> ActiveRun:
        """`chat.send`: reserve the slot, check the attachments, start the run, then claim them.

        Attachments are claimed only once the run is accepted, so a `run_active` (or any failure to
        start) leaves them free to send again. `judged_at`: when the sender's credential was checked."""
        conversation = await self._conversations.get(account.id, conversation_id)
        run = self.reserve(account, conversation)
        run.judged_at = judged_at
        try:
            if self._attachments is not None:
                prepared = await self._attachments.prepare_chat_input(account.id, conversation.id, text, attachment_ids)
                hermes_input, attachments = prepared.text, prepared.attachments
                if attachments:
                    await self._conversations.remember_input(conversation.id, hermes_input, text)
            else:
                hermes_input, attachments = text, []
        except BaseException:
            self.release(run)
            raise
        run.user_text = text
        await self.start(run, conversation, hermes_input, request_id)
        if attachments and self._attachments is not None:
            for attachment in await self._attachments.claim(attachments, run.user_message_id):
                self._hub.broadcast(
                    account.id,
                    attachment_added(conversation.id, attachment),
                )
        return run

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
        if not run.made:
            run.phase.move("finished")
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
            options = (
                NO_RUN_OPTIONS if self._plugin is None else await self._plugin.run_options(run.account, conversation)
            )
            turns = await self._turns_before_run(run, conversation)
            if turns is not None:
                run.sent_text, run.stored_before = hermes_input, max((t.hermes_id for t in turns), default=0)
            # With the plugin's tool-aware history, Hermes gets the stored turns; else the text-only ones.
            history = None if run.extras.history else [{"role": t.role, "content": t.content} for t in turns or []]
            if conversation.id in self._deleting:  # don't make a run in a conversation being deleted
                raise ConversationNotFound()
            # Before the run is made: between its first plugin pushes and run.accepted nothing may await.
            if conversation.session_id is None:
                await self._conversations.add_session(conversation.id, session_id)
            handle = await self._create_run(run, hermes_input, session_id, history, options)
            run.hermes_run_id = handle.run_id
            await self._journal.admitted(run)  # before anyone hears of it: from here a restart carries it on
            self._watch_plugin(run, handle.run_id)
            run.phase.move("running")
            run.started.set()  # from here a cancel can stop it
        except hc.HermesError as exc:
            self.release(run)
            raise hermes_failure(
                exc,
                unavailable="Hermes is unavailable right now; the message was not sent, try again",
                busy="Hermes is running as many runs as it allows; the message was not sent, try again in a moment",
                busy_as=RateLimited,  # the protocol's code for "try again later"
                failed="Hermes refused the run: {text}",
            ) from None
        except BaseException:
            self.release(run)
            self._by_hermes.pop(run.hermes_run_id, None)
            await asyncio.shield(self._journal.ended(run))  # a run given up here is not carried on by the next
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
        self._start_reader(run)
        await self._conversations.touch(conversation.id)  # after the reader starts: deltas wait for no one

    def _start_reader(self, run: ActiveRun) -> None:
        if self._handing_over:  # stopping: the journal has the run, the next process reads it
            return
        run.reader = asyncio.create_task(self._read_then_after_turn(run), name=f"run-{run.run_id}")
        self._readers.add(run.reader)
        run.reader.add_done_callback(self._readers.discard)

    def adopt(self, run: ActiveRun) -> None:
        """Carry on a run a stopped process left in the journal (`pheby.runs.reattach` rebuilt it)."""
        self._by_conversation[run.conversation_id] = run
        self._watch_plugin(run, run.hermes_run_id)
        for decision in run.decisions:
            self._decision_runs[decision.id] = run
        self._transitions[run.conversation_id] += 1
        self._journal.adopt(run)
        self._start_reader(run)

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
            run.view.merged = True
            run.merge = ToolMerge(
                PLUGIN_TOOL_WINDOW_SECONDS,
                lambda began: self._perform(run, tr.tool_began(run.view, began)),
                lambda ended: self._perform(run, tr.tool_ended(run.view, ended)),
            )

    async def _create_run(
        self,
        run: ActiveRun,
        hermes_input: str,
        session_id: str,
        history: list[dict[str, str]] | None,
        options: RunOptions,
    ) -> hc.RunHandle:
        """`POST /v1/runs`. Where the gateway advertises `runs_idempotency`, the run's id goes as its
        Idempotency-Key and a create whose answer was lost (Hermes may have made the run all the same) is
        sent again, up to `CREATE_TRIES` times: Hermes answers with the run it made, so no run goes on
        that the user can't see. Elsewhere a lost answer is the client's `error` (one try)."""
        idempotent = self._features is not None and (await self._features.of(run.account)).runs_idempotency
        tries, attempt = (CREATE_TRIES if idempotent else 1), 1
        while True:
            try:
                return await run.client.create_run(
                    hermes_input,
                    session_id=session_id,
                    conversation_history=history,
                    instructions=RUN_INSTRUCTIONS,
                    model=options.model,
                    provider=options.provider,
                    model_options=options.model_options,
                    idempotency_key=run.run_id if idempotent else None,
                )
            except hc.HermesUnavailable as exc:
                if attempt == tries:
                    raise
                log.warning("run %s: its create got no answer (%s); sending it again", run.run_id, exc)
                await asyncio.sleep(CREATE_RETRY_SECONDS * attempt)
                attempt += 1

    async def _turns_before_run(self, run: ActiveRun, conversation: Conversation) -> list[TranscriptTurn] | None:
        """The text turns before the run (`HistoryPages.turns_before_run`). Without them the run can't be
        sent (no history), unless the plugin supplies the history: then the run goes ahead, its turn
        unfound afterwards and its files unanchored (None)."""
        try:
            return await self._history.turns_before_run(run.client, conversation)
        except hc.HermesError:
            if not run.extras.history:
                raise
            log.warning(
                "conversation %s: transcript unreadable before a run; running without logging it", conversation.id
            )
            return None

    async def _read_then_after_turn(self, run: ActiveRun) -> None:
        await self._read(run)
        try:
            await self._after_turn(run)
        except Exception:
            log.exception("after run %s: logging its history or anchoring its files failed", run.run_id)

    async def _after_turn(self, run: ActiveRun) -> None:
        """Log the finished turn and anchor its files (`turn_log`); a seam tests may slow down."""
        await self._turn_log.after_turn(run)

    async def _read(self, run: ActiveRun) -> None:
        contact = Contact()  # one window of failures to answer, across the stream's resumption and `settle`
        try:
            if await self._follow(run, contact):
                await self._lost(run)
            elif not run.finished.is_set():
                await self._recover(run, contact)
        except asyncio.CancelledError:
            if not run.finished.is_set() and not self._handing_over:
                await self._end(run, "cancelled" if run.cancel_requested else "failed", "The run stream ended")
            raise
        except Exception:
            log.exception("run %s reader crashed", run.run_id)
            await self._end(run, "failed", "Internal error while streaming the run")

    async def _follow(self, run: ActiveRun, contact: Contact) -> bool:
        """Translate the run's event stream until its end or until it is lost; True when Hermes went
        silent with the stream still open (see `reader.watch_stream`)."""
        waiting_since: list[float | None] = [time.monotonic()]
        # While the hub holds this message's text back, read Hermes once before it goes out, not per event.
        read_pause = pause_while_held(
            lambda: self._hub.delta_held_for(run.message_id),
            lambda: self._hub.send_held_delta(run.message_id, READ_LEAD_SECONDS),
            run.read_now,
        )

        async def consume() -> None:
            try:
                async with contextlib.aclosing(
                    resumed_event_batches(
                        run.client,
                        run.hermes_run_id,
                        self._recovery,
                        contact=contact,
                        read_pause=read_pause,
                        after=run.position,
                    )
                ) as batches:
                    async for batch in batches:
                        waiting_since[0] = None
                        EVENT_ARRIVED.set(time.monotonic())  # what this batch's frames are timed from
                        for event in tr.joined_deltas(batch):
                            await self._perform_async(run, tr.translate(run.view, event))
                            if type(event.seq) is int:  # after it was performed: a restart reads on from here
                                run.position = event.seq
                            if run.finished.is_set():
                                return
                        self._journal.progress(run)
                        run.caught_up.set()
                        waiting_since[0] = time.monotonic()
            except hc.HermesError as exc:
                log.warning("run %s: its event stream was lost (%s); asking Hermes how it goes", run.run_id, exc)

        consumer = asyncio.create_task(consume(), name=f"stream-{run.run_id}")
        watchdog = asyncio.create_task(
            watch_stream(run.client, run.hermes_run_id, lambda: waiting_since[0], self._recovery),
            name=f"watch-{run.run_id}",
        )
        try:
            await asyncio.wait((consumer, watchdog), return_when=asyncio.FIRST_COMPLETED)
        finally:
            silent = watchdog.done() and not consumer.done()
            for task in (consumer, watchdog):
                task.cancel()
            await asyncio.gather(consumer, watchdog, return_exceptions=True)
        if consumer.done() and not consumer.cancelled() and consumer.exception() is not None:
            raise consumer.exception()  # type: ignore[misc]
        return silent

    async def _lost(self, run: ActiveRun) -> None:
        """Hermes can't say how the run goes: stop it (best effort) and say so."""
        await stop_lost(run.client, run.hermes_run_id, self._recovery)
        await self._end(run, "cancelled" if run.cancel_requested else "failed", LOST_ERROR)

    async def _recover(self, run: ActiveRun, contact: Contact) -> None:
        """The stream is gone but the run may go on: the run stays active until Hermes says it ended."""
        waits = UnseenApprovals()
        outcome = await settle(
            run.client,
            run.hermes_run_id,
            self._recovery,
            contact=contact,
            on_status=lambda status: self._while_unread(run, waits, status),
        )
        if run.finished.is_set():
            return  # a cancel gave up waiting and finished it meanwhile
        match outcome.status:
            case "completed":
                await self._perform_async(run, tr.complete(run.view, outcome.output))
            case "cancelled":
                await self._end(run, "cancelled")
            case "failed":
                await self._end(run, "failed", outcome.error or "The run failed")
            case "lost":
                await self._lost(run)

    async def _while_unread(self, run: ActiveRun, waits: UnseenApprovals, status: hc.RunStatus) -> None:
        """Hermes's word on a run whose stream nobody reads: an approval asked unseen, or stale ones."""
        run.caught_up.set()
        waiting = run.decisions.has("approval")
        match waits.seen(status.status, approval_waiting=waiting):
            case "ask_unseen":
                ids = (secrets.token_hex(6), session_key(run.conversation_id), run.conversation_id, run.run_id)
                request = unseen_request(*ids)
                await self._ask(run, Decision(request.approval_id, request, unseen=True))
            case "expire_waiting":
                for decision in run.decisions:
                    if decision.kind == "approval" and not decision.answering:
                        self._expire(run, decision.id)

    # --- performing what the translation asks --------------------------------------------

    async def _perform_async(self, run: ActiveRun, outputs: list[tr.Output]) -> None:
        for output in outputs:
            match output:
                case tr.AskApproval(event=event):
                    await self._ask_approval(run, event)
                case tr.AskClarify(held_id=held_id, question=question, choices=choices, seq=seq):
                    await self._ask_clarify(run, held_id, question, choices, by_plugin=False, seq=seq)
                case tr.Complete():
                    await self._complete(run, output)
                case tr.Finish(status=status, error=error):
                    await self._end(run, status, error)
                case _:
                    self._perform(run, [output])

    def _perform(self, run: ActiveRun, outputs: list[tr.Output]) -> None:
        for output in outputs:
            match output:
                case tr.Emit(event=event):
                    self._hub.broadcast(run.account.id, event)
                case tr.StreamTool(event=tool):
                    if run.merge is None:
                        self._perform(
                            run,
                            tr.tool_began(run.view, tool)
                            if isinstance(tool, tr.ToolBegan)
                            else tr.tool_ended(run.view, tool),
                        )
                    elif isinstance(tool, tr.ToolBegan):
                        run.merge.stream_started(tool)
                    else:
                        run.merge.stream_completed(tool)
                case tr.RetireClarify(held_id=held_id):
                    self._retire_clarify(run, held_id, by_plugin=False)
                case tr.ExpireUnansweredApprovals():
                    # Hermes fails an unanswered approval closed after its own timeout, with no event of its own.
                    # An approval being answered is left to its responder: the failure may be its own deny.
                    for decision in run.decisions:
                        if decision.kind == "approval" and not decision.answering:
                            self._expire(run, decision.id)
                case tr.ExpirePluginClarifications():
                    for decision in run.decisions:
                        if decision.kind == "clarify" and decision.by_plugin and not decision.answering:
                            self._expire(run, decision.id)
                case tr.AskApproval() | tr.AskClarify() | tr.Complete() | tr.Finish():
                    raise AssertionError("performed by _perform_async")

    async def _ask_approval(self, run: ActiveRun, event: hc.ApprovalRequest) -> None:
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
        await self._ask(run, Decision(approval.approval_id, approval, pattern_keys=keys), event.seq)

    async def _ask_clarify(
        self,
        run: ActiveRun,
        held_id: str,
        question: str,
        choices: list[str] | None,
        *,
        by_plugin: bool,
        seq: int | UnsetType = UNSET,
    ) -> str:
        clarify = ev.ClarifyRequest(
            clarify_id=secrets.token_hex(5),
            session_key=session_key(run.conversation_id),
            conversation_id=run.conversation_id,
            run_id=run.run_id,
            question=question,
            choices=choices,
        )
        await self._ask(run, Decision(clarify.clarify_id, clarify, held_id=held_id, by_plugin=by_plugin), seq)
        return clarify.clarify_id

    async def _ask(self, run: ActiveRun, decision: Decision, seq: int | UnsetType = UNSET) -> None:
        """Journal the decision (with the stream's position past the event that asked it, so a resumed
        stream never asks it again), then ask the clients."""
        if type(seq) is int:
            run.position = seq
        await self._journal.decision_asked(run, decision)
        if run.finished.is_set():
            return  # the run ended meanwhile: nobody is left to answer
        run.decisions.ask(decision)
        self._decision_runs[decision.id] = run
        run.phase.move("awaiting_decision")  # a run being cancelled stays cancelling
        self._hub.broadcast(run.account.id, decision.request)

    def _retire_clarify(self, run: ActiveRun, held_id: str, *, by_plugin: bool) -> None:
        """Hermes (or the plugin) stopped waiting for an answer: unless a client's answer is on its way
        (its reply resolves it), the question expired."""
        for decision in run.decisions:
            if (
                decision.kind == "clarify"
                and decision.held_id == held_id
                and decision.by_plugin == by_plugin
                and not decision.answering
            ):
                self._expire(run, decision.id)

    async def _resolve(self, run: ActiveRun, decision_id: str, answer: Answer) -> None:
        """A client's answer was taken: journaled before it is acknowledged."""
        await self._journal.decision_settled(decision_id)
        self._resolved(run, decision_id, run.decisions.resolve(decision_id, answer))

    def _expire(self, run: ActiveRun, decision_id: str) -> None:
        self._resolved(run, decision_id, run.decisions.expire(decision_id))

    def _resolved(self, run: ActiveRun, decision_id: str, event: Resolved | None) -> None:
        if event is None:
            return
        self._journal.forget_decision(decision_id)  # an answer (journaled already) or an expiry
        self._decision_runs.pop(decision_id, None)
        if not run.decisions:
            run.phase.move("running")  # refused once the run is cancelling or finished
        self._hub.broadcast(run.account.id, event)

    async def _complete(self, run: ActiveRun, completion: tr.Complete) -> None:
        if run.merge is not None:
            run.merge.flush()
            run.merge = None  # tool events the plugin pushes from now on would follow message.complete
        self._hub.broadcast(run.account.id, completion.message)
        await self._media.deliver(run, completion.paths)
        await self._end(run, "completed")

    async def _end(self, run: ActiveRun, status: ev.RunStatus, error: str | None = None) -> None:
        """End the run: out of the journal first, then its one `run.finished` (even if cancelled meanwhile)."""
        if run.finished.is_set() or run.ending:
            return
        run.ending = True
        try:
            await asyncio.shield(self._journal.ended(run))
        finally:
            self._finish(run, status, error)

    def _finish(self, run: ActiveRun, status: ev.RunStatus, error: str | None = None) -> None:
        """Emit the run's one `run.finished` and clear its state (`_end`: once the journal has let it go)."""
        if run.finished.is_set():
            return
        if run.merge is not None:
            run.merge.flush()
        run.phase.move("finished")
        run.finished.set()
        run.caught_up.set()
        if self._by_hermes.pop(run.hermes_run_id, None) is not None:
            self._recent[run.hermes_run_id] = run  # late plugin pushes (MEDIA: files) still find it
            while len(self._recent) > RECENT_RUNS:
                self._recent.popitem(last=False)
        self._perform(run, tr.end_running_tools(run.view))
        for resolved in run.decisions.settle_all():
            self._decision_runs.pop(resolved_id(resolved), None)
            self._hub.broadcast(run.account.id, resolved)
        self._last_tools[run.conversation_id] = list(run.tools.values())
        if not run.message_completed:  # cancelled or failed: the turn still ends with its message, as drafted
            run.view.message_completed = True
            self._hub.broadcast(
                run.account.id,
                ev.MessageComplete(conversation_id=run.conversation_id, message_id=run.message_id, text=run.draft),
            )
        self._settled.add(
            run.conversation_id,
            SettledTurn(
                run_id=run.run_id,
                user_message_id=run.user_message_id,
                answer_message_id=run.message_id,
                user_text=run.user_text,
                answer_text=run.draft,
                stored_before=run.stored_before,
                finished_at=time.monotonic(),
            ),
        )
        self.release(run)
        self._transitions[run.conversation_id] += 1
        metrics.RUNS_FINISHED.labels(status).inc()
        if run.reattached:
            metrics.RUNS_REATTACHED.labels(status).inc()
        metrics.RUN_SECONDS.observe(time.monotonic() - run.reserved_at)
        self._hub.broadcast(
            run.account.id,
            ev.RunFinished(
                conversation_id=run.conversation_id,
                run_id=run.run_id,
                status=status,
                error=sanitize_error(error) if status == "failed" and error else UNSET,
            ),
        )

    # --- client decisions ----------------------------------------------------------------

    async def cancel(self, account_id: str, conversation_id: str, run_id: str, *, once_made: bool = False) -> None:
        """Stop the run and wait (bounded) for it to end. A run Hermes has not made yet is `not_found`, unless
        its conversation is being deleted or `once_made` (a revoke): then it is stopped as soon as it is made."""
        run = self._by_conversation.get(conversation_id)
        if run is None or run.run_id != run_id or run.account.id != account_id or run.finished.is_set():
            raise NotFound("No such active run")
        if not run.made:  # reserved, no Hermes run made yet
            if conversation_id not in self._deleting and not once_made:
                raise NotFound("The run has not started yet")
            # A delete (the start sees the conversation going and makes no run, or made one just now) or a
            # revoke: wait for the start to end, then stop what it made.
            if not await _made_in_time(run) or self._by_conversation.get(conversation_id) is not run:
                raise NotFound("The run did not start")
        run.cancel_requested = True
        run.view.cancelling = True
        try:
            await run.client.stop_run(run.hermes_run_id)
        except hc.HermesError as exc:
            raise hermes_failure(
                exc, not_found="The run can no longer be interrupted", failed="Hermes did not stop the run: {text}"
            ) from None
        run.phase.move("cancelling")
        run.read_now.set()  # Hermes's answer to the stop is read as it comes, not after the text's window
        try:
            await asyncio.wait_for(asyncio.shield(run.finished.wait()), timeout=CANCEL_GRACE_SECONDS)
        except TimeoutError:
            if self._handing_over:
                return  # stopping: the journal has the cancel asked, and the next process sees it through
            if run.reader is not None:
                run.reader.cancel()
            await self._end(run, "cancelled")

    def _begin_answer(
        self, account_id: str, decision_id: str, kind: Kind, answer: Answer, unknown: type[NotFound]
    ) -> tuple[ActiveRun, Decision]:
        """The run and pending decision a client's answer is for, now marked as being answered; `unknown`
        when it is unknown, stale, another account's, or another client's answer is already on its way."""
        run = self._decision_runs.get(decision_id)
        decision = (
            run.decisions.begin_answer(decision_id, kind, answer)
            if run is not None and run.account.id == account_id
            else None
        )
        if run is None or decision is None:
            raise unknown()
        return run, decision

    async def respond_approval(
        self, account_id: str, approval_id: str, choice: str, request_id: str | UnsetType
    ) -> None:
        answer = Answer(choice, request_id)
        run, decision = self._begin_answer(account_id, approval_id, "approval", answer, ApprovalNotFound)
        if decision.unseen and choice != "deny":
            run.decisions.answer_not_taken(approval_id)
            raise BadRequest("Nobody here saw what this approval is for: it can only be denied")
        try:
            await run.client.respond_approval(run.hermes_run_id, choice)
        except (hc.HermesNotFound, hc.HermesRejected):
            if approval_id not in run.decisions:
                return  # the run ended meanwhile and resolved it with this answer
            self._expire(run, approval_id)
            raise ApprovalNotFound() from None
        except BaseException as exc:
            if isinstance(exc, Exception) and approval_id not in run.decisions:
                return  # the run ended meanwhile and resolved it with this answer
            run.decisions.answer_not_taken(approval_id)  # Hermes never took it: it waits for an answer again
            raise
        if choice == "session":
            for key in decision.pattern_keys:
                await self._conversations.approve_pattern(run.conversation_id, key)
        await self._resolve(run, approval_id, answer)

    async def respond_clarify(
        self, account_id: str, clarify_id: str, response: str, request_id: str | UnsetType
    ) -> None:
        answer = Answer(response, request_id)
        run, decision = self._begin_answer(account_id, clarify_id, "clarify", answer, ClarifyNotFound)
        try:
            answered = await self._answer_clarify(run, decision, response)
        except BaseException as exc:
            if isinstance(exc, Exception) and clarify_id not in run.decisions:
                return  # the run ended meanwhile and resolved it with this answer
            run.decisions.answer_not_taken(clarify_id)
            raise
        if clarify_id not in run.decisions:
            return  # the run ended meanwhile and resolved it with this answer
        if not answered:
            self._expire(run, clarify_id)
            raise ClarifyNotFound()
        await self._resolve(run, clarify_id, answer)

    async def _answer_clarify(self, run: ActiveRun, decision: Decision, response: str) -> bool:
        """Hand the answer to whoever holds the question (the plugin or Hermes); False if it no longer waits."""
        if decision.by_plugin and self._plugin is not None:
            return await self._plugin.answer_clarify(decision.held_id, response)
        try:
            await run.client.respond_clarify(run.hermes_run_id, decision.held_id, response)
        except (hc.HermesNotFound, hc.HermesRejected):
            return False
        return True

    # --- pushes of the companion plugin (keyed by Hermes's run id) ----------------------------

    def plugin_run(self, hermes_run_id: str) -> ActiveRun | None:
        """The active, or recently finished, run behind a Hermes run id, of the plugin's gateway only.

        The plugin is installed in the server's Hermes: a run of an account with a gateway of its
        own is none of its business, whatever id a push names."""
        run = self._by_hermes.get(hermes_run_id) or self._recent.get(hermes_run_id)
        return run if run is not None and _on_servers_hermes(run) else None

    def _plugin_active_run(self, hermes_run_id: str) -> ActiveRun | None:
        run = self._by_hermes.get(hermes_run_id)
        return run if run is not None and _on_servers_hermes(run) else None

    async def plugin_push(self, push: PluginInput) -> bool:
        """Take one push of the plugin; False when it found nothing to act on (for a clarification:
        no client can be asked, so the plugin lets the run go on)."""
        match push:
            case PluginToolStarted():
                run = self._plugin_active_run(push.hermes_run_id)
                if run is None or run.merge is None:
                    return False
                run.merge.plugin_started(push.began())
            case PluginToolEnded():
                run = self._plugin_active_run(push.hermes_run_id)
                if run is None or run.merge is None:
                    return False
                run.merge.plugin_completed(push.ended())
            case PluginClarifyAsked():
                run = self._plugin_active_run(push.hermes_run_id)
                if run is None or run.message_completed or run.finished.is_set() or not run.extras.clarify:
                    return False
                await self._ask_clarify(run, push.clarify_id, push.question, push.choices, by_plugin=True)
            case PluginClarifyExpired():
                run = self._plugin_active_run(push.hermes_run_id)
                if run is None:
                    return False
                self._retire_clarify(run, push.clarify_id, by_plugin=True)
            case PluginMediaDone():
                run = self.plugin_run(push.hermes_run_id)
                if run is None:
                    return False
                run.media_done.set()
        return True

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
        await self._media.from_disk(turn, media_paths(text))
        self._transitions[conversation_id] += 1
        self._hub.broadcast(
            account_id, ev.RunFinished(conversation_id=conversation_id, run_id=run_id, status="completed")
        )
        return run_id

    async def shutdown(self) -> None:
        """A graceful stop hands every run over to the next process, never cancels one: the readers stop,
        and the journal records where each run is; the runs go on in Hermes."""
        self._handing_over = True
        starting = [run.started.wait() for run in self._by_conversation.values() if not run.made]
        with contextlib.suppress(TimeoutError):  # a run being made now is journaled once Hermes names it
            await asyncio.wait_for(asyncio.gather(*starting), timeout=SHUTDOWN_START_WAIT_SECONDS)
        active = {run.reader for run in self._by_conversation.values()}
        after_turn = [reader for reader in self._readers if reader not in active]
        if after_turn:  # a moment for runs just finished to log their turn (a transcript read, a few rows)
            await asyncio.wait(after_turn, timeout=SHUTDOWN_AFTER_TURN_SECONDS)
        readers = list(self._readers)
        for reader in readers:
            reader.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        await asyncio.gather(*(self._journal.save(run) for run in self._by_conversation.values() if run.made))


def _on_servers_hermes(run: ActiveRun) -> bool:
    return not run.account.hermes.url


async def _made_in_time(run: ActiveRun) -> bool:
    """Wait (bounded) for a reserved run's start to end; whether it made the Hermes run."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(run.started.wait(), timeout=START_WAIT_SECONDS)
    return run.made
