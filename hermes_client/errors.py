"""The four kinds of Hermes failure, and how an HTTP error response maps onto them.

Callers decide what to tell their users by kind alone:

- ``HermesUnavailable``: Hermes cannot be reached right now (connection refused or reset, a timeout,
  503 including ``gateway_draining``). Worth retrying later.
- ``HermesUpstreamError``: Hermes answered, but wrongly (a 5xx, or a body not of the documented shape).
- ``HermesRejected``: Hermes refused the request (a 4xx). Carries Hermes's status, code and a sanitised
  message that is safe to show to a user.
- ``HermesNotFound``: the 404 case of ``HermesRejected`` (unknown run, session or job; a run stream
  already consumed).
"""

import re
from typing import Any

import msgspec

__all__ = [
    "HermesError",
    "HermesNotFound",
    "HermesRejected",
    "HermesUnavailable",
    "HermesUpstreamError",
    "error_from_response",
    "sanitize_message",
]

MAX_MESSAGE_CHARS = 400

_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)
_SECRET_ASSIGNMENT = re.compile(
    r"\b(bearer|token|api[_-]?key|secret|password)(\s*[:=]\s*|\s+)(?=\S*\d)\S+", re.IGNORECASE
)
_KEY_LIKE = re.compile(r"\b(?:sk|pk|rk|key)-[A-Za-z0-9_\-]{4,}")
_PATH = re.compile(r"(?<![\w:/.])(?:~|\.{1,2})?/[^\s'\"`,;)]+")


def sanitize_message(message: str) -> str:
    """Strip URLs, key-like tokens and filesystem paths from an upstream message, then truncate it.

    Hermes's own messages can quote a base URL, a provider key or a path on the Hermes host; none of
    that may reach a chat client.
    """
    text = _URL.sub("<url>", message)
    text = _SECRET_ASSIGNMENT.sub(lambda match: f"{match.group(1)}{match.group(2)}<redacted>", text)
    text = _KEY_LIKE.sub("<redacted>", text)
    text = _PATH.sub("<path>", text)
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[: MAX_MESSAGE_CHARS - 1] + "…"
    return text


class HermesError(Exception):
    """Base of every error raised by ``HermesClient``."""

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code


class HermesUnavailable(HermesError):
    """Hermes cannot be reached now: connection failure, timeout, or 503."""


class HermesUpstreamError(HermesError):
    """Hermes misbehaved: a 5xx, or a response body not of the documented shape."""


class HermesRejected(HermesError):
    """Hermes refused the request (4xx). ``message`` is sanitised and safe to show."""

    status: int

    def __init__(self, message: str, *, status: int, code: str | None = None) -> None:
        super().__init__(sanitize_message(message), status=status, code=code)


class HermesNotFound(HermesRejected):
    """Hermes answered 404: the run, session or job does not exist (or the run stream is gone)."""


class _Envelope(msgspec.Struct, frozen=True):
    """Both error envelopes: ``{"error": "..."}`` (jobs) and ``{"error": {"message", "code"}}`` (the rest).

    The dashboard (FastAPI) answers ``{"detail": ...}`` instead.
    """

    error: str | dict[str, Any] | None = None
    detail: str | list[Any] | None = None


_ENVELOPE = msgspec.json.Decoder(_Envelope)


def _message_and_code(status: int, body: bytes) -> tuple[str, str | None]:
    try:
        envelope = _ENVELOPE.decode(body)
    except msgspec.DecodeError:
        return f"HTTP {status}", None
    if isinstance(envelope.error, str):
        return envelope.error, None
    if isinstance(envelope.error, dict):
        message = envelope.error.get("message")
        code = envelope.error.get("code")
        return (
            message if isinstance(message, str) and message else f"HTTP {status}",
            code if isinstance(code, str) else None,
        )
    if isinstance(envelope.detail, str):
        return envelope.detail, None
    if isinstance(envelope.detail, list):
        return "the request was not valid", "validation_error"
    return f"HTTP {status}", None


def error_from_response(status: int, body: bytes) -> HermesError:
    """Classify a non-2xx Hermes response into one of the four error kinds."""
    message, code = _message_and_code(status, body)
    if status == 503:
        return HermesUnavailable(sanitize_message(message), status=status, code=code)
    if status == 404:
        return HermesNotFound(message, status=status, code=code)
    if 400 <= status < 500:
        return HermesRejected(message, status=status, code=code)
    # 0.19.0 reports an unparsable job schedule as a bare 500; it is the caller's input that is wrong.
    if status == 500 and message.startswith("Invalid schedule"):
        return HermesRejected(message, status=status, code="invalid_schedule")
    return HermesUpstreamError(sanitize_message(message), status=status, code=code)
