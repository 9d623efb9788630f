"""JSON request bodies validated strictly.

Litestar converts bodies leniently (`"1"` becomes `1`); routes whose fields must keep their JSON
types take the decoded body as a dict and validate it with `read_body`. (The caller is checked
before any body is parsed: see the `/api` router's guard in `handlers.support.dependencies`.)
"""

from typing import Any, TypeVar

import msgspec
from litestar import Request
from litestar.exceptions import SerializationException

from pheby.errors import PhebyError, Unprocessable
from pheby.protocol.json_input import NESTED_TOO_DEEPLY, convert

T = TypeVar("T")


class PhebyRequest(Request[Any, Any, Any]):
    """The app's request class: a JSON body nested too deep is malformed (400), like any other.

    Litestar decodes every JSON body here (`JSONBody` parameters too) and maps msgspec's
    DecodeError to a 400, but msgspec raises RecursionError for deep nesting (see
    `pheby.protocol.json_input`), which became a 500 with a traceback.
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
