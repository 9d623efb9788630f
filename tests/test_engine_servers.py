"""The throwaway PostgreSQL and Redis servers of the engine tests (tests/postgres_server.py,
tests/redis_server.py) are what they claim: a new empty database per test, loopback only, PostgreSQL not
as root, data kept across a stop, nothing left running after a kill, and with the PHEBY_TEST_* variables
set, those servers used and none started."""

import os
import subprocess
import sys
from pathlib import Path

import psutil
import psycopg
import pytest
import redis

from tests.postgres_server import DATABASE_PREFIX, PostgresServer, fresh_database
from tests.redis_server import RUN_PREFIX, RedisServer, RedisTarget, delete_prefix

pytestmark = pytest.mark.live

REPO = Path(__file__).resolve().parent.parent


def user_tables(url: str) -> list[str]:
    with psycopg.connect(url) as connection:
        rows = connection.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()
    return [row[0] for row in rows]


def databases(url: str) -> set[str]:
    with psycopg.connect(url) as connection:
        return {row[0] for row in connection.execute("SELECT datname FROM pg_database").fetchall()}


def listening(pid: int) -> set[tuple[str, int]]:
    """The addresses process `pid` listens on (TCP)."""
    return {
        (connection.laddr.ip, connection.laddr.port)
        for connection in psutil.Process(pid).net_connections(kind="inet")
        if connection.status == psutil.CONN_LISTEN
    }


def uids(pid: int) -> list[int]:
    """Real, effective, saved and filesystem uid of process `pid`."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return [int(field) for field in line.split()[1:]]
    raise AssertionError(f"no Uid line for {pid}")


def gone(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize("run", range(2))
def test_a_database_is_new_and_empty_for_each_test(postgres_url: str, run: int) -> None:
    assert DATABASE_PREFIX in postgres_url
    assert user_tables(postgres_url) == []  # the other run's table is not here
    with psycopg.connect(postgres_url) as connection:
        connection.execute("CREATE TABLE left_behind (run int)")
        connection.execute("INSERT INTO left_behind VALUES (%s)", (run,))


def test_databases_are_separate_and_dropped_at_the_end(postgres_server: PostgresServer, postgres_url: str) -> None:
    with psycopg.connect(postgres_url) as connection:
        connection.execute("CREATE TABLE mine (x int)")
    with fresh_database(postgres_server.url) as other:
        assert other != postgres_url
        assert user_tables(other) == []
        name = other.rsplit("/", 1)[1]
        held = psycopg.connect(other)  # a session still in it does not keep it from being dropped
    try:
        assert name not in databases(postgres_server.url)
    finally:
        held.close()
    assert user_tables(postgres_url) == ["mine"]


def test_postgres_listens_on_loopback_only(postgres_server: PostgresServer) -> None:
    assert listening(postgres_server.pid) == {("127.0.0.1", postgres_server.port)}
    with psycopg.connect(postgres_server.url) as connection:
        assert connection.execute("SHOW listen_addresses").fetchone() == ("127.0.0.1",)


def test_postgres_runs_unprivileged_when_the_tests_are_root(postgres_server: PostgresServer) -> None:
    postmaster = uids(postgres_server.pid)
    if os.geteuid() == 0:
        assert 0 not in postmaster
        assert not (postgres_server.base.stat().st_mode & 0o077)  # its dir is its own, for no one else
    else:
        assert postmaster == [os.geteuid()] * 4


def test_postgres_keeps_its_data_across_a_stop(own_postgres_server: PostgresServer) -> None:
    server = own_postgres_server
    with psycopg.connect(server.url) as connection:
        connection.execute("CREATE TABLE kept (x text)")
        connection.execute("INSERT INTO kept VALUES ('before the stop')")
    pid, port = server.pid, server.port
    held = psycopg.connect(server.url)  # a fast shutdown ends sessions still open
    try:
        server.stop()
        assert gone(pid)
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(server.url, connect_timeout=2).close()
    finally:
        held.close()
    server.start()
    assert server.port == port
    assert server.pid != pid
    with psycopg.connect(server.url) as connection:
        assert connection.execute("SELECT x FROM kept").fetchall() == [("before the stop",)]


def test_killing_postgres_leaves_nothing_running_and_loses_nothing_committed(
    own_postgres_server: PostgresServer,
) -> None:
    server = own_postgres_server
    held = psycopg.connect(server.url, autocommit=True)
    held.execute("CREATE TABLE committed (x int)")
    held.execute("INSERT INTO committed VALUES (1)")
    backend = held.info.backend_pid
    postmaster = server.pid
    workers = [child.pid for child in psutil.Process(postmaster).children(recursive=True)]
    assert backend in workers
    server.kill()
    try:
        assert all(gone(pid) for pid in [postmaster, *workers])
        with pytest.raises(psycopg.OperationalError):
            held.execute("SELECT 1")
    finally:
        held.close()
    server.start()  # crash recovery, on the same port
    with psycopg.connect(server.url) as connection:
        assert connection.execute("SELECT x FROM committed").fetchall() == [(1,)]


def test_redis_round_trip_under_the_test_prefix(redis_url: RedisTarget) -> None:
    assert redis_url.prefix.startswith(RUN_PREFIX)
    with redis.Redis.from_url(redis_url.url) as client:
        assert client.keys(f"{redis_url.prefix}*") == []
        client.set(f"{redis_url.prefix}greeting", "hello")
        assert client.get(f"{redis_url.prefix}greeting") == b"hello"


def test_deleting_a_prefix_deletes_its_keys_only(own_redis_server: RedisServer) -> None:
    with redis.Redis.from_url(own_redis_server.url) as client:
        client.mset({f"mine:{n}": n for n in range(2500)} | {"mine*": 1, "minefield": 1, "other:1": 1})
        assert delete_prefix(own_redis_server.url, "mine:") == 2500
        assert delete_prefix(own_redis_server.url, "mine*") == 1  # a prefix is not a pattern
        assert sorted(client.keys()) == [b"minefield", b"other:1"]


def test_redis_listens_on_loopback_only_and_stops_starts_and_dies(own_redis_server: RedisServer) -> None:
    server = own_redis_server
    assert listening(server.pid) == {("127.0.0.1", server.port)}
    pid, port = server.pid, server.port
    server.stop()
    assert gone(pid)
    with redis.Redis.from_url(server.url, socket_connect_timeout=2) as client, pytest.raises(redis.ConnectionError):
        client.ping()
    server.start()
    assert (server.port, server.pid != pid) == (port, True)
    pid = server.pid
    server.kill()
    assert gone(pid)
    server.start()
    with redis.Redis.from_url(server.url) as client:
        assert client.ping()


INNER = """
import os

import psutil
import psycopg
import redis

def no_servers_of_ours():
    started = [p.name() for p in psutil.Process().children(recursive=True)]
    assert not [name for name in started if "postgres" in name or "redis" in name], started

@pytest.mark.parametrize("run", range(2))
def test_database(postgres_url, run, tmp_path_factory):
    assert postgres_url.startswith(os.environ["PHEBY_TEST_POSTGRES_URL"].rsplit("/", 1)[0] + "/pheby_test_")
    with psycopg.connect(postgres_url) as connection:
        assert connection.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone() == (0,)
        connection.execute("CREATE TABLE t (x int)")
    (tmp_path_factory.getbasetemp().parent / f"db-{run}").write_text(postgres_url.rsplit("/", 1)[1])
    no_servers_of_ours()

def test_keys(redis_url):
    assert redis_url.url == os.environ["PHEBY_TEST_REDIS_URL"]
    with redis.Redis.from_url(redis_url.url) as client:
        client.set(redis_url.prefix + "k", "v")
    no_servers_of_ours()

def test_no_postgres_server_to_stop(postgres_server):
    raise AssertionError("skipped")

def test_no_redis_server_to_stop(own_redis_server):
    raise AssertionError("skipped")
"""


def test_with_the_variables_set_their_servers_are_used_and_none_started(
    own_postgres_server: PostgresServer,
    own_redis_server: RedisServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "test_inner.py").write_text("import pytest\n" + INNER)
    monkeypatch.setenv("PHEBY_TEST_POSTGRES_URL", own_postgres_server.url)
    monkeypatch.setenv("PHEBY_TEST_REDIS_URL", own_redis_server.url)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    base = tmp_path / "base"
    base.mkdir()
    before = databases(own_postgres_server.url)
    ran = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "-c",
            "/dev/null",
            "--rootdir",
            str(tmp_path),
            "--basetemp",
            str(base / "tmp"),
            "-p",
            "tests.postgres_server",
            "-p",
            "tests.redis_server",
            "test_inner.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "3 passed, 2 skipped" in ran.stdout, ran.stdout
    made = {(base / f"db-{run}").read_text() for run in range(2)}
    assert len(made) == 2  # a database for each test
    assert databases(own_postgres_server.url) == before  # each dropped after its test
    with redis.Redis.from_url(own_redis_server.url) as client:
        assert client.dbsize() == 0  # the test's keys deleted after it
