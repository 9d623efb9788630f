"""The blob sweep, on local disk and on moto's S3 server: orphans and leftovers of failed puts go,
live blobs and anything young enough to be an upload in progress stay."""

import asyncio
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from handlers.support.app import create_app
from pheby.services import Services
from pheby.settings import Settings
from scheduler.blob_sweep import sweep_blobs
from storage import LocalDiskStore
from storage.s3 import S3Store
from tests.conftest import TEST_SECRET, StartUpSweep
from tests.s3_server import CuttableS3Server

pytestmark = pytest.mark.anyio
OWNER = {"Authorization": f"Bearer {TEST_SECRET}"}
HOUR = 3600


@pytest.fixture(params=["local", "moto-server"])
async def client(
    request: pytest.FixtureRequest, make_settings: Callable[..., Settings], start_up_sweep: StartUpSweep
) -> AsyncIterator[AsyncTestClient[Any]]:
    if request.param == "local":
        settings = make_settings()
    else:
        server: CuttableS3Server = request.getfixturevalue("moto_s3")
        settings = make_settings(storage="s3", s3_bucket=server.bucket, s3_endpoint_url=server.url)
    async with AsyncTestClient(create_app(settings)) as c:
        await start_up_sweep()
        yield c


async def chunks(data: bytes) -> AsyncIterator[bytes]:
    yield data


class Leftovers:
    """Makes what a crash or a failed put leaves behind, in whichever store the server has."""

    def __init__(self, services: Services) -> None:
        self.blobs = services.blobs

    async def orphan(self, *, age: float) -> str:
        key = f"attachments/{uuid.uuid4().hex}/{uuid.uuid4().hex}"
        await self.blobs.put(key, chunks(b"orphan"), max_size=100)
        if isinstance(self.blobs, LocalDiskStore):
            then = time.time() - age
            os.utime(self.blobs.root / key, (then, then))
        return key

    def temp(self, *, age: float) -> str:
        if isinstance(self.blobs, LocalDiskStore):
            (self.blobs.root / ".tmp").mkdir(parents=True, exist_ok=True)
            path = self.blobs.root / ".tmp" / uuid.uuid4().hex
            path.write_bytes(b"half an upload")
            then = time.time() - age
            os.utime(path, (then, then))
            return path.name
        assert isinstance(self.blobs, S3Store)
        key = f"attachments/{uuid.uuid4().hex}/{uuid.uuid4().hex}"
        self.blobs.client.create_multipart_upload(Bucket=self.blobs.bucket, Key=key)
        return key

    async def keys(self) -> set[str]:
        return {info.key for info in await self.blobs.list("attachments/")}

    def temps(self) -> set[str]:
        if isinstance(self.blobs, LocalDiskStore):
            return set(os.listdir(self.blobs.root / ".tmp"))
        assert isinstance(self.blobs, S3Store)
        uploads = self.blobs.client.list_multipart_uploads(Bucket=self.blobs.bucket).get("Uploads", [])
        return {upload["Key"] for upload in uploads}


async def test_the_sweep_removes_orphans_and_old_leftovers_and_keeps_live_and_fresh_blobs(
    client: AsyncTestClient[Any],
) -> None:
    services: Services = client.app.state.services
    made = Leftovers(services)
    text = {**OWNER, "Content-Type": "text/plain"}
    live = (await client.post("/api/attachments", content=b"live", headers={**text, "X-Filename": "l.txt"})).json()
    deleted = (await client.post("/api/attachments", content=b"gone", headers={**text, "X-Filename": "d.txt"})).json()
    owner = (await services.accounts.ensure_owner()).id
    live_key = (await services.attachments.get(owner, live["attachment"]["id"])).blob_key
    gone = await services.attachments.get(owner, deleted["attachment"]["id"])
    await services.attachments._tombstone(gone)  # as if removing its bytes had failed after the tombstone
    old_orphan = await made.orphan(age=2 * HOUR)
    old_temp = made.temp(age=2 * HOUR)
    assert {live_key, gone.blob_key, old_orphan} <= await made.keys()
    assert old_temp in made.temps()

    # An upload in progress: its temp file (local) or multipart upload (S3) is there, its row is not.
    resume = asyncio.Event()
    in_flight_key = f"attachments/{owner}/{uuid.uuid4().hex}"

    async def paused() -> AsyncIterator[bytes]:
        yield b"x" * (9 * 1024 * 1024)  # over one S3 part: a multipart upload is under way
        await resume.wait()
        yield b"y"

    putting = asyncio.create_task(services.blobs.put(in_flight_key, paused(), max_size=10 * 1024 * 1024))
    for _ in range(200):
        if len(made.temps() - {old_temp}) == 1:
            break
        await asyncio.sleep(0.05)
    in_flight_temp = made.temps() - {old_temp}
    assert len(in_flight_temp) == 1

    # S3 can't backdate objects (and moto dates every multipart upload 2010), so there the sweep
    # looks two hours on: only this server's own upload in progress is spared then.
    later = time.time() + 2 * HOUR if isinstance(services.blobs, S3Store) else None
    result = await services.attachments.sweep(now=later)
    assert (result.orphans, result.temporary) == (2, 1)
    assert await made.keys() == {live_key}
    assert made.temps() == in_flight_temp

    fresh_orphan = await made.orphan(age=0)  # e.g. an upload whose row is about to be written
    again = await sweep_blobs(services)  # the scheduler's job, at the real time
    assert again is not None
    assert (again.orphans, again.temporary) == (0, 0)
    assert await made.keys() == {live_key, fresh_orphan}
    assert made.temps() == in_flight_temp

    resume.set()
    info = await putting
    assert info.size == 9 * 1024 * 1024 + 1
    assert await made.keys() == {live_key, fresh_orphan, in_flight_key}
    assert made.temps() == set()
    content = await client.get(f"/api/attachments/{live['attachment']['id']}/content", headers=OWNER)
    assert content.content == b"live"


async def _owner(services: Services) -> str:
    return (await services.accounts.ensure_owner()).id


async def test_the_sweep_runs_at_start_up_and_hourly(make_settings: Callable[..., Settings]) -> None:
    settings = make_settings()
    orphan = f"attachments/{uuid.uuid4().hex}/{uuid.uuid4().hex}"
    store = LocalDiskStore(settings.data_dir / "blobs")
    await store.put(orphan, chunks(b"left by a crash"), max_size=100)
    then = time.time() - 2 * HOUR
    os.utime(store.root / orphan, (then, then))
    async with AsyncTestClient(create_app(settings)) as client:
        job = client.app.state.scheduler.get_job("sweep-blobs")
        assert job.trigger.interval.total_seconds() == HOUR
        for _ in range(200):
            if not await store.list("attachments/"):
                break
            await asyncio.sleep(0.05)
        assert await store.list("attachments/") == []


async def test_a_sweep_while_storage_fails_is_one_warning_and_the_next_goes_on(
    make_settings: Callable[..., Settings], caplog: pytest.LogCaptureFixture, start_up_sweep: StartUpSweep
) -> None:
    settings = make_settings()
    async with AsyncTestClient(create_app(settings)) as client:
        await start_up_sweep()
        services: Services = client.app.state.services
        orphan = await Leftovers(services).orphan(age=2 * HOUR)
        blobs = settings.data_dir / "blobs"
        blobs.rename(blobs.with_name("blobs.away"))
        blobs.write_bytes(b"")  # a file where the store's directory was
        caplog.clear()
        assert await sweep_blobs(services) is None
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
            "blob sweep skipped: storage failed (StorageError)"
        ]
        assert not [r for r in caplog.records if r.exc_info]
        blobs.unlink()
        blobs.with_name("blobs.away").rename(blobs)
        result = await sweep_blobs(services)
        assert result is not None
        assert result.orphans == 1
        assert orphan not in await Leftovers(services).keys()
