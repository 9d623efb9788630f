"""Pytest plugin: a TCP proxy on loopback that can cut the connections it carries, for fault tests.

Registered from ``tests/conftest.py`` (``pytest_plugins = [..., "tests.tcp_proxy"]``).

Put it between the server and Hermes (``hermes_url=proxy.url``) and a test can break what a real
network or a dying Hermes breaks: :meth:`TcpProxy.cut` resets every current connection (both sides,
RST, no FIN), or only those matching a predicate; :meth:`TcpProxy.cut_requests` resets the ones
whose latest HTTP/1.1 request matches, e.g. only a run's SSE stream (``GET /v1/runs/<id>/events``)
while new connections keep working. :meth:`TcpProxy.retarget` sends new connections to another
port (a Hermes started again elsewhere), :meth:`TcpProxy.refuse` resets every new connection (a
Hermes that is down), and :meth:`TcpProxy.freeze` keeps every connection open while no byte moves (a
host gone silent) until :meth:`TcpProxy.thaw`. When the target refuses, the client's connection is
reset at once, as if nothing listened.

The proxy runs its own asyncio loop in a background thread; every method may be called from any
thread (a test's own event loop included: each call blocks for a moment only). Reads are 64 KiB
at a time and each is written and drained before the next, so a slow reader bounds the buffers;
at most ``max_connections`` are carried at once, more are reset.

Fixture
  ``make_tcp_proxy``  factory ``make_tcp_proxy(target_port, target_host="127.0.0.1") -> TcpProxy``;
                      every proxy it made is stopped when the test ends.
"""

import asyncio
import contextlib
import re
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any, Final, Self, TypeVar

import pytest

__all__ = ["ConnectionInfo", "ProxyStats", "TcpProxy"]

CHUNK_BYTES: Final = 64 * 1024
MAX_CONNECTIONS: Final = 256
CONNECT_TIMEOUT_S: Final = 5.0
CALL_TIMEOUT_S: Final = 10.0
REQUEST_LOG_SIZE: Final = 2000
# A request line the client side of a connection sends: "<METHOD> <target> HTTP/1.x" and CRLF. Bodies sent
# to Hermes are JSON, which can't hold a raw CR or LF, so no body is mistaken for a request.
_REQUEST_LINE: Final = re.compile(rb"(GET|POST|PUT|PATCH|DELETE|HEAD|OPTIONS) (\S+) HTTP/1\.[01]\r\n")
_SCAN_TAIL_BYTES: Final = 4096  # a request line split over two reads is still found
_RESET_ON_CLOSE: Final = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST
T = TypeVar("T")


@dataclass(frozen=True)
class ConnectionInfo:
    """One proxied connection as a predicate of :meth:`TcpProxy.cut` sees it."""

    id: int
    request: tuple[str, str] | None  # the latest (method, target) the client sent on it
    bytes_up: int  # client → target
    bytes_down: int  # target → client


@dataclass(frozen=True)
class ProxyStats:
    accepted: int  # client connections accepted
    active: int  # connections being carried now
    refused: int  # client connections reset because the target could not be reached (or too many)
    cut: int  # connections reset by cut() / cut_requests()
    bytes_up: int
    bytes_down: int


@dataclass
class _Connection:
    id: int
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    request: tuple[str, str] | None = None
    bytes_up: int = 0
    bytes_down: int = 0
    scan_tail: bytes = b""
    pumps: "list[asyncio.Task[None]]" = field(default_factory=list)

    def info(self) -> ConnectionInfo:
        return ConnectionInfo(self.id, self.request, self.bytes_up, self.bytes_down)


def _reset(writer: asyncio.StreamWriter | None) -> None:
    """Close abruptly: RST to the peer, nothing flushed."""
    if writer is None:
        return
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET_ON_CLOSE)
    writer.transport.abort()


class TcpProxy:
    """Forwards ``127.0.0.1:<port>`` to ``target_host:target_port``; start/stop or use as a context manager."""

    def __init__(
        self, target_port: int, target_host: str = "127.0.0.1", *, max_connections: int = MAX_CONNECTIONS
    ) -> None:
        self._target: tuple[str, int] | None = (target_host, target_port)
        self._max_connections = max_connections
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tcp-proxy", daemon=True)
        self._server: asyncio.Server | None = None
        self._connections: dict[int, _Connection] = {}
        self._next_id = 1
        self._requests: deque[tuple[str, str]] = deque(maxlen=REQUEST_LOG_SIZE)
        self._accepted = self._refused = self._cut = self._closed_up = self._closed_down = 0
        self._port = 0
        self._flowing = asyncio.Event()  # cleared by freeze(): nothing is forwarded or connected
        self._flowing.set()

    # --- life cycle ---------------------------------------------------------------------------------

    def start(self) -> Self:
        self._thread.start()
        self._server = self._call(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self._port = int(self._server.sockets[0].getsockname()[1])
        return self

    def stop(self) -> None:
        """Stop listening, reset whatever is still carried, end the loop's thread."""
        if not self._thread.is_alive():
            return

        async def shutdown() -> None:
            self._flowing.set()
            if self._server is not None:
                self._server.close()
            carried = list(self._connections.values())
            for connection in carried:
                self._drop(connection)
            await asyncio.gather(*(task for c in carried for task in c.pumps), return_exceptions=True)
            # Connections still being made (a client accepted, its upstream not yet reached) end too.
            others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)

        with contextlib.suppress(Exception):
            self._call(shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(CALL_TIMEOUT_S)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- what tests use -----------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def retarget(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        """Send new connections to another target (after :meth:`refuse`: let them through again); the current
        ones stay where they are."""
        self._target = (target_host, target_port)

    def refuse(self) -> None:
        """Reset every new connection at once, as if nothing listened (a Hermes that is down); the current ones
        stay (cut them too with :meth:`cut`). :meth:`retarget` ends it."""
        self._target = None

    def freeze(self) -> None:
        """Like a host gone silent: every connection, current or new, stays open, but no byte moves and no new
        one reaches the target, until :meth:`thaw`."""

        async def clear() -> None:
            self._flowing.clear()

        self._call(clear())

    def thaw(self) -> None:
        """End :meth:`freeze`: what was held back is forwarded, new connections are made."""

        async def release() -> None:
            self._flowing.set()

        self._call(release())

    def cut(self, match: Callable[[ConnectionInfo], bool] | None = None) -> int:
        """Reset every current connection (``match``: only those it accepts), both sides; how many were cut."""

        async def cut_now() -> int:
            chosen = [c for c in self._connections.values() if match is None or match(c.info())]
            for connection in chosen:
                self._drop(connection)
            self._cut += len(chosen)
            return len(chosen)

        return self._call(cut_now())

    def cut_requests(self, method: str, target: str) -> int:
        """Reset the connections whose latest request is ``method`` on a target matching the regex ``target``
        (in full); e.g. ``cut_requests("GET", r"/v1/runs/[^/]+/events")`` cuts only runs' event streams."""
        pattern = re.compile(target)

        def matches(info: ConnectionInfo) -> bool:
            return info.request is not None and info.request[0] == method and bool(pattern.fullmatch(info.request[1]))

        return self.cut(matches)

    def connections(self) -> list[ConnectionInfo]:
        return self._call(self._snapshot())

    def requests(self) -> list[tuple[str, str]]:
        """Every (method, target) clients sent through the proxy, oldest first (the last 2,000)."""

        async def read() -> list[tuple[str, str]]:
            return list(self._requests)

        return self._call(read())

    def stats(self) -> ProxyStats:
        async def read() -> ProxyStats:
            carried = self._connections.values()
            return ProxyStats(
                accepted=self._accepted,
                active=len(self._connections),
                refused=self._refused,
                cut=self._cut,
                bytes_up=self._closed_up + sum(c.bytes_up for c in carried),
                bytes_down=self._closed_down + sum(c.bytes_down for c in carried),
            )

        return self._call(read())

    def wait_for_connection(self, match: Callable[[ConnectionInfo], bool], timeout: float = 10.0) -> ConnectionInfo:
        """Block (bounded) until a current connection satisfies ``match``; it."""
        deadline = time.monotonic() + timeout
        while True:
            found = next((info for info in self.connections() if match(info)), None)
            if found is not None:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"no proxied connection matched within {timeout} s: {self.connections()}")
            time.sleep(0.02)

    # --- the loop's side ----------------------------------------------------------------------------

    def _call(self, work: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(CALL_TIMEOUT_S)

    async def _snapshot(self) -> list[ConnectionInfo]:
        return [connection.info() for connection in self._connections.values()]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._accepted += 1
        if len(self._connections) >= self._max_connections:
            self._refused += 1
            _reset(writer)
            return
        connection = _Connection(self._next_id, writer)
        self._next_id += 1
        self._connections[connection.id] = connection
        try:
            await self._flowing.wait()  # frozen: the connection is held open, and nothing answers
            if self._target is None:
                self._refused += 1
                _reset(writer)
                return
            host, port = self._target
            try:
                up_reader, up_writer = await asyncio.wait_for(
                    asyncio.open_connection(host, port), timeout=CONNECT_TIMEOUT_S
                )
            except (OSError, TimeoutError):
                self._refused += 1
                _reset(writer)
                return
            if connection.id not in self._connections:  # cut while connecting
                _reset(up_writer)
                return
            connection.upstream = up_writer
            connection.pumps = [
                asyncio.create_task(self._pump(connection, reader, up_writer, upward=True)),
                asyncio.create_task(self._pump(connection, up_reader, writer, upward=False)),
            ]
            results = await asyncio.gather(*connection.pumps, return_exceptions=True)
            if any(isinstance(result, BaseException) for result in results):
                self._drop(connection)
            else:
                for side in (writer, up_writer):
                    side.close()
        finally:
            self._forget(connection)

    async def _pump(
        self, connection: _Connection, source: asyncio.StreamReader, sink: asyncio.StreamWriter, *, upward: bool
    ) -> None:
        while chunk := await source.read(CHUNK_BYTES):
            if upward:
                connection.bytes_up += len(chunk)
                self._note_requests(connection, chunk)
            else:
                connection.bytes_down += len(chunk)
            await self._flowing.wait()
            sink.write(chunk)
            await sink.drain()
        if sink.can_write_eof():
            with contextlib.suppress(OSError):
                sink.write_eof()

    def _note_requests(self, connection: _Connection, chunk: bytes) -> None:
        scanned = connection.scan_tail + chunk
        for found in _REQUEST_LINE.finditer(scanned):
            if found.end() > len(connection.scan_tail):  # not already counted in the previous read
                request = (found.group(1).decode(), found.group(2).decode("latin-1"))
                connection.request = request
                self._requests.append(request)
        connection.scan_tail = scanned[-_SCAN_TAIL_BYTES:]

    def _drop(self, connection: _Connection) -> None:
        _reset(connection.client)
        _reset(connection.upstream)
        for pump in connection.pumps:
            pump.cancel()
        self._forget(connection)

    def _forget(self, connection: _Connection) -> None:
        if self._connections.pop(connection.id, None) is not None:
            self._closed_up += connection.bytes_up
            self._closed_down += connection.bytes_down


@pytest.fixture
def make_tcp_proxy() -> Iterator[Callable[..., TcpProxy]]:
    """Start proxies on demand; all are stopped when the test ends."""
    started: list[TcpProxy] = []

    def make(target_port: int, target_host: str = "127.0.0.1") -> TcpProxy:
        proxy = TcpProxy(target_port, target_host).start()
        started.append(proxy)
        return proxy

    yield make
    for proxy in reversed(started):
        proxy.stop()
