"""Revocation reaching live sockets: a revoked, expired or disabled credential's sockets are closed.

Each connection remembers the credential it said hello with (`Connection.token_id`,
`expires_at`; none for the owner secret). Three ways a credential stops working, three ways
the server learns of it:

- logout, in this process: `close_token` closes that token's sockets at once (and the next tick
  sweeps, as below);
- expiry: each tick closes the sockets whose session has expired (known in memory, no query);
- `pheby account disable|revoke`, from another process: the database's credential marker moves
  (`Database.credential_marker`: SQLite's `PRAGMA data_version`, which moves when another connection
  commits; on PostgreSQL a row its triggers count credential changes in), so each tick costs one small
  read, and only after such a change one sweep reads the accounts' states and, in one query, which of
  the live connections' tokens still work. The sweep is repeated
  on the next tick, for a socket whose hello was judged just before the change but joined the hub
  just after.

An account that was disabled, or all of whose credentials were revoked, has its messages
ignored at once, its active runs cancelled, then its sockets closed; every closed socket
first gets an `unauthorized` error, then a 1008 close. A revoke ends what was authenticated
before it (`Connection.judged_at`, `ActiveRun.judged_at`): a token issued after it, its sockets
and its runs go on, whichever sweep sees them.
"""

import asyncio
import logging
import math
import time
from collections.abc import Callable
from typing import Any

from pheby.db import Database
from pheby.errors import PhebyError
from pheby.protocol.hub import Hub
from pheby.runs import RunManager
from pheby.store.accounts import Accounts, CredentialState
from pheby.store.conversations import Conversations

log = logging.getLogger("pheby.revocation")

CHECK_SECONDS = 1.0
RUN_CANCEL_WAIT_SECONDS = 2.0  # how long sockets wait for the account's runs to be cancelled before closing

LOGGED_OUT = "Logged out"
SESSION_ENDED = "This session was ended from the Security page"
EXPIRED = "Your session has expired"
REVOKED = "Your credentials were revoked or have expired"
ACCOUNT_DISABLED = "This account was disabled"
ACCOUNT_REVOKED = "Every credential of this account was revoked"

Background = Callable[[asyncio.Task[Any]], None]


def newly_ended(before: CredentialState | None, now: CredentialState) -> str | None:
    """Why an account's sockets and runs must end since `before` (None: nothing ended)."""
    if now.disabled and (before is None or not before.disabled):
        return ACCOUNT_DISABLED
    if now.credentials_revoked_at is not None and (
        before is None or now.credentials_revoked_at != before.credentials_revoked_at
    ):
        return ACCOUNT_REVOKED
    return None


class Revocations:
    """Closes the sockets of credentials that stopped working and cancels the runs of ended accounts."""

    def __init__(
        self,
        *,
        db: Database,
        accounts: Accounts,
        hub: Hub,
        runs: RunManager,
        conversations: Conversations,
        background: Background,
        clock: Callable[[], float] = time.time,
        interval: float = CHECK_SECONDS,
    ) -> None:
        self._db = db
        self._accounts = accounts
        self._hub = hub
        self._runs = runs
        self._conversations = conversations
        self._background = background
        self._clock = clock
        self._interval = interval
        self._started = False
        self._change_marker: int | None = None
        self._states: dict[str, CredentialState] = {}
        self._recheck = False
        self._ended_last: dict[str, str] = {}

    def close_token(self, token_id: str, message: str = LOGGED_OUT) -> int:
        """Close every socket authenticated with `token_id` (just revoked in this process); how many.

        The next tick sweeps too, for a socket whose hello was judged before the revocation but that
        joined the hub after this look.
        """
        self._recheck = True
        closing = [c for c in self._hub.all_connections() if c.token_id == token_id and not c.closed.is_set()]
        for connection in closing:
            connection.revoke(message)
        return len(closing)

    async def watch(self) -> None:
        """Check every `interval` seconds until cancelled; a failed check is logged and retried next tick."""
        while True:
            try:
                await self.check()
            except Exception as exc:  # noqa: BLE001 - the database busy a moment: one line, the next tick again
                log.warning("revocation check failed (%s); trying again", type(exc).__name__)
            await asyncio.sleep(self._interval)

    async def check(self) -> None:
        """One tick: close expired sessions; after another process's commit, sweep. The first tick
        only learns the accounts' states."""
        if not self._started:
            marker = await self._db.credential_marker()  # first: a change after it shows on the next tick
            self._states, self._change_marker = await self._accounts.credential_states(), marker
            self._started = True
            return
        self._close_expired()
        marker = await self._db.credential_marker()
        changed, self._change_marker = marker != self._change_marker, marker
        if changed or self._recheck:
            self._recheck = changed
            await self._sweep()

    def _close_expired(self) -> None:
        now = self._clock()
        for connection in self._hub.all_connections():
            expires_at = connection.expires_at
            if expires_at is not None and expires_at <= now and not connection.closed.is_set():
                connection.revoke(EXPIRED)

    async def _sweep(self) -> None:
        states = await self._accounts.credential_states()
        ended = {aid: why for aid, state in states.items() if (why := newly_ended(self._states.get(aid), state))}
        self._states = states
        for account_id, why in ended.items():
            log.info("account %s: %s; cancelling its runs and closing its sockets", account_id, why.lower())
        again, self._ended_last = self._ended_last, ended
        ending = again | ended
        if ending:
            await self._end_accounts(ending)
        connections = [c for c in self._hub.all_connections() if not c.closed.is_set()]
        live = await self._accounts.live_tokens({c.token_id for c in connections if c.token_id is not None})
        for connection in connections:
            state = states.get(connection.account_id)
            if state is None or state.disabled:
                connection.revoke(ACCOUNT_DISABLED)
            elif connection.token_id is not None and connection.token_id not in live:
                connection.revoke(REVOKED)

    def _cutoff(self, account_id: str, why: str) -> float:
        """What was authenticated at or before this moment ends: everything of a disabled account; of a revoked
        one, what came before the revoke, so a credential issued after it (in the same tick) keeps working."""
        state = self._states.get(account_id)
        if why == ACCOUNT_REVOKED and state is not None and state.credentials_revoked_at is not None:
            return state.credentials_revoked_at
        return math.inf

    async def _end_accounts(self, ending: dict[str, str]) -> None:
        """Stop handling the accounts' messages, cancel their runs (bounded wait), then close their sockets:
        those authenticated up to each account's cutoff."""
        cutoffs = {account_id: self._cutoff(account_id, why) for account_id, why in ending.items()}
        for account_id, cutoff in cutoffs.items():
            for connection in self._hub.of_account(account_id):
                if connection.judged_at <= cutoff:
                    connection.revoked = True
        cancels: list[asyncio.Task[None]] = []
        for account_id, cutoff in cutoffs.items():
            task = asyncio.create_task(self._cancel_runs(account_id, cutoff), name=f"revoke-runs-{account_id}")
            self._background(task)  # a cancel that outlasts the wait still finishes
            cancels.append(task)
        await asyncio.wait(cancels, timeout=RUN_CANCEL_WAIT_SECONDS)
        for account_id, why in ending.items():
            for connection in self._hub.of_account(account_id):
                if connection.judged_at <= cutoffs[account_id]:
                    connection.revoke(why)

    async def _cancel_runs(self, account_id: str, cutoff: float) -> None:
        """Cancel every active run of the account asked for up to `cutoff`, each in its own task (a cancel
        waits for its run to end)."""
        cancels = []
        for conversation in await self._conversations.list(account_id):
            run = self._runs.active(conversation.id)
            if run is not None and run.judged_at <= cutoff:
                cancels.append(self._cancel_run(account_id, conversation.id, run.run_id))
        await asyncio.gather(*cancels)

    async def _cancel_run(self, account_id: str, conversation_id: str, run_id: str) -> None:
        try:
            await self._runs.cancel(account_id, conversation_id, run_id, once_made=True)  # even one Hermes is making
        except PhebyError as exc:
            log.warning("run %s of a revoked account not cancelled: %s", run_id, exc.message)
        except Exception:
            log.exception("cancelling run %s of a revoked account failed", run_id)
