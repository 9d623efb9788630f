"""GET /api/conversations/{conversation_id}/export?format=md|json — the conversation as a download.

Markdown to read or JSON in the history's shape (`pheby.hermes.export`); always an attachment, never
rendered inline, not cached. Another account's conversation, or an unknown one, is 404.
"""

import time
from typing import Annotated, Literal

import msgspec
from litestar import Response, get
from litestar.di import NamedDependency
from litestar.params import FromPath, Parameter

import hermes_client as hc
from handlers.support.downloads import content_disposition, download_stem
from handlers.support.openapi import download_operation, errors, struct_schema
from pheby.auth import Principal
from pheby.hermes.export import ConversationExport, as_markdown, conversation_export
from pheby.hermes.failures import hermes_failure
from pheby.services import Services

EXPORT_UNAVAILABLE = "Hermes is unavailable; the conversation can't be exported right now"
MEDIA_TYPES = {"md": "text/markdown; charset=utf-8", "json": "application/json"}
EXPORT_SCHEMA = struct_schema(ConversationExport)
FORMAT = Parameter(description="`md` (Markdown, the default) or `json` (the history's shape)")


@get(
    "/conversations/{conversation_id:str}/export",
    tags=["conversations"],
    operation_class=download_operation(200, ["text/markdown"], schemas={"application/json": EXPORT_SCHEMA}),
    responses=errors(400, 404, 502, 503),
)
async def export_conversation(
    current_user: NamedDependency[Principal],
    services: NamedDependency[Services],
    conversation_id: FromPath[str],
    format: Annotated[Literal["md", "json"], FORMAT] = "md",
) -> Response[bytes]:
    account = current_user.account
    conversation = await services.conversations.get(account.id, conversation_id)
    attachments = await services.attachments.for_conversation(account.id, conversation.id)
    try:
        export = await conversation_export(
            services.hermes.for_account(account), services.conversations, conversation, attachments, time.time()
        )
    except hc.HermesError as exc:
        raise hermes_failure(exc, failed=EXPORT_UNAVAILABLE, unavailable=EXPORT_UNAVAILABLE) from None
    body = as_markdown(export).encode("utf-8") if format == "md" else msgspec.json.encode(export)
    filename = f"{download_stem(conversation.name, 'conversation')}.{format}"
    return Response(
        body,
        media_type=MEDIA_TYPES[format],
        headers={
            "Content-Disposition": content_disposition(filename),
            "Cache-Control": "no-store",
            "X-Content-Type-Options": "nosniff",
        },
    )
