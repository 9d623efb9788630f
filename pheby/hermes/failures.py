"""Hermes's failures as the server's errors: every `hermes_client` exception a request reports is
translated here, and any Hermes text in the message passes `sanitize_error` here.

`hermes_client` raises `HermesUnavailable` (unreachable, timed out, 503), `HermesNotFound` (404),
`HermesRejected` (another 4xx) and `HermesUpstreamError` (a 5xx, a body not of the documented shape),
all `HermesError`. A caller says what each means for its request; a message may hold `{text}`, the
scrubbed Hermes text. Whatever the caller names no message for falls to `failed` (`UpstreamFailure`).
"""

import hermes_client as hc
from pheby.errors import BadRequest, Conflict, NotFound, PhebyError, Unavailable, UpstreamFailure
from pheby.redact import sanitize_error


def hermes_failure(
    exc: hc.HermesError,
    *,
    failed: str = UpstreamFailure.default_message,
    unavailable: str | None = None,
    not_found: str | None = None,
    conflict: str | None = None,
    busy: str | None = None,
    busy_as: type[PhebyError] = Unavailable,
    refused: str | None = None,
    refused_as: type[PhebyError] = BadRequest,
    refusal: bool = False,
) -> PhebyError:
    """The error to raise (`from None` or `from exc`) for `exc`: `unavailable` (`Unavailable`) when
    Hermes can't be reached, `not_found` (`NotFound`) for a 404, `conflict` (`Conflict`) for a 409,
    `busy` (`busy_as`, `Unavailable` by default) for a 429, `refused` (`refused_as`, 400 by default) for
    any other refusal (`refusal`: the caller knows this 5xx to be one), else `failed` (`UpstreamFailure`)."""
    text = sanitize_error(exc.message)
    if isinstance(exc, hc.HermesUnavailable) and unavailable is not None:
        return Unavailable(unavailable.format(text=text))
    if isinstance(exc, hc.HermesRejected) or refusal:
        if isinstance(exc, hc.HermesNotFound) and not_found is not None:
            return NotFound(not_found.format(text=text))
        if exc.status == 409 and conflict is not None:
            return Conflict(conflict.format(text=text))
        if exc.status == 429 and busy is not None:
            return busy_as(busy.format(text=text))
        if refused is not None:
            return refused_as(refused.format(text=text))
    return UpstreamFailure(failed.format(text=text))
