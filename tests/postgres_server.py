"""Throwaway PostgreSQL 15 servers on loopback, which a test may stop, kill and bring back.

The PostgreSQL engine is tested against a real server, not a double: Debian's `postgresql-15`
(`make services` installs it where it is missing). Each server lives in a temp dir of its own under /tmp
(data dir, socket, log), listens on a free port of 127.0.0.1 only, with `trust` auth for the superuser
`pheby`, and is stopped by PID at the end and its dir removed. PostgreSQL refuses to run as root: when
the tests run as root, initdb and postgres run as `nobody` (the temp dir is chowned to it); otherwise as
the tests' user. Under pytest-xdist each worker starts its own server, and only when a test asks for one.

Fixtures: ``postgres_server`` (one server for the session: `.url`, `.port`, `.pid`, `stop()`, `kill()`,
`start()`; a test that stops or kills it brings it back, or the next test using it does),
``own_postgres_server`` (a server of the test's own, to stop or kill without disturbing others) and
``postgres_url`` (a URL to a new, empty database made for the test, dropped after it) and ``migrated_postgres_url``
(the same, with the migrations applied: a copy of a database migrated once).

With ``PHEBY_TEST_POSTGRES_URL`` set (a `postgresql://` URL of a superuser, or of a user that may create
databases), ``postgres_url`` makes its databases there and no server is started; the fixtures that hand
a test a server to stop skip, as that server is not the tests' to stop.
"""

import atexit
import contextlib
import grp
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

from pheby.db.postgres import apply_migrations
from tests import server_process
from tests.live_server import free_port
from tests.server_process import log_tail

ENV_URL = "PHEBY_TEST_POSTGRES_URL"
SUPERUSER = "pheby"
BIN_DIRS = (Path("/usr/lib/postgresql/15/bin"),)
READY_SECONDS = 30.0
STOP_SECONDS = 30.0
DATABASE_PREFIX = "pheby_test_"

# Servers not stopped yet: stopped at exit should a fixture's finalizer not have run.


def _bin_dir() -> Path:
    for candidate in BIN_DIRS:
        if (candidate / "postgres").is_file():
            return candidate
    found = shutil.which("postgres")
    if found is not None:
        return Path(found).resolve().parent
    pytest.fail("PostgreSQL 15 is not installed (/usr/lib/postgresql/15/bin/postgres): run `make services`")


def _unprivileged() -> tuple[int, int] | None:
    """The uid and gid PostgreSQL runs as: `nobody` when the tests run as root, else none (the tests' own)."""
    if os.geteuid() != 0:
        return None
    user = pwd.getpwnam("nobody")
    for group in ("nogroup", "nobody"):
        with contextlib.suppress(KeyError):
            return user.pw_uid, grp.getgrnam(group).gr_gid
    return user.pw_uid, user.pw_gid


class PostgresServer(server_process.ThrowawayServer):
    """One postmaster on 127.0.0.1:`port` over a data dir of its own; `start()` runs it again on both."""

    name = "PostgreSQL"

    def __init__(self, *, shared_buffers: str = "16MB") -> None:
        """`shared_buffers`: small for the tests' many servers; a benchmark asks for more. `start()` after
        `stop()` takes a new value of it."""
        self._bin = _bin_dir()
        self.shared_buffers = shared_buffers
        self._owner = _unprivileged()
        # Not under pytest's basetemp: that is 0700 to root, which `nobody` could not enter.
        super().__init__(Path(tempfile.mkdtemp(prefix="pheby-pg-", dir="/tmp" if self._owner else None)))
        self.data_dir = self.base / "data"
        self.log_path = self.base / "postgres.log"
        self.port = 0
        try:
            if self._owner is not None:
                os.chown(self.base, *self._owner)
            self._run(
                [
                    str(self._bin / "initdb"),
                    "--pgdata",
                    str(self.data_dir),
                    "--username",
                    SUPERUSER,
                    "--auth",
                    "trust",
                    "--encoding",
                    "UTF8",
                    "--no-locale",
                    "--no-sync",  # a throwaway cluster: its files needn't reach the disk before it starts
                    "--no-instructions",
                ]
            )
            self._first_start()
        except BaseException:
            self.close()
            raise

    @property
    def url(self) -> str:
        """The server's `postgres` database, as the superuser."""
        return self.database_url("postgres")

    def database_url(self, database: str) -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def _env(self) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
        env["LC_ALL"] = "C"
        env["TZ"] = "UTC"
        return env

    def _popen(self, argv: list[str], log: BinaryIO, *, session: bool = False) -> "subprocess.Popen[bytes]":
        uid, gid = self._owner if self._owner is not None else (None, None)
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self._env(),
            cwd=self.base,
            user=uid,
            group=gid,
            extra_groups=[] if self._owner is not None else None,
            start_new_session=session,
        )

    def _run(self, argv: list[str]) -> None:
        with self.log_path.open("ab") as log:
            process = self._popen(argv, log)
            try:
                code = process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=server_process.KILL_SECONDS)
                raise RuntimeError(f"{argv[0]} took over 120 s:\n{log_tail(self.log_path)}") from None
        if code != 0:
            raise RuntimeError(f"{argv[0]} exited {code}:\n{log_tail(self.log_path)}")

    def _first_start(self) -> None:
        # A free port may be taken by someone else before the postmaster binds it: try another.
        for attempt in range(3):
            self.port = free_port()
            try:
                self.start()
                return
            except RuntimeError:
                if attempt == 2 or "could not bind" not in log_tail(self.log_path, 10):
                    raise

    def start(self) -> None:
        """Start the postmaster (again) on the same port and data dir; return once it takes connections."""
        if self.running:
            return
        with self.log_path.open("ab") as log:
            process = self._popen(
                [
                    str(self._bin / "postgres"),
                    "-D",
                    str(self.data_dir),
                    "-p",
                    str(self.port),
                    "-c",
                    "listen_addresses=127.0.0.1",
                    "-c",
                    f"unix_socket_directories={self.base}",
                    "-c",
                    f"shared_buffers={self.shared_buffers}",
                    "-c",
                    "max_connections=100",
                ],
                log,
                session=True,  # a Ctrl-C at the terminal is pytest's to handle, not the server's
            )
        self._started(process, self.log_path, READY_SECONDS)

    def _answers(self) -> bool:
        try:
            with psycopg.connect(self.url, connect_timeout=2, autocommit=True) as connection:
                connection.execute("SELECT 1")
        except psycopg.OperationalError:
            return False
        return True

    def stop(self) -> None:
        """A fast shutdown (SIGINT: sessions are ended, the data is kept); killed if it takes over 30 s."""
        if self._process is not None and not server_process.stop(self._process, signal.SIGINT, STOP_SECONDS):
            self._killed()
        self._reap()

    def kill(self) -> None:
        """As if the machine lost power: SIGKILL to the postmaster and every process of it (its backends)."""
        if self._process is not None and self._process.poll() is None:
            server_process.kill_tree(self._process)
            self._killed()
        self._reap()

    def _killed(self) -> None:
        # Every process of it is gone: its lock file names a PID that may be some other process's by the
        # next start, which the postmaster would take for a server still running.
        (self.data_dir / "postmaster.pid").unlink(missing_ok=True)


@contextlib.contextmanager
def fresh_database(admin_url: str, template: str = "template0") -> Iterator[str]:
    """A new database on the server of `admin_url` (a URL of a user that may create databases), a copy of
    `template` (empty: template0); its URL. Dropped at the end, sessions still in it or not."""
    name = f"{DATABASE_PREFIX}{uuid.uuid4().hex}"
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=10) as connection:
        # PostgreSQL 15's WAL_LOG strategy: a migrated template copies in half FILE_COPY's time (no checkpoint).
        connection.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(template))
        )
    parts = urlsplit(admin_url)
    try:
        yield urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=10) as connection:
            connection.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL server for the session (this xdist worker's); a test may stop, kill and start it,
    and should start it again before it ends (`postgres_url` does, should it find it down)."""
    yield from server_process.serving(PostgresServer, ENV_URL)


@pytest.fixture
def own_postgres_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server of the test's own, to stop or kill as it likes; removed at the end."""
    yield from server_process.serving(PostgresServer, ENV_URL)


# Migrated once per server and run (the schema can't change within one): a copy of it skips the migrations.
_migrated_templates: dict[str, str] = {}


def _migrated_template(admin_url: str) -> str:
    """The name of a database on `admin_url`'s server holding this code's migrations and nothing else."""
    if admin_url not in _migrated_templates:
        name = f"{DATABASE_PREFIX}migrated_{uuid.uuid4().hex}"
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=10) as connection:
            connection.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(name)))
        with psycopg.connect(
            urlunsplit(urlsplit(admin_url)._replace(path=f"/{name}")), autocommit=True, connect_timeout=10
        ) as connection:
            apply_migrations(connection)
        _migrated_templates[admin_url] = name
        atexit.register(_drop_template, admin_url, name)
    return _migrated_templates[admin_url]


def _drop_template(admin_url: str, name: str) -> None:
    with contextlib.suppress(psycopg.Error), psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as c:
        c.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture
def migrated_postgres_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """As `postgres_url`, with this code's migrations already applied (a copy of a database migrated once)."""
    external = os.environ.get(ENV_URL)
    if external:
        with fresh_database(external, _migrated_template(external)) as url:
            yield url
        return
    server: PostgresServer = request.getfixturevalue("postgres_server")
    server.start()
    with fresh_database(server.url, _migrated_template(server.url)) as url:
        yield url
        server.start()


@pytest.fixture
def postgres_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A URL to a new, empty database of the test's own (as the superuser), dropped after the test: on
    `PHEBY_TEST_POSTGRES_URL`'s server if that is set, else on `postgres_server`."""
    external = os.environ.get(ENV_URL)
    if external:
        with fresh_database(external) as url:
            yield url
        return
    server: PostgresServer = request.getfixturevalue("postgres_server")
    server.start()  # should an earlier test have left it stopped
    with fresh_database(server.url) as url:
        yield url
        server.start()  # the test may have stopped it: the database is dropped all the same
