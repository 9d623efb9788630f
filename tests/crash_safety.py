"""Crash safety under a write load: what `bench/crash.py` and `tests/test_crash_safety.py` both run.

`run_crash_rounds` starts `pheby serve` (local disk, SQLite, in a process of its own, on loopback) on a
fresh data dir, drives a write load at it, and kills it with SIGKILL at a seeded random moment; then it
restarts the server on the same data dir, waits for `/healthz` and for the start-up blob sweep, and
checks every write the server acknowledged so far. Round after round, on the one data dir.

The load, concurrently: Hope uploads (`POST /api/attachments`, text and images), Pheby uploads
(`POST /attachments`, any bytes; one of them a slow client trickling a big body, so that a put is
always in flight when the kill comes), artifact PATCH chains (each edit against the revision it last
got back; the chains go on across restarts) and conversations created over the WebSocket. Every body
is generated from the seed: sizes from a few bytes to MiBs, random bytes, random UTF-8 text, sent with
a Content-Length or chunked in random pieces.

A write counts as acknowledged once its 2xx answer (or its `conversation.created` frame) arrived. After
each restart: every acknowledged upload downloads byte-identical (SHA-256), every acknowledged artifact
revision is in its version list with the content that was sent (and the current revision is at least
the last one acknowledged), every acknowledged conversation is listed with its name. An edit whose
answer the kill cut off may or may not have committed; if it did, its content must be the one sent.

Temp files: a blob put streams into a temp file in `<data dir>/blobs/.tmp` (storage/local.py) and the
start-up sweep (scheduler/blob_sweep.py) removes what failed puts left there. The temp files a kill
leaves are listed before the restart; once the restarted server's start-up sweep has run (its log says
so), none of them may remain.

Every process is started here and stopped by its PID; the server gets SIGKILL at each round's kill
and SIGTERM (then SIGKILL) at the end, also when a check fails.
"""

import asyncio
import contextlib
import hashlib
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx
import psycopg

from tests.live_server import free_port
from tests.ws_client import PhebyClient

REPO_ROOT: Final = Path(__file__).resolve().parent.parent
SECRET: Final = "crash-owner-secret-0123456789abcdef"
AUTH: Final = {"Authorization": f"Bearer {SECRET}"}
HERMES_URL: Final = "http://127.0.0.1:9"  # nothing listens there: none of these writes calls Hermes
KiB: Final = 1024
MiB: Final = 1024 * KiB
START_TIMEOUT: Final = 60.0
SWEEP_TIMEOUT: Final = 30.0
REQUEST_TIMEOUT: Final = 30.0
DRAIN_TIMEOUT: Final = 10.0
CHAIN_LENGTH: Final = 40  # revisions before a chain moves on to a new artifact (the server keeps 100)
TEMP_DIR: Final = Path("blobs") / ".tmp"  # storage/local.py's `_TMP_DIR`, under the store's root
SWEEP_DONE: Final = ('Job "sweep_blobs', ("executed successfully", "raised an exception"))  # APScheduler's log
HOPE_TYPES: Final = ("text/plain", "text/markdown", "image/png", "image/jpeg", "image/webp")
PHEBY_TYPES: Final = ("application/octet-stream", "image/gif", "audio/ogg", "application/zip", "text/csv")
_WORD_TEXT: Final = (
    "the quick brown fox jumps over a lazy dog crash safety fsync rename sqlite wal journal "
    "déjà vu naïve façade straße smörgåsbord ünïcödé 東京 北京 日本語 слово ελληνικά עברית 🙂 🚀 ✓ —"
)
WORDS: Final = tuple(_WORD_TEXT.split())


@dataclass(frozen=True)
class CrashConfig:
    """How many rounds, and how big a load: one worker per count below."""

    rounds: int = 15
    seed: int = 0
    hope_uploaders: int = 2
    pheby_uploaders: int = 2
    trickle_uploaders: int = 1  # a slow client: a Pheby upload of 1-4 MiB in 32 KiB pieces, 10 ms apart
    artifact_chains: int = 3
    conversation_creators: int = 1
    hope_max_bytes: int = 1 * MiB
    pheby_max_bytes: int = 4 * MiB
    artifact_max_chars: int = 16 * KiB
    kill_after: tuple[float, float] = (0.5, 2.5)  # seconds of load before the kill, uniformly drawn
    edit_pause: tuple[float, float] = (0.0, 0.03)  # an editor's pause between two edits


@dataclass(frozen=True)
class Stored:
    sha256: str
    size: int


@dataclass
class Chain:
    """One artifact PATCH chain: the artifact it edits, its revision, and an edit whose answer is owed."""

    artifact_id: str | None = None
    revision: int = 0
    content: str = ""
    pending: tuple[int, str] | None = None  # (revision, content) of the edit in flight


@dataclass
class Ledger:
    """What the server acknowledged, with what should be there."""

    hope: dict[str, Stored] = field(default_factory=dict)
    pheby: dict[str, Stored] = field(default_factory=dict)
    artifacts: dict[str, dict[int, str]] = field(default_factory=dict)  # id → revision → content
    conversations: dict[str, str] = field(default_factory=dict)  # id → name
    acknowledged: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)  # non-2xx answers (and errors) before a kill
    unanswered_committed: int = 0  # edits the kill cut off that had committed (content checked)


@dataclass
class CrashResult:
    seed: int
    rounds: int = 0
    lost: list[str] = field(default_factory=list)
    corrupt: list[str] = field(default_factory=list)
    restart_failures: list[str] = field(default_factory=list)
    interrupted_temp_files: set[str] = field(default_factory=set)  # what the kills left in blobs/.tmp
    leftover_temp_files: set[str] = field(default_factory=set)  # ...and a restart's start-up sweep did not remove
    sweep_not_seen: int = 0  # restarts whose start-up sweep did not finish within SWEEP_TIMEOUT
    orphaned_blobs: set[str] = field(default_factory=set)  # blobs without a row (swept once an hour old)
    ledger: Ledger = field(default_factory=Ledger)
    seconds: float = 0.0

    @property
    def acknowledged(self) -> int:
        return sum(self.ledger.acknowledged.values())

    def missed_targets(self) -> list[str]:
        """The targets missed: 0 lost, 0 corrupt, 0 failed restarts, 0 leftover temp files."""
        missed = []
        if self.lost:
            missed.append(f"{len(self.lost)} lost")
        if self.corrupt:
            missed.append(f"{len(self.corrupt)} corrupt")
        if self.restart_failures:
            missed.append(f"{len(self.restart_failures)} restart failures")
        if self.leftover_temp_files:
            missed.append(f"{len(self.leftover_temp_files)} leftover temp files")
        return missed

    def report(self) -> list[str]:
        ledger = self.ledger
        kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(ledger.acknowledged.items()))
        lines = [
            f"seed {self.seed}: {self.rounds} rounds (SIGKILL, restart, check) in {self.seconds:.1f} s",
            f"acknowledged writes: {self.acknowledged} ({kinds})",
            f"  uploads acknowledged: {_mib(ledger.hope)} MiB Hope, {_mib(ledger.pheby)} MiB Pheby;"
            f" edits that committed without their answer: {ledger.unanswered_committed}",
            f"lost: {len(self.lost)}",
            f"corrupt: {len(self.corrupt)}",
            f"restart failures: {len(self.restart_failures)}",
            f"leftover temp files: {len(self.leftover_temp_files)}"
            f" (the kills left {len(self.interrupted_temp_files)} in blobs/.tmp;"
            f" those still there once a restart's start-up sweep had run)",
            f"  info: orphaned blobs (stored, no row; the sweep takes them once an hour old):"
            f" {len(self.orphaned_blobs)}",
        ]
        if ledger.refused:
            refused = ", ".join(f"{what} {n}" for what, n in sorted(ledger.refused.items()))
            lines.append(f"  info: refusals and errors before a kill (none is counted as acknowledged): {refused}")
        if self.sweep_not_seen:
            lines.append(f"  start-up sweeps not seen to finish within {SWEEP_TIMEOUT:g} s: {self.sweep_not_seen}")
        for title, items in (
            ("lost", self.lost),
            ("corrupt", self.corrupt),
            ("restart failure", self.restart_failures),
        ):
            lines.extend(f"  {title}: {item}" for item in items[:10])
            lines.extend([f"  ... and {len(items) - 10} more"] if len(items) > 10 else [])
        leftovers = sorted(self.leftover_temp_files)
        lines.extend(f"  leftover: blobs/.tmp/{name}" for name in leftovers[:5])
        lines.extend([f"  ... and {len(leftovers) - 5} more"] if len(leftovers) > 5 else [])
        missed = self.missed_targets()
        lines.append(
            "targets (0 lost, 0 corrupt, 0 failed restarts, 0 leftovers): "
            + ("met" if not missed else "NOT met: " + ", ".join(missed))
        )
        return lines


def _mib(stored: dict[str, Stored]) -> str:
    return f"{sum(s.size for s in stored.values()) / MiB:.1f}"


# --- the server, in a process of its own ---------------------------------------------------------------------


def serve_to_the_end(data_dir: Path, env: Mapping[str, str]) -> "subprocess.CompletedProcess[str]":
    """`pheby serve` on a free port with `env` over a clean environment (no PHEBY_/HERMES_/AWS_ of this
    one), run to its exit (a refusal at start), its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "pheby_main", "serve", "--port", str(free_port()), "--data-dir", str(data_dir)],
        cwd=REPO_ROOT,
        env={**{k: v for k, v in os.environ.items() if not k.startswith(("PHEBY_", "HERMES_", "AWS_"))}, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


class ServerProcess:
    """`pheby serve` on `data_dir` (local disk, SQLite) on a loopback port; its output in `log_path`; `env_extra`
    (a Hermes to talk to, say) over its environment."""

    def __init__(self, data_dir: Path, port: int, log_path: Path, env_extra: Mapping[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}"
        self.ws_url = f"ws://127.0.0.1:{port}/ws"
        self.log_path = log_path
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PHEBY_", "HERMES_", "AWS_"))}
        env.update(
            {
                "PHEBY_SECRET": SECRET,
                "PHEBY_STORAGE": "local",
                "PHEBY_JOB_POLLING": "false",
                "HERMES_URL": HERMES_URL,
                # Room for every round's uploads: a quota's 413 is not what this is about.
                "PHEBY_HOPE_ACCOUNT_QUOTA_BYTES": str(4096 * MiB),
                "PHEBY_HOPE_GLOBAL_QUOTA_BYTES": str(4096 * MiB),
                "PHEBY_ATTACHMENT_ACCOUNT_QUOTA_BYTES": str(16384 * MiB),
                "PHEBY_ARTIFACT_ACCOUNT_BYTES": str(1024 * MiB),
                "PHEBY_ARTIFACT_GLOBAL_BYTES": str(1024 * MiB),
                **(env_extra or {}),
            }
        )
        command = [sys.executable, "-m", "pheby_main", "serve", "--host", "127.0.0.1", "--port", str(port)]
        command += ["--data-dir", str(data_dir)]
        with log_path.open("wb") as log:
            self.process = subprocess.Popen(
                command, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")
        return ""

    async def wait_up(self, timeout: float = START_TIMEOUT) -> None:
        """Poll `/healthz` until it answers 200; raise with the log's tail if the server exits or never does."""
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(base_url=self.base_url, timeout=2) as http:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(f"exited with {self.process.returncode}: {self.log()[-2000:]}")
                with contextlib.suppress(httpx.TransportError):
                    if (await http.get("/healthz")).status_code == 200:
                        return
                await asyncio.sleep(0.05)
        raise RuntimeError(f"no /healthz within {timeout:g} s: {self.log()[-2000:]}")

    async def wait_start_up_sweep(self, timeout: float = SWEEP_TIMEOUT) -> bool:
        """Wait until the log says the start-up blob sweep ran (APScheduler logs each job's end)."""
        job, ends = SWEEP_DONE
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(job in line and any(end in line for end in ends) for line in self.log().splitlines()):
                return True
            if self.process.poll() is not None:
                return False
            await asyncio.sleep(0.05)
        return False

    def kill(self) -> None:
        """SIGKILL, by PID (`reap` waits for it)."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)

    async def reap(self) -> None:
        await asyncio.to_thread(self.process.wait, 30)

    def stop(self) -> None:
        """SIGTERM by PID, wait, SIGKILL if it does not exit."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=20)


# --- generated content ---------------------------------------------------------------------------------------


def _size(rng: random.Random, largest: int, smallest: int = 1) -> int:
    """Log-uniform between `smallest` and `largest`, now and then right at a 1 MiB boundary (the store's batch)."""
    if rng.random() < 0.08 and largest >= MiB + 1:
        return MiB + rng.choice((-1, 0, 1))
    return max(smallest, min(largest, round(2 ** rng.uniform(0, largest.bit_length() - 1))))


def _text(rng: random.Random, size: int) -> str:
    """About `size` bytes of UTF-8: words, punctuation, line breaks, multi-byte characters."""
    parts: list[str] = []
    length = 0
    while length < size:
        piece = rng.choices(WORDS, k=64)
        for index in range(0, 64, rng.randint(5, 16)):
            piece[index] += rng.choice((".\n", ",", "\n\n", "!", ";"))
        chunk = " ".join(piece) + " "
        parts.append(chunk)
        length += len(chunk.encode())
    text = "".join(parts).encode()[:size].decode(errors="ignore")
    return text or "x"


def hope_body(rng: random.Random, largest: int) -> tuple[bytes, str, str]:
    """A Hope upload: its bytes, type and filename (bytes the server's signature check takes)."""
    mime = rng.choice(HOPE_TYPES)
    size = _size(rng, largest, smallest=16)
    if mime.startswith("text/"):
        data = _text(rng, size).encode()
        ext = "md" if mime == "text/markdown" else "txt"
    else:
        signatures = {
            "image/png": b"\x89PNG\r\n\x1a\n",
            "image/jpeg": b"\xff\xd8\xff",
            "image/webp": b"RIFF" + (size - 8).to_bytes(4, "little") + b"WEBP",
        }
        head = signatures[mime]
        data = head + rng.randbytes(size - len(head))
        ext = mime.split("/")[1]
    return data, mime, f"{rng.choice(WORDS)} {rng.randrange(10**6)}.{ext}"


def pheby_body(rng: random.Random, largest: int) -> tuple[bytes, str, str]:
    mime = rng.choice(PHEBY_TYPES)
    return rng.randbytes(_size(rng, largest)), mime, f"{rng.choice(WORDS)}-{rng.randrange(10**6)}.bin"


def _pieces(rng: random.Random, data: bytes) -> list[bytes]:
    """`data` in random pieces (1 B to 256 KiB), drawn before sending so the draws don't depend on timing."""
    pieces = []
    offset = 0
    while offset < len(data):
        step = max(1, round(2 ** rng.uniform(0, 18)))
        pieces.append(data[offset : offset + step])
        offset += step
    return pieces


async def _stream(pieces: list[bytes], pause: float = 0.0) -> AsyncIterator[bytes]:
    for piece in pieces:
        yield piece
        await asyncio.sleep(pause)


def _body(rng: random.Random, data: bytes) -> bytes | AsyncIterator[bytes]:
    """Half the time with a Content-Length, half the time chunked."""
    return data if rng.random() < 0.5 else _stream(_pieces(rng, data))


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- the load ------------------------------------------------------------------------------------------------


class Load:
    """The round's writers; each stops once `killed` is set and its request has failed or ended."""

    def __init__(
        self,
        config: CrashConfig,
        ledger: Ledger,
        chains: list[Chain],
        server: ServerProcess,
        conversation_id: str,
        round_: int,
    ) -> None:
        self.config = config
        self.ledger = ledger
        self.chains = chains
        self.server = server
        self.conversation_id = conversation_id
        self.round = round_
        self.killed = asyncio.Event()

    def rng(self, worker: str) -> random.Random:
        return random.Random(f"{self.config.seed}/{self.round}/{worker}")

    def workers(self, http: httpx.AsyncClient) -> list[Coroutine[Any, Any, None]]:
        c = self.config
        return [
            *(self.hope_uploader(http, self.rng(f"hope{n}")) for n in range(c.hope_uploaders)),
            *(self.pheby_uploader(http, self.rng(f"pheby{n}"), trickle=False) for n in range(c.pheby_uploaders)),
            *(self.pheby_uploader(http, self.rng(f"trickle{n}"), trickle=True) for n in range(c.trickle_uploaders)),
            *(self.editor(http, self.rng(f"chain{n}"), chain) for n, chain in enumerate(self.chains)),
            *(self.conversation_creator(self.rng(f"conversations{n}"), n) for n in range(c.conversation_creators)),
        ]

    async def _keep_going(self, what: str, exc: BaseException | None = None, status: int | str | None = None) -> bool:
        """After a failed or refused request: go on unless the server was killed (then the failure is its)."""
        if self.killed.is_set():
            return False
        self.ledger.refused[f"{what} {status or type(exc).__name__}"] += 1
        await asyncio.sleep(0.05)
        return True

    async def hope_uploader(self, http: httpx.AsyncClient, rng: random.Random) -> None:
        while not self.killed.is_set():
            data, mime, filename = hope_body(rng, self.config.hope_max_bytes)
            headers = {  # the filename as its UTF-8 bytes, as clients send it
                b"authorization": AUTH["Authorization"].encode(),
                b"content-type": mime.encode(),
                b"x-filename": filename.encode(),
            }
            try:
                response = await http.post("/api/attachments", content=_body(rng, data), headers=headers)
            except httpx.HTTPError as exc:
                if not await self._keep_going("hope upload", exc):
                    return
                continue
            if response.status_code == 201:
                self.ledger.hope[response.json()["attachment"]["id"]] = Stored(sha256(data), len(data))
                self.ledger.acknowledged["hope upload"] += 1
            elif not await self._keep_going("hope upload", status=response.status_code):
                return

    async def pheby_uploader(self, http: httpx.AsyncClient, rng: random.Random, *, trickle: bool) -> None:
        while not self.killed.is_set():
            if trickle:  # a slow client: its put is in flight for seconds
                data = rng.randbytes(rng.randint(1 * MiB, 4 * MiB))
                mime = "application/octet-stream"
                filename = f"slow-{rng.randrange(10**6)}.bin"
                body: bytes | AsyncIterator[bytes] = _stream(
                    [data[i : i + 32 * KiB] for i in range(0, len(data), 32 * KiB)], 0.01
                )
            else:
                data, mime, filename = pheby_body(rng, self.config.pheby_max_bytes)
                body = _body(rng, data)
            params = {"conversation_id": self.conversation_id, "filename": filename}
            try:
                response = await http.post(
                    "/attachments", params=params, content=body, headers={**AUTH, "Content-Type": mime}
                )
            except httpx.HTTPError as exc:
                if not await self._keep_going("pheby upload", exc):
                    return
                continue
            if response.status_code == 201:
                self.ledger.pheby[response.json()["attachment"]["attachment_id"]] = Stored(sha256(data), len(data))
                self.ledger.acknowledged["pheby upload"] += 1
            elif not await self._keep_going("pheby upload", status=response.status_code):
                return

    async def editor(self, http: httpx.AsyncClient, rng: random.Random, chain: Chain) -> None:
        while not self.killed.is_set():
            content = _text(rng, rng.randint(1, self.config.artifact_max_chars))
            if chain.artifact_id is None or chain.revision >= CHAIN_LENGTH:
                kind = rng.choice(("text", "markdown", "code"))
                body = {"title": f"crash {self.round} {rng.choice(WORDS)}", "kind": kind, "content": content}
                try:
                    response = await http.post("/api/artifacts", json=body, headers=AUTH)
                except httpx.HTTPError as exc:
                    if not await self._keep_going("artifact create", exc):
                        return
                    continue
                if response.status_code != 201:
                    if not await self._keep_going("artifact create", status=response.status_code):
                        return
                    continue
                artifact = response.json()["artifact"]
                chain.artifact_id, chain.revision, chain.content, chain.pending = artifact["id"], 1, content, None
                self.ledger.artifacts[artifact["id"]] = {1: content}
                self.ledger.acknowledged["artifact create"] += 1
                continue
            edit: dict[str, Any] = {"revision": chain.revision}
            if rng.random() < 0.15:  # a rename: the new version repeats the content
                edit["title"] = f"renamed {rng.choice(WORDS)} {rng.randrange(1000)}"
                content = chain.content
            else:
                edit["content"] = content
            chain.pending = (chain.revision + 1, content)
            try:
                response = await http.patch(f"/api/artifacts/{chain.artifact_id}", json=edit, headers=AUTH)
            except httpx.HTTPError as exc:
                if not await self._keep_going("artifact edit", exc):
                    return  # the edit's fate is settled after the restart (`Verifier.settle`)
                continue
            if response.status_code != 200:
                chain.pending = None  # refused: nothing was written
                if not await self._keep_going("artifact edit", status=response.status_code):
                    return
                continue
            got = response.json()["artifact"]
            chain.pending = None
            if got["revision"] != chain.revision + 1 or got["content"] != content:
                self.ledger.refused[f"artifact edit answered revision {got['revision']}, not {chain.revision + 1}"] += 1
            chain.revision, chain.content = chain.revision + 1, content
            self.ledger.artifacts[chain.artifact_id][chain.revision] = content
            self.ledger.acknowledged["artifact edit"] += 1
            await asyncio.sleep(rng.uniform(*self.config.edit_pause))

    async def conversation_creator(self, rng: random.Random, worker: int) -> None:
        serial = 0
        while not self.killed.is_set():
            try:
                client = await PhebyClient.connect(self.server.ws_url, SECRET)
            except Exception as exc:
                if not await self._keep_going("websocket", exc):
                    return
                continue
            try:
                while not self.killed.is_set():
                    serial += 1
                    name = f"crash {self.round}.{worker}.{serial} {rng.randbytes(6).hex()}"
                    reply = await client.request("conversation.create", "conversation.created", name=name)
                    if reply["type"] != "conversation.created":
                        if not await self._keep_going("conversation", status=reply.get("error", {}).get("code")):
                            return
                        continue
                    self.ledger.conversations[reply["conversation_id"]] = name
                    self.ledger.acknowledged["conversation"] += 1
                    await asyncio.sleep(rng.uniform(0.0, 0.02))
            except Exception as exc:  # the socket closed under it, most likely by the kill
                if not await self._keep_going("conversation", exc):
                    return
            finally:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(client.ws.close(), 2)


# --- the checks after a restart ------------------------------------------------------------------------------


class Verifier:
    """Checks the ledger against the restarted server; adds what it finds to the result."""

    def __init__(self, result: CrashResult, http: httpx.AsyncClient, round_: int) -> None:
        self.result = result
        self.ledger = result.ledger
        self.http = http
        self.round = round_
        self._limit = asyncio.Semaphore(8)

    def lost(self, what: str) -> None:
        self.result.lost.append(f"round {self.round}: {what}")

    def corrupt(self, what: str) -> None:
        self.result.corrupt.append(f"round {self.round}: {what}")

    async def get(self, path: str, **params: Any) -> httpx.Response:
        async with self._limit:
            return await self.http.get(path, params=params or None, headers=AUTH)

    async def check_upload(self, path: str, what: str, expected: Stored) -> None:
        response = await self.get(path)
        if response.status_code != 200:
            self.lost(f"{what}: {response.status_code} {response.text[:200]}")
        elif sha256(response.content) != expected.sha256:
            self.corrupt(f"{what}: SHA-256 differs ({len(response.content)} bytes read, {expected.size} acknowledged)")

    async def check_artifact(self, artifact_id: str, revisions: dict[int, str]) -> None:
        what = f"artifact {artifact_id}"
        versions = await self.get(f"/api/artifacts/{artifact_id}/versions")
        if versions.status_code != 200:
            self.lost(f"{what}: versions {versions.status_code} {versions.text[:200]}")
            return
        listed = {v["revision"] for v in versions.json()["versions"]}
        for revision in sorted(set(revisions) - listed):
            self.lost(f"{what} revision {revision}: not in the version list")
        current = await self.get(f"/api/artifacts/{artifact_id}")
        if current.status_code != 200:
            self.lost(f"{what}: {current.status_code} {current.text[:200]}")
        elif current.json()["artifact"]["revision"] < max(revisions):
            self.lost(f"{what}: at revision {current.json()['artifact']['revision']}, {max(revisions)} acknowledged")

        async def one(revision: int, content: str) -> None:
            response = await self.get(f"/api/artifacts/{artifact_id}", revision=revision)
            if response.status_code != 200:
                self.lost(f"{what} revision {revision}: {response.status_code}")
            elif response.json()["artifact"]["content"] != content:
                self.corrupt(f"{what} revision {revision}: content differs from what was acknowledged")

        await asyncio.gather(*(one(r, c) for r, c in revisions.items() if r in listed))

    async def check_conversations(self, ws_url: str) -> None:
        async with await PhebyClient.connect(ws_url, SECRET) as client:
            snapshot = await client.request("conversation.list", "conversation.snapshot", timeout=REQUEST_TIMEOUT)
        if snapshot["type"] != "conversation.snapshot":
            self.lost(f"conversation.list answered {snapshot}")
            return
        listed = {c["conversation_id"]: c["name"] for c in snapshot["conversations"]}
        for conversation_id, name in self.ledger.conversations.items():
            if conversation_id not in listed:
                self.lost(f"conversation {conversation_id} ({name!r}): not listed")
            elif listed[conversation_id] != name:
                self.corrupt(f"conversation {conversation_id}: named {listed[conversation_id]!r}, not {name!r}")

    async def settle(self, chain: Chain) -> None:
        """An edit the kill cut off: committed (its content must be the one sent) or not; the chain goes on."""
        if chain.pending is None or chain.artifact_id is None:
            return
        revision, content = chain.pending
        chain.pending = None
        response = await self.get(f"/api/artifacts/{chain.artifact_id}")
        if response.status_code != 200:
            return  # counted by check_artifact
        artifact = response.json()["artifact"]
        if artifact["revision"] == revision:
            if artifact["content"] != content:
                self.corrupt(f"artifact {chain.artifact_id} revision {revision}: unanswered edit, other content")
            self.ledger.artifacts[chain.artifact_id][revision] = artifact["content"]
            self.ledger.unanswered_committed += 1
            chain.revision, chain.content = revision, artifact["content"]
        elif artifact["revision"] > revision:
            self.corrupt(f"artifact {chain.artifact_id}: at revision {artifact['revision']}, past the edit sent")

    async def run(self, ws_url: str, chains: list[Chain]) -> None:
        checks = [
            *(self.check_upload(f"/api/attachments/{i}/content", f"hope {i}", s) for i, s in self.ledger.hope.items()),
            *(self.check_upload(f"/attachments/{i}", f"pheby {i}", s) for i, s in self.ledger.pheby.items()),
            *(self.check_artifact(i, dict(r)) for i, r in self.ledger.artifacts.items()),
            self.check_conversations(ws_url),
        ]
        await asyncio.gather(*checks)
        for chain in chains:
            await self.settle(chain)


def temp_files(data_dir: Path) -> set[str]:
    with contextlib.suppress(FileNotFoundError):
        return {entry.name for entry in os.scandir(data_dir / TEMP_DIR) if not entry.is_dir(follow_symlinks=False)}
    return set()


def orphaned_blobs(data_dir: Path, database_url: str = "") -> set[str]:
    """Blob keys under `attachments/` that no row names (read from the database, read-only)."""
    root = data_dir / "blobs"
    keys = {str(p.relative_to(root)) for p in (root / "attachments").rglob("*") if p.is_file()}
    if database_url:
        with psycopg.connect(database_url, connect_timeout=10) as pg:
            return keys - {row[0] for row in pg.execute("SELECT blob_key FROM attachments")}
    connection = sqlite3.connect(f"file:{data_dir / 'pheby.sqlite3'}?mode=ro", uri=True, timeout=10)
    try:
        rows = {row[0] for row in connection.execute("SELECT blob_key FROM attachments")}
    finally:
        connection.close()
    return keys - rows


# --- the rounds ----------------------------------------------------------------------------------------------


def _client(server: ServerProcess) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=32, max_keepalive_connections=32)
    return httpx.AsyncClient(base_url=server.base_url, timeout=REQUEST_TIMEOUT, limits=limits)


async def _create_conversation(server: ServerProcess, ledger: Ledger) -> str:
    """The conversation the Pheby uploads go to (acknowledged, and checked, like the others)."""
    async with await PhebyClient.connect(server.ws_url, SECRET) as client:
        name = "crash uploads"
        reply = await client.request("conversation.create", "conversation.created", name=name)
    if reply["type"] != "conversation.created":
        raise RuntimeError(f"conversation.create answered {reply}")
    conversation_id: str = reply["conversation_id"]
    ledger.conversations[conversation_id] = name
    ledger.acknowledged["conversation"] += 1
    return conversation_id


async def _load_then_kill(load: Load, kill_after: float) -> None:
    """Run the load for `kill_after` seconds, SIGKILL the server, and let the writers see it (bounded)."""
    async with _client(load.server) as http:
        tasks = [asyncio.create_task(worker) for worker in load.workers(http)]
        try:
            await asyncio.sleep(kill_after)
            load.killed.set()  # no writer runs between these two lines: every failure from now on is the kill's
            load.server.kill()
            await load.server.reap()
            await asyncio.wait(tasks, timeout=DRAIN_TIMEOUT)
        finally:
            for task in tasks:
                task.cancel()
            outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    for outcome in outcomes:  # a writer's own bug, not the server's failure: raise it
        if isinstance(outcome, Exception):
            raise outcome


async def run_crash_rounds(
    config: CrashConfig, work_dir: Path, progress: Callable[[str], None] = lambda _: None, database_url: str = ""
) -> CrashResult:
    """Run `config.rounds` rounds of load, SIGKILL, restart and checks on one data dir under `work_dir` (the
    metadata in the PostgreSQL database `database_url` names, if given).

    Every server process started is stopped (by PID) before this returns or raises."""
    started = time.monotonic()
    result = CrashResult(seed=config.seed)
    ledger = result.ledger
    rng = random.Random(config.seed)
    data_dir = work_dir / "data"
    chains = [Chain() for _ in range(config.artifact_chains)]
    servers: list[ServerProcess] = []

    def start(port: int) -> ServerProcess:
        env = {"PHEBY_DATABASE_URL": database_url} if database_url else None
        server = ServerProcess(data_dir, port, work_dir / f"server-{len(servers) + 1}.log", env)
        servers.append(server)
        return server

    async def restart(port: int, round_: int) -> ServerProcess | None:
        for attempt, on_port in enumerate((port, free_port()), 1):  # a second try on another port
            server = start(on_port)
            try:
                await server.wait_up()
            except RuntimeError as exc:
                result.restart_failures.append(f"round {round_}, attempt {attempt}: {exc}")
                server.stop()
                continue
            return server
        return None

    try:
        server = start(free_port())
        await server.wait_up()  # the first start is no restart: if it fails, there is nothing to test
        conversation_id = await _create_conversation(server, ledger)
        for round_ in range(1, config.rounds + 1):
            kill_after = rng.uniform(*config.kill_after)
            await _load_then_kill(Load(config, ledger, chains, server, conversation_id, round_), kill_after)
            interrupted = temp_files(data_dir)
            result.interrupted_temp_files |= interrupted
            restart_began = time.monotonic()
            restarted = await restart(server.port, round_)
            if restarted is None:
                break
            server = restarted
            result.rounds = round_
            up_seconds = time.monotonic() - restart_began
            if not await server.wait_start_up_sweep():
                result.sweep_not_seen += 1
            result.leftover_temp_files |= interrupted & temp_files(data_dir)
            check_began = time.monotonic()
            async with _client(server) as http:
                await Verifier(result, http, round_).run(server.ws_url, chains)
            result.orphaned_blobs |= orphaned_blobs(data_dir, database_url)
            progress(
                f"round {round_}: killed after {kill_after:.2f} s of load, {len(interrupted)} temp files left;"
                f" up again in {up_seconds:.1f} s; {result.acknowledged} acknowledged writes checked in"
                f" {time.monotonic() - check_began:.1f} s; lost {len(result.lost)}, corrupt {len(result.corrupt)},"
                f" leftover temp files {len(result.leftover_temp_files)}"
            )
    finally:
        for each in servers:
            each.stop()
    result.seconds = time.monotonic() - started
    return result
