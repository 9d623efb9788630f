"""The database engines behind `pheby.db.Database`: one SQL for SQLite and PostgreSQL.

Every test here runs on both engines (`both_engines`): the same statements, the same rows, the same
errors. The PostgreSQL-only tests put real faults on a server of their own: a newer schema, two writers
from two pools (two processes), the server stopped and started again under a live pool.
"""

import asyncio
import sqlite3
import time
from pathlib import Path

import psycopg
import pytest

from pheby.db import Connection, Database, IntegrityError, SchemaTooNew, newest_version, open_database
from pheby.db.postgres import PostgresDatabase
from pheby.errors import DatabaseUnavailable
from tests.postgres_server import PostgresServer, fresh_database

pytestmark = [pytest.mark.anyio, pytest.mark.both_engines]

# Tables only SQLite's full-text index has (FTS5's own, and the rowid partitions it is kept in).
SQLITE_SEARCH_TABLES = {"search_index", "search_partitions", "search_labels"}


async def account(db: Database, account_id: str = "a1") -> None:
    await db.run(
        lambda c: c.execute(
            "INSERT INTO accounts (id, name, is_owner, created_at) VALUES (?, ?, ?, ?)",
            (account_id, f"name-{account_id}", False, 1.5),
        )
    )


async def test_migrations_are_applied_once_with_the_same_numbers_on_every_engine(db: Database) -> None:
    versions = await db.run(lambda c: [r[0] for r in c.execute("SELECT version FROM schema_migrations ORDER BY 1")])
    assert versions == list(range(1, newest_version() + 1))


async def test_a_constraint_is_an_integrity_error_and_a_failed_transaction_leaves_nothing(db: Database) -> None:
    with pytest.raises(IntegrityError):
        await db.run(
            lambda c: c.execute(
                "INSERT INTO auth_tokens (id, account_id, token_sha256, kind, created_at) "
                "VALUES ('t', 'nobody', 'd', 'api', 0)"
            )
        )

    def half(conn: Connection) -> None:
        conn.execute("INSERT INTO auth_failures (scope, subject, at) VALUES ('x', 'y', 1)")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        await db.transaction(half)
    assert await db.run(lambda c: c.execute("SELECT COUNT(*) FROM auth_failures").fetchone()[0]) == 0


async def test_rows_values_and_placeholders_read_the_same(db: Database) -> None:
    await account(db)
    row = await db.run(lambda c: c.execute("SELECT id, is_owner, created_at FROM accounts WHERE id = ?", ("a1",)))
    first = row.fetchone()
    assert (first[0], first["id"], first["is_owner"], first["created_at"]) == ("a1", "a1", 0, 1.5)
    assert first.keys() == ["id", "is_owner", "created_at"]
    # A literal % beside a placeholder; a ? inside a value is data, not a placeholder.
    await db.run(lambda c: c.execute("UPDATE accounts SET media_roots = ? WHERE id = ?", ("50%? off", "a1")))
    found = await db.run(
        lambda c: c.execute("SELECT media_roots FROM accounts WHERE media_roots LIKE '%off' AND id = ?", ("a1",))
    )
    assert found.fetchall()[0][0] == "50%? off"
    # SUM of integers is an int on both (PostgreSQL's numeric is not a Decimal here).
    await db.run(
        lambda c: c.executemany(
            "INSERT INTO artifact_usage (account_id, bytes) VALUES (?, ?) "
            "ON CONFLICT (account_id) DO UPDATE SET bytes = artifact_usage.bytes + excluded.bytes",
            [("a1", 3), ("a1", 4)],
        )
    )
    total = await db.run(lambda c: c.execute("SELECT SUM(bytes) FROM artifact_usage").fetchone()[0])
    assert total == 7
    assert type(total) is int


async def test_postgresql_has_every_table_and_column_sqlite_has(postgres_url: str, tmp_path: Path) -> None:
    """A migration given a PostgreSQL variant must make what the shared one makes."""
    lite = open_database("", tmp_path / "reference.sqlite3")
    await lite.open()
    await lite.close()
    db = PostgresDatabase(postgres_url)
    await db.open()
    reference = sqlite3.connect(tmp_path / "reference.sqlite3")
    expected: dict[str, set[str]] = {}
    for (table,) in reference.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
        if table not in SQLITE_SEARCH_TABLES and not table.startswith(("sqlite_", "search_index")):
            expected[table] = {r[1] for r in reference.execute(f"PRAGMA table_info({table})")}
    reference.close()
    rows = await db.run(
        lambda c: c.execute(
            "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'public'"
        ).fetchall()
    )
    actual: dict[str, set[str]] = {}
    for table, column in rows:
        actual.setdefault(table, set()).add(column)
    await db.close()
    missing = {table: columns - actual.get(table, set()) for table, columns in expected.items()}
    assert {table: columns for table, columns in missing.items() if columns} == {}


async def test_postgresql_refuses_a_newer_schema_and_changes_nothing(postgres_url: str) -> None:
    db = PostgresDatabase(postgres_url)
    await db.open()
    await db.run(lambda c: c.execute("INSERT INTO schema_migrations (version, applied_at) VALUES (999, 0)"))
    await db.close()
    again = PostgresDatabase(postgres_url)
    with pytest.raises(SchemaTooNew, match="the database's schema is version 999"):
        await again.open()
    await again.close()
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone() == (999,)


async def test_postgresql_writers_of_two_processes_take_turns(postgres_url: str) -> None:
    """Two pools (two processes) read-modify-write one row: the write lock makes every increment count."""
    first, second = PostgresDatabase(postgres_url, pool_size=4), PostgresDatabase(postgres_url, pool_size=4)
    await first.open()
    await second.open()
    await account(first)
    await first.run(lambda c: c.execute("INSERT INTO artifact_usage (account_id, bytes) VALUES ('a1', 0)"))

    def increment(conn: Connection) -> None:
        (value,) = conn.execute("SELECT bytes FROM artifact_usage WHERE account_id = 'a1'").fetchone()
        time.sleep(0.002)  # widen the window a lost update would need
        conn.execute("UPDATE artifact_usage SET bytes = ? WHERE account_id = 'a1'", (value + 1,))

    await asyncio.gather(*(db.transaction(increment) for db in (first, second) for _ in range(20)))
    assert await first.run(lambda c: c.execute("SELECT bytes FROM artifact_usage").fetchone()[0]) == 40
    await first.close()
    await second.close()


async def test_postgresql_stopped_answers_unavailable_and_service_returns_by_itself(
    own_postgres_server: PostgresServer,
) -> None:
    with fresh_database(own_postgres_server.url) as url:
        db = PostgresDatabase(url, pool_size=2)
        await db.open()
        await account(db)
        own_postgres_server.stop()
        started = time.monotonic()
        with pytest.raises(DatabaseUnavailable) as refused:
            await db.transaction(lambda c: c.execute("UPDATE accounts SET disabled = 1"))
        assert time.monotonic() - started < 15
        assert str(own_postgres_server.port) not in str(refused.value)
        assert "127.0.0.1" not in str(refused.value)
        own_postgres_server.start()
        deadline = time.monotonic() + 15
        while True:  # the pool replaces its broken connections on its own; bounded
            try:
                names = await db.run(lambda c: [r[0] for r in c.execute("SELECT name FROM accounts")])
                break
            except DatabaseUnavailable:
                assert time.monotonic() < deadline, "PostgreSQL came back, the pool did not"
                await asyncio.sleep(0.2)
        assert names == ["name-a1"]
        # Nothing was acknowledged while it was down: the refused update did not happen.
        assert await db.run(lambda c: c.execute("SELECT disabled FROM accounts").fetchone()[0]) == 0
        await db.close()


async def test_postgresql_credential_marker_moves_when_a_credential_may_end_and_only_then(postgres_url: str) -> None:
    db = PostgresDatabase(postgres_url, pool_size=2)
    await db.open()
    await account(db)
    await db.run(
        lambda c: c.execute(
            "INSERT INTO auth_tokens (id, account_id, token_sha256, kind, created_at) VALUES ('t', 'a1', 'd', 'api', 0)"
        )
    )
    unchanged = await db.credential_marker()
    await db.run(lambda c: c.execute("UPDATE auth_tokens SET last_used_at = 5 WHERE id = 't'"))
    await db.run(lambda c: c.execute("UPDATE accounts SET media_roots = 'x' WHERE id = 'a1'"))
    assert await db.credential_marker() == unchanged  # use and settings end nothing
    moves = [
        "UPDATE auth_tokens SET revoked_at = 6 WHERE id = 't'",
        "UPDATE accounts SET disabled = 1 WHERE id = 'a1'",
        "UPDATE accounts SET credentials_revoked_at = 7 WHERE id = 'a1'",
        "DELETE FROM auth_tokens WHERE id = 't'",
        "DELETE FROM accounts WHERE id = 'a1'",
    ]
    for statement in moves:
        before = await db.credential_marker()

        def change(c: Connection, statement: str = statement) -> None:
            c.execute(statement)

        await db.run(change)
        assert await db.credential_marker() > before, statement
    await db.close()


async def test_postgresql_takes_a_quiet_pooled_connection_without_a_round_trip_and_replaces_an_ended_one(
    postgres_url: str,
) -> None:
    """The pool's check sends nothing on a connection the server has said nothing on since its last use
    (each call a round trip shorter), and finds one the server ended: the next call gets a new one."""
    db = PostgresDatabase(postgres_url, pool_size=1)
    await db.open()
    try:
        with psycopg.connect(postgres_url, autocommit=True) as watcher:

            def backend(conn: Connection) -> int:
                return int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])

            def last_statement(pid: int) -> str:
                row = watcher.execute("SELECT query FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
                return "" if row is None else str(row[0])

            first = await db.run(backend)
            await db.run(lambda c: None)  # the pool's one connection, taken and given back
            assert last_statement(first) == "SELECT pg_backend_pid()"  # nothing was sent to check it

            watcher.execute("SELECT pg_terminate_backend(%s)", (first,))
            deadline = time.monotonic() + 10
            while last_statement(first):  # bounded: the backend gone, its last words sent
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            second = await db.run(backend)  # no error: the check found the connection ended, the pool replaced it
            assert second != first
    finally:
        await db.close()
