"""Server-sent-event framing: turns the bytes of a stream into the payloads of its ``data:`` fields.

Hermes writes one ``data: <json>`` line per event and a blank line after it, with comments such as
``: keepalive`` and ``: stream closed`` in between. This parser follows the SSE rules that matter
for that (multi-line data joined by ``\\n``, CRLF endings, comments and other fields ignored) and
works on bytes, so payloads go to the JSON decoder without a text round trip. As the SSE rules
say, an event cut off by the end of the stream (no blank line after it) is never dispatched.
Lines ended by a lone CR (no LF) are not supported; Hermes never writes them.
"""

__all__ = ["SSEDataParser"]


def _block_data(block: bytes) -> bytes | None:
    """The data of one event block (the lines between two blank lines), or None if it has none."""
    data = [
        line[6:] if line.startswith(b"data: ") else line[5:] for line in block.split(b"\n") if line.startswith(b"data:")
    ]
    return b"\n".join(data) if data else None


class SSEDataParser:
    """Incremental parser: feed it chunks as they arrive, get back the completed event payloads."""

    __slots__ = ("_partial",)

    def __init__(self) -> None:
        self._partial = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        """Consume a chunk; return the ``data`` payload of every event it completed."""
        buffer = self._partial + chunk if self._partial else chunk
        if b"\r" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n")
        end = buffer.rfind(b"\n\n")
        if end < 0:
            self._partial = buffer
            return []
        self._partial = buffer[end + 2 :]
        lines = buffer[:end].split(b"\n")
        # Fast path, Hermes's own framing: one-line events, so every other line is the blank separator.
        # A multi-line event would put a non-blank line at an odd index.
        if not any(lines[1::2]):
            return [line[6:] if line[5:6] == b" " else line[5:] for line in lines[::2] if line[:5] == b"data:"]
        return [data for data in map(_block_data, buffer[:end].split(b"\n\n")) if data is not None]
