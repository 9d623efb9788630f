"""What the raw-body upload routes share: the declared `Content-Length`, checked before reading,
header text sent as UTF-8, the filename rule as the OpenAPI document states it, and their metrics."""

from collections.abc import Awaitable
from typing import Any, Literal

from litestar import Request
from litestar.openapi.spec import OpenAPIType, Schema

from pheby import metrics
from pheby.errors import TooLarge, Unprocessable
from pheby.store.attachments import Attachment


async def counted(surface: Literal["pheby", "hope"], upload: Awaitable[Attachment]) -> Attachment:
    """The upload's attachment, counted (`pheby_uploads_total`, `pheby_upload_bytes_total`) as stored or refused."""
    try:
        attachment = await upload
    except BaseException:
        metrics.UPLOADS.labels(surface, "refused").inc()
        raise
    metrics.UPLOADS.labels(surface, "stored").inc()
    metrics.UPLOAD_BYTES.labels(surface).inc(attachment.size)
    return attachment


def declared_length(request: Request[Any, Any, Any]) -> int | None:
    """The body size the client announced, or None (chunked, or not a number)."""
    declared = request.headers.get("content-length")
    return int(declared) if declared is not None and declared.isdigit() else None


def refuse_declared_over(request: Request[Any, Any, Any], limit: int) -> None:
    """413 before a byte is read when the announced size is already over `limit`."""
    declared = declared_length(request)
    if declared is not None and declared > limit:
        raise TooLarge(f"Attachments are limited to {limit} bytes")


def utf8_header(request: Request[Any, Any, Any], name: str) -> str | None:
    """A header's value read as UTF-8 (clients send `résumé.txt` as its UTF-8 bytes; ASGI gives latin-1)."""
    value = request.headers.get(name)
    if value is None:
        return None
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        raise Unprocessable(f"{name} must be UTF-8 text") from None


# What `filename_problem` allows: not blank, not `.` or `..`, no path separator, no control or format
# character (as far as header text, Latin-1, can hold them), at most 255 UTF-8 bytes.
_NAME_CHAR = r"[^/\\\x00-\x1f\x7f-\x9f\xad]"
_NAME_MARK = r"[^/\\\s.\x00-\x1f\x7f-\x9f\xad]"  # a character that makes the name more than blanks and dots
FILENAME_SCHEMA = Schema(
    type=OpenAPIType.STRING,
    max_length=255,
    pattern=rf"^(?:{_NAME_CHAR}*{_NAME_MARK}{_NAME_CHAR}*|\.{{3,}}|[ .]*(?: [ .]*\.|\.[ .]* )[ .]*)$",
    description="The file's name as UTF-8, at most 255 bytes",
)
