"""What the raw-body upload routes share: the declared `Content-Length`, checked before reading."""

from typing import Any

from litestar import Request

from pheby.errors import TooLarge


def declared_length(request: Request[Any, Any, Any]) -> int | None:
    """The body size the client announced, or None (chunked, or not a number)."""
    declared = request.headers.get("content-length")
    return int(declared) if declared is not None and declared.isdigit() else None


def refuse_declared_over(request: Request[Any, Any, Any], limit: int) -> None:
    """413 before a byte is read when the announced size is already over `limit`."""
    declared = declared_length(request)
    if declared is not None and declared > limit:
        raise TooLarge(f"Attachments are limited to {limit} bytes")
