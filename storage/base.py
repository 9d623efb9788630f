"""The blob store interface: keys, metadata, errors and the streaming reader.

A key is a `/`-separated path of non-empty segments, such as `attachments/4f2c/photo.jpg`.
The rules are the same for every backend, so a key that works on local disk works on S3.
"""

import abc
import builtins
from collections.abc import AsyncIterable, AsyncIterator
from types import TracebackType
from typing import Self

import msgspec

MiB = 1024 * 1024
DEFAULT_CONTENT_TYPE = "application/octet-stream"
MAX_KEY_BYTES = 1024  # the S3 limit
MAX_SEGMENT_BYTES = 255  # the usual file-name limit


class StorageError(Exception):
    """Base class of every blob store error.

    Raised as itself, it means the store failed (unreachable, timing out, refusing, a broken disk):
    nothing the caller did, and it may pass when the store comes back.
    """


class BlobNotFound(StorageError):
    """No blob has this key."""


class BlobTooLarge(StorageError):
    """The stream went over `max_size`; nothing was stored."""


class BlobExists(StorageError):
    """A create-only put found the key taken; the existing blob is unchanged."""


class InvalidKey(StorageError):
    """The key breaks the key rules, or its path is not a plain file under the root."""


class BlobInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What a store knows about one blob.

    `content_type` is None only in `list` results (listing does not fetch it).
    `etag` is opaque and unquoted; it changes whenever the blob is rewritten.
    `modified_at` (Unix time the blob was last written) is set in `list` results only.
    """

    key: str
    size: int
    content_type: str | None = None
    etag: str | None = None
    modified_at: float | None = None


def split_key(key: str) -> list[str]:
    """Return the segments of `key`, or raise InvalidKey if it breaks the key rules."""
    try:
        encoded = key.encode()
    except UnicodeEncodeError:
        raise InvalidKey(f"{key!r}: not valid UTF-8") from None
    if not key or len(encoded) > MAX_KEY_BYTES:
        raise InvalidKey(f"{key!r}: must be 1 to {MAX_KEY_BYTES} bytes")
    if "\\" in key or any(ord(c) < 0x20 or ord(c) == 0x7F for c in key):
        raise InvalidKey(f"{key!r}: backslashes and control characters are not allowed")
    parts = key.split("/")
    for part in parts:
        if part in ("", ".", "..") or len(part.encode()) > MAX_SEGMENT_BYTES:
            raise InvalidKey(f"{key!r}: empty, '.', '..' or over-long segment (or a leading '/')")
    return parts


class BlobReader(abc.ABC):
    """An open blob: `info` is known before the first byte is read.

    Iterate it once for the bytes; the reader closes itself when the iteration ends.
    Use `async with` (or call `aclose`) when you may stop early.
    """

    def __init__(self, info: BlobInfo) -> None:
        self.info = info

    @abc.abstractmethod
    def __aiter__(self) -> AsyncIterator[bytes]:
        """Yield the blob's bytes in chunks."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Release the file or connection. Safe to call twice."""

    async def read(self) -> bytes:
        """Read the whole blob into memory (for small blobs only)."""
        return b"".join([chunk async for chunk in self])

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class BlobStore(abc.ABC):
    """Where attachment and artifact bytes live. Every method is safe to call concurrently."""

    @abc.abstractmethod
    async def put(
        self,
        key: str,
        chunks: AsyncIterable[bytes],
        *,
        max_size: int,
        content_type: str | None = None,
        create_only: bool = False,
    ) -> BlobInfo:
        """Store the streamed bytes under `key`, replacing any blob there, all or nothing.

        Chunks are held by reference until written, so pass fresh `bytes`, not a reused buffer.

        Raises:
            BlobTooLarge: the stream went over `max_size` bytes (checked while streaming).
            BlobExists: `create_only` is set and the key is taken.
            InvalidKey: the key breaks the key rules.

        On any failure, cancellation included, nothing is left behind and an existing blob
        is unchanged. `content_type` defaults to `application/octet-stream`.
        """

    @abc.abstractmethod
    async def open(self, key: str) -> BlobReader:
        """Open a blob for streaming; raises BlobNotFound before any byte is sent."""

    @abc.abstractmethod
    async def stat(self, key: str) -> BlobInfo:
        """Return the blob's metadata; raises BlobNotFound."""

    @abc.abstractmethod
    async def delete(self, key: str) -> None:
        """Remove the blob; a missing key is not an error."""

    @abc.abstractmethod
    async def list(self, prefix: str = "") -> builtins.list[BlobInfo]:
        """Return the blobs whose key starts with `prefix` (a plain string prefix), sorted by key."""

    @abc.abstractmethod
    async def check(self) -> None:
        """Raise StorageError (its message a short reason) unless the store can be read and written now."""

    @abc.abstractmethod
    async def sweep_temporary(self, older_than: float) -> int:
        """Remove what failed or abandoned puts left behind (temp files, incomplete uploads) that was
        started before `older_than` (Unix time), or at any age where the store can tell that no put
        holds it (local disk: a crash's leftovers at once), never a put still in flight; returns how many."""

    async def aclose(self) -> None:  # noqa: B027 - most stores hold nothing to release
        """Release clients and connections."""
