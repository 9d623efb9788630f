"""The SQLite metadata database: one connection on one dedicated thread.

Every query runs on that thread (`await db.run(fn)`), so the event loop never blocks on
SQLite and no two statements interleave; `transaction` wraps a function in BEGIN IMMEDIATE.
Numbered migrations in `pheby/migrations/NNNN_name.sql` are applied at start-up, once each.
"""

import asyncio
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


class Database:
    """Async facade over one sqlite3 connection owned by a single worker thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite")
        self._conn: sqlite3.Connection | None = None

    async def open(self) -> None:
        """Open the connection (WAL, foreign keys on) and apply pending migrations."""
        await self._submit(self._open)

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA busy_timeout=5000")
        self._conn = conn
        apply_migrations(conn)

    async def close(self) -> None:
        """Close the connection and stop the worker thread."""
        if self._conn is not None:
            await self._submit(self._conn.close)
            self._conn = None
        self._executor.shutdown(wait=True)

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn(conn)` on the database thread (autocommit: one statement, one transaction)."""
        return await self._submit(lambda: fn(self._connection()))

    async def transaction(self, fn: Callable[[sqlite3.Connection], T], *, durable: bool = False) -> T:
        """Run `fn(conn)` inside BEGIN IMMEDIATE … COMMIT, rolled back if it raises.

        `durable`: the commit is on disk when this returns. With WAL and synchronous=NORMAL (the
        default here) a commit survives a crash of the process but not of the machine; for this one
        the WAL is fsynced at commit (synchronous=FULL), then the connection goes back to NORMAL.
        """

        def wrapped() -> T:
            conn = self._connection()
            if durable:
                conn.execute("PRAGMA synchronous=FULL")
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    result = fn(conn)
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
            finally:
                if durable:
                    conn.execute("PRAGMA synchronous=NORMAL")
            return result

        return await self._submit(wrapped)

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError("database is not open")
        return self._conn

    async def _submit(self, fn: Callable[[], T]) -> T:
        return await asyncio.wrap_future(self._executor.submit(fn))


def apply_migrations(conn: sqlite3.Connection) -> list[int]:
    """Apply every numbered migration not yet recorded; return the versions applied."""
    conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at REAL)")
    done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
    applied: list[int] = []
    for version, sql in _migration_scripts():
        if version in done:
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


def _migration_scripts() -> list[tuple[int, str]]:
    folder = resources.files("pheby") / "migrations"
    scripts: list[tuple[int, str]] = []
    for entry in folder.iterdir():
        name = entry.name
        if name.endswith(".sql") and name[:4].isdigit():
            scripts.append((int(name[:4]), entry.read_text(encoding="utf-8")))
    return sorted(scripts)
