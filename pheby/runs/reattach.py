"""Runs carried on from the journal: at start-up, every run a stopped process left, before the server is
ready (`reattach`); later, any run whose owner died or was paused past its lease (`take_over`, called by
`pheby.runs.keeper`).

Each is rebuilt as it was journaled (same run id, draft, tool calls, pending decisions under their ids,
phase) and read again the way the gateway allows (`RunManager.adopt` starts its reader): where Hermes
numbers its events, the stream is reopened after the last one consumed, so the text goes on with
nothing lost or repeated and decisions asked meanwhile arrive as events; where it does not (0.19.0:
the stream went with the old process's connection), Hermes is asked about the run until it ends
(`reader.settle`), and what it waits on meanwhile is judged by `pheby.runs.unseen`. A run Hermes no
longer knows (its gateway restarted too) ends `failed` by the same path.
"""

import asyncio
import logging
import time
from collections.abc import Callable

import hermes_client as hc
from pheby import metrics
from pheby.errors import NotFound
from pheby.runs.active import ActiveRun
from pheby.runs.engine import RunManager
from pheby.runs.journal import JournaledRun, RunJournal
from pheby.store.accounts import Account, Accounts
from pheby.store.conversations import Conversation, Conversations

log = logging.getLogger("pheby.runs")

CATCH_UP_SECONDS = 3.0


async def reattach(
    journal: RunJournal,
    accounts: Accounts,
    conversations: Conversations,
    hermes_for: Callable[[Account], hc.HermesClient],
    runs: RunManager,
) -> int:
    """Carry on every run left by a process that stopped or died; how many were."""
    # This process's leases known fresh from here: the runs' first events are performed with no check first.
    await journal.leases.renew()
    carried = await take_over(journal, accounts, conversations, hermes_for, runs)
    if carried:
        began = time.monotonic()
        # A moment for each to hear from Hermes: the first snapshot then shows where the run is now (a replayed
        # stream's text, a run that ended meanwhile ended), not where the journal left it.
        waits = [asyncio.create_task(run.caught_up.wait()) for run in carried]
        _, late = await asyncio.wait(waits, timeout=CATCH_UP_SECONDS)
        for wait in late:
            wait.cancel()
        log.info(
            "carried on %d run(s) a stopped process left; %d heard from Hermes within %.2f s",
            len(carried),
            len(carried) - len(late),
            time.monotonic() - began,
        )
    return len(carried)


async def take_over(
    journal: RunJournal,
    accounts: Accounts,
    conversations: Conversations,
    hermes_for: Callable[[Account], hc.HermesClient],
    runs: RunManager,
) -> list[ActiveRun]:
    """Claim each run whose owner stopped or died or whose lease ran out (`RunLeases.left`), and carry it
    on here; those carried on. A run another process claims first is left to it."""
    claimed = []
    for left in await journal.leases.left():
        if await journal.leases.claim(left) is not None:
            metrics.RUN_TAKEOVERS.inc()
            claimed.append(left.run_id)
    carried: list[ActiveRun] = []
    for record in await journal.load(claimed):
        if not record.hermes_run_id:  # its process stopped while Hermes was making it: no run to follow
            log.warning("run %s: its process stopped before Hermes named it; it can't be followed", record.run_id)
            await journal.forget(record.run_id)
            continue
        try:
            account = await accounts.get(record.account_id)
            conversation = await conversations.get(account.id, record.conversation_id)
        except NotFound:
            await journal.forget(record.run_id)  # deleted while no server ran: nobody is left to see it
            continue
        if record.gateway != (account.hermes.url or ""):
            log.warning("run %s: its account moved to another Hermes; it can't be followed", record.run_id)
            await journal.forget(record.run_id)
            continue
        run = restored(record, account, conversation, hermes_for(account))
        runs.adopt(run)
        carried.append(run)
    return carried


def restored(record: JournaledRun, account: Account, conversation: Conversation, client: hc.HermesClient) -> ActiveRun:
    """The run as the journal kept it."""
    run = ActiveRun(account, conversation, client, run_id=record.run_id)
    run.hermes_run_id = record.hermes_run_id
    run.user_text, run.sent_text, run.stored_before = record.user_text, record.sent_text, record.stored_before
    run.extras = record.extras
    run.judged_at = record.judged_at
    run.cancel_requested = run.view.cancelling = record.cancel_requested
    run.position = record.position
    run.epoch = record.epoch
    run.view.draft = run.view.streamed.add(record.streamed)
    for tool in record.tools:
        run.view.tools[tool.tool_call_id] = tool
        if tool.status == "running":
            run.view.open_tools[tool.tool_name].append(tool.tool_call_id)
    for decision in record.decisions:
        run.decisions.ask(decision.decision())
    run.phase.move("running")
    if record.cancel_requested:
        run.phase.move("cancelling")
    elif run.decisions:
        run.phase.move("awaiting_decision")
    run.reattached = True
    run.started.set()
    return run
