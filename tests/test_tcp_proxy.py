"""The TCP proxy fixture (tests/tcp_proxy.py): it forwards, it cuts what it is told to, it can be retargeted."""

import socket
import socketserver
import threading
from collections.abc import Callable, Iterator

import pytest

from tests.real_hermes import unused_tcp_port
from tests.tcp_proxy import TcpProxy

EVENTS = r"/v1/runs/[^/]+/events"


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


@pytest.fixture
def echo_port() -> Iterator[int]:
    """A threaded TCP echo server on loopback."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="echo", daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()
    thread.join(5)


def connect(proxy: TcpProxy) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
    sock.settimeout(5)
    return sock


def echoed(sock: socket.socket, data: bytes) -> bytes:
    sock.sendall(data)
    received = b""
    while len(received) < len(data):
        chunk = sock.recv(65536)
        if not chunk:
            break
        received += chunk
    return received


def is_cut(sock: socket.socket) -> bool:
    """The peer reset (or closed) the connection."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def is_refused(proxy: TcpProxy) -> bool:
    """A new connection through the proxy is reset at once. The reset can come before `connect` returns:
    with a timeout the socket connects without blocking, and a reset that arrives before it asks how the
    connection went is what `connect` raises."""
    try:
        sock = connect(proxy)
    except ConnectionResetError:
        return True
    with sock:
        return is_cut(sock)


def test_forwards_both_ways_and_counts(make_tcp_proxy: Callable[..., TcpProxy], echo_port: int) -> None:
    proxy = make_tcp_proxy(echo_port)
    payload = b"x" * 300_000  # several reads of 64 KiB
    with connect(proxy) as sock:
        assert echoed(sock, payload) == payload
    stats = proxy.stats()
    assert stats.accepted == 1
    assert stats.bytes_up == stats.bytes_down == len(payload)


def test_cut_resets_every_connection_and_new_ones_work(make_tcp_proxy: Callable[..., TcpProxy], echo_port: int) -> None:
    proxy = make_tcp_proxy(echo_port)
    first, second = connect(proxy), connect(proxy)
    with first, second:
        assert echoed(first, b"one") == b"one"
        assert echoed(second, b"two") == b"two"
        assert proxy.cut() == 2
        assert is_cut(first)
        assert is_cut(second)
    with connect(proxy) as third:
        assert echoed(third, b"three") == b"three"
    assert proxy.stats().cut == 2


def test_cut_requests_cuts_only_the_matching_stream(make_tcp_proxy: Callable[..., TcpProxy], echo_port: int) -> None:
    proxy = make_tcp_proxy(echo_port)
    stream, other = connect(proxy), connect(proxy)
    with stream, other:
        # A kept-alive connection: the latest request on it is what counts.
        first = b"POST /v1/runs HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
        assert echoed(stream, first) == first
        request = b"GET /v1/runs/run_abc/events HTTP/1.1\r\nHost: x\r\n\r\n"
        assert echoed(stream, request) == request
        health = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
        assert echoed(other, health) == health
        assert proxy.cut_requests("GET", EVENTS) == 1
        assert is_cut(stream)
        assert echoed(other, b"still here") == b"still here"
    assert ("POST", "/v1/runs") in proxy.requests()
    assert ("GET", "/v1/runs/run_abc/events") in proxy.requests()


def test_a_refusing_target_resets_the_client_and_retarget_moves_new_connections(
    make_tcp_proxy: Callable[..., TcpProxy], echo_port: int
) -> None:
    proxy = make_tcp_proxy(unused_tcp_port())  # nothing listens there
    assert is_refused(proxy)
    assert proxy.stats().refused == 1
    proxy.retarget(echo_port)
    with connect(proxy) as sock:
        assert echoed(sock, b"back") == b"back"


def test_refuse_resets_new_connections_until_retarget(make_tcp_proxy: Callable[..., TcpProxy], echo_port: int) -> None:
    proxy = make_tcp_proxy(echo_port)
    with connect(proxy) as kept:
        assert echoed(kept, b"before") == b"before"
        proxy.refuse()
        assert is_refused(proxy)
        assert echoed(kept, b"kept") == b"kept"  # the current connection stays
    assert proxy.stats().refused == 1
    proxy.retarget(echo_port)
    with connect(proxy) as sock:
        assert echoed(sock, b"back") == b"back"


def test_freeze_holds_every_connection_open_and_silent_until_thaw(
    make_tcp_proxy: Callable[..., TcpProxy], echo_port: int
) -> None:
    proxy = make_tcp_proxy(echo_port)
    with connect(proxy) as current:
        assert echoed(current, b"one") == b"one"
        proxy.freeze()
        with connect(proxy) as new:
            for sock in (current, new):
                sock.sendall(b"held")
                sock.settimeout(0.5)
                with pytest.raises(TimeoutError):  # open (no reset, no EOF), and silent
                    sock.recv(1)
                sock.settimeout(5)
            assert proxy.stats().cut == proxy.stats().refused == 0
            proxy.thaw()
            assert new.recv(4) == b"held"
        assert current.recv(4) == b"held"
        assert echoed(current, b"flowing") == b"flowing"
