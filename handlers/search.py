"""GET /api/search?q=&cursor=&limit= — the caller's conversations, found by their words: a page of results.

The same results as the WebSocket's `conversation.search` (docs/protocol-extensions.md): the query
grammar is `pheby.search.query`'s, and a query outside it is 400.
"""

from typing import Annotated

from litestar import get
from litestar.di import NamedDependency
from litestar.params import Parameter

from handlers.support.openapi import errors
from pheby.auth import Principal
from pheby.search.index import CURSOR_PATTERN, PAGE_DEFAULT, PAGE_MAX, SearchPage
from pheby.search.query import QUERY_MAX_CHARS
from pheby.services import Services

QUERY = Parameter(
    description=(
        f'Words, "exact phrases" and prefix* terms (every one must match), at most {QUERY_MAX_CHARS} '
        "characters; anything else is 400"
    )
)
CURSOR = Parameter(
    pattern=CURSOR_PATTERN,
    description="`next_cursor` of the previous page; one that points past the index's end gives an empty page",
)
LIMIT = Parameter(ge=1, le=PAGE_MAX, description=f"results a page, at most {PAGE_MAX}")


@get("/search", tags=["search"], responses=errors(400))
async def search(
    current_user: NamedDependency[Principal],
    services: NamedDependency[Services],
    q: Annotated[str, QUERY],
    cursor: Annotated[str | None, CURSOR] = None,
    limit: Annotated[int, LIMIT] = PAGE_DEFAULT,
) -> SearchPage:
    return await services.search.search(current_user.account.id, q, limit=limit, cursor=cursor)
