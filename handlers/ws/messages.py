"""The base of every client → server message: tagged on "type", unknown fields refused."""

import msgspec


class ClientMessage(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, tag_field="type"):
    """`request_id` is any client-chosen string; direct replies and errors echo it."""

    request_id: str | None = None


class RequestIdOnly(msgspec.Struct, frozen=True):
    """Read on the error path, so an invalid frame's error still echoes its request_id."""

    request_id: str | None = None
