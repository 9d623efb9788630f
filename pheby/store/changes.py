"""The change feed behind `/api/features/sync`: Hope attachments created and deleted, artifacts
created, edited and deleted.

`record` takes the open connection, so a change is written in the same transaction as the
change itself and the feed never disagrees with the data.
"""

import time
from typing import Literal

import msgspec

from pheby.db import Connection, Database

ChangeKind = Literal["attachment", "artifact"]
FEED_PAGE = 200


class Change(msgspec.Struct, frozen=True):
    sequence: int
    kind: ChangeKind
    id: str
    deleted: bool
    created_at: int


def record(conn: Connection, account_id: str, kind: ChangeKind, object_id: str, *, deleted: bool) -> None:
    conn.execute(
        "INSERT INTO changes (account_id, kind, object_id, deleted, created_at) VALUES (?, ?, ?, ?, ?)",
        (account_id, kind, object_id, int(deleted), time.time()),
    )


class ChangeFeed:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def after(self, account_id: str, sequence: int, limit: int = FEED_PAGE) -> list[Change]:
        """The caller's changes after `sequence`, ascending, at most `limit`."""
        rows = await self._db.run(
            lambda c: c.execute(
                "SELECT sequence, kind, object_id, deleted, created_at FROM changes "
                "WHERE account_id = ? AND sequence > ? ORDER BY sequence LIMIT ?",
                (account_id, sequence, limit),
            ).fetchall()
        )
        return [Change(r[0], r[1], r[2], bool(r[3]), int(r[4])) for r in rows]
