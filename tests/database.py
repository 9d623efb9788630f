"""Reading a test server's database straight, whichever engine its settings name (as another process would)."""

import contextlib
import sqlite3
from typing import Any

import psycopg

from pheby.db.postgres import postgres_sql
from pheby.settings import Settings


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
