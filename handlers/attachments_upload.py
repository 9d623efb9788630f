"""POST /attachments — a Pheby upload: raw bytes, streamed into storage, 64 MiB at most."""

from typing import Any

import msgspec
from litestar import Request, post
from litestar.di import NamedDependency
from litestar.openapi.spec import OpenAPIType, Schema
from litestar.params import FromQuery

from handlers.support.openapi import errors, query, raw_body_operation
from handlers.support.uploads import FILENAME_SCHEMA, counted, refuse_declared_over
from pheby.errors import BadRequest, ConversationNotFound
from pheby.services import Services
from pheby.store.attachments import PhebyDescriptor, pheby_descriptor


class UploadResponse(msgspec.Struct, frozen=True):
    attachment: PhebyDescriptor


# Any type is taken and stored as sent; the document names the generic one (a `*/*` body is no raw bytes
# to a client generator). Both query values are required (checked after the credentials).
UPLOAD = raw_body_operation(
    ["application/octet-stream"],
    [
        query("conversation_id", Schema(type=OpenAPIType.STRING, min_length=1)),
        query("filename", FILENAME_SCHEMA),
    ],
    "The file's bytes (not empty), of any Content-Type",
)


@post(
    "/attachments",
    status_code=201,
    request_max_body_size=None,
    tags=["pheby"],
    operation_class=UPLOAD,
    responses=errors(400, 401, 403, 408, 413, 503),
)
async def upload_attachment(
    request: Request[Any, Any, Any],
    services: NamedDependency[Services],
    conversation_id: FromQuery[str | None] = None,
    filename: FromQuery[str | None] = None,
) -> UploadResponse:
    principal = await services.authenticator.for_attachments(request)
    if not conversation_id or not filename:
        raise BadRequest("conversation_id and filename are required")
    try:
        await services.conversations.get(principal.account.id, conversation_id)
    except ConversationNotFound:
        raise BadRequest("Unknown conversation_id") from None
    refuse_declared_over(request, services.settings.attachment_max_bytes)
    attachment = await counted(
        "pheby",
        services.attachments.upload_pheby(
            principal.account.id, conversation_id, filename, request.headers.get("content-type"), request.stream()
        ),
    )
    return UploadResponse(attachment=pheby_descriptor(attachment))
