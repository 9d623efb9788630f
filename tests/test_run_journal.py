"""The run journal, the rebuilding of a journaled run, and the judging of Hermes's status for unseen approvals,
without sockets: a real database (SQLite, and PostgreSQL), no Hermes (the runs' clients are never called)."""

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import hermes_client as hc
from pheby.db import Database, open_database
from pheby.errors import ConversationNotFound
from pheby.plugin.extras import PluginExtras
from pheby.protocol import frames as ev
from pheby.protocol.hub import Hub
from pheby.runs.active import ActiveRun
from pheby.runs.decision_desk import DecisionDesk
from pheby.runs.decisions import Decision
from pheby.runs.journal import RunJournal
from pheby.runs.reattach import restored
from pheby.runs.unseen import UnseenApprovals, unseen_request
from pheby.store.accounts import Account, Accounts
from pheby.store.conversations import DELETE_MARK_SECONDS, Conversation, Conversations

pytestmark = [pytest.mark.anyio, pytest.mark.both_engines]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Setup:
    def __init__(self, db: Database, account: Account, conversation: Conversation, client: hc.HermesClient) -> None:
        self.db = db
        self.account = account
        self.conversation = conversation
        self.client = client
        self.clock = Clock()
        self.journal = RunJournal(db, clock=self.clock)

    async def run(self) -> ActiveRun:
        """A run in a conversation of its own (a conversation has one run at a time)."""
        conversation = await Conversations(self.db).create(self.account.id, "Deploys")
        run = ActiveRun(self.account, conversation, self.client)
        run.hermes_run_id = "run_" + run.run_id
        run.user_text, run.sent_text, run.stored_before = "Deploy it", "Deploy it (inlined)", 41
        run.extras = PluginExtras(live=True, clarify=True)
        run.judged_at = 1234.5
        run.phase.move("running")
        return run

    async def admit(self, run: ActiveRun) -> None:
        assert await self.journal.reserved(run)
        await self.journal.admitted(run)

    async def rows(self, table: str) -> int:
        count: int = await self.db.run(lambda c: c.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
        return count


@pytest.fixture
async def setup(tmp_path: Path, database_url: str) -> AsyncIterator[Setup]:
    db = open_database(database_url, tmp_path / "pheby.sqlite3")
    await db.open()
    owner = await Accounts(db).ensure_owner()
    conversation = await Conversations(db).create(owner.id, "Deploys")
    async with hc.HermesClient("http://127.0.0.1:9", "unused") as client:
        yield Setup(db, owner, conversation, client)
    await db.close()


def approval(run: ActiveRun, approval_id: str = "a1") -> Decision:
    request = ev.ApprovalRequest(
        approval_id=approval_id,
        session_key="k",
        conversation_id=run.conversation_id,
        run_id=run.run_id,
        command="rm -rf /tmp/build",
        description="Destructive",
        choices=["once", "session", "always", "deny"],
    )
    return Decision(approval_id, request, pattern_keys=["recursive delete"])


def clarification(run: ActiveRun) -> Decision:
    request = ev.ClarifyRequest(
        clarify_id="c1",
        session_key="k",
        conversation_id=run.conversation_id,
        run_id=run.run_id,
        question="Staging or production?",
        choices=["staging", "production"],
    )
    return Decision("c1", request, held_id="hermes-c1", by_plugin=True)


async def test_no_run_is_reserved_in_a_conversation_being_deleted_or_gone(setup: Setup) -> None:
    clock = Clock()
    clock.now = time.time()  # the mark is read against the wall clock, as another process reads it
    conversations = Conversations(setup.db, clock=clock)
    run = await setup.run()
    await conversations.mark_deleting(run.conversation_id)  # a delete under way, on any process
    with pytest.raises(ConversationNotFound):
        await setup.journal.reserved(run)
    await conversations.unmark_deleting(run.conversation_id)  # that delete failed
    assert await setup.journal.reserved(run)
    assert await setup.journal.ended(run)

    clock.now = time.time() - DELETE_MARK_SECONDS - 1  # a mark whose process died mid-delete lapses
    await conversations.mark_deleting(run.conversation_id)
    assert await setup.journal.reserved(run)
    assert await setup.journal.ended(run)

    await conversations.delete(setup.account.id, run.conversation_id)
    with pytest.raises(ConversationNotFound):  # not the database's foreign-key error
        await setup.journal.reserved(run)
    assert await setup.rows("active_runs") == 0


async def test_a_journaled_run_reads_back_as_it_was_with_its_decisions_oldest_first(setup: Setup) -> None:
    run = await setup.run()
    await setup.admit(run)
    run.view.draft = run.view.streamed.add("Working on MEDIA:/tmp/a.png it")
    run.view.tools["t1"] = ev.ToolState(tool_call_id="t1", tool_name="terminal", status="running", run_id=run.run_id)
    run.view.tools["t0"] = ev.ToolState(tool_call_id="t0", tool_name="search", status="completed", run_id=run.run_id)
    run.position = 17
    asked = approval(run)
    await setup.journal.decision_asked(run, asked)
    await setup.journal.decision_asked(run, clarification(run))

    [record] = await setup.journal.load()
    assert (record.run_id, record.hermes_run_id, record.gateway) == (run.run_id, run.hermes_run_id, "")
    assert (record.user_text, record.sent_text, record.stored_before) == ("Deploy it", "Deploy it (inlined)", 41)
    assert record.extras == PluginExtras(live=True, clarify=True)
    assert (record.judged_at, record.phase, record.position) == (1234.5, "running", 17)
    assert record.streamed == "Working on MEDIA:/tmp/a.png it"
    assert [d.decision_id for d in record.decisions] == ["a1", "c1"]
    assert record.decisions[0].request == asked.request
    assert record.decisions[1].held_id == "hermes-c1"
    assert record.decisions[1].by_plugin

    again = restored(record, setup.account, setup.conversation, setup.client)
    assert again.run_id == run.run_id
    assert again.draft == run.draft
    assert "MEDIA" not in again.draft
    assert again.view.streamed.raw == run.view.streamed.raw
    assert again.tools == run.tools
    assert list(again.view.open_tools["terminal"]) == ["t1"]  # a call still running ends as its own
    assert again.status == "waiting_for_approval"
    assert [d.id for d in again.decisions] == ["a1", "c1"]
    assert again.decisions.get("a1", "approval") is not None
    assert again.decisions.get("a1", "approval").pattern_keys == ["recursive delete"]  # type: ignore[union-attr]
    assert again.reattached
    assert again.made


async def test_a_settled_decision_and_an_ended_run_leave_nothing(setup: Setup) -> None:
    run = await setup.run()
    await setup.admit(run)
    await setup.journal.decision_asked(run, approval(run, "a1"))
    await setup.journal.decision_asked(run, approval(run, "a2"))
    await setup.journal.decision_settled("a1")
    [record] = await setup.journal.load()
    assert [d.decision_id for d in record.decisions] == ["a2"]

    await setup.journal.ended(run)
    assert await setup.journal.load() == []
    assert await setup.rows("run_decisions") == 0


async def test_no_write_lands_after_the_run_ended_nor_over_a_newer_one(setup: Setup) -> None:
    run = await setup.run()
    await setup.admit(run)
    run.view.streamed.add("one two three")
    setup.clock.now += 10
    setup.journal.progress(run)  # a background write, under way while the run ends
    await setup.journal.ended(run)
    await asyncio.sleep(0.05)
    await setup.journal.save(run)
    await setup.journal.decision_asked(run, approval(run))
    assert await setup.journal.load() == []  # ended stays ended

    newer = await setup.run()
    await setup.admit(newer)
    newer.position = 9
    await setup.journal.save(newer)
    owner = (newer.run_id, setup.journal.leases.holder, newer.epoch)
    old_row = ("running", 0, 3, "stale", "[]", 1, *owner, 1)
    await setup.db.transaction(lambda conn: conn.execute(_update(), old_row))  # revision 1 after revision 2
    [record] = await setup.journal.load()
    assert record.position == 9
    assert record.streamed == ""


async def test_progress_writes_at_the_first_numbered_event_then_once_a_checkpoint_interval(setup: Setup) -> None:
    run = await setup.run()
    await setup.admit(run)
    run.view.streamed.add("first")
    setup.journal.progress(run)  # too soon after the admission, and no numbered event yet: nothing
    await asyncio.sleep(0.05)
    assert (await setup.journal.load())[0].streamed == ""
    run.position = 0  # the gateway numbers its events: a restart can reopen the stream, so say so at once
    setup.journal.progress(run)
    await asyncio.sleep(0.05)
    assert (await setup.journal.load())[0].position == 0
    run.view.streamed.add(" second")
    run.position = 1
    setup.journal.progress(run)  # within the interval: nothing
    await asyncio.sleep(0.05)
    assert (await setup.journal.load())[0].position == 0
    setup.clock.now += 2.0
    setup.journal.progress(run)
    await asyncio.sleep(0.05)
    record = (await setup.journal.load())[0]
    assert (record.position, record.streamed) == (1, "first second")


async def test_an_unreadable_entry_is_dropped_and_the_rest_read(setup: Setup) -> None:
    good, bad = await setup.run(), await setup.run()
    for run in (good, bad):
        await setup.admit(run)
    await setup.db.transaction(
        lambda conn: conn.execute("UPDATE active_runs SET tools = 'not json' WHERE run_id = ?", (bad.run_id,))
    )
    assert [r.run_id for r in await setup.journal.load()] == [good.run_id]
    assert await setup.rows("active_runs") == 1


def _update() -> str:
    from pheby.runs import journal

    return journal._UPDATE


# --- unseen approvals --------------------------------------------------------------------------------------------


def test_a_wait_nobody_saw_is_asked_only_once_two_polls_a_second_apart_show_it() -> None:
    clock = Clock()
    unseen = UnseenApprovals(clock=clock)
    assert unseen.seen("waiting_for_approval", approval_waiting=False) is None
    clock.now += 0.5
    assert unseen.seen("waiting_for_approval", approval_waiting=False) is None
    clock.now += 0.6
    assert unseen.seen("waiting_for_approval", approval_waiting=False) == "ask_unseen"
    # A status between resets the count: right after an answer Hermes may still say it waits.
    assert unseen.seen("running", approval_waiting=False) is None
    assert unseen.seen("waiting_for_approval", approval_waiting=False) is None


def test_a_known_approval_is_not_taken_for_unseen_and_expires_once_hermes_no_longer_waits() -> None:
    clock = Clock()
    unseen = UnseenApprovals(clock=clock)
    for _ in range(3):
        clock.now += 2
        assert unseen.seen("waiting_for_approval", approval_waiting=True) is None
    assert unseen.seen("running", approval_waiting=True) == "expire_waiting"  # Hermes answered it itself
    assert unseen.seen("completed", approval_waiting=True) is None  # the run's end settles it


def test_an_unseen_approval_offers_deny_only() -> None:
    request = unseen_request("a9", "k", "c", "r")
    assert request.choices == ["deny"]
    assert "not reading" in request.description


async def test_a_plugin_question_delivered_again_after_a_restart_is_the_one_already_pending(setup: Setup) -> None:
    """The plugin keeps what a stopped server never acknowledged and delivers it again: the question the journal
    kept pending is not asked a second time under a new id."""
    run = await setup.run()
    await setup.admit(run)
    desk = DecisionDesk(Hub(), setup.journal, Conversations(setup.db), None)
    first = await desk.ask_clarify(run, "plugin-c1", "Staging or production?", None, by_plugin=True)
    [record] = await setup.journal.load()
    carried = restored(record, setup.account, setup.conversation, setup.client)
    desk.adopt(carried)
    again = await desk.ask_clarify(carried, "plugin-c1", "Staging or production?", None, by_plugin=True)
    assert again == first
    assert [d.id for d in carried.decisions] == [first]
    other = await desk.ask_clarify(carried, "plugin-c2", "And then?", None, by_plugin=True)
    assert other != first
