"""`RunManager`: the run engine's wiring, one active run per conversation.

It starts runs (`send`), feeds each Hermes event through the pure translation (`translate`) and
performs what comes out, hands the runs' questions to the decision desk (`decision_desk`), resumes a
broken stream or recovers a lost one by asking Hermes (`reader`), logs the turn afterwards (`turn_log`),
delivers its files (`media`) and keeps finished turns for snapshots (`settled`). The journal
(`journal`) holds what a restart needs; a graceful stop hands every run over (`shutdown`), and the next
process carries it on (`reattach`, `adopt`).
"""

import asyncio
import contextlib
import logging
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Protocol

from msgspec import UNSET, UnsetType

import hermes_client as hc
from pheby import metrics
from pheby.cancelling import shielded
from pheby.errors import (
    ConversationNotFound,
    DatabaseError,
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
from pheby.protocol.hub import EVENT_ARRIVED, Hub, Stamp
from pheby.redact import sanitize_error
from pheby.runs import translate as tr
from pheby.runs.active import ActiveRun, AssistantTurn
from pheby.runs.decision_desk import DecisionDesk
from pheby.runs.forwarding import CancelRun, NoOtherOwners, RunOwners
from pheby.runs.journal import OwnedRun, RunJournal
from pheby.runs.media import DeliverMedia, MediaDelivery
from pheby.runs.plugin_runs import PluginRuns
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
from pheby.runs.unseen import UnseenApprovals
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

# The companion plugin: how long a tool event of the stream waits for the plugin's push of the same call.
PLUGIN_TOOL_WINDOW_SECONDS = 2.5

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
        owners: RunOwners | None = None,
    ) -> None:
        self._hub = hub
        self._journal = journal  # what a restart needs to carry the runs on
        self._leases = journal.leases  # whether this process still owns its runs
        journal.when_taken_over(self.let_go)
        hub.stamp_with(self._stamp)  # a run's logged events carry its journal's place along
        self._handing_over = False  # a graceful stop: runs go on in Hermes, for the next process
        self._features = features  # what each gateway advertises (None: nothing)
        self._conversations = conversations
        self._hermes_for = hermes_for
        self._media = MediaDelivery(deliver_media)
        self._plugin = plugin
        self._attachments = attachments
        self._recovery = recovery
        self._by_conversation: dict[str, ActiveRun] = {}
        self._owners = owners or NoOtherOwners()  # the other processes, for runs they own
        self.decision_desk = DecisionDesk(hub, journal, conversations, plugin, self._owners)  # questions, answers
        self.plugin_runs = PluginRuns(self.decision_desk)  # the runs the plugin's pushes name by Hermes's run id
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

    def all_active(self) -> list[ActiveRun]:
        return list(self._by_conversation.values())

    def snapshot(self, conversation_id: str) -> Snapshot:
        run = self._by_conversation.get(conversation_id)
        if run is None:
            return None, list(self._last_tools.get(conversation_id, [])), [], []
        approvals = [r for r in run.decisions.requests("approval") if isinstance(r, ev.ApprovalRequest)]
        clarifications = [r for r in run.decisions.requests("clarify") if isinstance(r, ev.ClarifyRequest)]
        return run.snapshot(), list(run.tools.values()), approvals, clarifications

    @property
    def owners(self) -> RunOwners:
        """The other processes, as this one reaches the runs they own."""
        return self._owners

    async def owner_elsewhere(self, account_id: str, conversation_id: str) -> OwnedRun | None:
        """The conversation's run, when another process owns it."""
        owned = await self._journal.owner_of_conversation(account_id, conversation_id)
        return owned if owned is not None and owned.owner != self._leases.holder else None

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
            if not await self._journal.reserved(run):
                raise RunActive()  # another process's run
            if self._attachments is not None:
                prepared = await self._attachments.prepare_chat_input(account.id, conversation.id, text, attachment_ids)
                hermes_input, attachments = prepared.text, prepared.attachments
                if attachments:
                    await self._conversations.remember_input(conversation.id, hermes_input, text)
            else:
                hermes_input, attachments = text, []
        except BaseException:
            self.release(run)
            await asyncio.shield(self._journal.ended(run))
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
        """Claim the conversation's run slot in this process (synchronously, so two sends can't both win);
        the journal's reservation claims it across processes."""
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

    @contextlib.asynccontextmanager
    async def deleting(self, conversation_id: str) -> AsyncIterator[None]:
        """While a conversation is deleted, sends to it are refused (`conversation_not_found`), by every process
        (the conversation's row is marked); a delete that fails takes the mark away."""
        self._deleting.add(conversation_id)
        try:
            await self._conversations.mark_deleting(conversation_id)
            try:
                yield
            except BaseException:
                with contextlib.suppress(Exception):  # else the mark lapses by itself
                    await shielded(self._conversations.unmark_deleting(conversation_id))
                raise
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
            # Before the run is made. Once the plugin's pushes can find it (`_watch_plugin`), nothing may await
            # until run.accepted is out.
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
            await asyncio.shield(self._journal.ended(run))
            raise hermes_failure(
                exc,
                unavailable="Hermes is unavailable right now; the message was not sent, try again",
                busy="Hermes is running as many runs as it allows; the message was not sent, try again in a moment",
                busy_as=RateLimited,  # the protocol's code for "try again later"
                failed="Hermes refused the run: {text}",
            ) from None
        except BaseException:
            self.release(run)
            self.plugin_runs.forget(run, keep=False)
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

    def let_go(self, run: ActiveRun) -> None:
        """Another process owns the run now (its lease ran out and was taken over): stop reading it, saying
        nothing to the clients; its new owner says the rest."""
        if run.finished.is_set():
            return
        log.warning("run %s: taken over by another process; letting it go", run.run_id)
        metrics.RUNS_LET_GO.inc()
        run.taken_over = True
        run.finished.set()  # nothing of it is done here any more: its reader, answers and end stop short
        self._journal.close(run)
        self.plugin_runs.forget(run, keep=False)
        self.decision_desk.let_go(run)
        self.release(run)
        if run.reader is not None and run.reader is not asyncio.current_task():
            run.reader.cancel()

    def _stamp(self, account_id: str, event: ev.Event) -> Stamp | None:
        """The journal's stamp for a logged event of a run under way here."""
        run = self._by_conversation.get(getattr(event, "conversation_id", ""))
        if run is None or run.account.id != account_id or run.finished.is_set():
            return None
        if getattr(event, "run_id", None) != run.run_id and getattr(event, "message_id", None) != run.message_id:
            return None  # the conversation's, not the run's (a rename, say)
        return self._journal.stamp(run)

    async def _still_owned(self, run: ActiveRun) -> bool:
        """Whether this process still owns the run, asking the database once its leases may have lapsed (a
        pause, the database away); if not, the run is let go."""
        if self._leases.valid() or await self._leases.confirm(run.run_id, run.epoch):
            return True
        self.let_go(run)
        return False

    def adopt(self, run: ActiveRun) -> None:
        """Carry on a run a stopped process left in the journal (`pheby.runs.reattach` rebuilt it)."""
        self._by_conversation[run.conversation_id] = run
        self._watch_plugin(run, run.hermes_run_id)
        self.decision_desk.adopt(run)
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
        self.plugin_runs.watch(run)
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
        if run.taken_over:
            return  # its turn is its new owner's to log
        try:
            await self._after_turn(run)
        except Exception:
            log.exception("after run %s: logging its history or anchoring its files failed", run.run_id)

    async def _after_turn(self, run: ActiveRun) -> None:
        """Log the finished turn and anchor its files (`turn_log`); a seam tests may slow down."""
        await self._turn_log.after_turn(run)

    async def _read(self, run: ActiveRun) -> None:
        contact = Contact()  # one window of failures to answer, across the stream's resumption and `settle`
        # A run carried on from the journal whose gateway numbered none of its events has no stream to resume:
        # reopening one (0.19.0) would make a second reader of a queue whose first, dead one takes the next event.
        resumable = not run.reattached or run.position is not None
        try:
            if resumable and await self._follow(run, contact):
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
                            run.performing = event.seq if type(event.seq) is int else run.position
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
            # The watchdog ends when Hermes is gone (silent), or when it says the run ended though its stream
            # never did: then `_recover` takes the end from Hermes.
            silent = watchdog.done() and not consumer.done() and not watchdog.cancelled() and watchdog.result()
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
            on_status=lambda status: self.decision_desk.while_unread(run, waits, status),
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

    # --- performing what the translation asks --------------------------------------------

    async def _perform_async(self, run: ActiveRun, outputs: list[tr.Output]) -> None:
        if not await self._still_owned(run):
            return
        for output in outputs:
            match output:
                case tr.AskApproval(event=event):
                    await self.decision_desk.ask_approval(run, event)
                case tr.AskClarify(held_id=held_id, question=question, choices=choices, seq=seq):
                    await self.decision_desk.ask_clarify(run, held_id, question, choices, by_plugin=False, seq=seq)
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
                    self.decision_desk.retire_clarify(run, held_id, by_plugin=False)
                case tr.ExpireUnansweredApprovals():
                    # Hermes fails an unanswered approval closed after its own timeout, with no event of its own.
                    # An approval being answered is left to its responder: the failure may be its own deny.
                    self.decision_desk.expire_waiting(run, "approval")
                case tr.ExpirePluginClarifications():
                    self.decision_desk.expire_waiting(run, "clarify", by_plugin_only=True)
                case tr.AskApproval() | tr.AskClarify() | tr.Complete() | tr.Finish():
                    raise AssertionError("performed by _perform_async")

    async def _complete(self, run: ActiveRun, completion: tr.Complete) -> None:
        if run.merge is not None:
            run.merge.flush()
            run.merge = None  # tool events the plugin pushes from now on would follow message.complete
        self._hub.broadcast(run.account.id, completion.message)
        await self._media.deliver(run, completion.paths)
        await self._end(run, "completed")

    async def _end(self, run: ActiveRun, status: ev.RunStatus, error: str | None = None) -> None:
        """End the run: out of the journal first, then its one `run.finished` (even if cancelled meanwhile)."""
        if run.finished.is_set() or run.ending or not await self._still_owned(run):
            return
        run.ending = True
        ours = True  # cancelled while the journal lets it go: it ends here all the same
        try:
            ours = await asyncio.shield(self._journal.ended(run))
        finally:
            if ours:
                self._finish(run, status, error)
            else:
                self.let_go(run)

    def _finish(self, run: ActiveRun, status: ev.RunStatus, error: str | None = None) -> None:
        """Emit the run's one `run.finished` and clear its state (`_end`: once the journal has let it go)."""
        if run.finished.is_set():
            return
        if run.merge is not None:
            run.merge.flush()
        run.phase.move("finished")
        run.finished.set()
        run.caught_up.set()
        self.plugin_runs.forget(run, keep=True)  # late plugin pushes (MEDIA: files) still find it
        self._perform(run, tr.end_running_tools(run.view))
        self.decision_desk.settle_all(run)
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

    async def hermes_run_id(self, account_id: str, conversation_id: str, run_id: str) -> str:
        """Hermes's id of the account's active run, whichever process owns it; `not_found` when it is not
        under way, or not made in Hermes yet."""
        run = self._by_conversation.get(conversation_id)
        if run is not None and (run.run_id != run_id or run.account.id != account_id):
            raise NotFound("No such active run")
        made = run.hermes_run_id if run is not None else None
        if run is None and (owned := await self._journal.owner_of_conversation(account_id, conversation_id)):
            made = owned.hermes_run_id if owned.run_id == run_id else None
        if made is None:
            raise NotFound("No such active run")
        if not made:
            raise NotFound("The run has not started yet")
        return made

    async def cancel(
        self, account_id: str, conversation_id: str, run_id: str, *, once_made: bool = False, forwarded: bool = False
    ) -> None:
        """Stop the run and wait (bounded) for it to end. A run Hermes has not made yet is `not_found`, unless
        its conversation is being deleted or `once_made` (a revoke, a delete): then it is stopped as soon as it is made.
        A run another process owns is stopped there (unless this is the cancel `forwarded` from another)."""
        run = self._by_conversation.get(conversation_id)
        if run is None and not forwarded:
            owned = await self.owner_elsewhere(account_id, conversation_id)
            if owned is not None and owned.run_id == run_id:
                command = CancelRun(
                    account_id=account_id, conversation_id=conversation_id, run_id=run_id, once_made=once_made
                )
                await self._owners.forward(owned.owner, command)
                return
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
        with contextlib.suppress(DatabaseError):  # else their leases lapse: taken over within one lease
            await self._leases.release()  # the next process (or another one) takes them over at once


async def _made_in_time(run: ActiveRun) -> bool:
    """Wait (bounded) for a reserved run's start to end; whether it made the Hermes run."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(run.started.wait(), timeout=START_WAIT_SECONDS)
    return run.made
