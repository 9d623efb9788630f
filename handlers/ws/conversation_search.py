"""`conversation.search` → `conversation.search.results`: a page of the account's search results."""

from typing import Annotated

import msgspec

from handlers.ws.support.context import WsContext, rid
from handlers.ws.support.messages import ClientMessage
from pheby.protocol.frames import ConversationSearchResults
from pheby.search.index import PAGE_DEFAULT, PAGE_MAX


class ConversationSearch(ClientMessage, frozen=True, tag="conversation.search"):
    query: str
    limit: Annotated[int, msgspec.Meta(ge=1, le=PAGE_MAX)] = PAGE_DEFAULT
    cursor: str | None = None


async def handle(ctx: WsContext, msg: ConversationSearch) -> None:
    page = await ctx.services.search.search(ctx.account.id, msg.query, limit=msg.limit, cursor=msg.cursor)
    ctx.reply(
        ConversationSearchResults(results=page.results, next_cursor=page.next_cursor, request_id=rid(msg.request_id))
    )
