"""The one place errors become responses: `{"error": {"code", "message"}}`, nothing more.

Blob store failures become errors here too (`storage_failure`), not in each handler: the store
failing (unreachable, timing out, refusing) is a 503 `unavailable` and one warning line, never a
traceback. App `exception_handlers` apply to HTTP only; the WebSocket loop maps errors itself.
"""

import logging
from typing import Any

import msgspec
from litestar import Request, Response
from litestar.exceptions import HTTPException, ValidationException
from litestar.status_codes import HTTP_500_INTERNAL_SERVER_ERROR

from pheby import metrics
from pheby.errors import NotFound, PhebyError, RateLimited, StorageUnavailable, TooLarge
from pheby.protocol.frames import ErrorBody
from storage import BlobNotFound, BlobTooLarge, StorageError

log = logging.getLogger("pheby.http")

# Litestar's own HTTP errors, by status, as spec codes.
_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "too_large",
    415: "unsupported_media_type",
    422: "invalid",
    429: "rate_limited",
}


class ErrorResponse(msgspec.Struct, frozen=True):
    """Every HTTP error body: `{"error": {"code", "message"}}` (the WebSocket `error` frame's `error` too)."""

    error: ErrorBody


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> Response[ErrorResponse]:
    return Response(ErrorResponse(ErrorBody(code=code, message=message)), status_code=status, headers=headers)


def pheby_error_handler(_: Request[Any, Any, Any], exc: PhebyError) -> Response[ErrorResponse]:
    retry_after = exc.retry_after if isinstance(exc, RateLimited) else None
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return error_response(exc.status_code, exc.code, exc.message, headers)


def storage_failure(exc: StorageError, during: str) -> PhebyError:
    """What a client is told when the blob store raised (a missing blob is the attachment's 404), and
    the one warning line in the log; `during` says what was being done (for the log)."""
    log.warning("storage failed during %s: %s: %s", during, type(exc).__name__, exc)
    metrics.STORAGE_ERRORS.inc()
    if isinstance(exc, BlobNotFound):  # a live row whose bytes are gone: the same answer as no row
        return NotFound("Attachment unavailable")
    if isinstance(exc, BlobTooLarge):
        return TooLarge()
    return StorageUnavailable()


def storage_error_handler(request: Request[Any, Any, Any], exc: StorageError) -> Response[ErrorResponse]:
    return pheby_error_handler(request, storage_failure(exc, f"{request.method} {request.url.path}"))


def http_error_handler(request: Request[Any, Any, Any], exc: HTTPException) -> Response[ErrorResponse]:
    status = exc.status_code
    if status >= 500:
        return error_response(status, "internal_error", "Internal error")
    if isinstance(exc, ValidationException):
        # Litestar's detail names the failing field ("Expected `str`, got `int` - at `$.username`").
        message = "Invalid request body" if not exc.extra else f"Invalid request: {_first_error(exc.extra)}"
        return error_response(400, "bad_request", message)
    if status == 404:
        # The Pheby spec allows an attachment URL no other answer than this, whatever the path holds.
        attachment = request.url.path.startswith("/attachments/")
        return error_response(404, "not_found", "Attachment unavailable" if attachment else "Not found")
    # A 405 keeps Litestar's `Allow` header (RFC 9110: the methods the path does answer).
    return error_response(status, _HTTP_CODES.get(status, "error"), exc.detail, exc.headers)


def internal_error_handler(request: Request[Any, Any, Any], exc: Exception) -> Response[ErrorResponse]:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(HTTP_500_INTERNAL_SERVER_ERROR, "internal_error", "Internal error")


def _first_error(extra: object) -> str:
    if isinstance(extra, list) and extra and isinstance(extra[0], dict):
        first = extra[0]
        key = first.get("key")
        text = str(first.get("message", "invalid value"))
        return f"{key}: {text}" if key else text
    return "invalid value"


EXCEPTION_HANDLERS = {
    PhebyError: pheby_error_handler,
    StorageError: storage_error_handler,
    HTTPException: http_error_handler,
    Exception: internal_error_handler,
}
