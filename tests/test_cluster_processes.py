"""Three `pheby serve` processes on one PostgreSQL and one Redis (each started by the tests), the demo Hermes
in a process of its own as a 0.22-era gateway, clients of one account on every process.

They serve the database together: a run started on one shows on the others (its events, its snapshot),
is stopped from another, and outlives its process's kill -9 (another takes it over within its lease and ends
it once with the agent's whole answer). A process without Redis can't join them, and says so in one line.
"""

import asyncio
import json
import signal
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import psycopg
import pytest

from pheby.db import open_database
from tests.crash_safety import SECRET, ServerProcess, serve_to_the_end
from tests.demo_hermes_process import DemoHermesProcess
from tests.live_server import free_port
from tests.passwords import PASSWORD, fast_accounts
from tests.redis_server import RedisTarget
from tests.server_deployment import opened, started_run, texts, tool_calls_started
from tests.ws_client import PhebyClient

# Three `pheby serve` processes and a Hermes each: one test after another, not beside the rest (two cores).
pytestmark = [pytest.mark.anyio, pytest.mark.live, pytest.mark.xdist_group("cluster-processes")]

LEASE_SECONDS = 3
TICKS = 200  # 10 s of text: still streaming after a kill and a takeover
ANSWER = "".join(f"tick {i} " for i in range(TICKS)).strip()


class Cluster:
    def __init__(self, tmp_path: Path, env: dict[str, str]) -> None:
        self.tmp_path = tmp_path
        self.env = env
        self.servers: list[ServerProcess] = []
        self.clients: list[PhebyClient] = []

    async def start(self) -> ServerProcess:
        index = len(self.servers) + 1
        # One data dir for all (its blobs are the deployment's shared directory).
        server = ServerProcess(self.tmp_path / "data", free_port(), self.tmp_path / f"server-{index}.log", self.env)
        self.servers.append(server)
        await server.wait_up()
        return server

    async def client(self, server: ServerProcess) -> PhebyClient:
        client = await PhebyClient.connect(server.ws_url, SECRET)
        self.clients.append(client)
        return client


@pytest.fixture(params=[pytest.param(("--replay",), id="replay")])
def gateway(request: pytest.FixtureRequest) -> tuple[str, ...]:
    """The demo Hermes's flags: a 0.22-era gateway (numbered events) unless a test asks for others."""
    flags: tuple[str, ...] = request.param
    return flags


@pytest.fixture
async def cluster(
    tmp_path: Path,
    migrated_postgres_url: str,
    redis_url: RedisTarget,
    make_demo_hermes_process: Callable[..., DemoHermesProcess],
    gateway: tuple[str, ...],
) -> AsyncIterator[Cluster]:
    hermes = make_demo_hermes_process("--delta-delay", "0.01", *gateway)
    env = {
        "HERMES_URL": hermes.base_url,
        "HERMES_API_KEY": hermes.api_key,
        "PHEBY_DATABASE_URL": migrated_postgres_url,
        "PHEBY_REDIS_URL": redis_url.url,
        "PHEBY_REDIS_PREFIX": redis_url.prefix,
        "PHEBY_RUN_LEASE_SECONDS": str(LEASE_SECONDS),
    }
    made = Cluster(tmp_path, env)
    try:
        yield made
    finally:
        for client in made.clients:
            await client.close()
        for server in made.servers:
            server.stop()


async def test_three_processes_share_a_run_its_commands_and_its_owners_death(
    cluster: Cluster, gateway: tuple[str, ...]
) -> None:
    first, second, third = [await cluster.start() for _ in range(3)]
    on_first, on_second, on_third = [await cluster.client(server) for server in (first, second, third)]

    # A run started on the first: its text reaches every process's client, a snapshot on the third shows it.
    conversation_id, run_id = await started_run(on_first, f"/demo slow {TICKS}")
    for client in (on_second, on_third):
        await client.wait_for(lambda f: f.get("type") == "message.delta" and "tick 5 " in f["text"], 15)
    snapshot = await opened(on_third, conversation_id)
    assert snapshot["run"] is not None, snapshot
    assert snapshot["run"]["run_id"] == run_id

    # Its owner is killed: another process takes the run over within the lease and 2 s, and the text goes on
    # from there (a 0.19.0 gateway's run taken over is followed by its status: tests/test_run_takeover.py).
    first.process.send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    await asyncio.sleep(0.5)  # what it sent before it died has arrived
    latest = texts(on_second, run_id)[-1]
    if gateway:
        await on_second.wait_for(
            lambda f: f.get("type") == "message.delta" and len(f["text"]) > len(latest), LEASE_SECONDS + 2 + 5
        )
        taken_over_within = time.monotonic() - killed_at
        assert taken_over_within < LEASE_SECONDS + 2, taken_over_within
    for client in (on_second, on_third):
        finished = await client.arrived("run.finished", 40, run_id=run_id)
        assert finished["status"] == "completed"
        assert len(client.seen("run.finished", run_id=run_id)) == 1
        assert [f["text"] for f in client.seen("message.complete", message_id=f"draft-{run_id}")] == [ANSWER]

    # A run started on the second is stopped from the third.
    accepted = await on_second.request(
        "chat.send", "run.accepted", 15, conversation_id=conversation_id, text="/demo slow 400"
    )
    await on_third.wait_for(lambda f: f.get("type") == "message.delta" and "tick 3 " in f["text"], 15)
    await on_third.send("run.cancel", conversation_id=conversation_id, run_id=accepted["run_id"], request_id="stop")
    for client in (on_second, on_third):
        assert (await client.arrived("run.finished", 15, run_id=accepted["run_id"]))["status"] == "cancelled"
    assert on_third.seen("error") == []


async def test_a_process_without_redis_cant_join_processes_with_it(cluster: Cluster) -> None:
    await cluster.start()
    alone = {key: value for key, value in cluster.env.items() if key not in ("PHEBY_REDIS_URL", "PHEBY_REDIS_PREFIX")}
    refused = serve_to_the_end(cluster.tmp_path / "x", {"PHEBY_SECRET": SECRET, **alone})
    assert refused.returncode == 2, refused.stderr
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith("pheby serve: PHEBY_DATABASE_URL: another server process"), refused.stderr
    assert "with PHEBY_REDIS_URL: set the same PHEBY_REDIS_URL here" in last
    await asyncio.sleep(0)


async def test_a_rolling_restart_under_load_loses_no_run_and_no_acknowledged_write(cluster: Cluster) -> None:
    """Each of three processes gets SIGTERM in turn (and a replacement) while runs stream and renames are
    acknowledged; a client whose process stops (1012) reconnects to another, as through a load balancer.
    Afterwards every run ended once with the agent's whole answer, every acknowledged rename holds, and each
    client's view of a conversation equals a fresh snapshot."""
    servers = [await cluster.start() for _ in range(3)]
    conversations: list[tuple[str, str]] = []
    for index, server in enumerate(servers):  # a run started through each process
        client = await cluster.client(server)
        conversations.append(await started_run(client, f"/demo slow {150 + 20 * index}"))
    acknowledged: dict[str, str] = {}
    renames = 0

    async def rename_through(client: PhebyClient) -> None:
        nonlocal renames
        conversation_id = conversations[renames % len(conversations)][0]
        renames += 1
        name = f"name {renames}"
        reply = await client.request(
            "conversation.rename", "conversation.renamed", 10, conversation_id=conversation_id, name=name
        )
        if reply["type"] == "conversation.renamed":
            acknowledged[conversation_id] = name

    for turn in range(3):  # each process in turn: SIGTERM, then its replacement
        stopping = servers[turn]
        live = [server for server in servers if server is not stopping]
        writer = await cluster.client(live[0])
        for _ in range(3):
            await rename_through(writer)
        stopping.process.send_signal(signal.SIGTERM)
        await stopping.reap()
        assert stopping.process.returncode == 0, stopping.log()[-2000:]
        for _ in range(3):
            await rename_through(writer)
        servers[turn] = await cluster.start()

    # Every run ends once, with the agent's whole answer, whoever owned it last.
    for conversation_id, run_id in conversations:
        observer = await cluster.client(servers[0])
        deadline = time.monotonic() + 60
        while (snapshot := await opened(observer, conversation_id))["run"] is not None:
            assert time.monotonic() < deadline, f"run {run_id} never ended"
            await asyncio.sleep(0.5)
        answer = [m["text"] for m in snapshot["messages"] if m["role"] == "assistant"]
        ticks = 150 + 20 * [c for c, _ in conversations].index(conversation_id)
        assert answer == ["".join(f"tick {i} " for i in range(ticks)).strip()], answer
    # Every acknowledged rename holds.
    reader = await cluster.client(servers[2])
    listed = await reader.request("conversation.list", "conversation.snapshot", 10)
    names = {c["conversation_id"]: c["name"] for c in listed["conversations"]}
    for conversation_id, name in acknowledged.items():
        assert names[conversation_id] == name, (names, acknowledged)
    assert renames == 18
    assert len(acknowledged) == len(conversations)
    handed = [line for server in cluster.servers for line in server.log().splitlines() if "took over" in line]
    assert handed, "no run was handed over: the restarts came after the runs"


async def test_an_owner_paused_past_its_lease_is_fenced_off_and_nothing_is_logged_twice(cluster: Cluster) -> None:
    """SIGSTOP a run's owner past its lease; another process takes the run over; SIGCONT: the old owner's
    writes are refused, it lets the run go, and the log holds each of the run's events once, in order."""
    first, second = await cluster.start(), await cluster.start()
    on_first, on_second = await cluster.client(first), await cluster.client(second)
    _, run_id = await started_run(on_first, "/demo busy 300")
    await on_first.wait_for(tool_calls_started(2), 20)
    first.process.send_signal(signal.SIGSTOP)
    try:
        await asyncio.sleep(LEASE_SECONDS + 1)  # past its lease; what it sent before the stop has arrived
        latest = texts(on_second, run_id)[-1]
        # The text goes on while the owner is still stopped: another process took the run over.
        await on_second.wait_for(lambda f: f.get("type") == "message.delta" and len(f["text"]) > len(latest), 2 + 5)
    finally:
        first.process.send_signal(signal.SIGCONT)
    finished = await on_second.arrived("run.finished", 40, run_id=run_id)
    assert finished["status"] == "completed"
    await asyncio.sleep(2.0)  # whatever the old owner would still write

    with psycopg.connect(cluster.env["PHEBY_DATABASE_URL"]) as pg:
        rows = pg.execute("SELECT kind, payload FROM account_events ORDER BY seq").fetchall()
    events = [(kind, json.loads(payload)["event"]) for kind, payload in rows]
    calls = [(e["tool_call_id"], e["status"]) for kind, e in events if kind == "tool.event"]
    assert len(calls) == len(set(calls)), calls  # nothing logged twice
    assert [kind for kind, e in events if e.get("run_id") == run_id].count("run.finished") == 1
    assert [kind for kind, _ in events].count("message.complete") == 1
    assert "letting it go" in first.log() or "lets it go" in first.log()
    assert len(on_second.seen("run.finished", run_id=run_id)) == 1


async def test_a_logout_on_one_process_closes_the_sessions_sockets_on_every_process(cluster: Cluster) -> None:
    """A session ended through one process: its sockets on the others get `unauthorized` and close within the
    revocation sweep's second (and a margin), and the account's other credentials keep theirs."""
    servers = [await cluster.start() for _ in range(3)]
    db = open_database(cluster.env["PHEBY_DATABASE_URL"], cluster.tmp_path / "unused.sqlite3")
    await db.open()
    try:
        accounts = fast_accounts(db)
        alice = await accounts.create("alice", PASSWORD)
        token = (await accounts.issue_token(alice.id, "api", None)).token
    finally:
        await db.close()
    async with httpx.AsyncClient(base_url=servers[0].base_url, timeout=30) as http:
        signed_in = await http.post("/api/auth/login", json={"username": "alice", "password": PASSWORD})
        session = signed_in.json()["token"]
        by_session = [await PhebyClient.connect(server.ws_url, session) for server in servers]
        by_token = [await PhebyClient.connect(server.ws_url, token) for server in servers]
        cluster.clients += [*by_session, *by_token]

        ended = await http.post("/api/auth/logout", headers={"Authorization": f"Bearer {session}"})
        assert ended.status_code == 200, ended.text
        began = time.monotonic()
    for client in by_session:
        error = await client.wait_for(lambda f: f.get("type") == "error", 5)
        assert error["error"]["code"] == "unauthorized", error
        await client.closed(5)
    assert time.monotonic() - began < 3.0  # a sweep a second on each process, and the closes
    for client in by_token:
        assert (await client.request("ping", "pong"))["type"] == "pong"
