"""A deployment for restart tests: a Hermes gateway (the demo Hermes in its own process, or a real one) and the
`pheby serve` processes started one after another on one data dir, each stopped by its PID at the end.

`Deployment` starts, signals and restarts the server and opens clients; `started_run`, `opened` and `texts`
are the client steps those tests share. `tests/test_run_handover.py` and
`tests/test_run_handover_real_hermes.py` use it.
"""

import asyncio
import contextlib
import signal
import sqlite3
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final, Generic, Protocol, TypeVar

import httpx

from tests.crash_safety import SECRET, ServerProcess
from tests.live_server import free_port
from tests.ws_client import Frame, PhebyClient

EXIT_SECONDS: Final = 10.0
METRICS_TOKEN: Final = "handover-metrics-token-0123456789"


class Gateway(Protocol):
    """What a deployment needs of its Hermes."""

    @property
    def base_url(self) -> str: ...

    @property
    def api_key(self) -> str: ...


G = TypeVar("G", bound=Gateway)


class Deployment(Generic[G]):
    def __init__(
        self, tmp_path: Path, hermes: G, port: int | None = None, env: Mapping[str, str] | None = None
    ) -> None:
        self.tmp_path = tmp_path
        self.hermes = hermes
        self.data_dir = tmp_path / "data"
        self.port = port
        self.env = dict(env or {})  # more settings for every server process
        self.servers: list[ServerProcess] = []
        self.clients: list[PhebyClient] = []

    @property
    def server(self) -> ServerProcess:
        return self.servers[-1]

    async def start(self) -> ServerProcess:
        server = self.spawn()
        await server.wait_up()
        return server

    def spawn(self) -> ServerProcess:
        """Start a server process, not waiting for it to be up."""
        env = {"HERMES_URL": self.hermes.base_url, "HERMES_API_KEY": self.hermes.api_key}
        env["PHEBY_METRICS_TOKEN"] = METRICS_TOKEN
        env.update(self.env)
        log = self.tmp_path / f"server-{len(self.servers) + 1}.log"
        server = ServerProcess(self.data_dir, self.port or free_port(), log, env_extra=env)
        self.servers.append(server)
        return server

    async def client(self) -> PhebyClient:
        client = await PhebyClient.connect(self.server.ws_url, SECRET)
        self.clients.append(client)
        return client

    async def stop(self, signum: signal.Signals) -> float:
        """Signal the server by its PID; the seconds until it exited (bounded: `EXIT_SECONDS`)."""
        server = self.server
        began = time.monotonic()
        server.process.send_signal(signum)
        await asyncio.to_thread(server.process.wait, EXIT_SECONDS)
        return time.monotonic() - began

    async def stop_mid_run(self, signum: signal.Signals, client: PhebyClient) -> None:
        """Stop the server by `signum` while `client` watches a run: it exits in time (0 for a graceful stop,
        which closes the socket with 1012, service restart), and ends no run on the way."""
        exited_after = await self.stop(signum)
        assert exited_after < EXIT_SECONDS
        assert self.server.process.returncode == (0 if signum == signal.SIGTERM else -signal.SIGKILL)
        if signum == signal.SIGTERM:
            assert await client.closed() == 1012
        else:
            await client.closed()
        assert not client.seen("run.finished")  # the stop ended nothing

    async def metric(self, name: str) -> float:
        """A sample of the server's `/metrics` (0 when it has none yet)."""
        async with httpx.AsyncClient(base_url=self.server.base_url, timeout=5) as http:
            scraped = await http.get("/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
        assert scraped.status_code == 200, scraped.text
        for line in scraped.text.splitlines():
            sample, _, value = line.rpartition(" ")
            if sample == name:
                return float(value)
        return 0.0

    def journaled(self, run_id: str) -> str | None:
        """The Hermes run id the journal keeps for `run_id`, None once it is gone."""
        with contextlib.closing(sqlite3.connect(self.data_dir / "pheby.sqlite3")) as conn:
            row = conn.execute("SELECT hermes_run_id FROM active_runs WHERE run_id = ?", (run_id,)).fetchone()
        return None if row is None else str(row[0])

    def journaled_runs(self) -> int:
        with contextlib.closing(sqlite3.connect(self.data_dir / "pheby.sqlite3")) as conn:
            count: int = conn.execute("SELECT count(*) FROM active_runs").fetchone()[0]
        return count

    async def close(self) -> None:
        for client in self.clients:
            if client.ws.close_code is None:
                with contextlib.suppress(Exception):
                    await client.close()
        for server in self.servers:
            server.stop()


async def started_run(client: PhebyClient, text: str) -> tuple[str, str]:
    """A new conversation with a run of `text` under way: (conversation id, run id)."""
    created = await client.request("conversation.create", "conversation.created", name="Long job")
    conversation_id = created["conversation_id"]
    accepted = await client.request("chat.send", "run.accepted", timeout=30, conversation_id=conversation_id, text=text)
    assert accepted["type"] == "run.accepted", accepted
    return conversation_id, accepted["run_id"]


async def opened(client: PhebyClient, conversation_id: str) -> dict[str, Any]:
    snapshot = await client.request("conversation.open", "conversation.history", conversation_id=conversation_id)
    assert snapshot["type"] == "conversation.history", snapshot
    return snapshot


def texts(client: PhebyClient, run_id: str, after: Frame | None = None) -> list[str]:
    """The cumulative `message.delta` texts the client got of the run's answer; with `after`, only those that
    came after that frame (a snapshot: deltas queued before its reply are older than it)."""
    frames = client.frames
    if after is not None:
        frames = frames[next(i for i, f in enumerate(frames) if f is after) + 1 :]
    deltas = (f for f in frames if f.get("type") == "message.delta")
    return [f["text"] for f in deltas if f.get("message_id") == f"draft-{run_id}"]


def tool_calls_started(count: int) -> Callable[[Frame], bool]:
    """A `wait_for` match for the frame that starts the `count`th distinct tool call."""
    started: set[str] = set()

    def match(frame: Frame) -> bool:
        if frame.get("type") == "tool.event" and frame.get("status") == "running":
            started.add(frame["tool_call_id"])
        return len(started) == count

    return match
