"""Each account's durable, ordered event log: `account_events`, with a gap-free `seq` per account.

`append` takes the next seq from the account's head row (`account_event_heads`) in the caller's own
transaction, so the event is committed with the write it tells of, or not at all: a rolled-back
transaction takes no seq. Writers run one at a time (`Database.transaction`: SQLite's BEGIN IMMEDIATE,
PostgreSQL's advisory lock) and the head row is locked until commit, so an account's events commit in
seq order and a reader always sees a gap-free run of them.

Retention (`prune`) removes rows by age and keeps at most so many per account; the head row stays, so
a seq is never used twice. Reading after a position older than what is retained raises `Truncated`:
the reader then owes its client a full snapshot, not events.

`EventLog` is the async facade over a `Database`; its `transaction` rings the bell (`pheby.events.bell`)
for every account it appended to once the transaction has committed.
"""

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import msgspec

from pheby import metrics
from pheby.cancelling import raise_if_cancelled
from pheby.db import Connection, Database
from pheby.db.in_lists import in_chunks
from pheby.events.bell import Bell

__all__ = [
    "MAX_READ",
    "Appender",
    "Event",
    "EventLog",
    "Truncated",
    "append",
    "heads",
    "prune",
    "read_after",
    "ring",
]

T = TypeVar("T")

log = logging.getLogger(__name__)

MAX_READ = 500  # rows one `read_after` returns at most, unless asked for fewer
PUBLISH_SECONDS = 1.0  # how long a ring may take before it is given up (the log holds the event)

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()


class Event(msgspec.Struct, frozen=True):
    """One logged event: the account's `seq`, its `kind`, its decoded JSON `payload`, when (`at`)."""

    account_id: str
    seq: int
    kind: str
    payload: Any
    at: float


class Truncated(Exception):
    """The position read after is older than the log retains (or newer than its head): events can't
    bring the reader up to date, a full snapshot must. `oldest` is the first seq still readable
    (`head + 1` when none is retained); `head` the account's newest seq (0: none ever)."""

    def __init__(self, account_id: str, after: int, oldest: int, head: int) -> None:
        self.account_id = account_id
        self.after = after
        self.oldest = oldest
        self.head = head
        super().__init__(f"events after {after} are no longer all retained (oldest {oldest}, head {head})")


def _require_transaction(conn: Connection) -> None:
    """Refuse to take a seq outside a transaction: the head row and the event must commit together."""
    if not conn.in_transaction:
        raise RuntimeError("append needs the caller's transaction (Database.transaction)")


def append(conn: Connection, account_id: str, kind: str, payload: object, at: float) -> int:
    """Append one event to the account's log in the caller's transaction; its seq (1, 2, 3 …)."""
    _require_transaction(conn)
    body = _encoder.encode(payload).decode()
    row = conn.execute(
        "INSERT INTO account_event_heads (account_id, seq) VALUES (?, 1) "
        "ON CONFLICT (account_id) DO UPDATE SET seq = account_event_heads.seq + 1 RETURNING seq",
        (account_id,),
    ).fetchone()
    seq = int(row[0])
    conn.execute(
        "INSERT INTO account_events (account_id, seq, kind, payload, at) VALUES (?, ?, ?, ?, ?)",
        (account_id, seq, kind, body, at),
    )
    metrics.EVENTS_APPENDED.inc()
    return seq


def read_after(conn: Connection, account_id: str, after: int, limit: int = MAX_READ) -> list[Event]:
    """The account's events with seq > `after`, ascending, at most `limit` of them. Raises `Truncated`
    when the first of them is no longer retained (or `after` is past the head)."""
    rows = conn.execute(
        "SELECT seq, kind, payload, at FROM account_events WHERE account_id = ? AND seq > ? ORDER BY seq LIMIT ?",
        (account_id, after, limit),
    ).fetchall()
    if not rows or int(rows[0][0]) != after + 1:
        found = conn.execute(
            "SELECT h.seq, (SELECT MIN(e.seq) FROM account_events e WHERE e.account_id = h.account_id) "
            "FROM account_event_heads h WHERE h.account_id = ?",
            (account_id,),
        ).fetchone()
        head = int(found[0]) if found is not None else 0
        oldest = int(found[1]) if found is not None and found[1] is not None else head + 1
        # An account's events commit in seq order, so the rows a reader sees run without a gap from the
        # oldest retained one: a first row past `after + 1` means the ones before it were pruned.
        if rows:
            oldest = min(oldest, int(rows[0][0]))
        if after > head or after + 1 < oldest:
            raise Truncated(account_id, after, oldest, head)
    return [Event(account_id, int(seq), kind, _decoder.decode(payload), float(at)) for seq, kind, payload, at in rows]


def heads(conn: Connection, account_ids: Iterable[str]) -> dict[str, int]:
    """Each account's newest seq (0: none yet), in one statement per `IN_CHUNK` accounts."""
    wanted = list(dict.fromkeys(account_ids))
    found = dict.fromkeys(wanted, 0)
    for chunk, marks in in_chunks(wanted):
        for account_id, seq in conn.execute(
            f"SELECT account_id, seq FROM account_event_heads WHERE account_id IN ({marks})",  # noqa: S608 - only ?s
            chunk,
        ):
            found[account_id] = int(seq)
    return found


def prune(conn: Connection, now: float, max_age_seconds: float, max_per_account: int) -> int:
    """Remove events older than `max_age_seconds` and all but each account's newest `max_per_account`;
    how many rows went. The head rows stay: seqs go on from where they were."""
    removed = conn.execute("DELETE FROM account_events WHERE at < ?", (now - max_age_seconds,)).rowcount
    removed += conn.execute(
        "DELETE FROM account_events WHERE seq <= "
        "(SELECT h.seq - ? FROM account_event_heads h WHERE h.account_id = account_events.account_id)",
        (max_per_account,),
    ).rowcount
    metrics.EVENTS_PRUNED.inc(max(removed, 0))
    return max(removed, 0)


class Appender:
    """Handed to an `EventLog.transaction` function: appends in that transaction and remembers, per
    account, the newest seq it took, for the rings sent once the transaction commits."""

    def __init__(self, conn: Connection, clock: Callable[[], float]) -> None:
        self._conn = conn
        self._clock = clock
        self.appended: dict[str, int] = {}

    def append(self, account_id: str, kind: str, payload: object) -> int:
        seq = append(self._conn, account_id, kind, payload, self._clock())
        self.appended[account_id] = seq
        return seq


async def ring(bell: Bell | None, appended: Mapping[str, int]) -> None:
    """Publish a ring for each account's newest appended seq, once its transaction has committed.
    A failed or slow publish is logged and counted, never raised: the log is the truth, and every feed
    finds the event by its position check or its polling."""
    global _failing
    if bell is None:
        return
    for account_id, seq in appended.items():
        try:
            async with asyncio.timeout(PUBLISH_SECONDS):  # not wait_for: it can lose a cancel (Python 3.11)
                await bell.publish(account_id, seq)
        except Exception as e:  # noqa: BLE001 - a lost ring costs latency, never an event
            metrics.EVENT_PUBLISH_FAILURES.inc()
            if not _failing:
                log.warning("event rings not published (%s): feeds find the events by polling", type(e).__name__)
            _failing = True
        else:
            if _failing:
                log.info("event rings are published again")
            _failing = False
        raise_if_cancelled()  # redis-py may swallow a cancel that comes during a publish


_failing = False  # the last ring failed: later failures are not logged again


class EventLog:
    """The log as the event loop uses it, over one `Database`; rings `bell` (if any) after commits."""

    def __init__(self, db: Database, bell: Bell | None = None, *, clock: Callable[[], float] = time.time) -> None:
        self.db = db
        self.bell = bell
        self._clock = clock

    async def transaction(
        self, fn: Callable[[Connection, Appender], T], *, durable: bool = False, ring_now: bool = True
    ) -> T:
        """Run `fn(conn, appender)` as one `Database.transaction`; once it has committed, ring the bell
        for every account it appended to (unless `ring_now` is False: the caller rings, in its own time).
        Nothing rings if it raised (nothing was appended)."""
        appended: dict[str, int] = {}

        def body(conn: Connection) -> T:
            appender = Appender(conn, self._clock)
            result = fn(conn, appender)
            appended.clear()
            appended.update(appender.appended)
            return result

        result = await self.db.transaction(body, durable=durable)
        if ring_now:
            await ring(self.bell, appended)
        return result

    async def append(self, account_id: str, kind: str, payload: object) -> int:
        """Append one event in a transaction of its own, then ring; its seq."""
        return await self.transaction(lambda _conn, appender: appender.append(account_id, kind, payload))

    async def read_after(self, account_id: str, after: int, limit: int = MAX_READ) -> list[Event]:
        """`read_after` on the database (raises `Truncated`)."""
        return await self.db.run(lambda conn: read_after(conn, account_id, after, limit))

    async def heads(self, account_ids: Iterable[str]) -> dict[str, int]:
        """`heads` on the database."""
        wanted = list(account_ids)
        return await self.db.run(lambda conn: heads(conn, wanted))

    async def size(self) -> int:
        """How many events the log holds (every account)."""
        row = await self.db.run(lambda conn: conn.execute("SELECT count(*) FROM account_events").fetchone())
        return int(row[0]) if row is not None else 0

    async def prune(self, max_age_seconds: float, max_per_account: int) -> int:
        """`prune` as one transaction, now."""
        now = self._clock()
        return await self.db.transaction(lambda conn: prune(conn, now, max_age_seconds, max_per_account))
