"""Conversations: ids, names, YOLO flags and their Hermes sessions — all the SQL of the domain."""

import builtins
import hashlib
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import NamedTuple

import msgspec

from pheby.db import Connection, Database
from pheby.errors import BadRequest, ConversationNotFound
from pheby.protocol.frames import HistoryMessage

DEFAULT_NAME = "New chat"
NAME_MAX = 200


class Conversation(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    account_id: str
    name: str
    source: str
    job_id: str | None
    yolo: bool
    created_at: float
    last_active: float | None
    session_ids: tuple[str, ...]

    @property
    def session_id(self) -> str | None:
        """The session new turns go to (the newest one)."""
        return self.session_ids[-1] if self.session_ids else None


class TranscriptTurn(NamedTuple):
    """A user or assistant message with text, as Hermes stored it (what a run is sent as history)."""

    hermes_id: int
    role: str
    content: str


def _kept_turns(conn: Connection, conversation_id: str) -> list[TranscriptTurn]:
    """The conversation's kept text turns (table transcript_turns), oldest first."""
    query = "SELECT hermes_id, role, content FROM transcript_turns WHERE conversation_id = ? ORDER BY hermes_id"
    return [TranscriptTurn(*row) for row in conn.execute(query, (conversation_id,))]


def clean_name(name: str | None) -> str:
    cleaned = " ".join((name or "").split())
    if len(cleaned) > NAME_MAX:
        raise BadRequest(f"Conversation names are at most {NAME_MAX} characters")
    return cleaned or DEFAULT_NAME


def input_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _load(conn: Connection, account_id: str, conversation_id: str) -> Conversation | None:
    row = conn.execute(
        "SELECT * FROM conversations WHERE id = ? AND account_id = ?", (conversation_id, account_id)
    ).fetchone()
    if row is None:
        return None
    sessions = tuple(
        r[0]
        for r in conn.execute(
            "SELECT session_id FROM conversation_sessions WHERE conversation_id = ? ORDER BY position",
            (conversation_id,),
        )
    )
    return Conversation(
        id=row["id"],
        account_id=row["account_id"],
        name=row["name"],
        source=row["source"],
        job_id=row["job_id"],
        yolo=bool(row["yolo"]),
        created_at=row["created_at"],
        last_active=row["last_active"],
        session_ids=sessions,
    )


# How long a delete's mark holds should its process die mid-delete: longer than a delete takes (a run's cancel,
# then Hermes's session deletes, each bounded in time).
DELETE_MARK_SECONDS = 120.0

# (account id, conversation id) → clean up what another domain keeps for a deleted conversation.
OnDelete = Callable[[str, str], Awaitable[None]]


class Conversations:
    def __init__(self, db: Database, clock: Callable[[], float] = time.time) -> None:
        self._db = db
        self._clock = clock
        self._on_delete: list[OnDelete] = []

    def when_deleted(self, hook: OnDelete) -> None:
        """Run `hook(account_id, conversation_id)` after each conversation is deleted."""
        self._on_delete.append(hook)

    async def list(self, account_id: str) -> list[Conversation]:
        def q(conn: Connection) -> list[Conversation]:
            ids = [
                r[0]
                for r in conn.execute(
                    "SELECT id FROM conversations WHERE account_id = ? ORDER BY COALESCE(last_active, created_at) DESC",
                    (account_id,),
                )
            ]
            return [c for i in ids if (c := _load(conn, account_id, i)) is not None]

        return await self._db.run(q)

    async def get(self, account_id: str, conversation_id: str) -> Conversation:
        """The account's conversation, else `conversation_not_found` (also for another account's id)."""
        found = await self._db.run(lambda c: _load(c, account_id, conversation_id))
        if found is None:
            raise ConversationNotFound()
        return found

    async def create(
        self, account_id: str, name: str | None, *, source: str = "hermes", job_id: str | None = None
    ) -> Conversation:
        conversation_id, now = uuid.uuid4().hex, self._clock()
        cleaned = clean_name(name)

        def q(conn: Connection) -> Conversation:
            conn.execute(
                "INSERT INTO conversations (id, account_id, name, source, job_id, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (conversation_id, account_id, cleaned, source, job_id, now),
            )
            created = _load(conn, account_id, conversation_id)
            assert created is not None
            return created

        return await self._db.transaction(q)

    async def task_conversation(self, account_id: str, job_id: str, name: str) -> tuple[Conversation, bool]:
        """The conversation of a scheduled task, created on its first output; (conversation, created)."""

        def q(conn: Connection) -> tuple[Conversation, bool]:
            row = conn.execute(
                "SELECT id FROM conversations WHERE account_id = ? AND job_id = ?", (account_id, job_id)
            ).fetchone()
            if row is not None:
                found = _load(conn, account_id, row[0])
                assert found is not None
                return found, False
            conversation_id = uuid.uuid4().hex
            conn.execute(
                "INSERT INTO conversations (id, account_id, name, source, job_id, created_at) "
                "VALUES (?, ?, ?, 'task', ?, ?)",
                (conversation_id, account_id, clean_name(name), job_id, self._clock()),
            )
            created = _load(conn, account_id, conversation_id)
            assert created is not None
            return created, True

        return await self._db.transaction(q)

    async def rename(self, account_id: str, conversation_id: str, name: str) -> Conversation:
        cleaned = clean_name(name)
        await self.get(account_id, conversation_id)
        await self._db.transaction(
            lambda c: c.execute("UPDATE conversations SET name = ? WHERE id = ?", (cleaned, conversation_id))
        )
        return await self.get(account_id, conversation_id)

    async def delete(self, account_id: str, conversation_id: str) -> None:
        await self.get(account_id, conversation_id)
        await self._db.run(lambda c: c.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,)))
        for hook in self._on_delete:
            await hook(account_id, conversation_id)

    async def mark_deleting(self, conversation_id: str) -> None:
        """Until the delete ends (or `DELETE_MARK_SECONDS` pass), no process reserves a run in the conversation
        (`RunJournal.reserved`)."""
        until = self._clock() + DELETE_MARK_SECONDS
        await self._db.transaction(
            lambda c: c.execute("UPDATE conversations SET deleting_until = ? WHERE id = ?", (until, conversation_id))
        )

    async def unmark_deleting(self, conversation_id: str) -> None:
        """The delete did not happen: runs may start in the conversation again."""
        await self._db.transaction(
            lambda c: c.execute("UPDATE conversations SET deleting_until = NULL WHERE id = ?", (conversation_id,))
        )

    async def set_yolo(self, account_id: str, conversation_id: str, enabled: bool) -> Conversation:
        await self.get(account_id, conversation_id)
        await self._db.run(
            lambda c: c.execute("UPDATE conversations SET yolo = ? WHERE id = ?", (int(enabled), conversation_id))
        )
        return await self.get(account_id, conversation_id)

    async def touch(self, conversation_id: str) -> None:
        now = self._clock()
        await self._db.run(
            lambda c: c.execute("UPDATE conversations SET last_active = ? WHERE id = ?", (now, conversation_id))
        )

    async def add_session(self, conversation_id: str, session_id: str) -> None:
        def q(conn: Connection) -> None:
            conn.execute(
                "INSERT INTO conversation_sessions (conversation_id, session_id, position) "
                "VALUES (?, ?, (SELECT COALESCE(MAX(position), 0) + 1 FROM conversation_sessions "
                "WHERE conversation_id = ?)) ON CONFLICT DO NOTHING",
                (conversation_id, session_id, conversation_id),
            )

        await self._db.transaction(q)

    async def approve_pattern(self, conversation_id: str, pattern_key: str) -> None:
        await self._db.run(
            lambda c: c.execute(
                "INSERT INTO session_approvals (conversation_id, pattern_key) VALUES (?, ?) ON CONFLICT DO NOTHING",
                (conversation_id, pattern_key),
            )
        )

    async def approved_patterns(self, conversation_id: str) -> set[str]:
        rows = await self._db.run(
            lambda c: c.execute(
                "SELECT pattern_key FROM session_approvals WHERE conversation_id = ?", (conversation_id,)
            ).fetchall()
        )
        return {r[0] for r in rows}

    async def mark_cron_session_seen(self, account_id: str, session_id: str) -> bool:
        """Record a cron session as delivered; False when it already was."""
        now = self._clock()
        cursor = await self._db.run(
            lambda c: c.execute(
                "INSERT INTO cron_sessions_seen (account_id, session_id, seen_at) VALUES (?, ?, ?) "
                "ON CONFLICT DO NOTHING",
                (account_id, session_id, now),
            )
        )
        return cursor.rowcount == 1

    async def remember_input(self, conversation_id: str, sent_text: str, original_text: str) -> None:
        """Remember what the user typed when the text sent to Hermes carried inlined attachments."""
        await self._db.run(
            lambda c: c.execute(
                "INSERT INTO turn_inputs (conversation_id, input_sha256, original_text) VALUES (?, ?, ?) "
                "ON CONFLICT (conversation_id, input_sha256) DO UPDATE SET original_text = excluded.original_text",
                (conversation_id, input_digest(sent_text), original_text),
            )
        )

    async def log_transcript(
        self, conversation_id: str, shown: Sequence[HistoryMessage], turns: Sequence[TranscriptTurn]
    ) -> None:
        """In one transaction: keep the messages history shows now that are newer than the newest kept
        so far, and make the kept text turns those Hermes lists now (`turns`, oldest first)."""

        def q(conn: Connection) -> None:
            newest = conn.execute(
                "SELECT COALESCE(MAX(hermes_id), 0) FROM history_log WHERE conversation_id = ?", (conversation_id,)
            ).fetchone()[0]
            conn.executemany(
                "INSERT INTO history_log (conversation_id, hermes_id, role, text, ts) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT DO NOTHING",
                [(conversation_id, m.number, m.role, m.text, m.ts) for m in shown if m.number > newest],
            )
            kept = set(_kept_turns(conn, conversation_id))
            listed = set(turns)
            conn.executemany(  # gone, or changed: a compaction rewrote the transcript
                "DELETE FROM transcript_turns WHERE conversation_id = ? AND hermes_id = ?",
                [(conversation_id, turn.hermes_id) for turn in kept - listed],
            )
            conn.executemany(
                "INSERT INTO transcript_turns (conversation_id, hermes_id, role, content) VALUES (?, ?, ?, ?)",
                [(conversation_id, *turn) for turn in turns if turn not in kept],
            )

        await self._db.transaction(q)

    async def transcript_turns(self, conversation_id: str) -> builtins.list[TranscriptTurn]:
        """The text turns `log_transcript` kept last, oldest first."""
        return await self._db.run(lambda c: _kept_turns(c, conversation_id))

    async def logged_history(self, conversation_id: str) -> builtins.list[HistoryMessage]:
        rows = await self._db.run(
            lambda c: c.execute(
                "SELECT hermes_id, role, text, ts FROM history_log WHERE conversation_id = ? ORDER BY hermes_id",
                (conversation_id,),
            ).fetchall()
        )
        return [HistoryMessage(message_id=f"m{r[0]}", role=r[1], text=r[2], ts=r[3]) for r in rows]

    async def original_inputs(self, conversation_id: str) -> dict[str, str]:
        rows = await self._db.run(
            lambda c: c.execute(
                "SELECT input_sha256, original_text FROM turn_inputs WHERE conversation_id = ?", (conversation_id,)
            ).fetchall()
        )
        return {r[0]: r[1] for r in rows}
