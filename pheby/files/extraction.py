"""Text extraction for agent input: UTF-8 text, and PDFs with pypdf in a worker thread.

Statuses are exactly `ready | truncated | image | unavailable | encrypted | failed`. Text is capped
at 100,000 characters; PDFs are bounded in pages and in time.
"""

import codecs
import logging
import tempfile
import time
from typing import IO, Literal

import anyio
import msgspec
from pypdf import PdfReader

from pheby.files.file_types import is_text
from storage import BlobStore

log = logging.getLogger("pheby.files.extraction")

ExtractionStatus = Literal["ready", "truncated", "image", "unavailable", "encrypted", "failed"]
TEXT_LIMIT = 100_000
PDF_MAX_PAGES = 1000
PDF_MAX_SECONDS = 30.0
_TEXT_READ_BYTES = TEXT_LIMIT * 4 + 4  # enough UTF-8 for TEXT_LIMIT characters and one more
_SPOOL_BYTES = 8 * 1024 * 1024


# Encrypted and broken files are refused as agent or model input.
UNUSABLE = frozenset({"encrypted", "failed"})


class Extraction(msgspec.Struct, frozen=True):
    status: ExtractionStatus
    text: str | None = None


def extract_text(data: bytes, more_follows: bool) -> Extraction:
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        text = decoder.decode(data, final=not more_follows)
    except UnicodeDecodeError:
        return Extraction("failed")
    if len(text) > TEXT_LIMIT or more_follows:
        return Extraction("truncated", text[:TEXT_LIMIT])
    return Extraction("ready", text)


def extract_pdf(file: IO[bytes], max_pages: int = PDF_MAX_PAGES, max_seconds: float = PDF_MAX_SECONDS) -> Extraction:
    """Blocking: call in a worker thread."""
    try:
        reader = PdfReader(file)
        if reader.is_encrypted:
            return Extraction("encrypted")
        deadline = time.monotonic() + max_seconds
        parts: list[str] = []
        length = 0
        truncated = len(reader.pages) > max_pages
        for index, page in enumerate(reader.pages):
            if index >= max_pages or time.monotonic() > deadline:
                truncated = True
                break
            text = page.extract_text() or ""
            parts.append(text)
            length += len(text) + 2
            if length > TEXT_LIMIT:
                truncated = True
                break
    except Exception as exc:  # noqa: BLE001 - pypdf raises many kinds of errors on damaged files
        log.info("PDF extraction failed: %s", type(exc).__name__)
        return Extraction("failed")
    text = "\n\n".join(parts).strip()
    if not text:
        return Extraction("unavailable")
    if truncated or len(text) > TEXT_LIMIT:
        return Extraction("truncated", text[:TEXT_LIMIT])
    return Extraction("ready", text)


async def extract(blobs: BlobStore, key: str, mime: str) -> Extraction:
    """Extract what can be extracted from a stored blob."""
    if mime.startswith("image/"):
        return Extraction("image")
    if is_text(mime):
        data = b""
        async with await blobs.open(key) as reader:
            async for chunk in reader:
                data += chunk
                if len(data) > _TEXT_READ_BYTES:
                    break
        return extract_text(data[:_TEXT_READ_BYTES], more_follows=len(data) > _TEXT_READ_BYTES)
    if mime == "application/pdf":
        with tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES) as spool:
            async with await blobs.open(key) as reader:
                async for chunk in reader:
                    await anyio.to_thread.run_sync(spool.write, chunk)
            spool.seek(0)
            return await anyio.to_thread.run_sync(lambda: extract_pdf(spool))
    return Extraction("unavailable")
