"""Decoding untrusted JSON: nesting too deep is malformed input like any other, never a RecursionError.

msgspec guards its recursion with Python's recursion limit, so a document nested about a thousand
levels deep (fewer inside a deep call stack) raises `RecursionError`, not `msgspec.DecodeError`:
callers that handle malformed JSON never saw it, and it became a 500 or a closed socket. Every
decoder of client input (WebSocket frames, the HTTP request body, plugin pushes) goes through
`decode_json`, which turns it into `NestedTooDeeply`, a `DecodeError`. No real message comes near
that depth.
"""

from typing import Any, TypeVar

import msgspec

T = TypeVar("T")
NESTED_TOO_DEEPLY = "JSON nested too deeply"


class NestedTooDeeply(msgspec.DecodeError):
    """The document is nested deeper than the decoder can follow."""


def decode_json(decoder: msgspec.json.Decoder[T], raw: bytes | str) -> T:
    """`decoder.decode(raw)`; nesting too deep raises `NestedTooDeeply` (a DecodeError)."""
    try:
        return decoder.decode(raw)
    except RecursionError:
        raise NestedTooDeeply(NESTED_TOO_DEEPLY) from None


def convert(data: Any, type_: type[T]) -> T:
    """`msgspec.convert(data, type_)` (strict) for already-decoded JSON, with the same depth rule."""
    try:
        return msgspec.convert(data, type_)
    except RecursionError:
        raise msgspec.ValidationError(NESTED_TOO_DEEPLY) from None
