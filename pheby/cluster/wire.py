"""How a broadcast event travels between processes.

A logged event (`pheby.events.log`) has the event's `type` as its kind and `{"origin": …, "event": …}` as
its payload: `origin` names the process that broadcast it (that process alone tells its listeners, Web
Push among them), `event` is the event as its clients get it, and `early` (when true) says the origin
delivered it to its own clients while the database was down (`pheby.cluster.backlog`). A live message
(`pheby.events.bell.Live`) is `b"{origin} "` followed by a `message.delta` in JSON.
"""

from typing import Any, Final, Union

import msgspec

from pheby.protocol.frames import Event, MessageAppend, MessageDelta

__all__ = ["decode_live", "decode_logged", "encode_live", "logged_payload"]


def _event_types() -> tuple[type[Event], ...]:
    """Every event a hub may broadcast: each concrete `Event` once per tag (`MessageAppend` is a form of
    `message.delta` made per connection, never broadcast)."""
    found: dict[str, type[Event]] = {}
    pending: list[type[Event]] = list(Event.__subclasses__())
    while pending:
        kind = pending.pop()
        pending.extend(kind.__subclasses__())
        tag = kind.__struct_config__.tag
        if isinstance(tag, str) and kind is not MessageAppend:
            found.setdefault(tag, kind)
    return tuple(found.values())


BroadcastEvent: Final[Any] = Union[_event_types()]  # noqa: UP007 - a tagged union built at run time
_encoder = msgspec.json.Encoder()
_delta_decoder = msgspec.json.Decoder(MessageDelta)


def logged_payload(origin: str, event: Event) -> dict[str, Any]:
    return {"origin": origin, "event": msgspec.to_builtins(event)}


def decode_logged(payload: Any) -> tuple[str, Event, bool]:
    """(origin, event, early) of a logged payload (early: its origin delivered it to its own clients before
    it was logged, `pheby.cluster.backlog`); `msgspec.ValidationError` (or `KeyError`, `TypeError`) if it
    is not one."""
    event: Event = msgspec.convert(payload["event"], type=BroadcastEvent)
    return str(payload["origin"]), event, payload.get("early") is True


def encode_live(origin: str, delta: MessageDelta) -> bytes:
    return origin.encode() + b" " + _encoder.encode(delta)


def decode_live(data: bytes) -> tuple[str, MessageDelta]:
    """(origin, delta); `msgspec.DecodeError` if `data` is not a live message."""
    origin, _, body = data.partition(b" ")
    return origin.decode(errors="replace"), _delta_decoder.decode(body)
