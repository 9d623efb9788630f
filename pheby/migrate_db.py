"""`pheby migrate-db --to postgresql://…`: a data dir's SQLite metadata moved, once, into PostgreSQL.

A deployment that outgrows one process moves its metadata to PostgreSQL (`PHEBY_DATABASE_URL`) without
losing an account, a token or a message. The move is all or nothing and checked:

1. The source is the data dir's `pheby.sqlite3`, read in one read transaction (one consistent snapshot,
   even should a server still be writing to it). It must be at this code's newest schema: an older one is
   refused (start the server once on SQLite to migrate it), a newer one too (`SchemaTooNew`).
2. The target must hold no row in any table copied into it (a second run, or a server already started on
   it, is refused before anything is written). An empty database is migrated first, as the server's
   start-up would (`pheby.db.postgres.apply_migrations`), so both sides are at the same version; a target
   a newer server migrated further is refused.
3. Every table SQLite has, except what only SQLite keeps (`schema_migrations`, which the target records
   itself; the FTS5 search index, its shadow tables and its partitions; `sqlite_*`), is copied with
   PostgreSQL's COPY, in foreign-key order (derived from `PRAGMA foreign_key_list`, so a table a future
   migration adds is handled), all in ONE PostgreSQL transaction under the writers' lock.
4. Before the commit: each copied table's row count on PostgreSQL must equal SQLite's; the identity
   sequences (`history_log.id`, `changes.sequence`, …) are moved past the copied ids, so a new row never
   takes one; and PostgreSQL's search index is rebuilt (`rebuild_search_index`). Any failure rolls the
   whole copy back: the target is left as it was, migrated and empty.

The URL may carry a password (better: `~/.pgpass` or `PGPASSWORD`, which libpq reads): no message here
names the URL, its host or its port, only what failed.
"""

import contextlib
import graphlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import msgspec
import psycopg
from psycopg import sql

from pheby.db import SchemaTooNew, newest_version
from pheby.db import schema_version as sqlite_schema_version
from pheby.db.postgres import LOCK_TIMEOUT, WRITE_LOCK, PostgresConnection, apply_migrations, pg_row
from pheby.search.documents import index_pending

CONNECT_SECONDS: Final = 10
# Tables only SQLite keeps: the target records its own migrations; the full-text index is SQLite's FTS5
# (PostgreSQL's is built by its own mechanism, `rebuild_search_index`). FTS5's virtual table and its shadow
# tables (`search_index_*`) are skipped as every virtual table is.
SQLITE_ONLY_TABLES: Final = frozenset({"schema_migrations", "search_partitions", "search_labels"})
URL_SCHEMES: Final = ("postgresql://", "postgres://")


class MigrateRefused(Exception):
    """The move can't go ahead as asked (no source, a schema out of step, a target holding data). Nothing
    was written to the target. The message is one line and names no host, port or password."""


class MigrateFailed(Exception):
    """The copy failed (the target refused a row, the connection dropped, the counts differ). The target's
    transaction was rolled back: its tables are as empty as they were."""


class MigrateResult(msgspec.Struct, frozen=True, kw_only=True):
    tables: dict[str, int]  # each copied table's rows, in the order copied
    rows: int
    schema_version: int


def migrate_db(source: Path, url: str) -> MigrateResult:
    """Copy the SQLite database at `source` into the empty PostgreSQL database at `url` (module docstring)."""
    if not url.startswith(URL_SCHEMES):
        raise MigrateRefused("--to must be a postgresql:// URL")
    if not source.is_file():
        raise MigrateRefused(f"no SQLite database at {source}: nothing to migrate (is PHEBY_DATA_DIR right?)")
    with _sqlite_snapshot(source) as lite:
        version = _check_source_version(lite)
        tables = copy_order(lite)
        with _connect(url) as pg:
            _check_empty(pg, tables)  # before migrating: a refused target is left exactly as it was
            try:
                apply_migrations(pg)
            except SchemaTooNew as exc:
                raise MigrateRefused(
                    f"the target database's schema is version {exc.found}; this code knows up to {exc.known}: "
                    "nothing was changed"
                ) from exc
            except psycopg.Error as exc:
                raise MigrateFailed(f"migrating the target database failed: {_reason(exc)}") from exc
            copied = _copy_all(lite, pg, tables)
    return MigrateResult(tables=copied, rows=sum(copied.values()), schema_version=version)


# --- the source ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def _sqlite_snapshot(path: Path) -> Iterator[sqlite3.Connection]:
    """The SQLite database at `path` in one read transaction (its snapshot is taken at the first read)."""
    try:
        conn = sqlite3.connect(path, isolation_level=None)
    except sqlite3.Error as exc:
        raise MigrateRefused(f"cannot open {path}: {exc}") from exc
    try:
        conn.execute("BEGIN")
        yield conn
    except sqlite3.DatabaseError as exc:
        raise MigrateFailed(f"reading {path} failed: {exc}") from exc
    finally:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        conn.close()


def _check_source_version(lite: sqlite3.Connection) -> int:
    found, known = sqlite_schema_version(lite), newest_version()
    if found > known:
        raise MigrateRefused(str(SchemaTooNew(found, known)))
    if found < known:
        raise MigrateRefused(
            f"the data dir's schema is version {found}, older than this code's {known}: start the server once "
            "on SQLite (without PHEBY_DATABASE_URL) to migrate it, stop it, then run migrate-db again"
        )
    return found


def copy_order(lite: sqlite3.Connection) -> list[str]:
    """SQLite's tables to copy, each after every table its foreign keys reference (a topological sort)."""
    listed = lite.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'")
    ddl = {str(name): str(text or "") for name, text in listed}
    virtual = {name for name, text in ddl.items() if text.upper().startswith("CREATE VIRTUAL TABLE")}
    tables = sorted(
        name
        for name in ddl
        if name not in virtual
        and name not in SQLITE_ONLY_TABLES
        and not name.startswith("sqlite_")
        and not any(name.startswith(f"{v}_") for v in virtual)  # FTS5's shadow tables
    )
    sorter: graphlib.TopologicalSorter[str] = graphlib.TopologicalSorter()
    for table in tables:
        referenced = {str(row[2]) for row in lite.execute(f"PRAGMA foreign_key_list({_quoted(table)})")}
        sorter.add(table, *sorted(referenced & set(tables) - {table}))
    try:
        return list(sorter.static_order())
    except graphlib.CycleError as exc:
        raise MigrateFailed(f"the tables' foreign keys form a cycle: {' -> '.join(exc.args[1])}") from exc


def _columns(lite: sqlite3.Connection, table: str) -> list[str]:
    return [str(row[1]) for row in lite.execute(f"PRAGMA table_info({_quoted(table)})")]


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# --- the target ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def _connect(url: str) -> Iterator[psycopg.Connection[Any]]:
    try:
        conn = psycopg.connect(
            url,
            autocommit=True,
            connect_timeout=CONNECT_SECONDS,
            options=f"-c lock_timeout={LOCK_TIMEOUT}",
            application_name="pheby migrate-db",
        )
    except psycopg.OperationalError as exc:
        raise MigrateRefused(f"cannot connect to the --to database: {_connect_reason(exc)}") from exc
    except psycopg.Error as exc:  # a malformed URL: libpq's message may quote it, password and all
        raise MigrateRefused("--to is not a valid PostgreSQL URL") from exc
    with conn:
        yield conn


def _connect_reason(exc: psycopg.OperationalError) -> str:
    """What libpq says went wrong, without the "connection to server at HOST, port PORT failed" part."""
    message = str(exc)
    if "FATAL:" in message:
        reason = message.rsplit("FATAL:", 1)[1].strip().splitlines()[0].strip()
        if reason:
            return reason
    return "check the URL, that the server is up and the credentials"


def _reason(exc: psycopg.Error) -> str:
    """The server's own message (one line, no address), else the error's kind."""
    primary = exc.diag.message_primary if exc.diag is not None else None
    return (primary or type(exc).__name__).splitlines()[0]


def _existing_tables(pg: psycopg.Connection[Any]) -> set[str]:
    rows = pg.execute(
        "SELECT table_name FROM information_schema.tables "
        "WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'"
    ).fetchall()
    return {str(row[0]) for row in rows}


def _check_empty(pg: psycopg.Connection[Any], tables: list[str]) -> None:
    try:
        existing = _existing_tables(pg)
        for table in tables:
            if table not in existing:
                continue
            row = pg.execute(sql.SQL("SELECT EXISTS (SELECT 1 FROM {})").format(sql.Identifier(table))).fetchone()
            if row is not None and row[0]:
                raise MigrateRefused(
                    f"the target database already holds data (table {table} has rows): migrate into a new, "
                    "empty database (and start no server on it before)"
                )
    except psycopg.Error as exc:
        raise MigrateFailed(f"reading the target database failed: {_reason(exc)}") from exc


def _copy_all(lite: sqlite3.Connection, pg: psycopg.Connection[Any], tables: list[str]) -> dict[str, int]:
    try:
        with pg.transaction():
            # No pheby transaction runs meanwhile, and nobody writes to the tables until this commits.
            pg.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
            target_tables = _existing_tables(pg)
            missing = [t for t in tables if t not in target_tables]
            if missing:
                raise MigrateFailed(f"the target database has no table {missing[0]}: its schema is not this code's")
            pg.execute(
                sql.SQL("LOCK TABLE {} IN EXCLUSIVE MODE").format(sql.SQL(", ").join(map(sql.Identifier, tables)))
            )
            _check_empty(pg, tables)  # again, now that nobody can write: a server may have started meanwhile
            copied = {table: _copy_table(lite, pg, table) for table in tables}
            for table, rows in copied.items():
                _check_count(lite, pg, table, rows)
            rebuild_search_index(pg)
            _advance_identities(lite, pg, tables)  # last: a sequence isn't rolled back with the rest
    except psycopg.Error as exc:
        raise MigrateFailed(f"the copy failed and was rolled back: {_reason(exc)}") from exc
    return copied


def _copy_table(lite: sqlite3.Connection, pg: psycopg.Connection[Any], table: str) -> int:
    columns = _columns(lite, table)
    target = {
        str(row[0])
        for row in pg.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name = %s",
            (table,),
        )
    }
    lost = [c for c in columns if c not in target]
    if lost:
        raise MigrateFailed(f"the target's table {table} has no column {lost[0]}: its schema is not this code's")
    statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
        sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, columns))
    )
    rows = 0
    try:
        with pg.cursor() as cursor, cursor.copy(statement) as copy:
            # SQLite's dynamic types as they are: an int in a REAL column is read as a double, a BLOB as bytea.
            select = f"SELECT {', '.join(map(_quoted, columns))} FROM {_quoted(table)}"  # noqa: S608 - names quoted
            for row in lite.execute(select):
                copy.write_row(row)
                rows += 1
    except psycopg.Error as exc:
        raise MigrateFailed(f"copying table {table} failed and the copy was rolled back: {_reason(exc)}") from exc
    return rows


def _check_count(lite: sqlite3.Connection, pg: psycopg.Connection[Any], table: str, copied: int) -> None:
    (expected,) = lite.execute(f"SELECT COUNT(*) FROM {_quoted(table)}").fetchone()  # noqa: S608 - a quoted name
    row = pg.execute(sql.SQL("SELECT COUNT(*) FROM {}").format(sql.Identifier(table))).fetchone()
    found = int(row[0]) if row is not None else -1
    if not expected == copied == found:
        raise MigrateFailed(
            f"table {table}: SQLite holds {expected} rows, {copied} were copied and PostgreSQL counts {found}: "
            "the copy was rolled back"
        )


def _advance_identities(lite: sqlite3.Connection, pg: psycopg.Connection[Any], tables: list[str]) -> None:
    """Move each identity (or serial) column's sequence of the copied tables past the largest id copied, and
    past the largest SQLite ever handed out (AUTOINCREMENT's `sqlite_sequence`, for ids of deleted rows)."""
    handed_out: dict[str, int] = {}
    if lite.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sqlite_sequence'").fetchone():
        handed_out = {str(name): int(seq) for name, seq in lite.execute("SELECT name, seq FROM sqlite_sequence")}
    identities = pg.execute(
        "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = current_schema() "
        "AND (is_identity = 'YES' OR column_default LIKE 'nextval(%%')"
    ).fetchall()
    for table, column in identities:
        if table not in tables:
            continue
        row = pg.execute(sql.SQL("SELECT MAX({}) FROM {}").format(sql.Identifier(column), sql.Identifier(table)))
        largest = max((row.fetchone() or (None,))[0] or 0, handed_out.get(table, 0))
        if largest > 0:
            pg.execute(
                "SELECT setval(pg_get_serial_sequence(%s, %s), %s)",
                (sql.Identifier(table).as_string(pg), column, largest),
            )


def rebuild_search_index(pg: psycopg.Connection[Any]) -> None:
    """Index what was just copied, inside the copy's transaction. SQLite's FTS5 index is never copied:
    PostgreSQL's triggers made each copied row's index row (numbered in PostgreSQL's own partitions) as it
    arrived, and `index_pending` gives them their terms, as after any write."""
    pg.row_factory = pg_row
    index_pending(PostgresConnection(pg))
