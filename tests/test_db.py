"""The metadata database: WAL, foreign keys, idempotent migrations, queries off the event loop."""

import threading
from pathlib import Path

import pytest

from pheby.db import Connection, IntegrityError, SqliteDatabase, apply_migrations, raw_sqlite

pytestmark = pytest.mark.anyio


async def test_open_applies_migrations_once(tmp_path: Path) -> None:
    db = SqliteDatabase(tmp_path / "m.sqlite3")
    await db.open()
    versions = await db.run(lambda c: [r[0] for r in c.execute("SELECT version FROM schema_migrations")])
    assert versions
    assert versions == sorted(versions)
    assert await db.run(lambda c: apply_migrations(raw_sqlite(c))) == []  # a second pass applies nothing
    await db.close()
    reopened = SqliteDatabase(tmp_path / "m.sqlite3")
    await reopened.open()  # and a restart neither fails nor re-applies
    again = await reopened.run(lambda c: [r[0] for r in c.execute("SELECT version FROM schema_migrations")])
    assert again == versions
    await reopened.close()


async def test_wal_and_foreign_keys(tmp_path: Path) -> None:
    db = SqliteDatabase(tmp_path / "m.sqlite3")
    await db.open()
    assert await db.run(lambda c: c.execute("PRAGMA journal_mode").fetchone()[0]) == "wal"
    assert await db.run(lambda c: c.execute("PRAGMA foreign_keys").fetchone()[0]) == 1
    with pytest.raises(IntegrityError):
        await db.run(
            lambda c: c.execute(
                "INSERT INTO auth_tokens (id, account_id, token_sha256, kind, created_at) "
                "VALUES ('t', 'nobody', 'd', 'api', 0)"
            )
        )
    await db.close()


async def test_queries_run_off_the_event_loop_thread(tmp_path: Path) -> None:
    db = SqliteDatabase(tmp_path / "m.sqlite3")
    await db.open()
    loop_thread = threading.get_ident()
    assert await db.run(lambda _: threading.get_ident()) != loop_thread
    await db.close()


async def test_transaction_rolls_back_on_error(tmp_path: Path) -> None:
    db = SqliteDatabase(tmp_path / "m.sqlite3")
    await db.open()

    def fail(conn: Connection) -> None:
        conn.execute("INSERT INTO auth_failures (scope, subject, at) VALUES ('x', 'y', 1)")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        await db.transaction(fail)
    assert await db.run(lambda c: c.execute("SELECT COUNT(*) FROM auth_failures").fetchone()[0]) == 0
    await db.close()
