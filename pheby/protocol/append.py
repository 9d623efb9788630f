"""Append deltas (the `delta_append` feature, docs/protocol-extensions.md): a client that asks for it in
its `hello` gets each `message.delta` as `{offset, append}` against the draft it already holds, where a
cumulative client gets the whole draft again.

`AppendDrafts` remembers, per message being streamed, the draft last sent to the account's append
connections and its generation (a count of those sends); each connection remembers the generation it
holds (`Connection.draft_generation`). A connection holding the previous generation gets the
continuation (`offset` is where the two drafts part, usually the old draft's length; smaller when the
visible draft shrank, a `MEDIA:` tag being hidden); any other gets the whole text (`offset` 0): the
first delta of a message, one after a reconnect snapshot (`Connection.forget_draft`), and one that
replaces a delta still waiting in the connection's queue (`Connection.holds_unsent_delta`), merged.
Each form of an event is encoded once, however many connections take it.

A connection also granted `delta_packed` gets the continuation as a `PackedAppend`, `["d", stream,
offset, append]`, and the whole text with the message's `stream` number, which those frames name it by.
Stream numbers count up for as long as the process runs, so one never names two messages.

Offsets count code points (characters of the JSON string), as Python's `len` does.
"""

import itertools
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING, Final

from msgspec import UNSET

from pheby.protocol.frames import (
    Event,
    MessageAppend,
    MessageComplete,
    MessageDelta,
    PackedAppend,
    RunFinished,
    encode_event,
)

if TYPE_CHECKING:
    from pheby.protocol.hub import Connection

DELTA_APPEND: Final = "delta_append"
DELTA_PACKED: Final = "delta_packed"  # append deltas' continuations positional; only with delta_append
FEATURES: Final = frozenset({DELTA_APPEND, DELTA_PACKED})  # what a hello may ask for and be granted


def granted(requested: Iterable[str]) -> list[str]:
    """The features of a hello's request this server grants, in the order asked, once each
    (`delta_packed` only beside `delta_append`, whose frames it changes)."""
    asked = list(dict.fromkeys(feature for feature in requested if feature in FEATURES))
    return asked if DELTA_APPEND in asked else [feature for feature in asked if feature != DELTA_PACKED]


def common_prefix_length(old: str, new: str) -> int:
    """How many leading characters `old` and `new` share; `len(old)` at once when `new` only grew."""
    if new.startswith(old):
        return len(old)
    low, high = 0, min(len(old), len(new))  # a retraction: the longest shared prefix, by halving
    while low < high:
        middle = (low + high + 1) // 2
        if old[:middle] == new[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


class _Draft:
    __slots__ = ("conversation_id", "generation", "stream", "text")

    def __init__(self, conversation_id: str, text: str, generation: int, stream: int) -> None:
        self.conversation_id = conversation_id
        self.text = text
        self.generation = generation
        self.stream = stream


class _Frame:
    """An event's frame, encoded once, on first use."""

    __slots__ = ("_event", "_frame")

    def __init__(self, event: Event | PackedAppend) -> None:
        self._event = event
        self._frame: tuple[str, int] | None = None

    def get(self) -> tuple[str, int]:
        if self._frame is None:
            encoded = encode_event(self._event)
            self._frame = encoded.decode(), len(encoded)
        return self._frame


class AppendDrafts:
    """The drafts the append connections were last sent, by message, while their runs stream."""

    def __init__(self) -> None:
        self._drafts: dict[str, _Draft] = {}
        self._streams = itertools.count(1)

    def send(self, connections: Collection["Connection"], event: MessageDelta, arrived: float | None) -> None:
        """Send `event` to append connections, each in the form it can apply."""
        draft = self._drafts.get(event.message_id)
        generation = 1 if draft is None else draft.generation + 1
        stream = next(self._streams) if draft is None else draft.stream
        whole = _Frame(self._append(event, 0, event.text))
        whole_packed = _Frame(self._append(event, 0, event.text, stream))
        continuation, continuation_packed = whole, whole_packed
        if draft is not None:
            offset = common_prefix_length(draft.text, event.text)
            continuation = _Frame(self._append(event, offset, event.text[offset:]))
            continuation_packed = _Frame(PackedAppend(stream=stream, offset=offset, append=event.text[offset:]))
        for connection in connections:
            merge = connection.holds_unsent_delta(event.message_id)
            holds_previous = draft is not None and connection.draft_generation(event.message_id) == draft.generation
            if holds_previous and not merge:
                chosen = continuation_packed if connection.delta_packed else continuation
            else:
                chosen = whole_packed if connection.delta_packed else whole
            frame, size = chosen.get()
            connection.send_delta(frame, size, arrived, event.message_id, generation, merge=merge)
        if draft is None:
            self._drafts[event.message_id] = _Draft(event.conversation_id, event.text, generation, stream)
        else:
            draft.text, draft.generation = event.text, generation

    def settle(self, connections: Iterable["Connection"], event: Event) -> None:
        """Forget the drafts `event` ends: its message's (`message.complete`), its conversation's (`run.finished`)."""
        if isinstance(event, MessageComplete):
            ended = [event.message_id] if event.message_id in self._drafts else []
        elif isinstance(event, RunFinished):
            ended = [m for m, d in self._drafts.items() if d.conversation_id == event.conversation_id]
        else:
            return
        connections = list(connections)
        for message_id in ended:
            del self._drafts[message_id]
            for connection in connections:
                connection.forget_draft(message_id)

    def streaming(self) -> int:
        """How many messages have a draft kept (tests: nothing may stay behind)."""
        return len(self._drafts)

    @staticmethod
    def _append(event: MessageDelta, offset: int, append: str, stream: int | None = None) -> MessageAppend:
        return MessageAppend(
            conversation_id=event.conversation_id,
            message_id=event.message_id,
            offset=offset,
            append=append,
            stream=UNSET if stream is None else stream,
            ts=event.ts,
            request_id=event.request_id,
        )
