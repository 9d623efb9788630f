"""The one exception hierarchy of the server.

Services raise these; `handlers.support.errors` maps them (and Litestar's own HTTP errors) to the
`{"error": {"code", "message"}}` body in one place. Messages are for users: no paths, URLs,
keys or stack traces.
"""

from typing import ClassVar


class PhebyError(Exception):
    """Base of every error the server reports to a client."""

    status_code: ClassVar[int] = 500
    code: ClassVar[str] = "internal_error"
    default_message: ClassVar[str] = "Internal error"

    def __init__(self, message: str | None = None) -> None:
        self.message = message or self.default_message
        super().__init__(self.message)


class BadRequest(PhebyError):
    status_code = 400
    code = "bad_request"
    default_message = "Bad request"


class Unauthorized(PhebyError):
    status_code = 401
    code = "unauthorized"
    default_message = "Authentication required"


class Forbidden(PhebyError):
    status_code = 403
    code = "forbidden"
    default_message = "Forbidden"


class NotFound(PhebyError):
    status_code = 404
    code = "not_found"
    default_message = "Not found"


class Conflict(PhebyError):
    status_code = 409
    code = "conflict"
    default_message = "Conflict"


class TooLarge(PhebyError):
    status_code = 413
    code = "too_large"
    default_message = "Too large"


class UnsupportedMediaType(PhebyError):
    status_code = 415
    code = "unsupported_media_type"
    default_message = "Unsupported media type"


class Unprocessable(PhebyError):
    status_code = 422
    code = "invalid"
    default_message = "Invalid input"


class RequestTimeout(PhebyError):
    status_code = 408
    code = "request_timeout"
    default_message = "The request body stalled"


class RateLimited(PhebyError):
    """`retry_after` (seconds), when known, becomes the HTTP `Retry-After` header."""

    status_code = 429
    code = "rate_limited"
    default_message = "Too many attempts; try again later"

    def __init__(self, message: str | None = None, *, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class NotImplementedByUpstream(PhebyError):
    status_code = 501
    code = "not_implemented"
    default_message = "Not supported by the connected Hermes"


class UpstreamFailure(PhebyError):
    status_code = 502
    code = "upstream_failure"
    default_message = "Hermes answered with an error"


class Unavailable(PhebyError):
    status_code = 503
    code = "unavailable"
    default_message = "Hermes is unavailable"


class StorageUnavailable(Unavailable):
    default_message = "File storage is unavailable right now; try again in a moment"


class DatabaseError(Exception):
    """The database failed a statement (any engine's own error, raised from it). Not a `PhebyError`: a
    failed statement is the server's fault, a 500; only `DatabaseUnavailable` tells the client more."""


class IntegrityError(DatabaseError):
    """A constraint refused the write (a duplicate key, a missing row a foreign key needs)."""


class DatabaseUnavailable(Unavailable, DatabaseError):
    """The database could not be reached, or a write could not be committed: nothing was acknowledged."""

    default_message = "The database is unavailable right now; try again in a moment"


# --- Pheby protocol codes (also meaningful over HTTP) ---------------------------------------


class ConversationNotFound(NotFound):
    code = "conversation_not_found"
    default_message = "Conversation not found"


class ApprovalNotFound(NotFound):
    code = "approval_not_found"
    default_message = "Approval not found or already resolved"


class ClarifyNotFound(NotFound):
    code = "clarify_not_found"
    default_message = "Clarification not found or already resolved"


class RunActive(Conflict):
    code = "run_active"
    default_message = "A run is already active in this conversation"


class ProtocolTooLarge(TooLarge):
    default_message = "Message too large"


def error_of(code: str, message: str) -> PhebyError:
    """The error a code names (as another process reported it), with its message: the most general class
    of that code; an unknown code is an internal error."""
    classes: list[type[PhebyError]] = [PhebyError]
    for cls in classes:  # breadth first: a base comes before the subclasses that share its code
        if cls.code == code:
            return cls(message)
        classes.extend(cls.__subclasses__())
    return PhebyError(message)
