"""Storage failing under a running server: 503 `unavailable`, nothing half-stored, no traceback, and
recovery without a restart. `/readyz` says what is down.

S3 is moto's server behind a real port that the test takes down (`tests.s3_server`); local disk
fails by having its blob directory replaced with a file (which stops root too, unlike chmod).
"""

import asyncio
import logging
import os
import sqlite3
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from pheby.settings import Settings
from storage import BlobReader, StorageError
from storage.s3 import S3Store
from tests.files import PNG_1PX
from tests.live_server import LiveServer, free_port
from tests.s3_server import CuttableS3Server
from tests.ws_client import PhebyClient

pytestmark = [pytest.mark.anyio, pytest.mark.live]
MiB = 1024 * 1024
UNAVAILABLE = "unavailable"


@pytest.fixture
def s3_server(
    moto_s3: CuttableS3Server,
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
) -> LiveServer:
    return start_live_server(live_settings(storage="s3", s3_bucket=moto_s3.bucket, s3_endpoint_url=moto_s3.url))


def s3_residue(moto_s3: CuttableS3Server) -> tuple[list[str], list[str]]:
    """(object keys, keys of incomplete multipart uploads) in the bucket, read straight from moto."""
    client = S3Store(moto_s3.bucket, endpoint_url=moto_s3.url).client
    objects = [o["Key"] for o in client.list_objects_v2(Bucket=moto_s3.bucket).get("Contents", [])]
    uploads = [u["Key"] for u in client.list_multipart_uploads(Bucket=moto_s3.bucket).get("Uploads", [])]
    return objects, uploads


def attachment_rows(server: LiveServer) -> list[str]:
    conn = sqlite3.connect(server.settings.database_path)
    try:
        return [row[0] for row in conn.execute("SELECT filename FROM attachments WHERE deleted_at IS NULL")]
    finally:
        conn.close()


def no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    tracebacks = [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]
    assert tracebacks == [], [r.getMessage() for r in tracebacks]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR and r.name.startswith("pheby")]


def headers(server: LiveServer, mime: str = "application/octet-stream") -> dict[str, str]:
    return {"Authorization": f"Bearer {server.secret}", "Content-Type": mime}


async def new_conversation(server: LiveServer) -> str:
    async with await PhebyClient.connect(server.ws_url, server.secret) as client:
        created = await client.request("conversation.create", "conversation.created")
    conversation_id: str = created["conversation_id"]
    return conversation_id


async def readyz(server: LiveServer) -> tuple[int, Any]:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as http:
        response = await http.get("/readyz")
    return response.status_code, response.json()


async def stream_upload(
    server: LiveServer, url: str, size: int, mime: str, params: dict[str, str], halfway: Callable[[], Any]
) -> httpx.Response:
    """POST `size` bytes in 1 MiB chunks (chunked, no Content-Length); `halfway()` runs at the middle."""

    async def body() -> AsyncIterator[bytes]:
        for index in range(size // MiB):
            if index == size // MiB // 2:
                await halfway()
            yield (b"%07d\n" % index) * (MiB // 8)

    extra = {} if url == "/attachments" else {"X-Filename": "big.txt"}
    async with httpx.AsyncClient(base_url=server.base_url, timeout=120) as http:
        return await http.post(url, params=params, content=body(), headers=headers(server, mime) | extra)


async def wait_for_upload_started(moto_s3: CuttableS3Server) -> None:
    for _ in range(200):
        if s3_residue(moto_s3)[1]:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the multipart upload never started")


# --- S3 ---------------------------------------------------------------------------------------


async def test_s3_stopped_mid_pheby_upload_is_503_leaves_nothing_and_recovers(
    moto_s3: CuttableS3Server, s3_server: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    conversation_id = await new_conversation(s3_server)
    params = {"conversation_id": conversation_id, "filename": "big.bin"}

    async def cut_once_a_part_is_stored() -> None:
        await wait_for_upload_started(moto_s3)  # 8 MiB in: the server's multipart upload is under way
        moto_s3.cut()

    size = 20 * MiB  # the first 8 MiB part goes before the cut, the rest can't
    response = await stream_upload(
        s3_server, "/attachments", size, "application/octet-stream", params, cut_once_a_part_is_stored
    )
    assert response.status_code == 503, response.text
    assert response.json() == {"error": {"code": UNAVAILABLE, "message": response.json()["error"]["message"]}}
    assert "storage" in response.json()["error"]["message"].lower()
    assert attachment_rows(s3_server) == []
    status, body = await readyz(s3_server)
    assert (status, body) == (503, {"status": "unavailable", "down": ["storage"]})
    no_tracebacks(caplog)

    moto_s3.restore()

    async def nothing() -> None:
        return None

    response = await stream_upload(s3_server, "/attachments", size, "application/octet-stream", params, nothing)
    assert response.status_code == 201, response.text
    assert attachment_rows(s3_server) == ["big.bin"]
    objects, uploads = s3_residue(moto_s3)
    assert len(objects) == 1  # the new upload's; nothing of the cut one
    assert uploads == []  # the cut upload's parts were aborted once S3 was back
    assert await readyz(s3_server) == (200, {"status": "ok"})
    no_tracebacks(caplog)


async def test_s3_stopped_mid_hope_upload_is_503_leaves_nothing_and_recovers(
    moto_s3: CuttableS3Server, s3_server: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    size = 4 * MiB  # Hope uploads are at most 8 MiB: one put, sent once the body is in

    async def cut() -> None:
        moto_s3.cut()

    response = await stream_upload(s3_server, "/api/attachments", size, "text/plain", {}, cut)
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == UNAVAILABLE
    assert attachment_rows(s3_server) == []
    assert (await readyz(s3_server))[1]["down"] == ["storage"]
    moto_s3.restore()
    assert s3_residue(moto_s3) == ([], [])

    async def nothing() -> None:
        return None

    response = await stream_upload(s3_server, "/api/attachments", size, "text/plain", {}, nothing)
    assert response.status_code == 201, response.text
    assert len(s3_residue(moto_s3)[0]) == 1
    assert await readyz(s3_server) == (200, {"status": "ok"})
    no_tracebacks(caplog)


async def test_downloads_while_s3_is_down_are_503_and_work_again_after(
    moto_s3: CuttableS3Server, s3_server: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    conversation_id = await new_conversation(s3_server)
    async with httpx.AsyncClient(
        base_url=s3_server.base_url, timeout=60, headers=headers(s3_server, "text/plain")
    ) as http:
        pheby = await http.post(
            "/attachments", params={"conversation_id": conversation_id, "filename": "a.txt"}, content=b"pheby bytes"
        )
        hope = await http.post("/api/attachments", content=b"hope bytes", headers={"X-Filename": "b.txt"})
        assert (pheby.status_code, hope.status_code) == (201, 201)
        paths = [
            pheby.json()["attachment"]["download_path"],
            f"/api/attachments/{hope.json()['attachment']['id']}/content",
        ]
        moto_s3.cut()
        for path in paths:
            response = await http.get(path)
            assert response.status_code == 503, response.text
            assert response.json()["error"]["code"] == UNAVAILABLE
        deleted = await http.delete(f"/api/attachments/{hope.json()['attachment']['id']}")
        assert deleted.status_code == 503
        assert (await readyz(s3_server))[0] == 503
        moto_s3.restore()
        assert (await http.get(paths[0])).content == b"pheby bytes"
        assert (await http.get(paths[1])).status_code == 404  # its delete tombstoned it before S3 failed
        assert await readyz(s3_server) == (200, {"status": "ok"})
    no_tracebacks(caplog)


# --- local disk --------------------------------------------------------------------------------


async def test_a_broken_blob_directory_is_503_and_recovers(
    live_server: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    blobs = live_server.settings.data_dir / "blobs"
    conversation_id = await new_conversation(live_server)
    params = {"conversation_id": conversation_id, "filename": "a.txt"}
    async with httpx.AsyncClient(
        base_url=live_server.base_url, timeout=60, headers=headers(live_server, "text/plain")
    ) as http:
        stored = await http.post("/attachments", params=params, content=b"kept")
        assert stored.status_code == 201
        path = stored.json()["attachment"]["download_path"]
        image = {"conversation_id": conversation_id, "filename": "b.png"}  # handed to the agent as a copy
        png = {"Content-Type": "image/png"}
        for_agent = (await http.post("/attachments", params=image, content=PNG_1PX, headers=png)).json()["attachment"]
        blobs.rename(blobs.with_name("blobs.away"))
        blobs.write_bytes(b"")  # the disk under the store is gone: a file where the directory was
        response = await http.post("/attachments", params=params, content=b"x" * 100_000)
        assert response.status_code == 503, response.text
        assert response.json()["error"]["code"] == UNAVAILABLE
        assert (
            await http.post("/api/attachments", content=b"hope", headers={"X-Filename": "h.txt"})
        ).status_code == 503
        assert (await http.get(path)).status_code == 503
        async with await PhebyClient.connect(live_server.ws_url, live_server.secret) as ws:
            refused = await ws.request(
                "chat.send",
                "run.accepted",
                conversation_id=conversation_id,
                text="/demo echo",
                attachment_ids=[for_agent["attachment_id"]],
            )
            assert refused["type"] == "error"
            assert "storage is unavailable" in refused["error"]["message"]
            assert (await ws.request("ping", "pong"))["type"] == "pong"  # the socket stays usable
        assert await readyz(live_server) == (503, {"status": "unavailable", "down": ["storage"]})
        assert attachment_rows(live_server) == ["a.txt", "b.png"]

        blobs.unlink()
        blobs.with_name("blobs.away").rename(blobs)
        assert (await http.post("/attachments", params=params, content=b"again")).status_code == 201
        assert (await http.get(path)).content == b"kept"
        assert await readyz(live_server) == (200, {"status": "ok"})
        assert os.listdir(blobs / ".tmp") == []
    no_tracebacks(caplog)


async def test_a_download_cut_mid_stream_ends_the_response_without_a_traceback(
    live_server: LiveServer, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO)
    conversation_id = await new_conversation(live_server)
    async with httpx.AsyncClient(base_url=live_server.base_url, timeout=60, headers=headers(live_server)) as http:
        stored = await http.post(
            "/attachments", params={"conversation_id": conversation_id, "filename": "big.bin"}, content=b"z" * (3 * MiB)
        )
        assert stored.status_code == 201
        attachments = live_server.services.attachments
        open_bytes = attachments.open_bytes

        async def failing_after_the_first_chunk(attachment: Any) -> BlobReader:
            return _FailsAfterOneChunk(await open_bytes(attachment))

        monkeypatch.setattr(attachments, "open_bytes", failing_after_the_first_chunk)
        with pytest.raises(httpx.RemoteProtocolError):
            await http.get(stored.json()["attachment"]["download_path"])
    no_tracebacks(caplog)
    assert any("download cut" in r.getMessage() for r in caplog.records)


class _FailsAfterOneChunk(BlobReader):
    """A blob whose store fails once its first chunk is out (the headers are sent by then)."""

    def __init__(self, reader: BlobReader) -> None:
        super().__init__(reader.info)
        self._reader = reader

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._reader:
            yield chunk
            raise StorageError("the disk went away")

    async def aclose(self) -> None:
        await self._reader.aclose()


async def test_readyz_names_each_thing_that_is_down(
    start_live_server: Callable[[Settings], LiveServer], live_settings: Callable[..., Settings]
) -> None:
    server = start_live_server(live_settings(hermes_url=f"http://127.0.0.1:{free_port()}"))  # nothing listens
    assert await readyz(server) == (503, {"status": "unavailable", "down": ["hermes"]})
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as http:
        assert (await http.head("/readyz")).status_code == 503
        assert (await http.get("/healthz")).json() == {"status": "ok"}  # liveness is another question
