"""`pheby backup DEST` and `pheby restore SRC`: a backup taken while a real server takes uploads and
artifact edits restores into a data dir that a new server serves everything from; damaged backups,
non-empty targets and non-empty destinations are refused with nothing written."""

import asyncio
import contextlib
import hashlib
import json
import os
import shutil
import sqlite3
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from pheby.backup import MANIFEST
from pheby.cli import main
from pheby.db import newest_version
from pheby.settings import Settings, resolve_secret
from storage import BlobNotFound, LocalDiskStore
from tests.live_server import LiveServer
from tests.ws_client import PhebyClient

ROOT = Path(__file__).resolve().parent.parent
StartServer = Callable[[Settings], LiveServer]
LiveSettings = Callable[..., Settings]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


async def cli_in_thread(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """`run_cli` from an async test: `main` runs its own event loop, so it runs in a worker thread."""
    code = await asyncio.to_thread(main, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


async def pheby(*argv: str) -> tuple[int, str, str]:
    """The `pheby` command in a process of its own, as cron or a timer runs it (no PHEBY_/HERMES_ variables)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PHEBY_", "HERMES_"))}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "pheby_main",
        *argv,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def http_client(server: LiveServer) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=server.base_url, timeout=30, headers={"Authorization": f"Bearer {server.secret}"})


async def new_conversation(server: LiveServer) -> str:
    client = await PhebyClient.connect(server.ws_url, server.secret)
    try:
        created = await client.request("conversation.create", "conversation.created")
    finally:
        await client.close()
    conversation_id: str = created["conversation_id"]
    return conversation_id


async def upload(http: httpx.AsyncClient, conversation_id: str, name: str, body: bytes) -> str:
    response = await http.post(
        "/attachments",
        params={"conversation_id": conversation_id, "filename": name},
        content=body,
        headers={"Content-Type": "application/octet-stream"},
    )
    assert response.status_code == 201, response.text
    attachment_id: str = response.json()["attachment"]["attachment_id"]
    return attachment_id


async def create_artifact(http: httpx.AsyncClient, content: str) -> dict[str, Any]:
    response = await http.post("/api/artifacts", json={"title": "Plan", "kind": "text", "content": content})
    assert response.status_code == 201, response.text
    artifact: dict[str, Any] = response.json()["artifact"]
    return artifact


def listing(path: Path) -> list[str]:
    return sorted(p.relative_to(path).as_posix() for p in path.rglob("*"))


def manifest_of(backup: Path) -> dict[str, Any]:
    manifest: dict[str, Any] = json.loads((backup / MANIFEST).read_text())
    return manifest


# --- a backup under load, restored, served -----------------------------------------------------


class Writes:
    """What a background writer had acknowledged, each with when (time.monotonic()) the answer came."""

    def __init__(self) -> None:
        self.uploads: list[tuple[float, str, bytes]] = []
        self.revisions: list[tuple[float, int, str]] = []


async def keep_writing(
    http: httpx.AsyncClient, conversation_id: str, artifact: dict[str, Any], writes: Writes, stop: asyncio.Event
) -> None:
    """Upload a Pheby attachment and edit the artifact, over and over, until `stop`."""
    revision = artifact["revision"]
    n = 0
    while not stop.is_set():
        n += 1
        body = hashlib.sha256(str(n).encode()).digest() * (1 + n % 7) + os.urandom(n % 50)
        attachment_id = await upload(http, conversation_id, f"file-{n}.bin", body)
        writes.uploads.append((time.monotonic(), attachment_id, body))
        content = f"version {n}: " + "x" * (n % 300)
        response = await http.patch(f"/api/artifacts/{artifact['id']}", json={"revision": revision, "content": content})
        assert response.status_code == 200, response.text
        revision = response.json()["artifact"]["revision"]
        writes.revisions.append((time.monotonic(), revision, content))
        await asyncio.sleep(0.01)  # steady, not flat out: the module stays fast on a busy machine


@pytest.mark.live
@pytest.mark.anyio
async def test_a_backup_taken_under_writes_restores_into_a_server_with_every_acknowledged_write(
    start_live_server: StartServer, live_settings: LiveSettings, tmp_path: Path
) -> None:
    data, dest, restored = tmp_path / "data", tmp_path / "backup", tmp_path / "restored"
    owner_secret = resolve_secret(data)  # the data dir's generated secret, as a first start leaves it
    server = start_live_server(live_settings(data_dir=data, secret=owner_secret, artifact_versions_max=100_000))
    conversation_id = await new_conversation(server)
    writes, stop = Writes(), asyncio.Event()
    async with http_client(server) as http:
        artifact = await create_artifact(http, "version 0")
        writes.revisions.append((time.monotonic(), artifact["revision"], "version 0"))
        writer = asyncio.create_task(keep_writing(http, conversation_id, artifact, writes, stop))
        while len(writes.uploads) < 5:
            await asyncio.sleep(0.01)
        began = time.monotonic()
        code, out, err = await pheby("--data-dir", str(data), "backup", str(dest))
        ended = time.monotonic()
        await asyncio.sleep(0.1)
        stop.set()
        await writer
    assert code == 0, err
    during = [u for u in writes.uploads if began < u[0] < ended]
    assert during, "the writer was acknowledged while the backup ran"
    result = json.loads(out)
    assert result["storage"] == "local"
    assert result["schema_version"] == newest_version()
    assert result["blobs"] >= len([u for u in writes.uploads if u[0] < began])
    assert set(result["secrets"]) == {"secret", "vapid_private_key.pem"}
    assert owner_secret not in out
    assert str(tmp_path) not in out  # paths are relative
    for name in result["secrets"]:
        assert stat.S_IMODE((dest / name).stat().st_mode) == 0o600

    restored.mkdir()  # an empty data dir, as `install -d` leaves it
    code, out, err = await pheby("--data-dir", str(restored), "restore", str(dest))
    assert code == 0, err
    assert json.loads(out)["blobs"] == result["blobs"]
    assert not list(restored.glob(".restore-*"))
    assert stat.S_IMODE((restored / "secret").stat().st_mode) == 0o600
    assert (restored / "vapid_private_key.pem").read_bytes() == (data / "vapid_private_key.pem").read_bytes()

    second = start_live_server(live_settings(data_dir=restored, secret=None))  # the restored secret
    assert second.secret == owner_secret
    async with http_client(second) as http:
        for acknowledged, attachment_id, body in writes.uploads:
            response = await http.get(f"/attachments/{attachment_id}")
            if acknowledged < began:
                assert response.status_code == 200, attachment_id
            if response.status_code == 200:  # later ones are there or not, never different
                assert response.content == body
            else:
                assert acknowledged > began
                assert response.status_code == 404
        for acknowledged, revision, content in writes.revisions:
            response = await http.get(f"/api/artifacts/{artifact['id']}", params={"revision": revision})
            if acknowledged < began:
                assert response.status_code == 200, revision
            if response.status_code == 200:
                assert response.json()["artifact"]["content"] == content
        current = (await http.get(f"/api/artifacts/{artifact['id']}")).json()["artifact"]
        written = {revision: content for _, revision, content in writes.revisions}
        assert current["revision"] >= max(r for t, r, _ in writes.revisions if t < began)
        assert current["content"] == written[current["revision"]]
        # and the restored server takes new writes
        more = await upload(http, conversation_id, "after.txt", b"after the restore")
        assert (await http.get(f"/attachments/{more}")).content == b"after the restore"


# --- damaged backups -----------------------------------------------------------------------------


async def small_backup(
    start_live_server: StartServer, live_settings: LiveSettings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> Path:
    """A data dir with two uploads and an artifact, backed up (the server still running) into tmp_path/backup."""
    server = start_live_server(live_settings(data_dir=tmp_path / "data"))
    conversation_id = await new_conversation(server)
    async with http_client(server) as http:
        await upload(http, conversation_id, "a.txt", b"first file")
        await upload(http, conversation_id, "b.txt", b"second file, a little longer")
        await create_artifact(http, "a document")
    code, _, err = await cli_in_thread(capsys, "--data-dir", str(tmp_path / "data"), "backup", str(tmp_path / "backup"))
    assert code == 0, err
    return tmp_path / "backup"


def alter_a_blob(backup: Path) -> str:
    blob = sorted((backup / "blobs").rglob("*"))[-1]
    raw = bytearray(blob.read_bytes())
    raw[0] ^= 0xFF  # same size, other bytes
    blob.write_bytes(bytes(raw))
    return blob.relative_to(backup).as_posix()


def truncate_the_database(backup: Path) -> str:
    db = backup / "pheby.sqlite3"
    with db.open("r+b") as fh:
        fh.truncate(db.stat().st_size // 2)
    return "pheby.sqlite3"


def truncate_the_database_and_its_entry(backup: Path) -> str:
    """The manifest made to agree with the truncated file: the database itself must be checked."""
    truncate_the_database(backup)
    manifest = manifest_of(backup)
    db = backup / "pheby.sqlite3"
    for entry in manifest["files"]:
        if entry["path"] == "pheby.sqlite3":
            entry["size"] = db.stat().st_size
            entry["sha256"] = hashlib.sha256(db.read_bytes()).hexdigest()
    (backup / MANIFEST).write_text(json.dumps(manifest))
    return "pheby.sqlite3"


def remove_a_blob(backup: Path) -> str:
    blob = sorted(p for p in (backup / "blobs").rglob("*") if p.is_file())[0]
    blob.unlink()
    return blob.relative_to(backup).as_posix()


def add_an_unlisted_blob(backup: Path) -> str:
    extra = next(p for p in (backup / "blobs").rglob("*") if p.is_file()).with_name("f" * 32)
    extra.write_bytes(b"planted")
    return extra.relative_to(backup).as_posix()


def drop_the_manifest(backup: Path) -> str:
    (backup / MANIFEST).unlink()
    return MANIFEST


DAMAGES = [
    alter_a_blob,
    truncate_the_database,
    truncate_the_database_and_its_entry,
    remove_a_blob,
    add_an_unlisted_blob,
    drop_the_manifest,
]


@pytest.mark.live
@pytest.mark.anyio
async def test_a_damaged_backup_is_refused_naming_the_file_and_nothing_is_restored(
    start_live_server: StartServer, live_settings: LiveSettings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pristine = await small_backup(start_live_server, live_settings, tmp_path, capsys)
    for damage in DAMAGES:
        damaged = tmp_path / f"damaged-{damage.__name__}"
        shutil.copytree(pristine, damaged)
        named = damage(damaged)
        for target in (tmp_path / f"empty-{damage.__name__}", tmp_path / f"new-{damage.__name__}"):
            existed = target.name.startswith("empty-")
            if existed:
                target.mkdir()
            code, out, err = await cli_in_thread(capsys, "--data-dir", str(target), "restore", str(damaged))
            assert code == 2, (damage.__name__, err)
            assert out == ""
            assert err.startswith(f"pheby restore: {named}"), (damage.__name__, err)  # one line, naming the file
            assert err.count("\n") == 1, err
            if existed:
                assert listing(target) == [], damage.__name__
            else:
                assert not target.exists(), damage.__name__

    code, _, err = await cli_in_thread(capsys, "--data-dir", str(tmp_path / "fine"), "restore", str(pristine))
    assert code == 0, err  # the backup the damaged ones were copied from restores


# --- refusals and the S3 layout ----------------------------------------------------------------


@pytest.fixture
def data_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """A data dir with a database and its generated secret, made by the `pheby` command."""
    data = tmp_path / "data"
    assert run_cli(capsys, "--data-dir", str(data), "account", "create", "alice")[0] == 0
    return data


def test_restore_into_a_non_empty_data_dir_is_refused(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(capsys, "--data-dir", str(data_dir), "backup", str(tmp_path / "backup"))[0] == 0
    target = tmp_path / "target"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    code, out, err = run_cli(capsys, "--data-dir", str(target), "restore", str(tmp_path / "backup"))
    assert (code, out) == (2, "")
    assert "not empty" in err
    assert str(target) in err
    assert listing(target) == ["keep.txt"]
    assert (target / "keep.txt").read_text() == "mine"

    # the data dir of a running server is no target either
    code, _, err = run_cli(capsys, "--data-dir", str(data_dir), "restore", str(tmp_path / "backup"))
    assert code == 2
    assert "not empty" in err


def test_backup_into_a_non_empty_dest_is_refused(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "old.txt").write_text("an older backup")
    code, out, err = run_cli(capsys, "--data-dir", str(data_dir), "backup", str(dest))
    assert (code, out) == (2, "")
    assert err.startswith("pheby backup: DEST")
    assert "not empty" in err
    assert err.count("\n") == 1
    assert listing(dest) == ["old.txt"]

    (tmp_path / "a-file").write_text("x")
    code, _, err = run_cli(capsys, "--data-dir", str(data_dir), "backup", str(tmp_path / "a-file"))
    assert code == 2
    assert "not a directory" in err

    code, _, err = run_cli(capsys, "--data-dir", str(tmp_path / "nothing"), "backup", str(tmp_path / "b"))
    assert code == 2
    assert "no database" in err
    assert not (tmp_path / "nothing").exists()
    assert not (tmp_path / "b").exists()


def test_with_s3_the_database_and_secrets_are_backed_up_and_the_bucket_named(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHEBY_STORAGE", "s3")
    monkeypatch.setenv("PHEBY_S3_BUCKET", "pheby-attachments")
    monkeypatch.setenv("PHEBY_S3_PREFIX", "prod")
    code, out, err = run_cli(capsys, "--data-dir", str(data_dir), "backup", str(tmp_path / "backup"))
    assert code == 0, err
    result = json.loads(out)
    assert (result["storage"], result["blobs"], result["s3_bucket"]) == ("s3", 0, "pheby-attachments")
    manifest = manifest_of(tmp_path / "backup")
    assert [entry["path"] for entry in manifest["files"]] == ["pheby.sqlite3", "secret"]
    assert (manifest["storage"], manifest["s3_bucket"], manifest["s3_prefix"]) == ("s3", "pheby-attachments", "prod")
    code, out, err = run_cli(capsys, "--data-dir", str(tmp_path / "restored"), "restore", str(tmp_path / "backup"))
    assert code == 0, err
    assert listing(tmp_path / "restored") == ["pheby.sqlite3", "secret"]


# --- blobs deleted while the backup runs ---------------------------------------------------------


@pytest.mark.live
@pytest.mark.anyio
async def test_a_blob_deleted_under_the_backup_makes_it_copy_the_database_again(
    start_live_server: StartServer,
    live_settings: LiveSettings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The server tombstones a row, then removes its blob: a backup whose copy still had the row finds the
    blob gone, copies the database again, and holds neither; a blob gone under a live row fails it."""
    data = tmp_path / "data"
    server = start_live_server(live_settings(data_dir=data))
    conversation_id = await new_conversation(server)
    async with http_client(server) as http:
        kept = await upload(http, conversation_id, "kept.txt", b"kept")
        deleted = await upload(http, conversation_id, "deleted.txt", b"deleted under the backup")
    opened = LocalDiskStore.open

    async def delete_first(store: LocalDiskStore, key: str) -> Any:
        if key.endswith(deleted) and (data / "blobs" / key).exists():  # as Attachments.delete does it
            with contextlib.closing(sqlite3.connect(data / "pheby.sqlite3", isolation_level=None)) as conn:
                conn.execute("UPDATE attachments SET deleted_at = 1 WHERE id = ?", (deleted,))
            (data / "blobs" / key).unlink()
        return await opened(store, key)

    monkeypatch.setattr(LocalDiskStore, "open", delete_first)
    code, out, err = await cli_in_thread(capsys, "--data-dir", str(data), "backup", str(tmp_path / "backup"))
    assert code == 0, err
    assert (json.loads(out)["database_copies"], json.loads(out)["blobs"]) == (2, 1)
    paths = [entry["path"] for entry in manifest_of(tmp_path / "backup")["files"]]
    assert any(p.endswith(kept) for p in paths)
    assert not any(p.endswith(deleted) for p in paths)

    async def lose(store: LocalDiskStore, key: str) -> Any:
        raise BlobNotFound(key)  # a blob missing under a row that stays live: the data dir is damaged

    monkeypatch.setattr(LocalDiskStore, "open", lose)
    code, _, err = await cli_in_thread(capsys, "--data-dir", str(data), "backup", str(tmp_path / "again"))
    assert code == 1
    assert kept in err
    assert "no such blob" in err
    assert not (tmp_path / "again").exists()  # what it wrote is gone
