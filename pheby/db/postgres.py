"""The PostgreSQL engine: a psycopg 3 connection pool, used from worker threads.

The stores' SQL is SQLite's qmark style; `postgres_sql` turns it into psycopg's (the one place the
parameter style is converted). What else differs is settled on the connections here, not in the stores:
Python's `bool` is written as 0/1 (the schema's flags are integers, as in SQLite), a `SUM` of integers
(PostgreSQL's `numeric`) is read back as an int, and rows are read by position or by column name.

Every `transaction` first takes one advisory lock, so writers run one at a time across every process,
as SQLite's `BEGIN IMMEDIATE` makes them: a store's read-then-write needs no isolation level of its own.
It is sent with the `BEGIN`, in one round trip. A connection that failed (the server restarted) is found
by the pool's check and replaced, with no round trip for a connection the server said nothing on; while
the server is down every call raises `DatabaseUnavailable` within `CONNECT_SECONDS`.
"""

import asyncio
import contextlib
import functools
import select
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any, TypeVar

import psycopg
import psycopg_pool
from psycopg.adapt import Dumper, Loader
from psycopg.rows import RowMaker

from pheby.db.interface import Connection, Cursor, Database, DatabaseError, IntegrityError, SchemaTooNew
from pheby.db.migrations import migration_scripts, newest_version
from pheby.errors import DatabaseUnavailable

T = TypeVar("T")

POOL_SIZE = 8
CONNECT_SECONDS = 5.0  # how long a call waits for a connection before answering "unavailable"
LOCK_TIMEOUT = "10s"  # a writer waits this long for the write lock, then fails (SQLite: busy_timeout)
WRITE_LOCK = 0x7068_6562  # the advisory lock every transaction takes ("pheb")
MIGRATION_LOCK = WRITE_LOCK + 1
# A transaction's start and its lock in one round trip (two statements in one simple query, no parameters).
BEGIN_WRITING = f"BEGIN; SELECT pg_advisory_xact_lock({WRITE_LOCK})"


@functools.lru_cache(maxsize=4096)
def postgres_sql(sql: str) -> str:
    """`sql` with psycopg's placeholders: a literal `%` doubled, each `?` made `%s`.

    The stores' SQL never holds a `?` inside a string literal (it binds every value), so each `?` is a
    parameter, as in SQLite's own qmark style."""
    return sql.replace("%", "%%").replace("?", "%s")


class PgRow:
    """A row readable as `row[0]` or `row["name"]`, like `sqlite3.Row`."""

    __slots__ = ("_index", "_values")

    def __init__(self, index: dict[str, int], values: Sequence[Any]) -> None:
        self._index = index
        self._values = tuple(values)

    def __getitem__(self, key: int | str, /) -> Any:
        if isinstance(key, str):
            return self._values[self._index[key]]
        return self._values[key]

    def keys(self) -> list[str]:
        return list(self._index)

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self) -> Any:
        return iter(self._values)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PgRow):
            return self._values == other._values
        return self._values == other

    def __hash__(self) -> int:
        return hash(self._values)

    def __repr__(self) -> str:
        return f"PgRow{self._values!r}"


def pg_row(cursor: "psycopg.Cursor[Any]") -> RowMaker[PgRow]:
    index = {column.name: i for i, column in enumerate(cursor.description or ())}
    return functools.partial(PgRow, index)


class FlagDumper(Dumper):
    """`True`/`False` as 1/0: the schema's flags are integers on both engines."""

    oid = psycopg.adapters.types["int8"].oid

    def dump(self, obj: bool) -> bytes:
        return b"1" if obj else b"0"


class WholeNumberLoader(Loader):
    """`numeric` (what `SUM` of integers gives) as an int when whole, else a float: never a Decimal."""

    def load(self, data: Any) -> int | float:
        number = Decimal(bytes(data).decode())
        return int(number) if number == number.to_integral_value() else float(number)


def _check(conn: psycopg.Connection[Any]) -> None:
    """The pool's check of a connection as it is taken: a round trip only where the server has spoken since
    its last use (a server that stops or restarts ends its connections, which makes their sockets
    readable); a quiet one is taken as it is, sparing every call a round trip."""
    readable = select.poll()
    readable.register(conn.fileno(), select.POLLIN)
    if readable.poll(0):
        psycopg_pool.ConnectionPool.check_connection(conn)


def _configure(conn: psycopg.Connection[Any]) -> None:
    conn.adapters.register_dumper(bool, FlagDumper)
    conn.adapters.register_loader("numeric", WholeNumberLoader)


class PostgresConnection(Connection):
    """The stores' view of a pooled psycopg connection."""

    __slots__ = ("_notices", "raw")
    engine = "postgresql"

    def __init__(self, raw: psycopg.Connection[PgRow]) -> None:
        self.raw = raw
        self._notices: set[str] = set()

    def hear(self, notice: psycopg.errors.Diagnostic) -> None:
        """psycopg's notice handler, while this connection runs a transaction."""
        if notice.message_primary is not None:
            self._notices.add(notice.message_primary)

    def heard(self, notice: str) -> bool:
        return notice in self._notices

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> Cursor:
        try:
            return self.raw.execute(postgres_sql(sql), parameters)
        except psycopg.errors.IntegrityError as e:
            raise IntegrityError(e.diag.message_primary or "constraint violated") from e

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]], /) -> Cursor:
        cursor = self.raw.cursor()
        try:
            cursor.executemany(postgres_sql(sql), rows)
        except psycopg.errors.IntegrityError as e:
            raise IntegrityError(e.diag.message_primary or "constraint violated") from e
        return cursor

    @property
    def in_transaction(self) -> bool:
        return self.raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE


class PostgresDatabase(Database):
    """A pool of connections to one PostgreSQL database, shared by every process of a deployment."""

    engine = "postgresql"

    def __init__(self, url: str, *, pool_size: int = POOL_SIZE) -> None:
        self.url = url
        self._executor = ThreadPoolExecutor(max_workers=pool_size, thread_name_prefix="postgres")
        self._pool: psycopg_pool.ConnectionPool[psycopg.Connection[PgRow]] = psycopg_pool.ConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            open=False,
            timeout=CONNECT_SECONDS,
            check=_check,
            configure=_configure,
            connection_class=psycopg.Connection[PgRow],
            kwargs={
                "autocommit": True,
                "row_factory": pg_row,
                "cursor_factory": psycopg.ClientCursor,
                "connect_timeout": int(CONNECT_SECONDS),
                # Notices too, whatever the role's default: a transaction follows up what its triggers say.
                "options": f"-c lock_timeout={LOCK_TIMEOUT} -c client_min_messages=notice",
                "application_name": "pheby",
            },
        )

    async def open(self) -> None:
        await self._submit(self._open)

    def _open(self) -> None:
        # A pool that can't connect (`_submit` makes that `DatabaseUnavailable`) or can't migrate is closed.
        try:
            self._pool.open(wait=True, timeout=CONNECT_SECONDS)
            with self._pool.connection() as conn:
                apply_migrations(conn)
        except BaseException:
            self._pool.close()
            raise

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._pool.close)
        self._executor.shutdown(wait=True)

    async def run(self, fn: Callable[[Connection], T]) -> T:
        def call() -> T:
            with self._pool.connection() as conn:
                return fn(PostgresConnection(conn))

        return await self._submit(call)

    async def transaction(self, fn: Callable[[Connection], T], *, durable: bool = False) -> T:
        # Every commit waits for its WAL flush (synchronous_commit on): `durable` needs nothing more.
        def call() -> T:
            with self._pool.connection() as conn:
                facade = PostgresConnection(conn)
                conn.add_notice_handler(facade.hear)
                try:
                    conn.execute(BEGIN_WRITING)
                    result = fn(facade)
                    self._commit(facade)
                except BaseException:
                    with contextlib.suppress(psycopg.Error):  # a broken connection: the pool discards it
                        conn.rollback()
                    raise
                finally:
                    conn.remove_notice_handler(facade.hear)
                conn.commit()
                return result

        return await self._submit(call)

    async def credential_marker(self) -> int:
        """The `credential_changes` row its triggers count in (a change by this process moves it too)."""
        return await self.run(lambda c: int(c.execute("SELECT version FROM credential_changes").fetchone()[0]))

    async def _submit(self, fn: Callable[[], T]) -> T:
        try:
            return await asyncio.wrap_future(self._executor.submit(fn))
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as e:
            raise DatabaseUnavailable() from e
        except psycopg.Error as e:
            # The message, never the server's address: errors reach logs and, as 500s, nobody else.
            raise DatabaseError(e.diag.message_primary or type(e).__name__) from e


def schema_version(conn: psycopg.Connection[Any]) -> int:
    """The newest migration recorded in the database (0 for a new one)."""
    if conn.execute("SELECT to_regclass('schema_migrations')").fetchone() in (None, (None,)):
        return 0
    row = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()
    return int(row[0]) if row is not None else 0


def apply_migrations(conn: psycopg.Connection[Any], up_to: int | None = None) -> list[int]:
    """Apply every migration not yet recorded (up to `up_to`) with their records, all in one transaction,
    under a lock so two processes starting at once migrate once. Raises `SchemaTooNew`, applying
    nothing, for a database ahead of this code."""
    applied: list[int] = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        found, known = schema_version(conn), newest_version()
        if found > known:
            raise SchemaTooNew(found, known, holder="the database")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION)"
        )
        done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
        for version, sql in migration_scripts("postgresql"):
            if version in done or (up_to is not None and version > up_to):
                continue
            conn.execute(sql.encode())  # bytes: run as written, no placeholder is read in it
            conn.execute(
                "INSERT INTO schema_migrations (version, applied_at) VALUES (%s, extract(epoch FROM now()))",
                (version,),
            )
            applied.append(version)
    return applied
