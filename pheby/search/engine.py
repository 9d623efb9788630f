"""What a search asks of the engine's index (`sqlite_index`, `postgres_index`); the rest is shared (`index`)."""

from abc import ABC, abstractmethod
from collections.abc import Sequence

from pheby.db import Connection, Database
from pheby.search.query import SearchQuery


class IndexEngine(ABC):
    async def prepare(self, db: Database) -> None:  # noqa: B027 - most engines have nothing to do
        """Bring the index up to what is committed, before a search reads it."""

    @abstractmethod
    def matching(self, conn: Connection, query: SearchQuery, low: int, high: int, limit: int) -> list[int]:
        """The rowids in [low, high) holding every term of `query` (as looked up: `ranking.lookup_query`),
        newest (largest) first, at most `limit`. `BadRequest` if the index refuses the query."""

    @abstractmethod
    def documents(self, conn: Connection, rowids: Sequence[int]) -> tuple[dict[int, str], dict[int, int]]:
        """Each row's text (`documents.document_texts`; a row gone meanwhile is missing) and its length in
        tokens, as the index counted it."""

    @abstractmethod
    def average_length(self, conn: Connection) -> float:
        """The average length of the index's rows (every account's, as FTS5's bm25() reads it); 0.0 if unknown."""
