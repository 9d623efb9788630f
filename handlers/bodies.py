"""JSON request bodies: authenticated before they are parsed, and validated strictly.

Litestar parses a `JSONBody` before the handler's dependencies run, so without the guard a
malformed body from an unauthenticated client got 400 instead of 401. Litestar also converts
bodies leniently (`"1"` becomes `1`); routes whose fields must keep their JSON types take the
decoded body as a dict and validate it with `read_body`.
"""

from typing import Any, TypeVar

import msgspec
from litestar.connection import ASGIConnection
from litestar.handlers import BaseRouteHandler

from pheby.errors import PhebyError, Unprocessable
from pheby.services import Services

T = TypeVar("T")


async def authenticated(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Guard: resolve the caller before the body is read; `current_user` then reuses it."""
    services: Services = connection.app.state.services
    connection.state.principal = await services.authenticator.for_api(connection)


def read_body(data: Any, type_: type[T], error: type[PhebyError] = Unprocessable) -> T:
    """Validate a decoded JSON body as `type_`, strictly; anything wrong (unknown fields too) is `error`."""
    try:
        return msgspec.convert(data, type_)
    except msgspec.ValidationError as exc:
        raise error(f"Invalid request: {exc}") from None
