"""The metadata database: SQLite (the default, one process) or PostgreSQL (`PHEBY_DATABASE_URL`).

Stores write one SQL for both engines (`interface`); each engine's module owns what differs: SQLite's
one connection on one thread (`sqlite`), PostgreSQL's pool and its parameter style (`postgres`). A list
bound to `IN (…)` goes in chunks (`in_lists`). Numbered migrations (`migrations`) are applied at
start-up, once each, and recorded in `schema_migrations`; a database a newer server migrated further
(`SchemaTooNew`) is refused before anything is written to it.

May import: `pheby.errors` (its database errors) and itself; nothing else of the server.
"""

from pathlib import Path

from pheby.db.interface import Connection, Cursor, Database, DatabaseError, IntegrityError, Row, SchemaTooNew
from pheby.db.migrations import migration_scripts, newest_version
from pheby.db.sqlite import SqliteDatabase, apply_migrations, check_schema_version, raw_sqlite, schema_version

__all__ = [
    "Connection",
    "Cursor",
    "Database",
    "DatabaseError",
    "IntegrityError",
    "Row",
    "SchemaTooNew",
    "SqliteDatabase",
    "apply_migrations",
    "check_schema_version",
    "migration_scripts",
    "newest_version",
    "open_database",
    "raw_sqlite",
    "schema_version",
]


def open_database(database_url: str, sqlite_path: Path) -> Database:
    """The database a deployment names: PostgreSQL at `database_url`, else SQLite at `sqlite_path`."""
    if database_url:
        from pheby.db.postgres import PostgresDatabase  # psycopg loads only where it is used

        return PostgresDatabase(database_url)
    return SqliteDatabase(sqlite_path)
