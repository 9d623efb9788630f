"""The test's database on either engine: the `db` fixture (opened on the engine `database_url` names) and
`add_accounts`; and reading a test server's database straight, as another process would (`query`, `dump`)."""

import contextlib
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pheby.db import Connection, Database, open_database
from pheby.db.postgres import postgres_sql
from pheby.settings import Settings


@pytest.fixture
async def db(database_url: str, tmp_path: Path) -> AsyncIterator[Database]:
    """The test's database, opened and migrated: SQLite in `tmp_path`, or its own PostgreSQL database."""
    database = open_database(database_url, tmp_path / "pheby.sqlite3")
    await database.open()
    yield database
    await database.close()


async def add_accounts(db: Database, *account_ids: str) -> None:
    """Bare accounts rows (named `name-<id>`), for tests below the stores."""

    def insert(conn: Connection) -> None:
        for account_id in account_ids:
            conn.execute(
                "INSERT INTO accounts (id, name, is_owner, created_at) VALUES (?, ?, ?, ?)",
                (account_id, f"name-{account_id}", False, 1.0),
            )

    await db.transaction(insert)


def query(settings: Settings, sql: str, parameters: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The rows of one statement (qmark placeholders, as the stores write them), on a connection of its own."""
    if settings.database_url:
        with psycopg.connect(settings.database_url, autocommit=True) as pg:
            return list(pg.execute(postgres_sql(sql).encode(), parameters).fetchall())
    with contextlib.closing(sqlite3.connect(settings.database_path)) as conn:
        return [tuple(row) for row in conn.execute(sql, parameters).fetchall()]


def dump(settings: Settings) -> str:
    """Every row of every table, as text: what a stolen copy of the database would show."""
    if settings.database_url:
        tables = query(settings, "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'")
        return "\n".join(repr(row) for (table,) in tables for row in query(settings, f"SELECT * FROM {table}"))
    with contextlib.closing(sqlite3.connect(settings.database_path)) as conn:
        return "\n".join(conn.iterdump())
