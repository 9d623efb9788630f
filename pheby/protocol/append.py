"""Append deltas (the `delta_append` feature, docs/protocol-extensions.md): a client that asks for it in
its `hello` gets each `message.delta` as `{offset, append}` against the draft it already holds, where a
cumulative client gets the whole draft again.

`AppendDrafts` remembers, per message being streamed, the draft last sent to the account's append
connections and its generation (a count of those sends); each connection remembers the generation it
holds (`Connection.draft_generation`). A connection holding the previous generation gets the
continuation (`offset` is where the two drafts part, usually the old draft's length; smaller when the
visible draft shrank, a `MEDIA:` tag being hidden); any other gets the whole text (`offset` 0): the
first delta of a message, and one after a reconnect snapshot (`Connection.forget_draft`).

Deltas are sent as they come; they are batched only where a connection is behind. A delta of a message
whose previous delta still waits in the connection's queue (`Connection.unsent_offset`) is folded into it:
one frame from where the waiting one starts in the client's draft (the lesser of the two offsets, so a
retraction stays exact) to the newest text. Each form of an event is encoded once, however many
connections take it.

A connection also granted `delta_packed` gets the continuation as a `PackedAppend`, `["d", stream,
offset, append]`, and the whole text with the message's `stream` number, which those frames name it by.
Stream numbers count up for as long as the process runs, so one never names two messages.

A connection also granted `delta_paced` gets its deltas at most every `PACED_DELTA_SECONDS`: one that
comes sooner waits in the queue, where the deltas after it are folded into it as into any waiting delta
(`Connection.send_delta`); any other frame queued behind it sends it at once, so the order stays.

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
DELTA_PACED: Final = "delta_paced"  # append deltas at most every PACED_DELTA_SECONDS; only with delta_append
FEATURES: Final = frozenset({DELTA_APPEND, DELTA_PACKED, DELTA_PACED})  # what a hello may ask for and be granted
# A paced client's deltas go out at most this often, those in between folded: Pheby Web draws a streamed draft
# at most every 50 ms (web/lib/store.js), and each frame it is handed costs its page's main thread.
PACED_DELTA_SECONDS: Final = 0.05


def granted(requested: Iterable[str]) -> list[str]:
    """The features of a hello's request this server grants, in the order asked, once each
    (`delta_packed` and `delta_paced` only beside `delta_append`, whose frames they change)."""
    asked = list(dict.fromkeys(feature for feature in requested if feature in FEATURES))
    return asked if DELTA_APPEND in asked else [feature for feature in asked if feature == DELTA_APPEND]


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


class _Forms:
    """The frames of one delta, by where their text starts in the client's draft and whether packed, each
    encoded once, when a connection first takes it: at 0, the whole text (naming the stream when packed:
    the client may not know it yet)."""

    __slots__ = ("_event", "_frames", "_stream")

    def __init__(self, event: MessageDelta, stream: int) -> None:
        self._event = event
        self._stream = stream
        self._frames: dict[tuple[int, bool], tuple[str, int]] = {}

    def at(self, offset: int, *, packed: bool) -> tuple[str, int]:
        frame = self._frames.get((offset, packed))
        if frame is None:
            event, append = self._event, self._event.text[offset:]
            form: Event | PackedAppend
            if offset == 0:
                form = _message_append(event, 0, append, self._stream if packed else None)
            elif packed:
                form = PackedAppend(stream=self._stream, offset=offset, append=append)
            else:
                form = _message_append(event, offset, append)
            encoded = encode_event(form)
            frame = self._frames[(offset, packed)] = encoded.decode(), len(encoded)
        return frame


def _message_append(event: MessageDelta, offset: int, append: str, stream: int | None = None) -> MessageAppend:
    return MessageAppend(
        conversation_id=event.conversation_id,
        message_id=event.message_id,
        offset=offset,
        append=append,
        stream=UNSET if stream is None else stream,
        ts=event.ts,
        request_id=event.request_id,
    )


class AppendDrafts:
    """The drafts the append connections were last sent, by message, while their runs stream."""

    def __init__(self) -> None:
        self._drafts: dict[str, _Draft] = {}
        self._streams = itertools.count(1)

    def send(self, connections: Collection["Connection"], event: MessageDelta, arrived: float | None) -> int:
        """Send `event` to append connections, each in the form it can apply; how many frames that queued (a delta
        folded into one still waiting is none)."""
        queued = 0
        draft = self._drafts.get(event.message_id)
        generation = 1 if draft is None else draft.generation + 1
        stream = next(self._streams) if draft is None else draft.stream
        forms = _Forms(event, stream)
        offset = 0 if draft is None else common_prefix_length(draft.text, event.text)
        for connection in connections:
            holds_previous = draft is not None and connection.draft_generation(event.message_id) == draft.generation
            at = offset if holds_previous else 0
            waiting = connection.unsent_offset(event.message_id)
            if waiting is not None:  # folded into the delta still waiting: from where that one starts
                at = min(at, waiting)
            frame, size = forms.at(at, packed=connection.delta_packed)
            queued += connection.send_delta(frame, size, arrived, event.message_id, generation, at)
        if draft is None:
            self._drafts[event.message_id] = _Draft(event.conversation_id, event.text, generation, stream)
        else:
            draft.text, draft.generation = event.text, generation
        return queued

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
