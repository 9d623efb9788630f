"""Hermes sessions deleted with their conversation, deleted again if they come back.

A 0.22-era gateway names a session in a thread started with its first turn, with an LLM call of its
own. When that call answers after the session was deleted, writing the title creates the session's
row again: an empty session on the gateway, titled from the conversation its owner deleted. So once a
conversation's sessions are deleted, `SessionDeletes.watch` deletes them again a few times over the
next two minutes (`RECHECK_AFTER_SECONDS`, counted from the delete); a session that is not there
answers 404, which is the usual case. Each watch is one task, kept by the services' background set
(cancelled at shutdown); at most `MAX_WATCHES` run at once, and past that a delete is not watched.
The watches live in this process only: a restart inside those two minutes can leave such a row.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

import hermes_client as hc

log = logging.getLogger("pheby.hermes")

RECHECK_AFTER_SECONDS: Final = (3.0, 10.0, 30.0, 120.0)
MAX_WATCHES: Final = 256

Sleep = Callable[[float], Awaitable[Any]]


class SessionDeletes:
    def __init__(
        self,
        background: Callable[[asyncio.Task[Any]], None],
        *,
        recheck_after: Sequence[float] = RECHECK_AFTER_SECONDS,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._background = background
        self._recheck_after = tuple(recheck_after)
        self._sleep = sleep
        self._watches: set[asyncio.Task[None]] = set()

    def watch(self, client: hc.HermesClient, session_ids: Sequence[str]) -> None:
        """Delete these (just deleted) sessions again over the next minutes, should they come back."""
        if not session_ids:
            return
        if len(self._watches) >= MAX_WATCHES:
            log.warning("not watching %d deleted Hermes session(s): %d watches already", len(session_ids), MAX_WATCHES)
            return
        task = asyncio.create_task(self._recheck(client, tuple(session_ids)), name="session-deletes")
        self._watches.add(task)
        task.add_done_callback(self._watches.discard)
        self._background(task)

    def watching(self) -> int:
        return len(self._watches)

    async def _recheck(self, client: hc.HermesClient, session_ids: tuple[str, ...]) -> None:
        waited = 0.0
        for after in self._recheck_after:
            await self._sleep(after - waited)
            waited = after
            for session_id in session_ids:
                try:
                    await client.delete_session(session_id)
                except hc.HermesNotFound:
                    continue  # still deleted
                except hc.HermesError as exc:  # unavailable, or refused: the next check tries again
                    log.info("deleted Hermes session %s not checked again: %s", session_id, type(exc).__name__)
                    continue
                log.info("Hermes session %s came back after its delete and was deleted again", session_id)
