"""Pages of a conversation's history from what the server logged of it, reading Hermes only when it changed.

0.19.0's `GET /api/sessions/{id}/messages` has no paging, so reading a transcript costs the whole
conversation. The server already logs what history shows (`Conversations.log_transcript`, table
history_log). `HistoryPages` remembers, per conversation, the state of its Hermes sessions
(`GET /api/sessions/{id}`: message count, tokens and end, one small request per session) at which the log was
seen to hold exactly what history shows: the log is "in sync" at that state. A `conversation.open`
asks Hermes for the state; unchanged, its page comes from the log (one indexed query, whatever the
conversation's length); changed (a turn of a run, one added behind the server's back, a compaction, a
session added or resolved to a continuation), the transcript is read once, the log brought up to
date, and the new state remembered if the log then matches. The states are kept in the database too (table
history_sync) and recalled the first time a conversation is asked for (memory holds a bounded number of
them), so a restart costs no full read of a conversation Hermes has not changed meanwhile.

The same read keeps the text turns Hermes lists, as it stored them (`Conversations.log_transcript`,
table transcript_turns): a run is sent them as its history (`turns_before_run`), from the table
while the log is in sync, so a run doesn't read the whole transcript either.
"""

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Sequence
from typing import Final

import msgspec

import hermes_client as hc
from pheby.db import Connection, Database, DatabaseError
from pheby.hermes.history import shown_history, text_turns, transcript
from pheby.protocol.frames import HistoryMessage
from pheby.store.conversations import Conversation, Conversations, TranscriptTurn

SYNC_STATES_MAX: Final = 10_000  # conversations whose in-sync state is remembered (least recently opened go)
# History's reads of Hermes under way at once; the rest wait their turn here. A reconnect storm (every client
# of a restarted server opening its conversations) must not take every connection of the client's pool to
# Hermes, which the runs' own requests (status, answers, stops) need: starved, a run is taken for lost.
HERMES_READS_AT_ONCE: Final = 16

# A session's id, message count, tokens in and out, end time and reason (None: the session is gone).
SessionState = tuple[str, int | None, int, int, float | None, str | None]
SyncState = tuple[SessionState, ...]


def _cursor_number(before_message_id: str | None) -> int | None:
    """The Hermes id a history cursor names (`m<id>`); None for no cursor, -1 for one that isn't such."""
    if before_message_id is None:
        return None
    digits = before_message_id[1:]
    return int(digits) if before_message_id.startswith("m") and digits.isdigit() and len(digits) < 19 else -1


class HistoryPages:
    def __init__(self, db: Database, conversations: Conversations, states_max: int = SYNC_STATES_MAX) -> None:
        self._db = db
        self._conversations = conversations
        self._states_max = states_max
        self._synced: OrderedDict[str, SyncState] = OrderedDict()  # conversation id → state the log matches
        self._resolved: dict[str, tuple[str, ...]] = {}  # sessions a transcript read resolved to, beyond its own
        self._recalled: OrderedDict[str, None] = OrderedDict()  # conversations whose kept state memory holds
        self.full_reads = 0  # transcripts read whole (for tests and benches)
        self._hermes_reads = asyncio.Semaphore(HERMES_READS_AT_ONCE)

    async def window(
        self,
        client: hc.HermesClient,
        conversation: Conversation,
        limit: int,
        before_message_id: str | None,
        newer_than: int | None,
        *,
        both_ways: bool = False,
    ) -> list[HistoryMessage]:
        """What history shows around a page, oldest first, to merge finished turns into and `page`.

        In sync: the `limit` + 1 messages before the cursor and the cursor's own (or, without a cursor,
        the newest `limit` + 1 and every one after `newer_than`, the oldest message a finished turn kept
        for snapshots may have: so that merge finds its turn); `both_ways` (a page around or after the
        cursor), the `limit` + 1 after it and every one after `newer_than` too. Else the whole history.
        Raises `HermesError` when Hermes can't be asked."""
        await self._recall(conversation.id)
        async with self._hermes_reads:
            state = await self._state(client, conversation)
            cursor = _cursor_number(before_message_id)
            if self._synced.get(conversation.id) == state and cursor != -1:
                self._synced.move_to_end(conversation.id)
                logged = await self._logged_window(conversation.id, limit, cursor, newer_than, both_ways)
                if logged is not None:
                    return logged
            return await self._read_whole(client, conversation, state)

    async def turns_before_run(self, client: hc.HermesClient, conversation: Conversation) -> list[TranscriptTurn]:
        """The text turns Hermes lists now, oldest first (a run's history): kept ones when in sync, else
        read whole, which also logs the history (before the run can compact it away). Raises `HermesError`."""
        await self._recall(conversation.id)
        async with self._hermes_reads:
            state = await self._state(client, conversation)
            if self._synced.get(conversation.id) == state:
                self._synced.move_to_end(conversation.id)
                with contextlib.suppress(DatabaseError):  # else Hermes is read instead
                    return await self._conversations.transcript_turns(conversation.id)
            stored, _ = await self._read_and_log(client, conversation, state, strict=False)
            return text_turns(stored)

    async def _state(self, client: hc.HermesClient, conversation: Conversation) -> SyncState:
        session_ids = list(conversation.session_ids)
        session_ids += [s for s in self._resolved.get(conversation.id, ()) if s not in session_ids]
        states: list[SessionState] = []
        for session_id in session_ids:
            try:
                session = await client.get_session(session_id)
            except hc.HermesNotFound:
                states.append((session_id, None, 0, 0, None, None))
                continue
            states.append(
                (
                    session_id,
                    session.message_count,
                    session.input_tokens,
                    session.output_tokens,
                    session.ended_at,
                    session.end_reason,
                )
            )
        return tuple(states)

    async def read_and_log(
        self, client: hc.HermesClient, conversation: Conversation
    ) -> tuple[list[hc.SessionMessage], list[HistoryMessage]]:
        """Read the whole transcript, log what history shows of it, and remember the sessions' state if
        the log then matches (the after-turn work of a run: the next `conversation.open` reads the log).
        Raises `HermesError` and `DatabaseError`."""
        await self._recall(conversation.id)
        async with self._hermes_reads:
            return await self._read_and_log(client, conversation, await self._state(client, conversation), strict=True)

    async def _read_whole(
        self, client: hc.HermesClient, conversation: Conversation, state: SyncState
    ) -> list[HistoryMessage]:
        return (await self._read_and_log(client, conversation, state, strict=False))[1]

    async def _read_and_log(
        self, client: hc.HermesClient, conversation: Conversation, state: SyncState, *, strict: bool
    ) -> tuple[list[hc.SessionMessage], list[HistoryMessage]]:
        """The transcript and what history shows of it, logged; `state` (read before it) is remembered
        if the log matches. Without `strict`, a database error only skips the logging."""
        self.full_reads += 1
        stored = await transcript(client, conversation.session_ids)
        shown = await shown_history(self._conversations, conversation.id, stored)
        known = {session_id for session_id, *_ in state}
        resolved = tuple(sorted({m.session_id for m in stored if m.session_id and m.session_id not in known}))
        if resolved:  # a continuation: its state is asked for from now on, and the log is synced next time
            self._resolved[conversation.id] = (*self._resolved.get(conversation.id, ()), *resolved)
        try:
            await self._conversations.log_transcript(conversation.id, shown, text_turns(stored))
            logged = await self._conversations.logged_history(conversation.id)
        except DatabaseError:
            if strict:
                raise
            return stored, shown
        if resolved:
            self._synced.pop(conversation.id, None)
        elif _same_messages(logged, shown):
            self._synced[conversation.id] = state
            self._synced.move_to_end(conversation.id)
        else:
            self._synced.pop(conversation.id, None)
        with contextlib.suppress(DatabaseError):  # unkept, it is only read again after a restart
            await self._keep(conversation.id)
        return stored, shown

    async def _recall(self, conversation_id: str) -> None:
        """Bring the conversation's kept state into memory (the first time it is asked for, or again after
        memory let it go); memory keeps the `states_max` conversations asked for last."""
        if conversation_id in self._recalled:
            self._recalled.move_to_end(conversation_id)
            return
        with contextlib.suppress(DatabaseError):  # unreadable: as if never in sync
            row = await self._db.run(
                lambda conn: conn.execute(
                    "SELECT state, resolved FROM history_sync WHERE conversation_id = ?", (conversation_id,)
                ).fetchone()
            )
            if row is not None:
                if row[0] is not None:
                    self._synced[conversation_id] = _decode_state(row[0])
                resolved = tuple(msgspec.json.decode(row[1], type=list[str]))
                if resolved:
                    self._resolved[conversation_id] = resolved
        self._recalled[conversation_id] = None
        while len(self._recalled) > self._states_max:
            gone, _ = self._recalled.popitem(last=False)
            self._synced.pop(gone, None)
            self._resolved.pop(gone, None)

    async def _keep(self, conversation_id: str) -> None:
        state = self._synced.get(conversation_id)
        row = (
            conversation_id,
            None if state is None else msgspec.json.encode(state).decode(),
            msgspec.json.encode(self._resolved.get(conversation_id, ())).decode(),
        )
        await self._db.run(
            lambda conn: conn.execute(
                "INSERT INTO history_sync (conversation_id, state, resolved) VALUES (?, ?, ?) "
                "ON CONFLICT (conversation_id) DO UPDATE SET state = excluded.state, resolved = excluded.resolved",
                row,
            )
        )

    async def _logged_window(
        self, conversation_id: str, limit: int, cursor: int | None, newer_than: int | None, both_ways: bool
    ) -> list[HistoryMessage] | None:
        """The logged messages of `window`; None when the cursor names no logged message."""

        def q(conn: Connection) -> list[tuple[int, str, str, str | None]] | None:
            columns = "SELECT hermes_id, role, text, ts FROM history_log WHERE conversation_id = ?"
            if cursor is not None:
                at = conn.execute(f"{columns} AND hermes_id = ?", (conversation_id, cursor)).fetchall()
                if not at:
                    return None
                after: list[tuple[int, str, str, str | None]] = at
                if both_ways:
                    after += conn.execute(
                        f"{columns} AND hermes_id > ? ORDER BY hermes_id LIMIT ?", (conversation_id, cursor, limit + 1)
                    ).fetchall()
                    if newer_than is not None:
                        after += conn.execute(f"{columns} AND hermes_id > ?", (conversation_id, newer_than)).fetchall()
                bound = cursor
            else:
                after = (
                    conn.execute(f"{columns} AND hermes_id > ?", (conversation_id, newer_than)).fetchall()
                    if newer_than is not None
                    else []
                )
                bound = None
            older = conn.execute(
                f"{columns} AND hermes_id < ? ORDER BY hermes_id DESC LIMIT ?",
                (conversation_id, bound if bound is not None else 1 << 62, limit + 1),
            ).fetchall()
            rows = {row[0]: row for row in [*older, *after]}
            return [rows[key] for key in sorted(rows)]

        rows = await self._db.run(q)
        if rows is None:
            return None
        return [HistoryMessage(message_id=f"m{r[0]}", role=r[1], text=r[2], ts=r[3]) for r in rows]  # type: ignore[arg-type]


def _decode_state(text: str) -> SyncState:
    return tuple(msgspec.json.decode(text, type=list[SessionState]))


def _same_messages(logged: Sequence[HistoryMessage], shown: Sequence[HistoryMessage]) -> bool:
    """Whether the log holds exactly what history shows, in the log's order (Hermes ids ascending)."""
    return len(logged) == len(shown) and all(a == b for a, b in zip(logged, shown, strict=True))
