"""What the stores see of a database, whichever engine holds it.

A store hands `Database.run` or `Database.transaction` a plain function of a `Connection`; the
function's SQL is the same on every engine (qmark parameters, `ON CONFLICT`, `RETURNING`), and the
engine's module converts what differs. Rows are read by position or by column name.
"""

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

from pheby.errors import DatabaseError, IntegrityError

__all__ = ["Connection", "Cursor", "Database", "DatabaseError", "IntegrityError", "Row", "SchemaTooNew"]

T = TypeVar("T")


class Row(Protocol):
    """A result row: `row[0]` or `row["column"]`."""

    def __getitem__(self, key: int | str, /) -> Any: ...

    def keys(self) -> list[str]: ...

    def __len__(self) -> int: ...


class Cursor(Protocol):
    """What a statement returns: its rows and how many rows it changed."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Connection(ABC):
    """One engine connection, as a store's function uses it (never shared between threads)."""

    engine: str  # its database's: "sqlite" or "postgresql"

    @abstractmethod
    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> Cursor:
        """Run one statement; `?` marks each parameter."""

    @abstractmethod
    def executemany(self, sql: str, rows: Iterable[Sequence[Any]], /) -> Cursor:
        """Run one statement once for each row of parameters."""

    @property
    @abstractmethod
    def in_transaction(self) -> bool:
        """Whether a transaction is open (`Database.transaction`), not each statement its own."""

    def heard(self, notice: str) -> bool:
        """Whether the server sent this notice during the transaction (PostgreSQL's `RAISE NOTICE`, from a
        trigger: what it did that the client has to follow up before the commit). SQLite sends none."""
        return False


class SchemaTooNew(Exception):
    """The database holds migrations newer than this code's: a newer server wrote it. Nothing was changed."""

    def __init__(self, found: int, known: int, *, holder: str = "the data dir") -> None:
        self.found = found
        self.known = known
        super().__init__(
            f"{holder}'s schema is version {found}; this server knows up to {known}: "
            "upgrade the server (or restore a backup made for this version)"
        )


class Database(ABC):
    """An engine's connections, used from the event loop: every function runs on a worker thread."""

    engine: str  # "sqlite" or "postgresql"
    _commit_steps: tuple[Callable[[Connection], object], ...] = ()

    def add_commit_step(self, step: Callable[[Connection], object]) -> None:
        """Run `step(conn)` at the end of every `transaction`, before it commits (once, however often added):
        what the engine's triggers can't do in the writer's transaction (`pheby.search.documents`)."""
        if step not in self._commit_steps:
            self._commit_steps = (*self._commit_steps, step)

    def _commit(self, conn: Connection) -> None:
        for step in self._commit_steps:
            step(conn)

    @abstractmethod
    async def open(self) -> None:
        """Connect and apply pending migrations. Raises `SchemaTooNew`, having changed nothing, for a
        database a newer server migrated further."""

    @abstractmethod
    async def close(self) -> None:
        """Close every connection and stop the worker threads."""

    @abstractmethod
    async def run(self, fn: Callable[[Connection], T]) -> T:
        """Run `fn(conn)` with each statement its own transaction."""

    @abstractmethod
    async def transaction(self, fn: Callable[[Connection], T], *, durable: bool = False) -> T:
        """Run `fn(conn)` as one transaction that no other writer interleaves with, rolled back if it
        raises; `durable`: on disk when this returns, even if the machine goes down."""

    @abstractmethod
    async def credential_marker(self) -> int:
        """A number that moves whenever another process may have ended a credential (SQLite: any commit of
        another connection; PostgreSQL: an account disabled, revoked or removed, a token revoked or
        removed), so that `pheby.revocation` sweeps the live sockets only then."""
