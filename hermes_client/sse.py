"""Server-sent-event framing: turns the bytes of a stream into the payloads of its ``data:`` fields.

Hermes writes one ``data: <json>`` line per event and a blank line after it, with comments such as
``: keepalive`` and ``: stream closed`` in between. This parser follows the SSE rules that matter
for that (multi-line data joined by ``\\n``, CRLF endings, comments and other fields ignored) and
works on bytes, so payloads go to the JSON decoder without a text round trip. As the SSE rules
say, an event cut off by the end of the stream (no blank line after it) is never dispatched.
Lines ended by a lone CR (no LF) are not supported; Hermes never writes them. An event still
unfinished past ``MAX_EVENT_BYTES`` is ``HermesUpstreamError``.

``feed_frames`` also returns each event's ``id:`` field (a 0.22-era gateway numbers its events, 0.19.0
does not) and keeps ``last_event_id`` as the SSE rules define it: the last ``id:`` seen, which is what a
reconnecting client sends as ``Last-Event-ID``.
"""

from typing import Final

from hermes_client.errors import HermesUpstreamError

__all__ = ["MAX_EVENT_BYTES", "MAX_EVENT_ID_BYTES", "SSEDataParser"]

MAX_EVENT_ID_BYTES: Final = 64  # a longer id is ignored: nothing this client resumes with is that long
# An event not ended by then is refused: its bytes are kept until its blank line, so this bounds them.
# A run's final output (run.completed) is the largest event Hermes writes; this leaves it ample room.
MAX_EVENT_BYTES: Final = 16 * 1024 * 1024


def _block_data(block: bytes) -> bytes | None:
    """The data of one event block (the lines between two blank lines), or None if it has none."""
    data = [
        line[6:] if line.startswith(b"data: ") else line[5:] for line in block.split(b"\n") if line.startswith(b"data:")
    ]
    return b"\n".join(data) if data else None


def _field_value(line: bytes, name_length: int) -> bytes:
    return line[name_length + 2 :] if line[name_length + 1 : name_length + 2] == b" " else line[name_length + 1 :]


class SSEDataParser:
    """Incremental parser: feed it chunks as they arrive, get back the completed event payloads."""

    __slots__ = ("_partial", "last_event_id")

    def __init__(self) -> None:
        self._partial = b""
        self.last_event_id: str | None = None

    def _complete(self, chunk: bytes) -> bytes | None:
        """Add a chunk; return the events it completed (blocks joined by blank lines), or None if none."""
        buffer = self._partial + chunk if self._partial else chunk
        if b"\r" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n")
        end = buffer.rfind(b"\n\n")
        self._partial = buffer if end < 0 else buffer[end + 2 :]
        if len(self._partial) > MAX_EVENT_BYTES:
            self._partial = b""
            raise HermesUpstreamError(f"an event of the run stream is over {MAX_EVENT_BYTES} bytes")
        return None if end < 0 else buffer[:end]

    def feed_frames(self, chunk: bytes) -> tuple[list[bytes], list[str | None] | None]:
        """Consume a chunk; return the ``data`` of every event it completed and, if any had one, their ids
        (one per payload, None for an event without ``id:``). No ids at all (0.19.0) costs nothing extra."""
        region = self._complete(chunk)
        if region is None:
            return [], None
        lines = region.split(b"\n")
        if not any(lines[1::2]):
            # One-line events (0.19.0's framing): an event with an id has two lines, so there is none here.
            return [line[6:] if line[5:6] == b" " else line[5:] for line in lines[::2] if line[:5] == b"data:"], None
        payloads: list[bytes] = []
        ids: list[str | None] = []
        for block in region.split(b"\n\n"):
            event_id: str | None = None
            data: list[bytes] = []
            for line in block.split(b"\n"):
                if line.startswith(b"data:"):
                    data.append(_field_value(line, 4))
                elif line.startswith(b"id:"):
                    value = _field_value(line, 2)
                    # The SSE rules ignore an id with a NUL; we also ignore one too long or not ASCII.
                    if len(value) <= MAX_EVENT_ID_BYTES and value.isascii() and b"\0" not in value:
                        event_id = value.decode("ascii")
                        self.last_event_id = event_id
            if data:
                payloads.append(b"\n".join(data))
                ids.append(event_id)
        return payloads, ids

    def feed(self, chunk: bytes) -> list[bytes]:
        """Consume a chunk; return the ``data`` payload of every event it completed."""
        region = self._complete(chunk)
        return [] if region is None else self._data_of(region)

    @staticmethod
    def _data_of(region: bytes) -> list[bytes]:
        lines = region.split(b"\n")
        # Fast path, Hermes's own framing: one-line events, so every other line is the blank separator.
        # A multi-line event would put a non-blank line at an odd index.
        if not any(lines[1::2]):
            return [line[6:] if line[5:6] == b" " else line[5:] for line in lines[::2] if line[:5] == b"data:"]
        return [data for data in map(_block_data, region.split(b"\n\n")) if data is not None]
