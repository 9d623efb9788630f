"""JSON request bodies: authenticated before they are parsed, and validated strictly.

Litestar parses a `JSONBody` before the handler's dependencies run, so without the guard a
malformed body from an unauthenticated client got 400 instead of 401. Litestar also converts
bodies leniently (`"1"` becomes `1`); routes whose fields must keep their JSON types take the
decoded body as a dict and validate it with `read_body`.
"""

from typing import Any, TypeVar

import msgspec
from litestar import Request
from litestar.connection import ASGIConnection
from litestar.exceptions import SerializationException
from litestar.handlers import BaseRouteHandler

from pheby.errors import PhebyError, Unprocessable
from pheby.json_input import NESTED_TOO_DEEPLY, convert
from pheby.services import Services

T = TypeVar("T")


async def authenticated(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Guard: resolve the caller before the body is read; `current_user` then reuses it."""
    services: Services = connection.app.state.services
    connection.state.principal = await services.authenticator.for_api(connection)


class PhebyRequest(Request[Any, Any, Any]):
    """The app's request class: a JSON body nested too deep is malformed (400), like any other.

    Litestar decodes every JSON body here (`JSONBody` parameters too) and maps msgspec's
    DecodeError to a 400, but msgspec raises RecursionError for deep nesting (see
    `pheby.json_input`), which became a 500 with a traceback.
    """

    async def json(self) -> Any:
        try:
            return await super().json()
        except RecursionError:
            raise SerializationException(NESTED_TOO_DEEPLY) from None


def read_body(data: Any, type_: type[T], error: type[PhebyError] = Unprocessable) -> T:
    """Validate a decoded JSON body as `type_`, strictly; anything wrong (unknown fields too) is `error`."""
    try:
        return convert(data, type_)
    except msgspec.ValidationError as exc:
        raise error(f"Invalid request: {exc}") from None
