"""The run journal: what a new process needs to carry on the runs this one was reading.

A run is written once Hermes has made it (`admitted`), again every `CHECKPOINT_SECONDS` while it
streams (`progress`, in the background, never on every delta) and exactly at a graceful stop
(`save`): its ids, phase, the position in Hermes's event stream (`position`, the last event consumed
where the gateway numbers them) and the text streamed up to that position, a consistent pair. Its
pending decisions are written when asked and deleted when answered or expired, each before the
clients hear of it; the run's row goes before its `run.finished` does (`ended`). `pheby.runs.reattach`
reads it all back at start-up.

Writes of one run go one at a time and carry a revision: a write never lands over a newer one, and
none lands after the run's end. Each names the run's owner and epoch (`pheby.runs.leases`): once another
process has taken the run over, this one's writes land nowhere, and it is told (`when_taken_over`).
"""

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

import msgspec

from pheby.db import Connection, Database, DatabaseError, Row
from pheby.errors import ConversationNotFound
from pheby.plugin.extras import PluginExtras
from pheby.protocol import frames as ev
from pheby.protocol.hub import Stamp
from pheby.runs.active import ActiveRun
from pheby.runs.decisions import Decision
from pheby.runs.leases import RunLeases
from pheby.runs.phase import ALLOWED, Phase

log = logging.getLogger("pheby.runs")

CHECKPOINT_SECONDS: Final = 2.0  # at most this much of a run's stream is read again after a crash

_JSON = msgspec.json.Encoder()
_decode_tools = msgspec.json.Decoder(list[ev.ToolState]).decode
_decode_request = msgspec.json.Decoder(ev.ApprovalRequest | ev.ClarifyRequest).decode
_decode_extras = msgspec.json.Decoder(PluginExtras).decode


class JournaledDecision(msgspec.Struct, frozen=True, kw_only=True):
    decision_id: str
    request: ev.ApprovalRequest | ev.ClarifyRequest
    held_id: str
    pattern_keys: list[str]
    by_plugin: bool
    unseen: bool

    def decision(self) -> Decision:
        return Decision(
            self.decision_id,
            self.request,
            held_id=self.held_id,
            pattern_keys=list(self.pattern_keys),
            by_plugin=self.by_plugin,
            unseen=self.unseen,
        )


class JournaledRun(msgspec.Struct, frozen=True, kw_only=True):
    run_id: str
    account_id: str
    conversation_id: str
    hermes_run_id: str
    gateway: str
    user_text: str
    sent_text: str
    stored_before: int
    extras: PluginExtras
    judged_at: float
    phase: Phase
    cancel_requested: bool
    position: int | None
    streamed: str
    tools: list[ev.ToolState]
    decisions: list[JournaledDecision]
    epoch: int


class OwnedRun(NamedTuple):
    """A run under way as the journal has it: the process that owns it, its id, Hermes's ('' while Hermes
    makes it)."""

    owner: str
    run_id: str
    hermes_run_id: str


@dataclass
class _Entry:
    """One run's writes: one at a time (`lock`), numbered (`revision`), none after its end (`closed`)."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    revision: int = 0
    saved_at: float = 0.0
    positioned: bool = False  # a position was written: the gateway numbers the run's events
    closed: bool = False


class RunJournal:
    def __init__(
        self,
        db: Database,
        *,
        leases: RunLeases | None = None,
        every: float = CHECKPOINT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._db = db
        self.leases = leases or RunLeases(db)
        self._every = every
        self._clock = clock
        self._entries: dict[str, _Entry] = {}
        self._background: set[asyncio.Task[object]] = set()
        self._taken_over: Callable[[ActiveRun], None] = lambda run: None

    def when_taken_over(self, callback: Callable[[ActiveRun], None]) -> None:
        """Who is told that a write found the run another process's (it lets the run go)."""
        self._taken_over = callback

    # --- the run's row ---------------------------------------------------------------------

    async def reserved(self, run: ActiveRun) -> bool:
        """Hold the conversation's one run slot for `run` across processes (this process owns it, epoch 1);
        False if a run of the conversation is under way already, whichever process owns it. Raises
        `ConversationNotFound` if the conversation is gone or being deleted (`Conversations.mark_deleting`), by
        any process, and `DatabaseError` when that can't be known."""
        row = (*_row(run, 0), self.leases.holder, 1, self.leases.expiry())
        now = time.time()

        def reserve(conn: Connection) -> bool:
            # Writers take turns (`Database.transaction`): no other reservation, delete or mark lands in between.
            marked = conn.execute("SELECT deleting_until FROM conversations WHERE id = ?", (run.conversation_id,))
            conversation = marked.fetchone()
            if conversation is None or (conversation[0] is not None and conversation[0] > now):
                raise ConversationNotFound()
            if conn.execute("SELECT 1 FROM active_runs WHERE conversation_id = ?", (run.conversation_id,)).fetchone():
                return False
            conn.execute(_INSERT, row)
            return True

        if not await self._db.transaction(reserve):
            return False
        run.epoch = 1
        self._entries[run.run_id] = _Entry(saved_at=self._clock())
        return True

    async def admitted(self, run: ActiveRun) -> None:
        """Hermes made the run: from here a restart, or another process, carries it on."""
        await self._write(run, "admitting", lambda conn: None, admitting=True)

    def adopt(self, run: ActiveRun) -> None:
        """A run read back from the journal is journaled again from here."""
        self._entries[run.run_id] = _Entry(saved_at=self._clock(), positioned=run.position is not None)

    def progress(self, run: ActiveRun) -> None:
        """The run read on: write where it is, in the background, if the last write is old enough, or at the
        first numbered event (from then on a restart can reopen the stream rather than poll the run's status)."""
        entry = self._entries.get(run.run_id)
        if entry is None or entry.lock.locked():
            return
        first_position = run.position is not None and not entry.positioned
        if not first_position and self._clock() - entry.saved_at < self._every:
            return
        entry.saved_at = self._clock()
        self._spawn(self.save(run))

    async def save(self, run: ActiveRun) -> None:
        """Write where the run is now (also a graceful stop's hand-over)."""
        await self._write(run, "saving", lambda conn: None)

    async def decision_asked(self, run: ActiveRun, decision: Decision) -> None:
        """The decision, and the run where it is now (past the event that asked it), in one transaction."""
        request = msgspec.json.encode(decision.request).decode()
        asked = (decision.id, run.run_id, request, decision.held_id, _JSON.encode(decision.pattern_keys).decode(),
                 int(decision.by_plugin), int(decision.unseen), time.time())  # fmt: skip
        await self._write(run, "asking a decision", lambda conn: conn.execute(_INSERT_DECISION, asked))

    async def ended(self, run: ActiveRun) -> bool:
        """The run ends: its row and decisions go (before its `run.finished` does), after any write under way.
        False if the run is another process's now: its end is that process's to say."""
        entry = self._entries.pop(run.run_id, None)
        if entry is None:
            return True
        entry.closed = True
        fence = (run.run_id, self.leases.holder, run.epoch)

        def end(conn: Connection) -> bool:
            deleted = conn.execute("DELETE FROM active_runs WHERE run_id = ? AND owner = ? AND epoch = ?", fence)
            return deleted.rowcount == 1 or _owner(conn, run.run_id) is None

        async with entry.lock:
            ours = await self._quiet_write(run.run_id, "ending", end)
        return ours is not False

    def stamp(self, run: ActiveRun) -> Stamp | None:
        """Where the run is as one of its logged events goes out, written in that event's append
        (`Hub.stamp_with`): the log and the journal's position move together, so a process that takes the run
        over reads Hermes on after the last event logged, not from a checkpoint up to `every` seconds older.
        Where the row is another process's now, the event is dropped (its new owner reads it again) and this
        process lets the run go."""
        entry = self._entries.get(run.run_id)
        if entry is None or entry.closed or run.epoch == 0:
            return None
        entry.revision += 1  # taken now: an earlier write still under way lands under it, never over it
        entry.saved_at = self._clock()
        # Past the Hermes event being performed: its outputs are this event and what goes out with it.
        position = run.performing if run.performing is not None else run.position
        progress = _progress(run, entry.revision, position)
        row = (*progress, run.run_id, self.leases.holder, run.epoch, entry.revision)
        owner = (self.leases.holder, run.epoch)

        def write(conn: Connection) -> bool:
            return conn.execute(_UPDATE, row).rowcount == 1 or _owner(conn, run.run_id) in (owner, None)

        return Stamp(write, lambda: self._lost(run))

    def _lost(self, run: ActiveRun) -> None:
        """A write found the run another process's: nothing more of it is written here, and who lets it go is
        told (once)."""
        if run.run_id in self._entries:
            self.close(run)
            log.warning("run %s: another process owns it now; this one lets it go", run.run_id)
            self._taken_over(run)

    def close(self, run: ActiveRun) -> None:
        """The run is another process's now: nothing more of it is written here."""
        entry = self._entries.pop(run.run_id, None)
        if entry is not None:
            entry.closed = True

    async def _write(
        self, run: ActiveRun, what: str, then: Callable[[Connection], object], *, admitting: bool = False
    ) -> None:
        """Write where the run is now (`admitting`: and what Hermes made of it), then `then`, in one
        transaction, where the row is still this process's."""
        entry = self._entries.get(run.run_id)
        if entry is None:
            return
        async with entry.lock:
            if entry.closed:
                return
            entry.revision += 1
            entry.positioned = run.position is not None
            fence = (run.run_id, self.leases.holder, run.epoch, entry.revision)
            statement, row = (
                (_ADMIT, (*_made(run), *_progress(run, entry.revision), *fence))
                if admitting
                else (_UPDATE, (*_progress(run, entry.revision), *fence))
            )
            owner = (self.leases.holder, run.epoch)

            def write(conn: Connection) -> bool:
                if conn.execute(statement, row).rowcount == 0 and _owner(conn, run.run_id) != owner:
                    return False  # taken over (or its conversation deleted): not this process's any more
                then(conn)
                return True

            if await self._quiet_write(run.run_id, what, write) is False:
                self._lost(run)

    # --- decisions -------------------------------------------------------------------------

    async def decision_settled(self, decision_id: str) -> None:
        """A client's answer was taken (journaled before it is acknowledged)."""
        await self._quiet_write(decision_id, "settling a decision", _delete_decision(decision_id))

    def forget_decision(self, decision_id: str) -> None:
        """A decision expired (or its answer is journaled already): its row goes, in the background."""
        self._spawn(self._quiet_write(decision_id, "forgetting a decision", _delete_decision(decision_id)))

    def _spawn(self, work: Coroutine[Any, Any, object]) -> None:
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # --- whose runs ------------------------------------------------------------------------

    async def owner_of_conversation(self, account_id: str, conversation_id: str) -> OwnedRun | None:
        """The account's run under way in the conversation, whichever process owns it (None: none)."""
        row = await self._db.run(
            lambda c: c.execute(
                "SELECT owner, run_id, hermes_run_id FROM active_runs WHERE conversation_id = ? AND account_id = ?",
                (conversation_id, account_id),
            ).fetchone()
        )
        return None if row is None else OwnedRun(str(row[0]), str(row[1]), str(row[2]))

    async def owner_of_decision(self, account_id: str, decision_id: str) -> str | None:
        """The process that owns the run whose pending decision this is (None: no such decision waits)."""
        row = await self._db.run(
            lambda c: c.execute(
                "SELECT r.owner FROM run_decisions d JOIN active_runs r ON r.run_id = d.run_id "
                "WHERE d.decision_id = ? AND r.account_id = ?",
                (decision_id, account_id),
            ).fetchone()
        )
        return None if row is None else str(row[0])

    # --- reading back ----------------------------------------------------------------------

    async def load(self, run_ids: list[str] | None = None) -> list[JournaledRun]:
        """These runs (None: all) as journaled, their decisions oldest first (one that can't be read is
        dropped)."""
        if run_ids == []:
            return []  # none claimed (the keeper's usual pass): nothing to read
        rows, decisions = await self._db.run(lambda conn: _read(conn, run_ids))
        runs: list[JournaledRun] = []
        for row in rows:
            try:
                runs.append(_journaled(row, decisions.get(row["run_id"], [])))
            except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
                log.warning("run %s: its journal entry can't be read (%s); dropped", row["run_id"], exc)
                await self.forget(row["run_id"])
        return runs

    async def forget(self, run_id: str) -> None:
        """A journaled run that can't be carried on (its account or conversation is gone)."""
        self._entries.pop(run_id, None)
        await self._quiet_write(run_id, "forgetting", _delete_run(run_id))

    async def _quiet_write(self, what_id: str, what: str, fn: Callable[[Connection], object]) -> object:
        """A journal write that fails (a full disk, the database away) is logged, never raised: the run goes on
        in this process either way. What `fn` returned, None if it failed."""
        try:
            return await self._db.transaction(fn)
        except (DatabaseError, RuntimeError) as exc:
            log.warning("run journal: %s %s failed (%s)", what, what_id, exc)
            return None


_INSERT: Final = """
INSERT INTO active_runs (run_id, account_id, conversation_id, hermes_run_id, gateway, user_text, sent_text,
    stored_before, extras, judged_at, phase, cancel_requested, position, streamed, tools, revision, admitted_at,
    owner, epoch, lease_expires_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""

# Where the run is now, where the row is still this owner's at this epoch, and not newer already.
_UPDATE: Final = """
UPDATE active_runs SET phase = ?, cancel_requested = ?, position = ?, streamed = ?, tools = ?, revision = ?
WHERE run_id = ? AND owner = ? AND epoch = ? AND revision < ?
"""

# The same, with what was not known when the run was reserved: the run Hermes made and what it was sent.
_ADMIT: Final = """
UPDATE active_runs SET hermes_run_id = ?, user_text = ?, sent_text = ?, stored_before = ?, extras = ?, judged_at = ?,
    phase = ?, cancel_requested = ?, position = ?, streamed = ?, tools = ?, revision = ?
WHERE run_id = ? AND owner = ? AND epoch = ? AND revision < ?
"""

_INSERT_DECISION: Final = """
INSERT INTO run_decisions
    (decision_id, run_id, request, held_id, pattern_keys, by_plugin, unseen, asked_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT DO NOTHING
"""


def _row(run: ActiveRun, revision: int) -> tuple[object, ...]:
    return (
        run.run_id,
        run.account.id,
        run.conversation_id,
        run.hermes_run_id,
        run.account.hermes.url or "",
        run.user_text,
        run.sent_text,
        run.stored_before,
        msgspec.json.encode(run.extras).decode(),
        run.judged_at,
        run.phase.current,
        int(run.cancel_requested),
        run.position,
        run.view.streamed.raw,
        _JSON.encode(list(run.tools.values())).decode(),
        revision,
        time.time(),
    )


def _progress(run: ActiveRun, revision: int, position: int | None = None) -> tuple[object, ...]:
    """What changes as a run goes on (taken in one step: the text and the position agree)."""
    tools = _JSON.encode(list(run.tools.values())).decode()
    position = run.position if position is None else position
    return (run.phase.current, int(run.cancel_requested), position, run.view.streamed.raw, tools, revision)


def _made(run: ActiveRun) -> tuple[object, ...]:
    """What is known of a run once Hermes made it."""
    extras = msgspec.json.encode(run.extras).decode()
    return (run.hermes_run_id, run.user_text, run.sent_text, run.stored_before, extras, run.judged_at)


def _owner(conn: Connection, run_id: str) -> tuple[str, int] | None:
    row = conn.execute("SELECT owner, epoch FROM active_runs WHERE run_id = ?", (run_id,)).fetchone()
    return None if row is None else (str(row[0]), int(row[1]))


def _read(conn: Connection, run_ids: list[str] | None) -> tuple[list[Row], dict[str, list[Row]]]:
    rows = conn.execute("SELECT * FROM active_runs ORDER BY admitted_at").fetchall()
    if run_ids is not None:
        rows = [row for row in rows if row["run_id"] in run_ids]
    decisions: dict[str, list[Row]] = {}
    for decision in conn.execute("SELECT * FROM run_decisions ORDER BY asked_at, decision_id"):
        decisions.setdefault(decision["run_id"], []).append(decision)
    return rows, decisions


def _journaled(row: Row, decisions: list[Row]) -> JournaledRun:
    return JournaledRun(
        run_id=row["run_id"],
        account_id=row["account_id"],
        conversation_id=row["conversation_id"],
        hermes_run_id=row["hermes_run_id"],
        gateway=row["gateway"],
        user_text=row["user_text"],
        sent_text=row["sent_text"],
        stored_before=row["stored_before"],
        extras=_decode_extras(row["extras"]),
        judged_at=row["judged_at"],
        phase=_phase(row["phase"]),
        cancel_requested=bool(row["cancel_requested"]),
        position=row["position"],
        streamed=row["streamed"],
        tools=_decode_tools(row["tools"]),
        epoch=row["epoch"],
        decisions=[
            JournaledDecision(
                decision_id=d["decision_id"],
                request=_decode_request(d["request"]),
                held_id=d["held_id"],
                pattern_keys=msgspec.json.decode(d["pattern_keys"], type=list[str]),
                by_plugin=bool(d["by_plugin"]),
                unseen=bool(d["unseen"]),
            )
            for d in decisions
        ],
    )


def _phase(value: str) -> Phase:
    if value not in ALLOWED:
        raise ValueError(f"no such phase: {value!r}")
    return value


def _delete_run(run_id: str) -> Callable[[Connection], object]:
    return lambda conn: conn.execute("DELETE FROM active_runs WHERE run_id = ?", (run_id,))


def _delete_decision(decision_id: str) -> Callable[[Connection], object]:
    return lambda conn: conn.execute("DELETE FROM run_decisions WHERE decision_id = ?", (decision_id,))
