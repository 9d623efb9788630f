"""Blob storage: one interface (`BlobStore`) with a local-disk and an S3 implementation (`storage.s3.S3Store`,
imported where S3 is used: boto3 alone takes a fifth of a second to import)."""

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

__all__ = [
    "BlobExists",
    "BlobInfo",
    "BlobNotFound",
    "BlobReader",
    "BlobStore",
    "BlobTooLarge",
    "InvalidKey",
    "LocalDiskStore",
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
        from storage.s3 import S3Store

        return S3Store(s3_bucket, prefix=s3_prefix, endpoint_url=s3_endpoint_url)
    raise ValueError(f"unknown storage kind {kind!r}: expected 'local' or 's3'")
