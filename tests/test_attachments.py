"""Attachments on both surfaces: status codes, exact descriptors, extraction, quotas, expiry.

The API tests run twice: on local disk and on S3 (moto in-process).
"""

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from apscheduler.schedulers.base import STATE_PAUSED
from litestar import Request
from litestar.testing import AsyncTestClient
from moto import mock_aws

from handlers.support.app import create_app
from handlers.support.uploads import utf8_header
from pheby.db import raw_sqlite
from pheby.errors import TooLarge, Unprocessable
from pheby.services import Services
from pheby.settings import Settings
from pheby.store.quotas import UploadQuota
from storage import StorageError
from tests.conftest import TEST_SECRET, StartUpSweep
from tests.database import query
from tests.files import PNG_1PX, corrupted_pdf, encrypted_pdf, text_pdf
from tests.live_server import LiveServer
from tests.ws_client import PhebyClient

pytestmark = [pytest.mark.anyio, pytest.mark.both_engines]
MiB = 1024 * 1024
BUCKET = "pheby-test-attachments"
PHEBY_KEYS = {
    "attachment_id",
    "filename",
    "mime_type",
    "size",
    "kind",
    "inline_image",
    "direction",
    "conversation_id",
    "message_id",
    "created_at",
    "expires_at",
    "download_path",
}
HOPE_KEYS = {"id", "filename", "mime", "size", "extraction_status", "created_at"}
OWNER = {"Authorization": f"Bearer {TEST_SECRET}"}
OWNER_AUTH = OWNER["Authorization"].encode()


@pytest.fixture(params=["local", "s3"])
def storage_settings(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    if request.param == "local":
        yield {"storage": "local"}
        return
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        from storage.s3 import S3Store

        store = S3Store(BUCKET)
        store.client.create_bucket(Bucket=BUCKET)
        yield {"storage": "s3", "s3_bucket": BUCKET}


@pytest.fixture
def settings(make_settings: Callable[..., Settings], storage_settings: dict[str, Any]) -> Settings:
    return make_settings(**storage_settings)


@pytest.fixture
async def client(settings: Settings, start_up_sweep: StartUpSweep) -> AsyncIterator[AsyncTestClient[Any]]:
    async with AsyncTestClient(create_app(settings)) as c:
        await start_up_sweep()  # else it may sweep what a test tombstones
        yield c


def services_of(client: AsyncTestClient[Any]) -> Services:
    services: Services = client.app.state.services
    return services


async def account_token(client: AsyncTestClient[Any], name: str) -> str:
    services = services_of(client)
    account = await services.accounts.create(name)
    return (await services.accounts.issue_token(account.id, "api", None)).token


async def conversation(client: AsyncTestClient[Any], token: str = TEST_SECRET) -> str:
    services = services_of(client)
    principal = await services.authenticator.from_secret(token)
    assert principal is not None
    return (await services.conversations.create(principal.account.id, "Files")).id


async def pheby_upload(
    client: AsyncTestClient[Any], conversation_id: str | None, filename: str | None, body: bytes, **headers: str
) -> Any:
    params = {k: v for k, v in (("conversation_id", conversation_id), ("filename", filename)) if v is not None}
    return await client.post(
        "/attachments", params=params, content=body, headers={"Content-Type": "text/markdown", **OWNER, **headers}
    )


async def hope_upload(
    client: AsyncTestClient[Any], body: bytes, mime: str, filename: str | None, **headers: str
) -> Any:
    extra = {"X-Filename": filename} if filename is not None else {}
    return await client.post(
        "/api/attachments", content=body, headers={"Content-Type": mime, **OWNER, **extra, **headers}
    )


# --- Pheby surface ---------------------------------------------------------------------------


async def test_pheby_upload_and_download(client: AsyncTestClient[Any]) -> None:
    conversation_id = await conversation(client)
    response = await pheby_upload(client, conversation_id, "notes.md", b"# Notes\nhello")
    assert response.status_code == 201
    descriptor = response.json()["attachment"]
    assert set(descriptor) == PHEBY_KEYS
    assert descriptor["direction"] == "inbound"
    assert descriptor["message_id"] is None
    assert descriptor["conversation_id"] == conversation_id
    assert descriptor["kind"] == "document"
    assert descriptor["inline_image"] is False
    assert descriptor["size"] == 13
    assert len(descriptor["attachment_id"]) == 32
    assert descriptor["expires_at"] is not None
    assert descriptor["download_path"] == f"/attachments/{descriptor['attachment_id']}"

    for auth in (OWNER, {"Authorization": f"ApiKey {TEST_SECRET}"}, {"X-Pheby-Secret": TEST_SECRET}):
        download = await client.get(descriptor["download_path"], headers=auth)
        assert download.status_code == 200
        assert download.content == b"# Notes\nhello"
        assert download.headers["content-type"].startswith("text/markdown")
        assert download.headers["content-disposition"].startswith('attachment; filename="notes.md"')
        assert download.headers["x-content-type-options"] == "nosniff"
        assert download.headers["cache-control"] == "no-store"


async def test_pheby_upload_errors(client: AsyncTestClient[Any], settings: Settings) -> None:
    conversation_id = await conversation(client)
    no_auth = await client.post(
        "/attachments", params={"conversation_id": conversation_id, "filename": "a.txt"}, content=b"x"
    )
    assert no_auth.status_code == 401
    wrong = await pheby_upload(client, conversation_id, "a.txt", b"x", Authorization="Bearer wrong")
    assert wrong.status_code == 401
    for conv, name, body in (
        ("0" * 32, "a.txt", b"x"),  # unknown conversation
        (None, "a.txt", b"x"),
        (conversation_id, None, b"x"),
        (conversation_id, "a.txt", b""),  # empty body
        (conversation_id, "../etc/passwd", b"x"),
        (conversation_id, "a\x00b", b"x"),
        (conversation_id, "x" * 256, b"x"),
    ):
        response = await pheby_upload(client, conv, name, body)
        assert response.status_code == 400, (conv, name)
        assert response.json()["error"]["code"] == "bad_request"


async def test_pheby_oversize_is_413_and_leaves_nothing(make_settings: Callable[..., Settings]) -> None:
    settings = make_settings(attachment_max_bytes=1024)
    async with AsyncTestClient(create_app(settings)) as client:
        conversation_id = await conversation(client)
        response = await pheby_upload(client, conversation_id, "big.bin", b"x" * 1025)
        assert response.status_code == 413
        services = services_of(client)
        assert await services.blobs.list("attachments/") == []
        assert await services.db.run(lambda c: c.execute("SELECT COUNT(*) FROM attachments").fetchone()[0]) == 0
        exact = await pheby_upload(client, conversation_id, "fits.bin", b"x" * 1024)
        assert exact.status_code == 201


async def test_download_404s_say_nothing_more(client: AsyncTestClient[Any]) -> None:
    conversation_id = await conversation(client)
    uploaded = (await pheby_upload(client, conversation_id, "a.md", b"a")).json()["attachment"]
    other = await account_token(client, "other")
    expected = {"error": {"code": "not_found", "message": "Attachment unavailable"}}
    for path, headers in (
        (uploaded["download_path"], {"Authorization": f"Bearer {other}"}),
        ("/attachments/" + "0" * 32, OWNER),
        ("/attachments/not-an-id", OWNER),
        ("/attachments/..%2F..%2Fetc%2Fpasswd", OWNER),
    ):
        response = await client.get(path, headers=headers)
        assert response.status_code == 404
        assert response.json() == expected
    assert (await client.get(uploaded["download_path"])).status_code == 401


# --- Hope surface ----------------------------------------------------------------------------


async def test_hope_routes(client: AsyncTestClient[Any]) -> None:
    created = await hope_upload(client, b"plain words", "text/plain; charset=utf-8", "notes.txt")
    assert created.status_code == 201
    attachment = created.json()["attachment"]
    assert set(attachment) == HOPE_KEYS
    assert attachment["mime"] == "text/plain"
    assert attachment["extraction_status"] == "ready"
    assert isinstance(attachment["created_at"], int)
    attachment_id = attachment["id"]

    listing = await client.get("/api/attachments", headers=OWNER)
    assert listing.json() == {"attachments": [attachment], "next_cursor": None}
    one = await client.get(f"/api/attachments/{attachment_id}", headers=OWNER)
    assert one.json() == {"attachment": attachment}
    content = await client.get(f"/api/attachments/{attachment_id}/content", headers=OWNER)
    assert content.content == b"plain words"
    assert content.headers["content-disposition"].startswith("attachment;")
    assert content.headers["cache-control"] == "no-store"
    assert content.headers["x-content-type-options"] == "nosniff"

    deleted = await client.delete(f"/api/attachments/{attachment_id}", headers=OWNER)
    assert deleted.json() == {"ok": True}
    for path in (f"/api/attachments/{attachment_id}", f"/api/attachments/{attachment_id}/content"):
        assert (await client.get(path, headers=OWNER)).status_code == 404
    assert (await client.delete(f"/api/attachments/{attachment_id}", headers=OWNER)).status_code == 404
    assert (await client.get("/api/attachments", headers=OWNER)).json()["attachments"] == []
    services = services_of(client)
    assert await services.blobs.list("attachments/") == []  # bytes removed
    row = await services.db.run(lambda c: c.execute("SELECT deleted_at FROM attachments").fetchone())
    assert row[0] is not None  # metadata tombstoned
    assert (await client.get("/api/attachments")).status_code == 401


@pytest.mark.parametrize(
    ("body", "mime", "status"),
    [
        (b"<html></html>", "text/html", 415),
        (b"<svg/>", "image/svg+xml", 415),
        (PNG_1PX, "application/pdf", 415),
        (b"%PDF-1.4 not a png", "image/png", 415),
        (b"\xff\xfe\x00bad utf8", "text/plain", 415),
        (b"RIFF0000WAVE", "image/webp", 415),
        (PNG_1PX, "image/png", 201),
        (b"\xff\xd8\xff\xe0rest", "image/jpeg", 201),
        (b"RIFF\x00\x00\x00\x00WEBPVP8 ", "image/webp", 201),
        ("# Überschrift".encode(), "text/markdown", 201),
    ],
)
async def test_hope_types_and_signatures(client: AsyncTestClient[Any], body: bytes, mime: str, status: int) -> None:
    response = await hope_upload(client, body, mime, "file.bin")
    assert response.status_code == status, response.text
    if status == 415:
        assert response.json()["error"]["code"] == "unsupported_media_type"
        assert await services_of(client).blobs.list("attachments/") == []


async def test_hope_filenames_are_utf8(client: AsyncTestClient[Any]) -> None:
    name = "résumé, 履歴.txt"
    headers = [(b"Content-Type", b"text/plain"), (b"X-Filename", name.encode()), (b"Authorization", OWNER_AUTH)]
    response = await client.post("/api/attachments", content=b"x", headers=headers)
    assert response.status_code == 201
    assert response.json()["attachment"]["filename"] == name
    scope: Any = {"type": "http", "headers": [(b"x-filename", b"caf\xe9.txt")]}
    with pytest.raises(Unprocessable):  # bytes that are not UTF-8 (the test client can't send them)
        utf8_header(Request(scope), "x-filename")


@pytest.mark.parametrize("filename", [None, "", "a/b.txt", "a\\b.txt", "bad\x07name.txt", "x" * 256, "é" * 128])
async def test_hope_invalid_filenames_are_422(client: AsyncTestClient[Any], filename: str | None) -> None:
    if filename is not None and not filename.isascii():
        response = await client.post(
            "/api/attachments",
            content=b"x",
            headers=[
                (b"Content-Type", b"text/plain"),
                (b"X-Filename", filename.encode()),
                (b"Authorization", OWNER_AUTH),
            ],
        )
    else:
        response = await hope_upload(client, b"x", "text/plain", filename)
    assert response.status_code == 422


async def test_hope_size_limits(make_settings: Callable[..., Settings], storage_settings: dict[str, Any]) -> None:
    settings = make_settings(
        hope_upload_max_bytes=100, hope_account_quota_bytes=250, hope_global_quota_bytes=400, **storage_settings
    )
    async with AsyncTestClient(create_app(settings)) as client:
        assert (await hope_upload(client, b"x" * 101, "text/plain", "big.txt")).status_code == 413
        for _ in range(2):
            assert (await hope_upload(client, b"x" * 100, "text/plain", "ok.txt")).status_code == 201
        assert (await hope_upload(client, b"x" * 60, "text/plain", "over.txt")).status_code == 413  # account quota
        assert (await hope_upload(client, b"x" * 50, "text/plain", "fits.txt")).status_code == 201
        other = await account_token(client, "other")
        auth = {"Authorization": f"Bearer {other}"}
        assert (await hope_upload(client, b"x" * 100, "text/plain", "a.txt", **auth)).status_code == 201
        global_full = await hope_upload(client, b"x" * 100, "text/plain", "b.txt", **auth)
        assert global_full.status_code == 413  # 250 + 100 + 100 > 400
        assert global_full.json()["error"]["code"] == "too_large"


@pytest.mark.live
async def test_chunked_uploads_near_the_quota_are_judged_by_their_size(
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    storage_settings: dict[str, Any],
) -> None:
    """Without a Content-Length the quota is reserved as bytes arrive, not a whole upload limit ahead."""
    settings = live_settings(hope_upload_max_bytes=100, hope_account_quota_bytes=250, **storage_settings)
    server = start_live_server(settings)

    async def chunked(size: int) -> AsyncIterator[bytes]:
        for _ in range(size // 10):
            yield b"x" * 10

    async with httpx.AsyncClient(base_url=server.base_url, timeout=30, headers=OWNER) as http:

        async def upload(size: int, *, streamed: bool = True) -> int:
            headers = {"Content-Type": "text/plain", "X-Filename": "c.txt"}
            body = chunked(size) if streamed else b"x" * size
            return (await http.post("/api/attachments", content=body, headers=headers)).status_code

        assert await upload(100, streamed=False) == 201
        assert await upload(100) == 201
        assert await upload(40) == 201  # 50 left: it fits, though the per-upload limit (100) would not
        assert await upload(20) == 413  # 10 left
        assert await upload(10) == 201
        listing = (await http.get("/api/attachments")).json()["attachments"]
    assert sum(a["size"] for a in listing) == 250


@pytest.mark.live
async def test_concurrent_uploads_never_pass_the_quota(
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    storage_settings: dict[str, Any],
) -> None:
    server = start_live_server(live_settings(**storage_settings))  # defaults: 8 MiB an upload, 64 MiB an account
    body = b"a" * (8 * MiB)

    async def chunks() -> AsyncIterator[bytes]:
        for offset in range(0, len(body), 256 * 1024):
            yield body[offset : offset + 256 * 1024]
            await asyncio.sleep(0)

    async with httpx.AsyncClient(base_url=server.base_url, timeout=120, headers=OWNER) as http:
        first = await http.post(
            "/api/attachments", content=b"x" * MiB, headers={"Content-Type": "text/plain", "X-Filename": "first.txt"}
        )
        assert first.status_code == 201
        responses = await asyncio.gather(
            *(
                http.post(
                    "/api/attachments",
                    content=chunks(),
                    headers={"Content-Type": "text/plain", "X-Filename": f"f{i}.txt"},
                )
                for i in range(10)
            )
        )
        statuses = sorted(r.status_code for r in responses)
        assert set(statuses) <= {201, 413}
        assert statuses.count(413) >= 3  # 1 + 10 x 8 MiB can't fit in 64 MiB
        listing = (await http.get("/api/attachments")).json()["attachments"]
    stored = sum(a["size"] for a in listing)
    assert stored <= 64 * MiB
    assert stored == MiB + statuses.count(201) * 8 * MiB


# --- extraction ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "mime", "status"),
    [
        (text_pdf([f"Page {i} says hello" for i in range(1, 6)]), "application/pdf", "ready"),
        (encrypted_pdf(), "application/pdf", "encrypted"),
        (corrupted_pdf(), "application/pdf", "failed"),
        (b"x" * 150_000, "text/plain", "truncated"),
        (PNG_1PX, "image/png", "image"),
    ],
    ids=["text-pdf", "encrypted-pdf", "corrupted-pdf", "long-text", "png"],  # an encrypted PDF differs each time
)
async def test_extraction_of_real_files(client: AsyncTestClient[Any], body: bytes, mime: str, status: str) -> None:
    response = await hope_upload(client, body, mime, "file")
    assert response.status_code == 201
    attachment = response.json()["attachment"]
    assert attachment["extraction_status"] == status


async def test_pdf_text_and_truncation_reach_provider_content(client: AsyncTestClient[Any]) -> None:
    services = services_of(client)
    owner = (await services.authenticator.from_secret(TEST_SECRET)).account.id  # type: ignore[union-attr]
    pdf = (await hope_upload(client, text_pdf(["Alpha page", "Beta page"]), "application/pdf", "a.pdf")).json()
    long = (await hope_upload(client, b"y" * 150_000, "text/plain", "long.txt")).json()
    parts = await services.attachments.provider_content(owner, [pdf["attachment"]["id"], long["attachment"]["id"]])
    assert parts[0]["type"] == "text"
    assert "Alpha page" in parts[0]["text"]
    assert "Beta page" in parts[0]["text"]
    assert parts[1]["text"].count("y") == 100_000


async def test_provider_content_rules(client: AsyncTestClient[Any]) -> None:
    from pheby.errors import BadRequest, Conflict, NotFound, Unprocessable

    services = services_of(client)
    owner = (await services.authenticator.from_secret(TEST_SECRET)).account.id  # type: ignore[union-attr]
    image = (await hope_upload(client, PNG_1PX, "image/png", "p.png")).json()["attachment"]["id"]
    locked = (await hope_upload(client, encrypted_pdf(), "application/pdf", "l.pdf")).json()["attachment"]["id"]
    with pytest.raises(Conflict):
        await services.attachments.provider_content(owner, [image])
    parts = await services.attachments.provider_content(owner, [image, image], vision=True)
    assert parts == [{"type": "image_url", "image_url": {"url": parts[0]["image_url"]["url"]}}]
    assert parts[0]["image_url"]["url"].startswith("data:image/png;base64,iVBOR")
    with pytest.raises(Unprocessable):
        await services.attachments.provider_content(owner, [locked])
    with pytest.raises(BadRequest):
        await services.attachments.provider_content(owner, [f"{i:032x}" for i in range(9)])
    other = await services.accounts.create("other")
    with pytest.raises(NotFound):
        await services.attachments.provider_content(other.id, [image], vision=True)


# --- isolation and retention -----------------------------------------------------------------


async def test_another_accounts_id_is_404_everywhere(client: AsyncTestClient[Any]) -> None:
    hope_id = (await hope_upload(client, b"mine", "text/plain", "mine.txt")).json()["attachment"]["id"]
    conversation_id = await conversation(client)
    pheby = (await pheby_upload(client, conversation_id, "m.md", b"m")).json()["attachment"]
    other = {"Authorization": f"Bearer {await account_token(client, 'other')}"}
    for method, path in (
        ("GET", f"/api/attachments/{hope_id}"),
        ("GET", f"/api/attachments/{hope_id}/content"),
        ("DELETE", f"/api/attachments/{hope_id}"),
        ("GET", pheby["download_path"]),
    ):
        response = await client.request(method, path, headers=other)
        assert response.status_code == 404, path
    assert (await client.get("/api/attachments", headers=other)).json()["attachments"] == []
    assert (await client.get(f"/api/attachments/{hope_id}", headers=OWNER)).status_code == 200


async def test_expiry_job_with_an_injected_clock(client: AsyncTestClient[Any]) -> None:
    services = services_of(client)
    conversation_id = await conversation(client)
    old = (await pheby_upload(client, conversation_id, "old.md", b"old")).json()["attachment"]
    clock = services.attachments._clock
    services.attachments._clock = lambda: clock() + 3 * 86400
    fresh = (await pheby_upload(client, conversation_id, "new.md", b"new")).json()["attachment"]
    hope = (await hope_upload(client, b"kept", "text/plain", "kept.txt")).json()["attachment"]
    services.attachments._clock = clock
    expired = await services.attachments.expire(now=clock() + 8 * 86400)
    assert expired == 1
    keys = {b.key.rsplit("/", 1)[-1] for b in await services.blobs.list("attachments/")}
    assert old["attachment_id"] not in keys
    assert {fresh["attachment_id"], hope["id"]} <= keys
    assert (await client.get(old["download_path"], headers=OWNER)).status_code == 404
    assert (await client.get(fresh["download_path"], headers=OWNER)).status_code == 200
    row = await services.db.run(
        lambda c: c.execute("SELECT deleted_at FROM attachments WHERE id = ?", (old["attachment_id"],)).fetchone()
    )
    assert row[0] is not None


async def test_retention_zero_keeps_forever(make_settings: Callable[..., Settings]) -> None:
    async with AsyncTestClient(create_app(make_settings(attachment_retention_days=0))) as client:
        conversation_id = await conversation(client)
        descriptor = (await pheby_upload(client, conversation_id, "k.md", b"k")).json()["attachment"]
        assert descriptor["expires_at"] is None
        assert await services_of(client).attachments.expire(now=4e9) == 0


async def test_scheduler_runs_expiry_once_per_data_dir(client: AsyncTestClient[Any]) -> None:
    scheduler = client.app.state.scheduler
    assert scheduler is not None
    assert {job.id for job in scheduler.get_jobs()} == {"expire-attachments", "poll-cron-sessions", "sweep-blobs"}
    assert scheduler.get_job("expire-attachments").trigger.interval.total_seconds() == 3600
    # A second app on the same data dir does not run a second scheduler (on PostgreSQL, it waits for the
    # database's scheduler lease: tests/test_scheduler_lease.py).
    async with AsyncTestClient(create_app(client.app.state.services.settings)) as second:
        if client.app.state.services.db.engine == "postgresql":
            assert second.app.state.scheduler.state == STATE_PAUSED
        else:
            assert second.app.state.scheduler is None


# --- deleting safely, quotas, agent copies ------------------------------------------------------


async def test_a_failure_between_tombstone_and_byte_removal_leaves_a_404_not_a_500(
    client: AsyncTestClient[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    services = services_of(client)
    hope = (await hope_upload(client, b"hope bytes", "text/plain", "h.txt")).json()["attachment"]
    content = f"/api/attachments/{hope['id']}/content"

    async def failing_delete(key: str) -> None:
        raise StorageError(f"{key!r}: the store failed")

    with monkeypatch.context() as patch:
        patch.setattr(services.blobs, "delete", failing_delete)
        deleted = await client.delete(f"/api/attachments/{hope['id']}", headers=OWNER)
    assert deleted.status_code == 503
    assert deleted.json()["error"]["code"] == "unavailable"
    for path in (content, f"/api/attachments/{hope['id']}"):
        response = await client.get(path, headers=OWNER)
        assert response.status_code == 404, (path, response.text)
    assert (await client.get("/api/attachments", headers=OWNER)).json()["attachments"] == []
    assert len(await services.blobs.list("attachments/")) == 1  # the bytes: an orphan for the sweep
    assert (await services.attachments.sweep()).orphans == 1
    assert await services.blobs.list("attachments/") == []


async def test_a_live_row_whose_bytes_are_gone_is_a_404(client: AsyncTestClient[Any]) -> None:
    services = services_of(client)
    conversation_id = await conversation(client)
    pheby = (await pheby_upload(client, conversation_id, "a.md", b"a")).json()["attachment"]
    hope = (await hope_upload(client, b"hope", "text/plain", "h.txt")).json()["attachment"]
    for blob in await services.blobs.list("attachments/"):
        await services.blobs.delete(blob.key)
    for path in (pheby["download_path"], f"/api/attachments/{hope['id']}/content"):
        response = await client.get(path, headers=OWNER)
        assert response.status_code == 404, (path, response.text)
        assert response.json() == {"error": {"code": "not_found", "message": "Attachment unavailable"}}


@pytest.mark.live
async def test_pheby_uploads_count_against_the_accounts_quota_while_streaming(
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    storage_settings: dict[str, Any],
) -> None:
    server = start_live_server(live_settings(attachment_account_quota_bytes=1000, **storage_settings))

    async def refused_before_the_body_ends() -> bytes:
        """Send 2,000 bytes of a body that never ends (chunked): the answer comes while it streams."""
        reader, writer = await asyncio.open_connection(server.settings.host, server.settings.port)
        path = f"/attachments?conversation_id={conversation_id}&filename=q.bin"
        writer.write(
            f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: {OWNER['Authorization']}\r\n"
            "Transfer-Encoding: chunked\r\n\r\n".encode()
        )
        for _ in range(20):
            writer.write(b"64\r\n" + b"x" * 100 + b"\r\n")
        await writer.drain()
        status = await asyncio.wait_for(reader.readline(), 10)
        writer.close()
        return status

    async with await PhebyClient.connect(server.ws_url, server.secret) as ws:
        conversation_id = (await ws.request("conversation.create", "conversation.created"))["conversation_id"]
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30, headers=OWNER) as http:

        async def upload(size: int) -> int:
            params = {"conversation_id": conversation_id, "filename": "q.bin"}
            return (await http.post("/attachments", params=params, content=b"x" * size)).status_code

        assert await upload(600) == 201
        assert (await refused_before_the_body_ends()).startswith(b"HTTP/1.1 413")
        assert await upload(400) == 201  # exactly what is left
        assert await upload(1) == 413
    assert query(server.settings, "SELECT COUNT(*), SUM(size) FROM attachments") == [(2, 1000)]


async def test_agent_copies_are_per_account_and_removed_at_expiry(client: AsyncTestClient[Any]) -> None:
    services = services_of(client)
    owner = await services.accounts.ensure_owner()
    conversation_id = await conversation(client)
    photo = (await pheby_upload(client, conversation_id, "p.png", PNG_1PX, **{"Content-Type": "image/png"})).json()
    claimed = await services.attachments.prepare_chat_input(
        owner.id, conversation_id, "look", [photo["attachment"]["attachment_id"]]
    )
    copy = Path(claimed.text.split(" at ", 1)[1].rstrip("]"))
    assert copy.read_bytes() == PNG_1PX
    assert copy.is_relative_to((services.attachments.agent_media_dir / owner.id).resolve())
    assert await services.attachments.expire(now=time.time() + 30 * 86400) == 1
    assert not copy.exists()
    assert not copy.parent.exists()


async def test_an_upload_row_is_committed_durably(client: AsyncTestClient[Any]) -> None:
    """The 201 comes after a commit with synchronous=FULL (WAL fsynced), not the connection's NORMAL; on
    PostgreSQL every commit waits for its WAL flush (synchronous_commit on)."""
    services = services_of(client)
    if services.db.engine == "postgresql":
        assert await services.db.run(lambda c: c.execute("SHOW synchronous_commit").fetchone()[0]) == "on"
        return
    statements: list[str] = []
    await services.db.run(lambda c: raw_sqlite(c).set_trace_callback(statements.append))
    try:
        conversation_id = await conversation(client)
        assert (await pheby_upload(client, conversation_id, "d.md", b"durable")).status_code == 201
    finally:
        await services.db.run(lambda c: raw_sqlite(c).set_trace_callback(None))
    insert = next(i for i, s in enumerate(statements) if s.startswith("INSERT INTO attachments"))
    full = max(i for i, s in enumerate(statements[:insert]) if s.startswith("PRAGMA synchronous"))
    assert statements[full] == "PRAGMA synchronous=FULL"
    assert statements[insert + 1 :].index("COMMIT") < statements[insert + 1 :].index("PRAGMA synchronous=NORMAL")


async def test_a_long_chunked_upload_asks_the_database_for_its_quota_a_handful_of_times() -> None:
    """The reservation grows ahead of the bytes by what it holds, not by one step at a time (64 queries for
    64 MiB in 1 MiB steps); it never holds more than a step or twice what arrived, and only what arrived
    must fit."""
    asked = 0

    async def stored_bytes(account_id: str | None) -> int:
        nonlocal asked
        asked += 1
        return 0

    mib = 1024 * 1024
    quota = UploadQuota(stored_bytes, per_account=100 * mib)

    async def chunks(size: int) -> AsyncIterator[bytes]:
        for _ in range(size // (64 * 1024)):
            yield b"x" * (64 * 1024)

    async with quota.reserve("a") as reservation:
        arrived = 0
        async for chunk in reservation.metered(chunks(64 * mib), step=mib, ceiling=64 * mib):
            arrived += len(chunk)
            assert arrived <= reservation.amount <= max(mib, 2 * arrived)
    assert asked <= 8, asked
    async with quota.reserve("a") as reservation:  # 128 MiB would pass the 100 MiB quota: refused past it
        received: list[int] = []

        async def take_all() -> None:
            async for chunk in reservation.metered(chunks(128 * mib), step=mib, ceiling=128 * mib):
                received.append(len(chunk))

        with pytest.raises(TooLarge):
            await take_all()
        assert sum(received) == 100 * mib
