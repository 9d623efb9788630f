"""Throwaway Redis servers on loopback, which a test may stop, kill and bring back.

The Redis engine is tested against a real server, not a double: Debian's `redis-server` (Redis 7;
`make services` installs it where it is missing). Each server runs in a temp dir of its own, listens on a
free port of 127.0.0.1 only, keeps nothing on disk (`--save ''`, no AOF: a restart starts it empty) and is
stopped by PID at the end. Under pytest-xdist each worker starts its own server, and only when a test
asks for one.

Fixtures: ``redis_server`` (one server for the session: `.url`, `.port`, `.pid`, `stop()`, `kill()`,
`start()`; a test that stops or kills it brings it back, or the next test using it does),
``own_redis_server`` (a server of the test's own, to stop or kill without disturbing others) and
``redis_url`` (a `RedisTarget`: a server's URL and a key prefix of the test's own, whose keys are deleted
after the test).

With ``PHEBY_TEST_REDIS_URL`` set, ``redis_url`` points there (a prefix of this run's, then of the
test's) and no server is started; the fixtures that hand a test a server to stop skip, as that server
is not the tests' to stop.
"""

import os
import shutil
import signal
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from tests import server_process
from tests.live_server import free_port
from tests.server_process import log_tail

ENV_URL = "PHEBY_TEST_REDIS_URL"
READY_SECONDS = 30.0
STOP_SECONDS = 10.0
# Every key the tests make starts with this run's prefix (this process's, under xdist a worker's).
RUN_PREFIX = f"pheby-test:{uuid.uuid4().hex[:12]}:"


@dataclass(frozen=True)
class RedisTarget:
    """Where a test keeps its keys: the server's URL and a prefix no other test uses (ends with ':')."""

    url: str
    prefix: str


def _binary() -> str:
    found = shutil.which("redis-server") or (
        "/usr/bin/redis-server" if Path("/usr/bin/redis-server").is_file() else None
    )
    if found is None:
        pytest.fail("redis-server is not installed: run `make services`")
    return found


class RedisServer(server_process.ThrowawayServer):
    """One redis-server on 127.0.0.1:`port`; `start()` runs it again on the same port (empty)."""

    name = "Redis"

    def __init__(self) -> None:
        self._binary = _binary()
        super().__init__(Path(tempfile.mkdtemp(prefix="pheby-redis-")))
        self.log_path = self.base / "redis.log"
        self.port = 0
        try:
            # A free port may be taken by someone else before Redis binds it: try another.
            for attempt in range(3):
                self.port = free_port()
                try:
                    self.start()
                    break
                except RuntimeError:
                    if attempt == 2 or "Address already in use" not in log_tail(self.log_path, 10):
                        raise
        except BaseException:
            self.close()
            raise

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start it (again) on the same port; return once it answers PING."""
        if self.running:
            return
        with self.log_path.open("ab") as log:
            process = subprocess.Popen(
                [
                    self._binary,
                    "--port",
                    str(self.port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--daemonize",
                    "no",
                    "--dir",
                    str(self.base),
                    "--logfile",
                    "",  # to stdout, the log file
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.base,
                start_new_session=True,  # a Ctrl-C at the terminal is pytest's to handle, not the server's
            )
        self._started(process, self.log_path, READY_SECONDS)

    def _answers(self) -> bool:
        try:
            with redis.Redis.from_url(self.url, socket_connect_timeout=2, socket_timeout=2) as client:
                client.ping()
        except redis.RedisError:
            return False
        return True

    def stop(self) -> None:
        """SIGTERM (it exits, saving nothing); killed if it takes over 10 s."""
        if self._process is not None:
            server_process.stop(self._process, signal.SIGTERM, STOP_SECONDS)
        self._reap()

    def kill(self) -> None:
        """SIGKILL to it (and any child of it, such as a fork saving a snapshot)."""
        if self._process is not None:
            server_process.kill_tree(self._process)
        self._reap()


def delete_prefix(url: str, prefix: str) -> int:
    """Delete every key starting with `prefix` on the server of `url`; how many there were."""
    pattern = "".join(f"\\{char}" if char in "*?[]\\" else char for char in prefix) + "*"
    deleted = 0
    with redis.Redis.from_url(url, socket_connect_timeout=10, socket_timeout=30) as client:
        batch: list[bytes] = []
        for key in client.scan_iter(match=pattern, count=1000):
            batch.append(key)
            if len(batch) == 1000:
                deleted += int(client.unlink(*batch))
                batch.clear()
        if batch:
            deleted += int(client.unlink(*batch))
    return deleted


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One Redis server for the session (this xdist worker's); a test may stop, kill and start it, and
    should start it again before it ends (`redis_url` does, should it find it down)."""
    yield from server_process.serving(RedisServer, ENV_URL)


@pytest.fixture
def own_redis_server() -> Iterator[RedisServer]:
    """A Redis server of the test's own, to stop or kill as it likes; removed at the end."""
    yield from server_process.serving(RedisServer, ENV_URL)


@pytest.fixture
def redis_url(request: pytest.FixtureRequest) -> Iterator[RedisTarget]:
    """A Redis server's URL and a key prefix of the test's own, on `PHEBY_TEST_REDIS_URL`'s server if that
    is set, else on `redis_server`; the prefix's keys are deleted after the test (the server is shared)."""
    prefix = f"{RUN_PREFIX}{uuid.uuid4().hex[:12]}:"
    external = os.environ.get(ENV_URL)
    if external:
        yield RedisTarget(external, prefix)
        delete_prefix(external, prefix)
        return
    server: RedisServer = request.getfixturevalue("redis_server")
    server.start()  # should an earlier test have left it stopped
    yield RedisTarget(server.url, prefix)
    server.start()  # the test may have stopped it
    delete_prefix(server.url, prefix)
