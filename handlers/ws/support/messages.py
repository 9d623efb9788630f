"""The base of every client → server message: tagged on "type", unknown fields refused."""

from typing import Annotated

import msgspec

MAX_REQUEST_ID_CHARS = 128
# A client-chosen id, echoed by replies and errors: bounded, so an echo can't be made large.
RequestId = Annotated[str, msgspec.Meta(max_length=MAX_REQUEST_ID_CHARS)]


class ClientMessage(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, tag_field="type"):
    """`request_id` is any client-chosen string of at most 128 characters; direct replies and errors echo it."""

    request_id: RequestId | None = None


class RequestIdOnly(msgspec.Struct, frozen=True):
    """Read on the error path, so an invalid frame's error still echoes its request_id (a valid one only)."""

    request_id: RequestId | None = None
