"""Blobs as objects in one S3 bucket (or an S3-compatible server), through boto3.

boto3 blocks, so every call runs in a worker thread, at most `max_threads` at a time, which
is also the size of the client's connection pool. Puts up to `part_size` are one `put_object`;
bigger ones are a multipart upload that is aborted on any failure. Create-only puts use
`If-None-Match: *`, so S3 itself decides which concurrent writer wins.
"""

import bisect
import builtins
import io
import logging
from collections.abc import AsyncIterable, AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

import anyio
import boto3
import urllib3.exceptions
from anyio import to_thread
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from storage.base import (
    DEFAULT_CONTENT_TYPE,
    BlobExists,
    BlobInfo,
    BlobNotFound,
    BlobReader,
    BlobStore,
    BlobTooLarge,
    MiB,
    StorageError,
    split_key,
)

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer
    from botocore.response import StreamingBody
    from types_boto3_s3 import S3Client
    from types_boto3_s3.type_defs import (
        CompletedPartTypeDef,
        CompleteMultipartUploadRequestTypeDef,
        PutObjectRequestTypeDef,
    )

T = TypeVar("T")

MIN_PART_SIZE = 5 * MiB  # S3's minimum for every part but the last
_READ_SIZE = 1 * MiB
_EXISTS_CODES = {"PreconditionFailed", "ConditionalRequestConflict"}
_NOT_FOUND_CODES = {"NoSuchKey", "NotFound", "404"}  # HEAD errors carry only the status
# A store that stops answering must fail a request in seconds, not hang it for boto's default minute.
CONNECT_TIMEOUT_SECONDS = 5.0
READ_TIMEOUT_SECONDS = 20.0
_UNABORTED_MAX = 1000  # failed aborts remembered for retrying (beyond: the sweep finds them)
_RETRIES_PER_CALL = 5

logger = logging.getLogger(__name__)


class S3Store(BlobStore):
    """Blobs under `prefix` in `bucket`. Pass `client` to share one; otherwise one is made here.

    A non-empty `prefix` gets a trailing `/`; it is added to every key and stripped from list
    results. `endpoint_url` selects an S3-compatible server (path-style addressing).
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        endpoint_url: str | None = None,
        region: str | None = None,
        max_threads: int = 10,
        part_size: int = 8 * MiB,
        client: "S3Client | None" = None,
    ) -> None:
        if part_size < MIN_PART_SIZE:
            raise ValueError(f"part_size must be at least {MIN_PART_SIZE} bytes")
        self.bucket = bucket
        prefix = prefix.strip("/")
        self.prefix = f"{prefix}/" if prefix else ""
        self.part_size = part_size
        self._owns_client = client is None
        self.client: S3Client = client or boto3.client(
            "s3",
            endpoint_url=endpoint_url,
            region_name=region,
            config=Config(
                max_pool_connections=max_threads,  # one connection per worker thread: no pool churn
                connect_timeout=CONNECT_TIMEOUT_SECONDS,
                read_timeout=READ_TIMEOUT_SECONDS,
                retries={"mode": "standard"},
                s3={"addressing_style": "path"} if endpoint_url else None,
            ),
        )
        self._limiter = anyio.CapacityLimiter(max_threads)
        # Multipart uploads whose abort failed (S3 was down): retried by later puts and the sweep.
        self._unaborted: set[tuple[str, str, str]] = set()  # (key, full key, upload id)
        # Multipart uploads of puts in progress here: the sweep never aborts them, however old they look.
        self._in_flight: set[str] = set()

    async def put(
        self,
        key: str,
        chunks: AsyncIterable[bytes],
        *,
        max_size: int,
        content_type: str | None = None,
        create_only: bool = False,
    ) -> BlobInfo:
        """Buffer up to one part; one put_object, or a multipart upload; see `BlobStore.put`."""
        full_key = self._full_key(key)
        content_type = content_type or DEFAULT_CONTENT_TYPE
        if self._unaborted:
            await self._retry_aborts()
        part = _Part()
        size = 0
        upload_id: str | None = None
        parts: list[CompletedPartTypeDef] = []
        try:
            async for chunk in chunks:
                size += len(chunk)
                if size > max_size:
                    raise BlobTooLarge(f"{key!r}: over {max_size} bytes")
                rest = memoryview(chunk)
                # More than fits: this part is full and more follows, so it is a multipart upload.
                # (An object of exactly one part stays a single put_object.)
                while len(rest) > (room := self.part_size - part.size):
                    part.append(rest[:room])
                    rest = rest[room:]
                    if upload_id is None:
                        upload_id = await self._create_upload(key, full_key, content_type)
                        self._in_flight.add(upload_id)
                    parts.append(await self._upload_part(key, full_key, upload_id, len(parts) + 1, part))
                    part = _Part()
                part.append(rest)
            if upload_id is None:
                etag = await self._put_object(key, full_key, part, content_type, create_only)
            else:  # the last part is never empty: a part is only sent when more bytes follow
                parts.append(await self._upload_part(key, full_key, upload_id, len(parts) + 1, part))
                etag = await self._complete_upload(key, full_key, upload_id, parts, create_only)
        except BaseException:
            if upload_id is not None:
                with anyio.CancelScope(shield=True):  # also on cancellation: no parts left to pay for
                    await self._abort_upload(key, full_key, upload_id)
            raise
        finally:
            self._in_flight.discard(upload_id or "")
        return BlobInfo(key=key, size=size, content_type=content_type, etag=etag)

    async def open(self, key: str) -> BlobReader:
        """GET the object; raises BlobNotFound before any byte is read."""
        full_key = self._full_key(key)
        response = await self._run(key, lambda: self.client.get_object(Bucket=self.bucket, Key=full_key))
        info = BlobInfo(
            key=key,
            size=response["ContentLength"],
            content_type=response.get("ContentType"),
            etag=_unquote(response.get("ETag")),
        )
        return _BodyReader(info, response["Body"], self._limiter)

    async def stat(self, key: str) -> BlobInfo:
        """HEAD the object; raises BlobNotFound."""
        full_key = self._full_key(key)
        response = await self._run(key, lambda: self.client.head_object(Bucket=self.bucket, Key=full_key))
        return BlobInfo(
            key=key,
            size=response["ContentLength"],
            content_type=response.get("ContentType"),
            etag=_unquote(response.get("ETag")),
        )

    async def delete(self, key: str) -> None:
        """DELETE the object (S3 deletes are idempotent)."""
        full_key = self._full_key(key)
        await self._run(key, lambda: self.client.delete_object(Bucket=self.bucket, Key=full_key))

    async def list(self, prefix: str = "") -> builtins.list[BlobInfo]:
        """List every page in one worker thread; keys come back without the store prefix."""

        def list_all() -> builtins.list[BlobInfo]:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix + prefix
            )
            return [
                BlobInfo(
                    key=item["Key"][len(self.prefix) :],
                    size=item["Size"],
                    etag=_unquote(item.get("ETag")),
                    modified_at=item["LastModified"].timestamp(),
                )
                for page in pages
                for item in page.get("Contents", [])
            ]

        return await self._run(prefix, list_all)

    async def check(self) -> None:
        """HEAD the bucket; the StorageError's message says why it is not reachable."""
        try:
            await to_thread.run_sync(lambda: self.client.head_bucket(Bucket=self.bucket), limiter=self._limiter)
        except ClientError as err:
            error = err.response.get("Error", {})
            status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            reason = {404: "no such bucket", 403: "access denied"}.get(status or 0) or error.get("Code") or str(status)
            raise StorageError(reason) from None
        except BotoCoreError as err:
            raise StorageError(" ".join(str(err).split())) from None

    async def sweep_temporary(self, older_than: float) -> int:
        """Abort the incomplete multipart uploads under the prefix started before `older_than` (except this
        store's own puts in progress: a server's clock and S3's may disagree)."""
        if self._unaborted:
            await self._retry_aborts()

        def stale_uploads() -> builtins.list[tuple[str, str]]:
            pages = self.client.get_paginator("list_multipart_uploads").paginate(Bucket=self.bucket, Prefix=self.prefix)
            return [
                (upload["Key"], upload["UploadId"])
                for page in pages
                for upload in page.get("Uploads", [])
                if upload["Initiated"].timestamp() < older_than and upload["UploadId"] not in self._in_flight
            ]

        stale = await self._run(self.prefix, stale_uploads)
        for full_key, upload_id in stale:
            await self._run(
                full_key,
                lambda k=full_key, u=upload_id: self.client.abort_multipart_upload(  # type: ignore[misc]
                    Bucket=self.bucket, Key=k, UploadId=u
                ),
            )
        return len(stale)

    async def aclose(self) -> None:
        """Close the client's connections, if this store made the client."""
        if self._owns_client:
            await to_thread.run_sync(self.client.close, limiter=self._limiter)

    # --- one boto3 call each, in a worker thread ---

    async def _run(self, key: str, call: Callable[[], T]) -> T:
        """Run one blocking boto3 call in a worker thread and map its errors."""
        try:
            return await to_thread.run_sync(call, limiter=self._limiter)
        except ClientError as err:
            raise _storage_error(key, err) from err
        except BotoCoreError as err:
            raise StorageError(f"{key!r}: {err}") from err

    async def _put_object(self, key: str, full_key: str, body: "_Part", content_type: str, create_only: bool) -> str:
        request: PutObjectRequestTypeDef = {
            "Bucket": self.bucket,
            "Key": full_key,
            "Body": body.reader(),
            "ContentType": content_type,
        }
        if create_only:
            request["IfNoneMatch"] = "*"
        try:
            response = await self._run(key, lambda: self.client.put_object(**request))
        finally:
            body.close()
        return _unquote(response["ETag"]) or ""

    async def _create_upload(self, key: str, full_key: str, content_type: str) -> str:
        response = await self._run(
            key,
            lambda: self.client.create_multipart_upload(Bucket=self.bucket, Key=full_key, ContentType=content_type),
        )
        return response["UploadId"]

    async def _upload_part(
        self, key: str, full_key: str, upload_id: str, number: int, body: "_Part"
    ) -> "CompletedPartTypeDef":
        try:
            response = await self._run(
                key,
                lambda: self.client.upload_part(
                    Bucket=self.bucket, Key=full_key, UploadId=upload_id, PartNumber=number, Body=body.reader()
                ),
            )
        finally:
            body.close()
        return {"PartNumber": number, "ETag": response["ETag"]}

    async def _complete_upload(
        self, key: str, full_key: str, upload_id: str, parts: "Sequence[CompletedPartTypeDef]", create_only: bool
    ) -> str:
        request: CompleteMultipartUploadRequestTypeDef = {
            "Bucket": self.bucket,
            "Key": full_key,
            "UploadId": upload_id,
            "MultipartUpload": {"Parts": parts},
        }
        if create_only:
            request["IfNoneMatch"] = "*"
        response = await self._run(key, lambda: self.client.complete_multipart_upload(**request))
        return _unquote(response.get("ETag")) or ""

    async def _abort_upload(self, key: str, full_key: str, upload_id: str) -> None:
        def abort() -> None:
            try:
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=full_key, UploadId=upload_id)
            except ClientError as err:
                if err.response.get("Error", {}).get("Code") != "NoSuchUpload":  # already gone is done
                    raise

        try:
            await self._run(key, abort)
        except StorageError as err:
            # S3 is likely down: a later put (or the sweep, or the bucket's AbortIncompleteMultipartUpload
            # rule) aborts it once it is back. The failure itself was reported by the put.
            if len(self._unaborted) < _UNABORTED_MAX:
                self._unaborted.add((key, full_key, upload_id))
            logger.info("multipart upload %s of %r not aborted yet (%s)", upload_id, full_key, type(err).__name__)
        else:
            self._unaborted.discard((key, full_key, upload_id))

    async def _retry_aborts(self) -> None:
        """Abort a few of the uploads whose abort failed earlier (each put pays for a few at most)."""
        for key, full_key, upload_id in list(self._unaborted)[:_RETRIES_PER_CALL]:
            await self._abort_upload(key, full_key, upload_id)

    def _full_key(self, key: str) -> str:
        split_key(key)
        return self.prefix + key


class _Part(io.RawIOBase):
    """One part's chunks, kept as they arrived, that boto3 reads as one seekable file.

    Joining the chunks into one bytes object instead would briefly double the memory per part.
    """

    def __init__(self) -> None:
        super().__init__()
        self._chunks: list[memoryview] = []
        self._ends: list[int] = []  # the offset just past each chunk
        self._pos = 0

    @property
    def size(self) -> int:
        return self._ends[-1] if self._ends else 0

    def append(self, chunk: memoryview) -> None:
        if chunk:
            self._ends.append(self.size + len(chunk))
            self._chunks.append(chunk)

    def close(self) -> None:
        """Drop the chunks now: boto3 may keep a reference to the body until a later GC."""
        self._chunks.clear()
        self._ends.clear()
        super().close()

    def reader(self) -> io.BufferedReader:
        """The part from its start, as the binary file boto3 takes as a body."""
        self.seek(0)
        return io.BufferedReader(self)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: "WriteableBuffer") -> int:
        """Copy from the chunk at the current position (a short read, as files may return)."""
        index = bisect.bisect_right(self._ends, self._pos)
        if index == len(self._chunks):
            return 0
        chunk = self._chunks[index]
        start = self._pos - (self._ends[index] - len(chunk))
        target = memoryview(buffer).cast("B")
        count = min(len(target), len(chunk) - start)
        target[:count] = chunk[start : start + count]
        self._pos += count
        return count


class _BodyReader(BlobReader):
    def __init__(self, info: BlobInfo, body: "StreamingBody", limiter: anyio.CapacityLimiter) -> None:
        super().__init__(info)
        self._body = body
        self._limiter = limiter

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            while chunk := await to_thread.run_sync(self._body.read, _READ_SIZE, limiter=self._limiter):
                yield chunk
        except (BotoCoreError, urllib3.exceptions.HTTPError, OSError) as err:  # connection lost or a short body
            raise StorageError(f"{self.info.key!r}: {err}") from err
        finally:
            self._body.close()

    async def aclose(self) -> None:
        self._body.close()


def _storage_error(key: str, err: ClientError) -> StorageError:
    code = err.response.get("Error", {}).get("Code", "")
    status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    if code in _EXISTS_CODES or status == 412:
        return BlobExists(key)
    if code in _NOT_FOUND_CODES:
        return BlobNotFound(key)
    return StorageError(f"{key!r}: {code or status}: {err}")


def _unquote(etag: str | None) -> str | None:
    return etag.strip('"') if etag else None
