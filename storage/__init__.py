"""Blob storage: one interface (`BlobStore`) with a local-disk and an S3 implementation."""

from pathlib import Path

from storage.base import (
    BlobExists,
    BlobInfo,
    BlobNotFound,
    BlobReader,
    BlobStore,
    BlobTooLarge,
    InvalidKey,
    StorageError,
)
from storage.local import LocalDiskStore
from storage.s3 import S3Store

__all__ = [
    "BlobExists",
    "BlobInfo",
    "BlobNotFound",
    "BlobReader",
    "BlobStore",
    "BlobTooLarge",
    "InvalidKey",
    "LocalDiskStore",
    "S3Store",
    "StorageError",
    "open_blob_store",
]


def open_blob_store(
    kind: str,
    *,
    data_dir: Path,
    s3_bucket: str | None = None,
    s3_prefix: str = "",
    s3_endpoint_url: str | None = None,
) -> BlobStore:
    """Build the store named by PHEBY_STORAGE: `local` (under `data_dir/blobs`) or `s3`."""
    if kind == "local":
        return LocalDiskStore(data_dir / "blobs")
    if kind == "s3":
        if not s3_bucket:
            raise ValueError("PHEBY_STORAGE=s3 needs PHEBY_S3_BUCKET")
        return S3Store(s3_bucket, prefix=s3_prefix, endpoint_url=s3_endpoint_url)
    raise ValueError(f"unknown storage kind {kind!r}: expected 'local' or 's3'")
