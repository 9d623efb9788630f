"""WebSocket permessage-deflate (RFC 7692) with context takeover, at a bounded cost per connection.

Cumulative `message.delta` frames repeat the text before them, so with context takeover a frame
costs little more than its new words, provided the server's LZ77 window still holds the previous
frame: hence a 32 KiB window (15 bits; a 12-bit window, uvicorn's choice, loses the context once a
draft passes 4 KiB). What bounds its memory (measured with bench/ws_stream.py, 300-1,000 connections):

- frames under `MIN_COMPRESSED_BYTES` (128) go out uncompressed (RSV1 clear, which the extension
  allows) while the connection holds no compressor, and the compressor is made for the first frame
  that is compressed: `ready`, pongs and other tiny frames make none, so a connection that only said
  hello holds just the decompressor (~5 KiB; the client's window is asked down to 10 bits, its
  messages being small). Once one is held (a conversation's history, a message's first delta), small
  frames are compressed too: a packed append delta (~35 bytes, `delta_packed`) finds its words in the
  window, and costs 1.0x its text where sent as is it cost 1.8x. Append deltas as objects (~200
  bytes, mostly the same keys and ids each time) cost a few bytes more than their new text;
- `memLevel` 4 keeps zlib's hash table and pending buffer at 8 KiB each (its default 8: 64 KiB
  each, ~150 KiB per idle connection); a connection streaming a long draft holds ~110 KiB more;
- `level` 2: measured on varied text (a 2,000-word answer of 600 distinct words, bench/stream_bytes.py
  and a replay of its frames), cumulative frames every 10 words cost 1.9x the answer at level 2
  against 7.8x at level 1, whose matches against the previous frame come out in short pieces, and
  level 2 spends no more CPU (about 3 ms for the whole answer); levels 4 to 9 gain at most a fifth
  more at more than twice the CPU. Append frames compress alike at every level (1.5-1.6x);
- the compressor is dropped after `ENCODER_IDLE_SECONDS` without a message (the next frame starts
  a fresh one: a server may stop referring to earlier messages at any message boundary, the
  client keeps its window regardless), so its memory is held by the connections streaming now,
  not by every one that ever streamed (freed memory is reused by the process, not always given back
  to the OS).

`CompressedWebSocketProtocol` is uvicorn's websockets (sans-I/O) protocol class with this
compression; `build_uvicorn_config` (pheby/server.py) passes it as uvicorn's `ws`, and
`Config.ws_per_message_deflate` (the `ws_compression` setting) switches it on or off.
"""

import asyncio
import zlib
from collections.abc import Sequence
from typing import Any

from uvicorn._types import ASGISendEvent
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.extensions.base import Extension, ServerExtensionFactory
from websockets.extensions.permessage_deflate import PerMessageDeflate, ServerPerMessageDeflateFactory
from websockets.frames import CTRL_OPCODES, Frame
from websockets.typing import ExtensionParameter

SERVER_MAX_WINDOW_BITS = 15
CLIENT_MAX_WINDOW_BITS = 10
COMPRESS_SETTINGS: dict[str, Any] = {"memLevel": 4, "level": 2}
ENCODER_IDLE_SECONDS = 5.0
MIN_COMPRESSED_BYTES = 128


class ReleasablePerMessageDeflate(PerMessageDeflate):
    """`PerMessageDeflate` whose compressor is made on first use and can be released between messages."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.release_encoder()

    def release_encoder(self) -> None:
        """Drop the compression context (its window and tables); the next message starts a new one."""
        self.__dict__.pop("encoder", None)

    def holds_encoder(self) -> bool:
        return "encoder" in self.__dict__

    def encode(self, frame: Frame) -> Frame:
        if frame.opcode in CTRL_OPCODES:
            return frame  # never compressed: a keepalive ping must not make a compressor nothing releases
        if not self.holds_encoder() and frame.fin and len(frame.data) < MIN_COMPRESSED_BYTES:
            return frame  # too small to pay for a compressor: sent as is (RSV1 clear), and none is made for it
        if not self.holds_encoder() and not self.local_no_context_takeover:
            self.encoder = zlib.compressobj(wbits=-self.local_max_window_bits, **self.compress_settings)
        return super().encode(frame)


class ServerDeflateFactory(ServerPerMessageDeflateFactory):
    """The server's permessage-deflate offer handling, making `ReleasablePerMessageDeflate` extensions."""

    def process_request_params(
        self, params: Sequence[ExtensionParameter], accepted_extensions: Sequence[Extension]
    ) -> tuple[list[ExtensionParameter], PerMessageDeflate]:
        response, negotiated = super().process_request_params(params, accepted_extensions)
        extension = ReleasablePerMessageDeflate(
            negotiated.remote_no_context_takeover,
            negotiated.local_no_context_takeover,
            negotiated.remote_max_window_bits,
            negotiated.local_max_window_bits,
            negotiated.compress_settings,
        )
        return response, extension


def deflate_extensions() -> list[ServerExtensionFactory]:
    """The server's extension list: permessage-deflate as described in this module's docstring."""
    return [
        ServerDeflateFactory(
            server_max_window_bits=SERVER_MAX_WINDOW_BITS,
            client_max_window_bits=CLIENT_MAX_WINDOW_BITS,
            compress_settings=dict(COMPRESS_SETTINGS),
        )
    ]


class CompressedWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's websockets (sans-I/O) protocol with this module's permessage-deflate.

    uvicorn negotiates compression only when `Config.ws_per_message_deflate` is true (with its own
    settings); this replaces those settings and releases an idle connection's compressor. Another
    subclass of `WebSocketsSansIOProtocol` combines with it by multiple inheritance, every method
    here calling `super()`: `class Combined(CompressedWebSocketProtocol, OtherProtocol): pass`.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._encoder_release: asyncio.TimerHandle | None = None
        self._last_send = 0.0
        if self.config.ws_per_message_deflate:
            self.conn.available_extensions = deflate_extensions()

    async def send(self, message: ASGISendEvent) -> None:
        await super().send(message)
        if message["type"] == "websocket.send" and self._deflate() is not None:
            # One timer per idle period, not one per frame: when it fires early it is set again.
            self._last_send = self.loop.time()
            if self._encoder_release is None:
                self._encoder_release = self.loop.call_later(ENCODER_IDLE_SECONDS, self._release_encoder)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._encoder_release is not None:
            self._encoder_release.cancel()
            self._encoder_release = None
        super().connection_lost(exc)

    def _deflate(self) -> ReleasablePerMessageDeflate | None:
        for extension in self.conn.extensions:
            if isinstance(extension, ReleasablePerMessageDeflate):
                return extension
        return None

    def _release_encoder(self) -> None:
        idle = self.loop.time() - self._last_send
        if idle < ENCODER_IDLE_SECONDS:
            self._encoder_release = self.loop.call_later(ENCODER_IDLE_SECONDS - idle, self._release_encoder)
            return
        self._encoder_release = None
        extension = self._deflate()
        if extension is not None:
            extension.release_encoder()
