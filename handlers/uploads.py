"""What the raw-body upload routes share: the declared `Content-Length`, checked before reading, and
header text sent as UTF-8."""

from typing import Any

from litestar import Request

from pheby.errors import TooLarge, Unprocessable


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
