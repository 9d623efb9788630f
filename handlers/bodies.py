"""JSON request bodies validated strictly.

Litestar converts bodies leniently (`"1"` becomes `1`); routes whose fields must keep their JSON
types take the decoded body as a dict and validate it with `read_body`. (The caller is checked
before any body is parsed: see the `/api` router's guard in `handlers.dependencies`.)
"""

from typing import Any, TypeVar

import msgspec

from pheby.errors import PhebyError, Unprocessable

T = TypeVar("T")


def read_body(data: Any, type_: type[T], error: type[PhebyError] = Unprocessable) -> T:
    """Validate a decoded JSON body as `type_`, strictly; anything wrong (unknown fields too) is `error`."""
    try:
        return msgspec.convert(data, type_)
    except msgspec.ValidationError as exc:
        raise error(f"Invalid request: {exc}") from None
