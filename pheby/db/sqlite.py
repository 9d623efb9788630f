"""The SQLite engine: one connection on one dedicated thread.

Every query runs on that thread (`await db.run(fn)`), so the event loop never blocks on
SQLite and no two statements interleave; `transaction` wraps a function in BEGIN IMMEDIATE.
Numbered migrations in `pheby/migrations/NNNN_name.sql` are applied at start-up, once each, and
recorded in `schema_migrations`. A database a newer server migrated further than this code knows
(`SchemaTooNew`) is refused before anything is written to it: migrations only move forward.
"""

import asyncio
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from pheby.db.interface import Connection, Cursor, Database, DatabaseError, IntegrityError, SchemaTooNew
from pheby.db.migrations import migration_scripts, newest_version

T = TypeVar("T")


class SqliteConnection(Connection):
    """The stores' view of the sqlite3 connection: its own errors become the engine-neutral ones."""

    __slots__ = ("raw",)
    engine = "sqlite"

    def __init__(self, raw: sqlite3.Connection) -> None:
        self.raw = raw

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> Cursor:
        try:
            return self.raw.execute(sql, parameters)
        except sqlite3.IntegrityError as e:
            raise IntegrityError(str(e)) from e

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]], /) -> Cursor:
        try:
            return self.raw.executemany(sql, rows)
        except sqlite3.IntegrityError as e:
            raise IntegrityError(str(e)) from e

    @property
    def in_transaction(self) -> bool:
        return self.raw.in_transaction


class SqliteDatabase(Database):
    """Async facade over one sqlite3 connection owned by a single worker thread."""

    engine = "sqlite"

    def __init__(self, path: Path) -> None:
        self.path = path
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite")
        self._conn: sqlite3.Connection | None = None
        self._facade: SqliteConnection | None = None

    async def open(self) -> None:
        """Open the connection (WAL, foreign keys on) and apply pending migrations.

        Raises `SchemaTooNew`, having changed nothing, when a newer server migrated the database further."""
        await self._submit(self._open)

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            refuse_newer(conn)  # before any pragma or migration writes to it
        except BaseException:
            conn.close()
            raise
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA busy_timeout=5000")
        self._conn = conn
        self._facade = SqliteConnection(conn)
        apply_migrations(conn)

    async def close(self) -> None:
        """Close the connection and stop the worker thread."""
        if self._conn is not None:
            await self._submit(self._conn.close)
            self._conn = self._facade = None
        self._executor.shutdown(wait=True)

    async def run(self, fn: Callable[[Connection], T]) -> T:
        """Run `fn(conn)` on the database thread (autocommit: one statement, one transaction)."""
        return await self._submit(lambda: fn(self._connection()))

    async def transaction(self, fn: Callable[[Connection], T], *, durable: bool = False) -> T:
        """Run `fn(conn)` inside BEGIN IMMEDIATE … COMMIT, rolled back if it raises.

        `durable`: the commit is on disk when this returns. With WAL and synchronous=NORMAL (the
        default here) a commit survives a crash of the process but not of the machine; for this one
        the WAL is fsynced at commit (synchronous=FULL), then the connection goes back to NORMAL.
        """

        def wrapped() -> T:
            facade = self._connection()
            conn = facade.raw
            if durable:
                conn.execute("PRAGMA synchronous=FULL")
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    result = fn(facade)
                    self._commit(facade)
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
            finally:
                if durable:
                    conn.execute("PRAGMA synchronous=NORMAL")
            return result

        return await self._submit(wrapped)

    async def credential_marker(self) -> int:
        """`PRAGMA data_version`: it moves when another connection (a `pheby account` command) commits."""
        return await self._submit(lambda: int(self._connection().raw.execute("PRAGMA data_version").fetchone()[0]))

    def _connection(self) -> SqliteConnection:
        if self._facade is None:
            raise RuntimeError("database is not open")
        return self._facade

    async def _submit(self, fn: Callable[[], T]) -> T:
        try:
            return await asyncio.wrap_future(self._executor.submit(fn))
        except sqlite3.Error as e:
            raise DatabaseError(str(e)) from e


def check_schema_version(path: Path) -> None:
    """Raise `SchemaTooNew` if the database at `path` was migrated past this code's newest migration.

    Only reads: a missing database stays missing, an existing one is opened, queried and closed (the
    `-wal` and `-shm` files the read makes are gone again once it closes)."""
    if not path.exists():
        return
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        refuse_newer(conn)
    finally:
        conn.close()


def schema_version(conn: sqlite3.Connection) -> int:
    """The newest migration recorded in the database (0 for a new one)."""
    table = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'").fetchone()
    if table is None:
        return 0
    (version,) = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()
    return int(version)


def refuse_newer(conn: sqlite3.Connection) -> None:
    """Raise `SchemaTooNew` when the database records a migration this code doesn't have."""
    found, known = schema_version(conn), newest_version()
    if found > known:
        raise SchemaTooNew(found, known)


def apply_migrations(conn: sqlite3.Connection, up_to: int | None = None) -> list[int]:
    """Apply every numbered migration not yet recorded (up to version `up_to`, default all); return
    the versions applied. Raises `SchemaTooNew` (applying nothing) for a database ahead of this code."""
    refuse_newer(conn)
    conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at REAL)")
    done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
    applied: list[int] = []
    for version, sql in migration_scripts("sqlite"):
        if version in done or (up_to is not None and version > up_to):
            continue
        # executescript commits first, so the whole script and its record go in one explicit transaction.
        try:
            conn.executescript(
                f"BEGIN IMMEDIATE;\n{sql}\n"
                f"INSERT INTO schema_migrations (version, applied_at) VALUES ({version}, strftime('%s', 'now'));\n"
                "COMMIT;"
            )
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        applied.append(version)
    return applied


def raw_sqlite(conn: Connection) -> sqlite3.Connection:
    """The sqlite3 connection under `conn`, for what only SQLite has (FTS5, the backup API, tracing)."""
    if not isinstance(conn, SqliteConnection):
        raise TypeError("not a SQLite connection")
    return conn.raw
