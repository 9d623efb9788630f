"""POST /api/attachments — a Hope upload: raw bytes, `Content-Type`, `X-Filename`."""

from typing import Any

import msgspec
from litestar import Request, post
from litestar.di import NamedDependency

from handlers.support.openapi import errors, header, raw_body_operation
from handlers.support.uploads import FILENAME_SCHEMA, counted, declared_length, utf8_header
from pheby.auth import Principal
from pheby.files.file_types import HOPE_MIME_TYPES
from pheby.services import Services
from pheby.store.attachments import HopeAttachment, hope_object


class HopeAttachmentResponse(msgspec.Struct, frozen=True):
    attachment: HopeAttachment


UPLOAD = raw_body_operation(HOPE_MIME_TYPES, [header("X-Filename", FILENAME_SCHEMA)])


@post(
    "/attachments",
    status_code=201,
    request_max_body_size=None,
    tags=["hope"],
    operation_class=UPLOAD,
    responses=errors(400, 408, 413, 415, 422),
)
async def create_hope_attachment(
    request: Request[Any, Any, Any], current_user: NamedDependency[Principal], services: NamedDependency[Services]
) -> HopeAttachmentResponse:
    attachment = await counted(
        "hope",
        services.attachments.upload_hope(
            current_user.account.id,
            utf8_header(request, "x-filename"),
            request.headers.get("content-type"),
            declared_length(request),
            request.stream(),
        ),
    )
    return HopeAttachmentResponse(attachment=hope_object(attachment))
