"""moto's S3 server on a loopback port that a test can take down for real and bring back.

`ThreadedMotoServer.stop()` only stops accepting: its listening socket stays open (new connections
hang) and kept-alive connections go on being served. `cut()` closes the listener and every open
connection, as a crashed or unreachable S3 would; `restore()` listens on the same port again.
moto keeps its buckets in-process, so what was stored before the cut is there after it.

Fixtures: ``moto_s3`` (a server of the test's own, with a new empty bucket, that it may cut),
``moto_server_url`` (one server for the whole session, never cut: its endpoint URL) and
``aws_credentials`` (fake ones, no real profile reachable).
"""

import contextlib
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server

from storage.s3 import S3Store


class CuttableS3Server:
    def __init__(self) -> None:
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.port = 0
        self.bucket = f"pheby-{uuid.uuid4().hex[:12]}"  # moto's buckets live as long as the process
        self._listen()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _listen(self) -> None:
        connections, lock = self._connections, self._lock

        class Handler(MotoRequestHandler):
            def setup(self) -> None:
                super().setup()
                with lock:
                    connections.add(self.connection)

            def finish(self) -> None:
                with lock:
                    connections.discard(self.connection)
                super().finish()

        app = DomainDispatcherApplication(create_backend_app)
        self._server = make_server("127.0.0.1", self.port, app, threaded=True, request_handler=Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="moto-s3", daemon=True)
        self._thread.start()

    def cut(self) -> None:
        """S3 is gone: connecting is refused, connections in use break."""
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self._lock:
            for connection in list(self._connections):
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)
            self._connections.clear()

    def restore(self) -> None:
        """S3 is back, on the same port, with everything it held."""
        self._listen()

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.cut()


@pytest.fixture
def aws_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Fake credentials, and no way to reach a real profile."""
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


@pytest.fixture
def moto_s3(aws_credentials: None) -> Iterator[CuttableS3Server]:
    """A moto S3 server with a new, empty bucket (`s3.bucket`); stopped at the end."""
    server = CuttableS3Server()
    S3Store(server.bucket, endpoint_url=server.url).client.create_bucket(Bucket=server.bucket)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def moto_server_url() -> Iterator[str]:
    """One moto S3 server for the session (never cut); its endpoint URL, what PHEBY_S3_ENDPOINT_URL would hold."""
    server = CuttableS3Server()
    try:
        yield server.url
    finally:
        server.stop()
