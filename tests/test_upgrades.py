"""Upgrades: a data dir left at any earlier schema level comes up on this code with its data, and one a newer
server migrated is refused untouched.

The data dirs are built from SQL by `tests/upgrade_fixtures.py` (migrations 1..N, representative rows of
every table level N has, the attachments' bytes in the local blob store). For every level N:

- in the database: `Database.open` applies N+1..current, and every row is still there with every value
  it had, the schema is the one a new install gets, and foreign keys and integrity check clean;
- through the API (`live`): a real server on the upgraded data dir reads it all back: password login,
  the stored tokens and sessions (live ones work, expired, revoked and a disabled account's don't), the
  owner secret of the data dir, the conversations over the WebSocket with their YOLO, own model and
  effort, logged history and attachments, the attachments' bytes, Hope files, artifacts and their
  versions, the change feed, who owns which scheduled task, push subscriptions, the accounts' own Hermes
  settings (`pheby account list`); and it keeps working: an approved pattern answers `/demo approve`
  without asking, an artifact takes its next version.

Level current is in the list too, as the restart it is today (nothing to migrate): it covers the newest
rows (push subscriptions), and becomes an upgrade like the others once a migration is added.

A data dir whose `schema_migrations` holds a version above this code's newest is refused by
`Database.open` (`SchemaTooNew`), by `pheby serve` and `local_dev.py` (one line, exit 2, before the start-up
checks) and by the account commands, and not one byte of it changes.
"""

import asyncio
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from demo_hermes import DemoHermesServer
from demo_hermes.newer import NEWER_FEATURES
from pheby.cli import main as pheby_main
from pheby.db import SchemaTooNew, SqliteDatabase, apply_migrations, check_schema_version
from pheby.search.index import SearchIndex
from pheby.settings import Settings, load_settings
from tests import upgrade_fixtures as fx
from tests.files import PNG_1PX
from tests.live_server import LiveServer, free_port, hermes_settings
from tests.ws_client import PhebyClient

ROOT = Path(__file__).resolve().parent.parent
LEVELS = [pytest.param(level, id=f"from-{level}") for level in fx.VERSIONS]
NEWER = fx.CURRENT + 2
REFUSAL = (
    f"the data dir's schema is version {NEWER}; this server knows up to {fx.CURRENT}: "
    "upgrade the server (or restore a backup made for this version)"
)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# --- in the database ----------------------------------------------------------------------------


def _rows_of(conn: sqlite3.Connection, columns: dict[str, tuple[str, ...]]) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the given tables, over the given columns, in a stable order."""
    return {
        table: sorted(conn.execute(f"SELECT {', '.join(names)} FROM {table}").fetchall(), key=repr)
        for table, names in columns.items()
    }


def _schema(conn: sqlite3.Connection) -> list[tuple[str, str, str]]:
    query = "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name"
    return [tuple(row) for row in conn.execute(query)]


@pytest.mark.anyio
@pytest.mark.parametrize("level", LEVELS)
async def test_each_level_upgrades_in_the_database_with_every_row_kept(tmp_path: Path, level: int) -> None:
    fixture = fx.build_data_dir(tmp_path / "data", level)
    assert fixture.inserted["accounts"]  # every level has rows to keep
    before = sqlite3.connect(fixture.database)
    try:
        kept = _rows_of(before, fixture.columns)
    finally:
        before.close()
    assert sum(len(found) for found in kept.values()) == sum(len(found) for found in fixture.inserted.values())

    db = SqliteDatabase(fixture.database)
    await db.open()
    await db.close()

    fresh = sqlite3.connect(":memory:")
    apply_migrations(fresh)
    conn = sqlite3.connect(fixture.database)
    try:
        versions = [row[0] for row in conn.execute("SELECT version FROM schema_migrations ORDER BY version")]
        assert versions == list(fx.VERSIONS)
        assert _rows_of(conn, fixture.columns) == kept  # every row, every value it had
        assert _schema(conn) == _schema(fresh)  # the schema a new install gets
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()
        fresh.close()


@pytest.mark.anyio
@pytest.mark.parametrize("level", LEVELS)
async def test_each_level_upgrade_builds_the_search_index(tmp_path: Path, level: int) -> None:
    """The data already there is searchable: every logged message, every conversation's name and every
    searchable attachment has its row in its account's part of the index, and searches find them."""
    fixture = fx.build_data_dir(tmp_path / "data", level)
    db = SqliteDatabase(fixture.database)
    await db.open()
    try:
        search = SearchIndex(db)
        if fixture.has("history_log"):
            [answer] = [r for r in (await search.search(fx.BOB_ID, "eggs")).results if r.kind == "message"]
            assert (answer.conversation_id, answer.message_id, answer.role) == (fx.GROCERIES_ID, "m2", "assistant")
        for account_id, name in fixture_names(fixture):
            found = (await search.search(account_id, f'"{name}"')).results
            assert any(r.kind == "name" and r.conversation_name == name for r in found), name
    finally:
        await db.close()
    conn = sqlite3.connect(fixture.database)
    try:
        indexed = {row[0] for row in conn.execute("SELECT id FROM search_index_docsize")}
        expected = {row[0] for row in conn.execute("SELECT id FROM history_log")}
        expected |= {row[0] for row in conn.execute("SELECT id FROM search_labels")}
        labelled = conn.execute("SELECT count(*) FROM search_labels WHERE attachment_id IS NULL").fetchone()[0]
        assert labelled == len(fixture.inserted.get("conversations", []))
        assert indexed == expected
        conn.execute("INSERT INTO search_index (search_index, rank) VALUES ('integrity-check', 0)")
    finally:
        conn.close()


def fixture_names(fixture: fx.Fixture) -> list[tuple[str, str]]:
    return [(row["account_id"], row["name"]) for row in fixture.inserted.get("conversations", [])]


def test_fixtures_are_the_same_every_time(tmp_path: Path) -> None:
    """Built twice, a level holds the same rows (ids, times, hashes): the fixtures are reproducible."""
    first = fx.build_data_dir(tmp_path / "a", fx.CURRENT)
    second = fx.build_data_dir(tmp_path / "b", fx.CURRENT)
    assert first.inserted == second.inserted
    for path in (tmp_path / "a" / "blobs").rglob("*"):
        twin = tmp_path / "b" / path.relative_to(tmp_path / "a")
        assert path.is_dir() or twin.read_bytes() == path.read_bytes()
    assert set(first.inserted) == set(fx.current_columns())  # every table of the newest schema has rows


# --- through the API ----------------------------------------------------------------------------


class Jobs:
    def __init__(self, hermes: DemoHermesServer) -> None:
        self.hermes = hermes
        self.bob, self.owner = (self._create(name) for name in ("Bob's reminder", "Owner's digest"))

    def _create(self, name: str) -> str:
        body = {"name": name, "schedule": "every 2h", "prompt": "remind me", "deliver": "local"}
        response = httpx.post(
            f"{self.hermes.base_url}/api/jobs", json=body, headers=bearer(self.hermes.api_key), timeout=10
        )
        response.raise_for_status()
        job_id: str = response.json()["job"]["id"]
        return job_id

    def forget_sessions(self) -> None:
        """Delete the fixture's sessions a test's runs made in this Hermes: the next level starts without them."""
        for _, session_id, _ in fx.SESSIONS:
            response = httpx.delete(
                f"{self.hermes.base_url}/api/sessions/{session_id}", headers=bearer(self.hermes.api_key), timeout=10
            )
            assert response.status_code in (200, 404), response.text


@pytest.fixture(scope="module")
def module_jobs() -> Iterator[Jobs]:
    with DemoHermesServer(features=NEWER_FEATURES) as hermes:
        yield Jobs(hermes)


@pytest.fixture
def jobs(module_jobs: Jobs) -> Iterator[Jobs]:
    """A 0.22-era demo Hermes of this module's own (per-run model options: a conversation's own model and
    effort are applied, so shown), with one job for bob and one for the owner; shared by the levels, none
    of which sees the sessions another one's runs made."""
    yield module_jobs
    module_jobs.forget_sessions()


def upgraded_settings(fixture: fx.Fixture, hermes: DemoHermesServer) -> Settings:
    """The server's settings on the fixture's data dir; the owner secret is the data dir's own."""
    return load_settings(
        {},
        data_dir=fixture.data_dir,
        port=free_port(),
        ws_hello_timeout=1.0,
        **hermes_settings(hermes),
    )


async def check_credentials(http: httpx.AsyncClient, fixture: fx.Fixture) -> None:
    async def me(token: str) -> int | dict[str, str]:
        response = await http.get("/api/me", headers=bearer(token))
        return response.json() if response.status_code == 200 else response.status_code

    bob = {"id": fx.BOB_ID, "name": "bob"}
    assert await me(fx.SECRET) == {"id": fx.OWNER_ID, "name": "owner"}  # the data dir's secret, its owner
    assert await me(fx.BOB_TOKEN) == bob
    assert await me(fx.BOB_SESSION) == bob
    assert await me(fx.BOB_EXPIRED) == 401
    assert await me(fx.BOB_REVOKED) == 401
    assert await me(fx.CAROL_TOKEN) == 401  # disabled
    assert await me(fx.DAVE_TOKEN) == {"id": fx.DAVE_ID, "name": "dave"}

    login = await http.post("/api/auth/login", json={"username": "bob", "password": fx.BOB_PASSWORD})
    assert login.status_code == 200, login.text
    assert await me(login.json()["token"]) == bob
    wrong = await http.post("/api/auth/login", json={"username": "bob", "password": fx.CAROL_PASSWORD})
    assert wrong.status_code == 401
    disabled = await http.post("/api/auth/login", json={"username": "carol", "password": fx.CAROL_PASSWORD})
    assert disabled.status_code == 401


async def check_conversations(server: LiveServer, fixture: fx.Fixture) -> PhebyClient:
    """Bob's and the owner's conversations over the WebSocket; bob's client, still open."""
    bob = await PhebyClient.connect(server.ws_url, fx.BOB_TOKEN)
    owner = await PhebyClient.connect(server.ws_url, fx.SECRET)
    try:
        listed = await bob.request("conversation.list", "conversation.snapshot")
        owners = await owner.request("conversation.list", "conversation.snapshot")
    finally:
        await owner.close()

    def summary(frame: dict[str, Any]) -> list[tuple[str, str, str | None, str]]:
        return [(c["conversation_id"], c["name"], c["session_id"], c["source"]) for c in frame["conversations"]]

    if not fixture.has("conversations"):
        assert summary(listed) == summary(owners) == []
        return bob
    assert summary(listed) == [
        (fx.TRIP_ID, "Trip plans", "sess_fixture_trip", "hermes"),
        (fx.GROCERIES_ID, "Groceries", "sess_fixture_groceries", "hermes"),
    ]
    assert summary(owners) == [
        (fx.DIGEST_ID, "Daily digest", "cron_fixture_digest_2", "task"),  # its newest cron session
        (fx.NOTES_ID, "Owner notes", "sess_fixture_notes", "hermes"),
    ]
    assert listed["conversations"][0]["last_active"].startswith("2026-01-01T01:23:20")

    for conversation_id, enabled in ((fx.TRIP_ID, True), (fx.GROCERIES_ID, False)):
        yolo = await bob.request("yolo.current", "yolo.snapshot", conversation_id=conversation_id)
        assert yolo["enabled"] is enabled, yolo

    model = await bob.request("models.current", "model.current", conversation_id=fx.TRIP_ID)
    effort = await bob.request("reasoning.current", "reasoning.snapshot", conversation_id=fx.TRIP_ID)
    if fixture.has("conversation_overrides"):
        assert (model["model"], model["scope"]) == (fx.TRIP_MODEL, "conversation"), model
        assert (effort["effort"], effort["scope"]) == (fx.TRIP_EFFORT, "conversation"), effort
    else:
        assert (model.get("scope"), effort.get("scope")) == ("global", "global"), (model, effort)

    opened = await bob.request("conversation.open", "conversation.history", conversation_id=fx.GROCERIES_ID)
    assert opened["type"] == "conversation.history", opened
    shown = [(m["message_id"], m["role"], m["text"], m["ts"]) for m in opened["messages"]]
    if fixture.has("history_log"):  # this Hermes never saw the session: only the server's log has it
        assert shown == [
            ("m1", "user", fx.GROCERIES_TYPED, fx.HISTORY_TS[0]),
            ("m2", "assistant", fx.GROCERIES_ANSWER, fx.HISTORY_TS[1]),
        ]
    else:
        assert shown == []
    files = [(a["attachment_id"], a["filename"], a["direction"], a["message_id"]) for a in opened["attachments"]]
    if fixture.has("attachments"):
        assert files == [(fx.LIST_ID, "list.txt", "inbound", "m1"), (fx.CHART_ID, "chart.png", "outbound", "m2")]
    else:
        assert files == []
    return bob


async def check_files(http: httpx.AsyncClient, fixture: fx.Fixture) -> None:
    async def download(attachment_id: str, token: str) -> tuple[int, bytes, str | None]:
        response = await http.get(f"/attachments/{attachment_id}", headers=bearer(token))
        return response.status_code, response.content, response.headers.get("content-type")

    hope = (await http.get("/api/attachments", headers=bearer(fx.BOB_TOKEN))).json()["attachments"]
    feed = (await http.get("/api/features/sync", params={"after": 0}, headers=bearer(fx.BOB_TOKEN))).json()
    if not fixture.has("attachments"):
        assert (await download(fx.LIST_ID, fx.BOB_TOKEN))[0] == 404
        assert hope == feed["changes"] == []
        return
    assert await download(fx.LIST_ID, fx.BOB_TOKEN) == (200, fx.LIST_BYTES, "text/plain; charset=utf-8")
    assert await download(fx.CHART_ID, fx.BOB_TOKEN) == (200, PNG_1PX, "image/png")
    assert (await download(fx.OWNER_FILE_ID, fx.SECRET))[:2] == (200, fx.OWNER_FILE_BYTES)
    assert (await download(fx.OWNER_FILE_ID, fx.BOB_TOKEN))[0] == 404  # still the owner's only
    assert (await download(fx.GONE_ID, fx.BOB_TOKEN))[0] == 404  # deleted before the upgrade

    assert hope == [
        {
            "id": fx.HOPE_NOTES_ID,
            "filename": "notes.md",
            "mime": "text/markdown",
            "size": len(fx.HOPE_NOTES_BYTES),
            "extraction_status": "ready",
            "created_at": fx.BASE + 4100,
        }
    ]
    content = await http.get(f"/api/attachments/{fx.HOPE_NOTES_ID}/content", headers=bearer(fx.BOB_TOKEN))
    assert (content.status_code, content.content) == (200, fx.HOPE_NOTES_BYTES)
    expected = [
        (row["kind"], row["object_id"], bool(row["deleted"]), row["created_at"])
        for row in fixture.inserted["changes"]
        if row["account_id"] == fx.BOB_ID
    ]
    assert [(c["kind"], c["id"], c["deleted"], c["created_at"]) for c in feed["changes"]] == expected
    sequences = [c["sequence"] for c in feed["changes"]]
    assert sequences == sorted(sequences)
    assert feed["cursor"] == sequences[-1]


async def check_artifacts(http: httpx.AsyncClient, fixture: fx.Fixture) -> None:
    bob = bearer(fx.BOB_TOKEN)
    listed = (await http.get("/api/artifacts", headers=bob)).json()["artifacts"]
    owners = (await http.get("/api/artifacts", headers=bearer(fx.SECRET))).json()["artifacts"]
    if not fixture.has("artifacts"):
        assert listed == owners == []
        return
    assert listed == [
        {
            "id": fx.PACKING_ID,
            "title": "Packing list",
            "kind": "markdown",
            "revision": 3,
            "created_at": fx.PACKING_TIMES[0],
            "updated_at": fx.PACKING_TIMES[2],
        }
    ]
    assert [a["id"] for a in owners] == [fx.OWNER_DOC_ID]
    current = (await http.get(f"/api/artifacts/{fx.PACKING_ID}", headers=bob)).json()["artifact"]
    assert (current["revision"], current["content"]) == (3, fx.PACKING_VERSIONS[2])
    for revision, (text, at) in enumerate(zip(fx.PACKING_VERSIONS, fx.PACKING_TIMES, strict=True), start=1):
        old = await http.get(f"/api/artifacts/{fx.PACKING_ID}", params={"revision": revision}, headers=bob)
        assert (old.json()["artifact"]["content"], old.json()["artifact"]["updated_at"]) == (text, at)
    versions = (await http.get(f"/api/artifacts/{fx.PACKING_ID}/versions", headers=bob)).json()["versions"]
    assert versions == [
        {"revision": n, "created_at": at} for n, at in reversed(list(enumerate(fx.PACKING_TIMES, start=1)))
    ]
    assert (await http.get(f"/api/artifacts/{fx.OLD_DRAFT_ID}", headers=bob)).status_code == 404  # a tombstone
    assert (await http.get(f"/api/artifacts/{fx.OWNER_DOC_ID}", headers=bob)).status_code == 404

    edited = await http.patch(
        f"/api/artifacts/{fx.PACKING_ID}", json={"revision": 3, "content": "- passport\n- hat"}, headers=bob
    )
    assert edited.status_code == 200, edited.text
    assert edited.json()["artifact"]["revision"] == 4
    stale = await http.patch(f"/api/artifacts/{fx.PACKING_ID}", json={"revision": 3, "title": "x"}, headers=bob)
    assert stale.status_code == 409


async def check_tasks_and_push(http: httpx.AsyncClient, fixture: fx.Fixture, jobs: Jobs) -> None:
    async def task_ids(token: str) -> set[str]:
        response = await http.get("/api/tasks", headers=bearer(token))
        assert response.status_code == 200, response.text
        return {task["id"] for task in response.json()["tasks"]}

    if fixture.has("task_owners"):
        assert await task_ids(fx.BOB_TOKEN) == {jobs.bob}
        assert await task_ids(fx.SECRET) == {jobs.owner}
    else:  # no owners recorded: every job is the owner's
        assert await task_ids(fx.BOB_TOKEN) == set()
        assert await task_ids(fx.SECRET) == {jobs.bob, jobs.owner}

    subscriptions = (await http.get("/api/push/subscriptions", headers=bearer(fx.BOB_TOKEN))).json()
    if fixture.has("push_subscriptions"):
        assert subscriptions["subscriptions"] == [
            {
                "id": fx.PUSH_ID,
                "endpoint_origin": "https://push.example.test",
                "events": list(fx.PUSH_EVENTS),
                "created_at": fx.BASE + 7000,
            }
        ]
    else:
        assert subscriptions["subscriptions"] == []


def check_account_list(fixture: fx.Fixture, capsys: pytest.CaptureFixture[str]) -> None:
    """`pheby account list` on the upgraded data dir (while the server runs): the accounts' own settings."""
    capsys.readouterr()
    assert pheby_main(["--data-dir", str(fixture.data_dir), "account", "list"]) == 0
    accounts = {a["name"]: a for a in json.loads(capsys.readouterr().out)}
    assert set(accounts) == {"owner", "bob", "carol", "dave"}
    assert accounts["owner"]["is_owner"]
    assert accounts["owner"]["id"] == fx.OWNER_ID
    assert accounts["carol"]["disabled"]
    assert accounts["bob"]["hermes"]["home"] == fx.BOB_HOME
    media_roots = [fx.BOB_MEDIA_ROOT] if fixture.has("accounts", "media_roots") else []
    assert accounts["bob"]["hermes"]["media_roots"] == media_roots
    assert (accounts["dave"]["hermes"]["url"], accounts["dave"]["hermes"]["api_key"]) == (fx.DAVE_URL, True)


async def check_approved_pattern(bob: PhebyClient) -> None:
    """A run in the conversation whose pattern was approved for the session: answered without asking."""
    accepted = await bob.request("chat.send", "run.accepted", conversation_id=fx.GROCERIES_ID, text="/demo approve")
    assert accepted["type"] == "run.accepted", accepted
    finished = await bob.expect("run.finished", run_id=accepted["run_id"], timeout=15)
    assert finished["status"] == "completed", finished
    answer = bob.seen("message.complete", conversation_id=fx.GROCERIES_ID)
    assert answer, bob.frames
    assert answer[-1]["text"].startswith("Approved (once)"), answer
    assert bob.seen("approval.request") == []


@pytest.mark.anyio
@pytest.mark.live
@pytest.mark.parametrize("level", LEVELS)
async def test_each_level_upgrades_and_reads_back_through_the_api(
    tmp_path: Path,
    level: int,
    jobs: Jobs,
    start_live_server: Callable[[Settings], LiveServer],
    capsys: pytest.CaptureFixture[str],
) -> None:
    fixture = fx.build_data_dir(
        tmp_path / "data", level, hermes_url=jobs.hermes.base_url, bob_job=jobs.bob, owner_job=jobs.owner
    )
    server = start_live_server(upgraded_settings(fixture, jobs.hermes))
    assert server.secret == fx.SECRET
    async with httpx.AsyncClient(base_url=server.base_url, timeout=15) as http:
        await check_credentials(http, fixture)
        bob = await check_conversations(server, fixture)
        try:
            await check_files(http, fixture)
            await check_artifacts(http, fixture)
            await check_tasks_and_push(http, fixture, jobs)
            await asyncio.to_thread(check_account_list, fixture, capsys)
            if fixture.has("session_approvals"):
                await check_approved_pattern(bob)
                deleted = await bob.request(
                    "conversation.delete", "conversation.deleted", conversation_id=fx.GROCERIES_ID
                )
                assert deleted["type"] == "conversation.deleted", deleted  # with what hangs off it, cascaded
            assert bob.ws.close_code is None  # his socket stayed open throughout
        finally:
            await bob.close()


# --- a data dir newer than the code -------------------------------------------------------------


def newer_data_dir(path: Path) -> Path:
    """A data dir as a server two migrations ahead of this code would have left it."""
    fixture = fx.build_data_dir(path, fx.CURRENT)
    conn = sqlite3.connect(fixture.database, isolation_level=None)
    try:
        conn.execute("CREATE TABLE from_the_future (id TEXT PRIMARY KEY)")
        conn.execute("INSERT INTO schema_migrations (version, applied_at) VALUES (?, 0), (?, 0)", (NEWER - 1, NEWER))
    finally:
        conn.close()
    return fixture.data_dir


def snapshot(directory: Path) -> dict[str, str]:
    """Every file and directory under `directory` with a digest of its bytes (directories: "dir")."""
    found: dict[str, str] = {}
    for path in sorted(directory.rglob("*")):
        name = str(path.relative_to(directory))
        found[name] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return found


@pytest.mark.anyio
async def test_database_open_refuses_a_newer_schema_and_changes_nothing(tmp_path: Path) -> None:
    data_dir = newer_data_dir(tmp_path / "data")
    before = snapshot(data_dir)
    db = SqliteDatabase(data_dir / fx.DATABASE)
    with pytest.raises(SchemaTooNew) as refused:
        await db.open()
    await db.close()
    assert (refused.value.found, refused.value.known) == (NEWER, fx.CURRENT)
    assert str(refused.value) == REFUSAL
    with pytest.raises(SchemaTooNew):
        check_schema_version(data_dir / fx.DATABASE)
    conn = sqlite3.connect(data_dir / fx.DATABASE)
    try:
        with pytest.raises(SchemaTooNew):
            apply_migrations(conn)
    finally:
        conn.close()
    assert snapshot(data_dir) == before  # no -wal or -shm left, not a byte of the database changed

    check_schema_version(tmp_path / "none" / fx.DATABASE)  # no database yet: nothing to refuse, nothing made
    assert not (tmp_path / "none").exists()


def _environment(**extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PHEBY_", "HERMES_"))}
    env.update(extra)
    return env


def test_pheby_serve_refuses_a_newer_data_dir_with_one_line_touching_nothing(tmp_path: Path) -> None:
    data_dir = newer_data_dir(tmp_path / "data")
    (data_dir / "secret").unlink()  # so settings loaded before the check would write a new one
    before = snapshot(data_dir)
    hermes = f"http://127.0.0.1:{free_port()}"  # set, so the start-up checks would let it start
    result = subprocess.run(
        [sys.executable, "-m", "pheby_main", "serve", "--data-dir", str(data_dir), "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=_environment(HERMES_URL=hermes),
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [f"pheby serve: {REFUSAL}"]
    assert result.stdout == ""
    assert snapshot(data_dir) == before


def test_local_dev_refuses_a_newer_data_dir_with_one_line_touching_nothing(tmp_path: Path) -> None:
    data_dir = newer_data_dir(tmp_path / "data")
    (data_dir / "secret").unlink()
    before = snapshot(data_dir)
    result = subprocess.run(
        [sys.executable, "local_dev.py", "--data-dir", str(data_dir), "--port", str(free_port())],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=_environment(),
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [f"local_dev: {REFUSAL}"]
    assert snapshot(data_dir) == before  # no demo media dir, no secret


def test_account_commands_refuse_a_newer_data_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data_dir = newer_data_dir(tmp_path / "data")
    before = snapshot(data_dir)
    assert pheby_main(["--data-dir", str(data_dir), "account", "create", "zoe"]) == 2
    assert capsys.readouterr().err.splitlines() == [f"pheby: {REFUSAL}"]
    assert snapshot(data_dir) == before
