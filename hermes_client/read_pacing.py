"""Socket reads a run stream's reader can hold back: a network backend for httpcore that wraps each
connection so that, while a response is being read, a pause given for it is awaited before every
read from the socket.

A run stream brings one Hermes event per TCP segment, and reading each as it comes costs a wake-up
and a pass through httpx, httpcore and anyio per event. A reader that will not pass the text on
before some moment anyway (the delta coalescer holds it until its window ends) can instead let the
events gather in the socket's buffer and take them all in one read. The wait happens only before
a read from the socket: events already received (h11 holds the rest of a read's bytes, one HTTP
chunk each) are handed over without one.

`pausable_transport()` is httpx's default transport with this backend; `ReadPausable` is the
network stream it makes, found on a response as its `network_stream` extension (httpcore's).
"""

# ruff: noqa: ASYNC109 - httpcore's network stream and backend interface takes a `timeout` per call

import ssl
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import httpcore
import httpx

__all__ = ["ReadPausable", "ReadPause", "pausable_transport"]

ReadPause = Callable[[], Awaitable[None]]  # awaited before each read from the socket; returns when to read


class ReadPausable(httpcore.AsyncNetworkStream):
    """A connection whose reads await `pause_before_read()` first, while it is set."""

    def __init__(self, stream: httpcore.AsyncNetworkStream) -> None:
        self._stream = stream
        self.pause_before_read: ReadPause | None = None

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        if self.pause_before_read is not None:
            await self.pause_before_read()  # before the read's own timeout starts: a pause is no silence
        return await self._stream.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._stream.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.AsyncNetworkStream:
        return ReadPausable(await self._stream.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _ReadPausableBackend(httpcore.AsyncNetworkBackend):
    def __init__(self, backend: httpcore.AsyncNetworkBackend) -> None:
        self._backend = backend

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return ReadPausable(await self._backend.connect_tcp(host, port, timeout, local_address, socket_options))

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        return ReadPausable(await self._backend.connect_unix_socket(path, timeout, socket_options))

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


def pausable_transport() -> httpx.AsyncHTTPTransport:
    """httpx's default transport (same pool settings), its connections `ReadPausable`.

    httpx does not take a network backend, so the one its pool was made with is wrapped in place;
    tests/test_hermes_client.py checks that a run stream's reads go through it."""
    transport = httpx.AsyncHTTPTransport()
    pool = transport._pool
    if isinstance(pool, httpcore.AsyncConnectionPool):  # always, without a proxy
        pool._network_backend = _ReadPausableBackend(pool._network_backend)
    return transport
