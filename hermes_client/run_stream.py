"""A run's event stream read from a connection of its own: one HTTP/1.1 GET over an asyncio transport,
its head parsed by h11, its chunked body undone in one pass a read, each read's body handed over whole.

Hermes writes every event as an HTTP chunk of its own. Through httpx a chunk is one trip up six async
generators and h11, so a run of 2,000 text deltas cost 2,000 such trips even when the reader had let
them gather in the socket (see `read_pause`). Here a read's chunks are joined before anyone sees them:
what came while the reader waited is one piece of bytes, split into events in one pass.

The connection stops reading from the socket while the reader pauses (`read_pause`, awaited before
each read) and while a megabyte waits to be taken; what Hermes sends meanwhile waits in the kernel,
and the socket costs no wake-up. Failures are raised as httpx's transport errors (`ConnectError`, `ReadTimeout`,
`ReadError`, `RemoteProtocolError`), so the client maps them as it maps every other request's.
"""

# ruff: noqa: ASYNC109 - a read's timeout is one timer per read (asyncio.timeout costs several times as much)

import asyncio
import contextlib
import functools
import re
import ssl
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator
from typing import Final, cast

import h11
import httpx

__all__ = ["MAX_ERROR_BODY_BYTES", "Dechunker", "ReadPause", "StreamRefused", "body_reads"]

ReadPause = Callable[[], Awaitable[None]]  # awaited before each read from the socket; returns when to read

MAX_ERROR_BODY_BYTES: Final = 64 * 1024  # of a refusal's body: Hermes's error envelope is a few hundred bytes
HIGH_WATER_BYTES: Final = 1024 * 1024  # received and not yet taken: reading stops until it is
_HEX: Final = re.compile(rb"[0-9A-Fa-f]{1,16}")


class StreamRefused(Exception):
    """The gateway answered the GET with another status than 200 (`body`: the start of its body)."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.body = body


class _Connection(asyncio.Protocol):
    """The socket's bytes, kept until taken; reading stops while nobody waits for them and too many wait."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._received: list[bytes] = []
        self._buffered = 0
        self._waiter: asyncio.Future[None] | None = None
        self._ended = False
        self._error: BaseException | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is one, not a subclass

    def data_received(self, data: bytes) -> None:
        self._received.append(data)
        self._buffered += len(data)
        if self._buffered >= HIGH_WATER_BYTES and self.transport is not None:
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self._ended = True
        self._wake()
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._ended = True
        self._error = exc
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def read(self, timeout: float | None) -> bytes:
        """All bytes received and not yet taken, waiting up to `timeout` for some; b"" once the peer is done."""
        if not self._received and not self._ended:
            loop = asyncio.get_running_loop()
            self._waiter = waiter = loop.create_future()
            timer = None if timeout is None else loop.call_later(timeout, _expire, waiter)
            try:
                await waiter
            finally:
                if timer is not None:
                    timer.cancel()
                self._waiter = None
        if self._received:
            data = self._received[0] if len(self._received) == 1 else b"".join(self._received)
            if self._buffered >= HIGH_WATER_BYTES and self.transport is not None and not self._ended:
                self.transport.resume_reading()
            self._received.clear()
            self._buffered = 0
            return data
        if self._error is not None:
            raise httpx.ReadError(f"the connection broke ({type(self._error).__name__})") from self._error
        return b""

    def hold(self) -> None:
        """Stop reading from the socket (the reader pauses): what comes waits in the kernel."""
        if self.transport is not None and not self._ended and self._buffered < HIGH_WATER_BYTES:
            self.transport.pause_reading()

    def release(self) -> None:
        if self.transport is not None and not self._ended and self._buffered < HIGH_WATER_BYTES:
            self.transport.resume_reading()


def _expire(waiter: "asyncio.Future[None]") -> None:
    if not waiter.done():
        waiter.set_exception(httpx.ReadTimeout("no bytes from Hermes in time"))


def _request_bytes(url: httpx.URL, headers: list[tuple[str, str]]) -> tuple[h11.Connection, bytes]:
    http = h11.Connection(h11.CLIENT)
    host = url.raw_host.decode("ascii")  # IDNA-encoded
    host = f"[{host}]" if ":" in host else host  # an IPv6 address
    host = host if url.port is None else f"{host}:{url.port}"
    target = url.raw_path  # path and query
    head = [("Host", host), ("Accept", "text/event-stream"), ("Connection", "close"), *headers]
    data = http.send(h11.Request(method="GET", target=target, headers=head))
    return http, (data or b"") + (http.send(h11.EndOfMessage()) or b"")


async def _connect(url: httpx.URL, tls: ssl.SSLContext | None, timeout: float | None) -> _Connection:
    loop = asyncio.get_running_loop()
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        async with asyncio.timeout(timeout):
            _, connection = await loop.create_connection(
                _Connection, url.host, port, ssl=tls, server_hostname=url.host if tls is not None else None
            )
    except TimeoutError as exc:
        raise httpx.ConnectTimeout("connecting to Hermes timed out") from exc
    except OSError as exc:  # refused, unreachable, a name that does not resolve, a TLS failure
        raise httpx.ConnectError(f"cannot connect to Hermes ({type(exc).__name__})") from exc
    return connection


async def _next_event(
    http: h11.Connection, connection: _Connection, timeout: float | None
) -> h11.Event | type[h11.NEED_DATA] | type[h11.PAUSED]:
    """h11's next event of the response, reading as needed (no pause: the response head, a refusal)."""
    while (event := http.next_event()) is h11.NEED_DATA:
        http.receive_data(await connection.read(timeout))
    return event


async def body_reads(
    url: httpx.URL,
    headers: list[tuple[str, str]],
    *,
    tls: ssl.SSLContext | None,
    connect_timeout: float | None,
    read_timeout: float | None,
    read_pause: ReadPause | None = None,
) -> AsyncGenerator[bytes, None]:
    """GET `url` and yield its body, one socket read's bytes at a time (never empty); the body's end ends it.

    Raises `StreamRefused` for a status other than 200, httpx's transport errors for the rest (a body cut
    short is `RemoteProtocolError`). `read_timeout` counts silence, not pauses. Close the generator
    (``contextlib.aclosing``) to close the connection."""
    http, request = _request_bytes(url, headers)
    connection = await _connect(url, tls, connect_timeout)
    assert connection.transport is not None
    try:
        with _protocol_errors():
            connection.transport.write(request)
            while not isinstance(event := await _next_event(http, connection, read_timeout), h11.Response):
                pass  # 1xx answers
            if event.status_code != 200:
                raise StreamRefused(event.status_code, await _refusal_body(http, connection, read_timeout))
            if any(name == b"content-encoding" and value != b"identity" for name, value in event.headers):
                raise httpx.RemoteProtocolError("the run stream came encoded, though none was asked for")
            if _chunked(event):
                decode: Callable[[bytes | None], tuple[bytes, bool]] = Dechunker().feed
                body, ended = decode(http.trailing_data[0] or None)  # what came with the head
            else:  # a length or the connection's end delimits the body: h11 gives a read's bytes at once
                decode = functools.partial(_body, http)
                body, ended = decode(None)
            while True:
                if body:
                    yield body
                if ended:
                    return
                if read_pause is not None:
                    connection.hold()
                    try:
                        await read_pause()
                    finally:
                        connection.release()
                body, ended = decode(await connection.read(read_timeout))
    finally:
        connection.transport.close()


def _chunked(response: h11.Response) -> bool:
    codings = b",".join(value for name, value in response.headers if name == b"transfer-encoding")
    return codings.rsplit(b",", 1)[-1].strip().lower() == b"chunked"


def _body(http: h11.Connection, data: bytes | None) -> tuple[bytes, bool]:
    """The body bytes h11 makes of `data` (b"": the peer closed; None: nothing new), every chunk of it
    joined, and whether the body ended (its last chunk, or a close that ends a close-delimited body)."""
    if data is not None:
        http.receive_data(data)
    parts: list[bytes] = []
    while type(event := http.next_event()) is h11.Data:
        parts.append(event.data)
    return (parts[0] if len(parts) == 1 else b"".join(parts)), event is not h11.NEED_DATA


class Dechunker:
    """The chunked transfer coding undone (RFC 9112 section 7.1), every chunk of a read in one pass.

    h11 hands a chunked body over one chunk at a time, some thirty Python calls each, and Hermes writes
    one event per chunk: at window 100 ms that was 45% of the calls the server made for a streamed
    answer. Chunk extensions and trailer fields are skipped, as HTTP allows. A size line longer than
    `MAX_LINE_BYTES` or not hexadecimal, a chunk not followed by CRLF, or the peer closing inside the
    body is `httpx.RemoteProtocolError`."""

    MAX_LINE_BYTES: Final = 4096

    __slots__ = ("_crlf", "_left", "_rest", "_trailer", "done")

    def __init__(self) -> None:
        self._rest = b""  # an incomplete line (or CRLF) from the last read
        self._left = 0  # bytes of the current chunk still to come
        self._crlf = False  # the CRLF after a chunk's data is due
        self._trailer = False  # after the last chunk: trailer fields until an empty line
        self.done = False

    def feed(self, data: bytes | None) -> tuple[bytes, bool]:
        """The body bytes in `data` (b"": the peer closed; None: nothing new), and whether the body is complete."""
        if data is None or self.done:
            return b"", self.done
        if not data:
            raise httpx.RemoteProtocolError("the run stream ended inside its chunked body")
        buffer = self._rest + data if self._rest else data
        out: list[bytes] = []
        pos, end = 0, len(buffer)
        while pos < end:
            if self._left:
                take = min(self._left, end - pos)
                out.append(buffer[pos : pos + take])
                pos += take
                self._left -= take
                self._crlf = not self._left
            elif self._crlf:
                if end - pos < 2:
                    break
                if buffer[pos : pos + 2] != b"\r\n":
                    raise httpx.RemoteProtocolError("a chunk of the run stream did not end with CRLF")
                pos += 2
                self._crlf = False
            else:
                line_end = buffer.find(b"\r\n", pos, pos + self.MAX_LINE_BYTES + 2)
                if line_end < 0:
                    if end - pos > self.MAX_LINE_BYTES:
                        raise httpx.RemoteProtocolError("a line of the run stream's chunked body is too long")
                    break
                line, pos = buffer[pos:line_end], line_end + 2
                if self._trailer:
                    if not line:
                        self.done = True
                        break
                    continue
                size = _HEX.fullmatch(line.split(b";", 1)[0].rstrip(b" \t"))
                if size is None:
                    raise httpx.RemoteProtocolError("a chunk size of the run stream is not hexadecimal")
                self._left = int(size[0], 16)
                self._trailer = not self._left
        self._rest = b"" if self.done else buffer[pos:]
        return (out[0] if len(out) == 1 else b"".join(out)), self.done


async def _refusal_body(http: h11.Connection, connection: _Connection, timeout: float | None) -> bytes:
    body = b""
    while type(event := await _next_event(http, connection, timeout)) is h11.Data and len(body) < MAX_ERROR_BODY_BYTES:
        body += event.data
    return body[:MAX_ERROR_BODY_BYTES]


@contextlib.contextmanager
def _protocol_errors() -> Iterator[None]:
    try:
        yield
    except h11.ProtocolError as exc:
        raise httpx.RemoteProtocolError(f"Hermes broke HTTP/1.1 ({exc})") from exc
