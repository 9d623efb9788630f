"""One contract suite for every BlobStore: local disk, moto in-process and moto's HTTP server.

moto's server and the fake AWS credentials are tests/s3_server.py's (``moto_server_url``, ``aws_credentials``).

Big streams are generated lazily in 64 KiB pieces, as a request body would arrive.
"""

import contextlib
import hashlib
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from botocore.stub import ANY, Stubber
from moto import mock_aws

from storage import (
    BlobExists,
    BlobInfo,
    BlobNotFound,
    BlobStore,
    BlobTooLarge,
    InvalidKey,
    LocalDiskStore,
    StorageError,
    open_blob_store,
)
from storage.s3 import S3Store

pytestmark = pytest.mark.anyio

KiB = 1024
MiB = 1024 * KiB
PART = 5 * MiB  # S3's minimum part size keeps the multipart tests small
LOCAL = "local"
S3_BACKENDS = [pytest.param("moto", marks=pytest.mark.s3), pytest.param("moto-server", marks=pytest.mark.s3)]


@dataclass
class Backend:
    store: BlobStore
    residue: Callable[[], list[str]]  # every file under the root, or every object and open upload
    root: Path | None = None  # local disk only
    s3: S3Store | None = None  # S3 only


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=[LOCAL, *S3_BACKENDS])
async def backend(request: pytest.FixtureRequest, tmp_path: Path, aws_credentials: None) -> AsyncIterator[Backend]:
    if request.param == LOCAL:
        root = tmp_path / "blobs"
        yield Backend(LocalDiskStore(root), lambda: _files_under(root), root=root)
        return
    endpoint_url = request.getfixturevalue("moto_server_url") if request.param == "moto-server" else None
    with mock_aws() if endpoint_url is None else contextlib.nullcontext():
        store = S3Store(f"pheby-{uuid.uuid4().hex[:12]}", prefix="tenant", endpoint_url=endpoint_url, part_size=PART)
        store.client.create_bucket(Bucket=store.bucket)
        yield Backend(store, lambda: _s3_residue(store), s3=store)
        await store.aclose()


def _files_under(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*") if not path.is_dir())


def _s3_residue(store: S3Store) -> list[str]:
    objects = store.client.list_objects_v2(Bucket=store.bucket).get("Contents", [])
    uploads = store.client.list_multipart_uploads(Bucket=store.bucket).get("Uploads", [])
    return sorted(
        [item["Key"].removeprefix(store.prefix) for item in objects]
        + [f"upload:{upload.get('Key')}" for upload in uploads]
    )


def _blocks(size: int, seed: int = 0, chunk: int = 64 * KiB) -> Iterator[bytes]:
    """`size` deterministic bytes; every piece differs, so a lost or reordered piece shows."""
    for index, start in enumerate(range(0, size, chunk)):
        yield ((seed << 32 | index).to_bytes(8, "big") * (chunk // 8))[: size - start]


async def stream(size: int, seed: int = 0) -> AsyncIterator[bytes]:
    for block in _blocks(size, seed):
        yield block


def digest(size: int, seed: int = 0) -> str:
    hasher = hashlib.sha256()
    for block in _blocks(size, seed):
        hasher.update(block)
    return hasher.hexdigest()


async def read_back(store: BlobStore, key: str) -> tuple[BlobInfo, str]:
    hasher = hashlib.sha256()
    async with await store.open(key) as reader:
        async for chunk in reader:
            hasher.update(chunk)
    return reader.info, hasher.hexdigest()


# --- round trips ---


@pytest.mark.parametrize("size", [0, 1000, 12 * MiB + 3], ids=["empty", "small", "multipart"])
async def test_round_trip(backend: Backend, size: int) -> None:
    store = backend.store
    info = await store.put("docs/a.bin", stream(size), max_size=16 * MiB, content_type="application/pdf")
    assert (info.key, info.size, info.content_type) == ("docs/a.bin", size, "application/pdf")
    assert info.etag
    assert await store.stat("docs/a.bin") == info
    assert await read_back(store, "docs/a.bin") == (info, digest(size))
    assert backend.residue() == ["docs/a.bin"]
    if backend.s3 is not None and size > PART:
        assert info.etag.endswith("-3")  # really a three-part upload


async def test_overwrite_replaces_and_defaults_the_content_type(backend: Backend) -> None:
    first = await backend.store.put("k", stream(100, seed=1), max_size=MiB)
    second = await backend.store.put("k", stream(200, seed=2), max_size=MiB)
    assert first.content_type == second.content_type == "application/octet-stream"
    assert first.etag != second.etag
    assert await read_back(backend.store, "k") == (second, digest(200, seed=2))
    assert backend.residue() == ["k"]


async def test_reader_can_stop_early(backend: Backend) -> None:
    await backend.store.put("k", stream(3 * MiB), max_size=4 * MiB)
    async with await backend.store.open("k") as reader:
        assert reader.info.size == 3 * MiB
        async for chunk in reader:
            assert chunk
            break
    await backend.store.delete("k")
    assert backend.residue() == []


async def test_stat_list_delete(backend: Backend) -> None:
    store = backend.store
    keys = ["a/1", "a/2", "ab", "b/1"]
    for size, key in enumerate(keys, start=1):
        await store.put(key, stream(size), max_size=MiB, content_type="text/plain")
    listed = await store.list()
    assert [(i.key, i.size, i.content_type) for i in listed] == [(k, n, None) for n, k in enumerate(keys, start=1)]
    assert [i.etag for i in listed] == [(await store.stat(k)).etag for k in keys]
    assert [i.key for i in await store.list("a/")] == ["a/1", "a/2"]
    assert [i.key for i in await store.list("a")] == ["a/1", "a/2", "ab"]
    assert await store.list("zzz") == []

    await store.delete("a/1")
    await store.delete("a/1")  # idempotent
    await store.delete("never/was")
    assert [i.key for i in await store.list("a/")] == ["a/2"]
    with pytest.raises(BlobNotFound):
        await store.stat("a/1")
    with pytest.raises(BlobNotFound):
        await store.open("a/1")


async def test_missing_blob(backend: Backend) -> None:
    with pytest.raises(BlobNotFound):
        await backend.store.stat("nope")
    with pytest.raises(BlobNotFound):
        await backend.store.open("no/such/key")
    assert await backend.store.list() == []


# --- size limit, failures and cancellation leave nothing behind ---


async def test_too_large_stops_streaming_and_leaves_nothing(backend: Backend) -> None:
    consumed = 0

    async def big() -> AsyncIterator[bytes]:
        nonlocal consumed
        async for chunk in stream(64 * MiB):
            consumed += len(chunk)
            yield chunk

    with pytest.raises(BlobTooLarge):
        await backend.store.put("big", big(), max_size=8 * MiB)
    assert consumed <= 8 * MiB + 64 * KiB  # refused while streaming, not after
    assert backend.residue() == []  # no object, no temp file, no open multipart upload
    with pytest.raises(BlobNotFound):
        await backend.store.stat("big")


async def test_limit_is_inclusive(backend: Backend) -> None:
    assert (await backend.store.put("k", stream(1000), max_size=1000)).size == 1000
    with pytest.raises(BlobTooLarge):
        await backend.store.put("k2", stream(1001), max_size=1000)


async def test_failed_overwrite_keeps_the_old_blob(backend: Backend) -> None:
    old = await backend.store.put("k", stream(10, seed=7), max_size=MiB)
    with pytest.raises(BlobTooLarge):
        await backend.store.put("k", stream(12 * MiB), max_size=8 * MiB)
    assert await read_back(backend.store, "k") == (old, digest(10, seed=7))
    assert backend.residue() == ["k"]


async def test_source_error_leaves_nothing(backend: Backend) -> None:
    async def broken() -> AsyncIterator[bytes]:
        async for chunk in stream(7 * MiB):
            yield chunk
        raise RuntimeError("client went away")

    with pytest.raises(RuntimeError, match="client went away"):
        await backend.store.put("k", broken(), max_size=16 * MiB)
    assert backend.residue() == []


async def test_cancellation_mid_put_leaves_nothing(backend: Backend) -> None:
    stalled = anyio.Event()

    async def stalling() -> AsyncIterator[bytes]:
        async for chunk in stream(7 * MiB):  # past the first S3 part and several local writes
            yield chunk
        stalled.set()
        await anyio.sleep_forever()

    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: backend.store.put("k", stalling(), max_size=16 * MiB))
        await stalled.wait()
        assert backend.residue() != []  # a temp file or an open multipart upload exists...
        tg.cancel_scope.cancel()
    assert backend.residue() == []  # ...and is gone


# --- create-only puts ---


async def test_create_only_race_has_one_winner(backend: Backend) -> None:
    winners: list[int] = []
    losers: list[int] = []

    async def attempt(seed: int) -> None:
        try:
            await backend.store.put("race", stream(4 * KiB, seed=seed), max_size=MiB, create_only=True)
            winners.append(seed)
        except BlobExists:
            losers.append(seed)

    async with anyio.create_task_group() as tg:
        for seed in range(20):
            tg.start_soon(attempt, seed)
    assert len(winners) == 1
    assert len(losers) == 19
    assert (await read_back(backend.store, "race"))[1] == digest(4 * KiB, seed=winners[0])
    assert backend.residue() == ["race"]


async def test_create_only_multipart_over_existing_key(backend: Backend) -> None:
    first = await backend.store.put("k", stream(12 * MiB, seed=1), max_size=16 * MiB, create_only=True)
    with pytest.raises(BlobExists):
        await backend.store.put("k", stream(12 * MiB, seed=2), max_size=16 * MiB, create_only=True)
    assert await read_back(backend.store, "k") == (first, digest(12 * MiB, seed=1))
    assert backend.residue() == ["k"]  # the losing multipart upload was aborted


# --- keys ---

BAD_KEYS = ["../x", "/etc/passwd", "a/../../b", "a\x00b", "a\\b", "", "a//b", "a/", "./a", "a/./b"]


@pytest.mark.parametrize("key", BAD_KEYS)
async def test_invalid_keys_are_refused(backend: Backend, tmp_path: Path, key: str) -> None:
    store = backend.store
    with pytest.raises(InvalidKey):
        await store.put(key, stream(10), max_size=MiB)
    with pytest.raises(InvalidKey):
        await store.open(key)
    with pytest.raises(InvalidKey):
        await store.stat(key)
    with pytest.raises(InvalidKey):
        await store.delete(key)
    assert not (tmp_path / "x").exists()
    assert not (tmp_path / "b").exists()
    assert backend.residue() == []


@pytest.mark.parametrize("backend", [LOCAL], indirect=True)
async def test_planted_symlinks_are_never_followed(backend: Backend, tmp_path: Path) -> None:
    assert backend.root is not None
    outside_file = tmp_path / "outside.txt"
    outside_file.write_bytes(b"secret")
    outside_dir = tmp_path / "outside-dir"
    outside_dir.mkdir()
    (outside_dir / "x").write_bytes(b"secret")
    (backend.root / "sub").mkdir(parents=True)
    (backend.root / "link").symlink_to(outside_file)
    (backend.root / "dirlink").symlink_to(outside_dir)
    (backend.root / "sub" / "deep").symlink_to(outside_dir)

    for key in ["link", "dirlink/x", "dirlink/new", "sub/deep/x"]:
        with pytest.raises(InvalidKey):
            await backend.store.put(key, stream(5), max_size=MiB)
        with pytest.raises(InvalidKey):
            await backend.store.put(key, stream(5), max_size=MiB, create_only=True)
        with pytest.raises((InvalidKey, BlobNotFound)):
            await backend.store.open(key)
        with pytest.raises((InvalidKey, BlobNotFound)):
            await backend.store.stat(key)
        with pytest.raises(InvalidKey):
            await backend.store.delete(key)

    assert outside_file.read_bytes() == b"secret"
    assert sorted(p.name for p in outside_dir.iterdir()) == ["x"]
    assert (outside_dir / "x").read_bytes() == b"secret"
    assert (backend.root / "link").is_symlink()
    assert await backend.store.list() == []
    assert list((backend.root / ".tmp").iterdir()) == []


@pytest.mark.parametrize("backend", [LOCAL], indirect=True)
async def test_local_reserves_its_temp_dir(backend: Backend) -> None:
    with pytest.raises(InvalidKey):
        await backend.store.put(".tmp/x", stream(5), max_size=MiB)


# --- S3 specifics ---


@pytest.mark.parametrize("backend", S3_BACKENDS, indirect=True)
async def test_s3_prefix_is_applied_and_stripped(backend: Backend) -> None:
    assert backend.s3 is not None
    await backend.store.put("docs/a", stream(10), max_size=MiB)
    head = backend.s3.client.head_object(Bucket=backend.s3.bucket, Key="tenant/docs/a")
    assert head["ContentLength"] == 10
    assert [i.key for i in await backend.store.list("docs/")] == ["docs/a"]


@pytest.mark.s3
@pytest.mark.parametrize("status", [409, 412])
async def test_s3_conditional_conflicts_mean_exists_and_abort(aws_credentials: None, status: int) -> None:
    code = "ConditionalRequestConflict" if status == 409 else "PreconditionFailed"
    store = S3Store("bucket", region="us-east-1", part_size=PART)
    with Stubber(store.client) as stub:
        stub.add_client_error("put_object", service_error_code=code, http_status_code=status)
        with pytest.raises(BlobExists):
            await store.put("k", stream(10), max_size=MiB, create_only=True)

        stub.add_response("create_multipart_upload", {"UploadId": "u1"})
        for number in (1, 2):
            part = {"Bucket": "bucket", "Key": "k", "UploadId": "u1", "PartNumber": number, "Body": ANY}
            stub.add_response("upload_part", {"ETag": f'"e{number}"'}, part)
        stub.add_client_error("complete_multipart_upload", service_error_code=code, http_status_code=status)
        stub.add_response("abort_multipart_upload", {}, {"Bucket": "bucket", "Key": "k", "UploadId": "u1"})
        with pytest.raises(BlobExists):
            await store.put("k", stream(6 * MiB), max_size=8 * MiB, create_only=True)
        stub.assert_no_pending_responses()
    await store.aclose()


@pytest.mark.s3
async def test_s3_other_errors_are_storage_errors(aws_credentials: None) -> None:
    store = S3Store("bucket", region="us-east-1")
    with Stubber(store.client) as stub:
        stub.add_client_error("head_object", service_error_code="AccessDenied", http_status_code=403)
        with pytest.raises(StorageError) as caught:
            await store.stat("k")
    assert type(caught.value) is StorageError
    await store.aclose()


# --- the factory ---


async def test_open_blob_store(tmp_path: Path, aws_credentials: None) -> None:
    local = open_blob_store("local", data_dir=tmp_path, s3_bucket=None, s3_prefix="", s3_endpoint_url=None)
    assert isinstance(local, LocalDiskStore)
    assert local.root == tmp_path / "blobs"
    s3 = open_blob_store("s3", data_dir=tmp_path, s3_bucket="b", s3_prefix="/p/", s3_endpoint_url="http://127.0.0.1:1")
    assert isinstance(s3, S3Store)
    assert (s3.bucket, s3.prefix) == ("b", "p/")
    await s3.aclose()
    with pytest.raises(ValueError, match="PHEBY_S3_BUCKET"):
        open_blob_store("s3", data_dir=tmp_path, s3_bucket=None, s3_prefix="", s3_endpoint_url=None)
    with pytest.raises(ValueError, match="unknown storage kind"):
        open_blob_store("ftp", data_dir=tmp_path, s3_bucket=None, s3_prefix="", s3_endpoint_url=None)
