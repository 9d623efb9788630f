"""Streaming an attachment's bytes: stored type, safe download name, nosniff, no caching.

Once the headers are out, a storage failure can only cut the response: it ends without its last
byte (the declared Content-Length tells the client it is incomplete) and the server logs one warning
line, instead of an exception escaping into the ASGI server after the response started.
"""

import logging
import re
from collections.abc import AsyncIterator
from urllib.parse import quote

from litestar.response.streaming import ASGIStreamingResponse
from litestar.types import Receive, Send

from pheby.services import Services
from pheby.store.attachments import Attachment
from storage import BlobReader, StorageError

log = logging.getLogger("pheby.http")


FILENAME_STEM_MAX = 100
_UNSAFE = re.compile(r"[^\w .-]+")  # \w is Unicode-aware: letters and digits of any script stay


def download_stem(title: str, fallback: str) -> str:
    """A download name's stem from a title: no separators, quotes or control characters, never hidden or empty."""
    return " ".join(_UNSAFE.sub("_", title).split()).strip(" ._")[:FILENAME_STEM_MAX].strip(" ._") or fallback


def content_disposition(filename: str, disposition: str = "attachment") -> str:
    """RFC 6266: an ASCII fallback plus the UTF-8 name; quotes and separators can't break out."""
    fallback = "".join(c if c.isascii() and c.isprintable() and c not in '"\\;' else "_" for c in filename) or "file"
    return f"{disposition}; filename=\"{fallback}\"; filename*=UTF-8''{quote(filename, safe='')}"


class BlobResponse(ASGIStreamingResponse):
    """A blob's bytes; a storage failure mid-stream cuts the response (the ASGI server closes the connection)."""

    async def send_body(self, send: Send, receive: Receive) -> None:
        try:
            await super().send_body(send, receive)
        except* StorageError as failures:
            log.warning("download cut: storage failed mid-stream (%s)", failures.exceptions[0])


async def attachment_download(services: Services, attachment: Attachment) -> BlobResponse:
    reader = await services.attachments.open_bytes(attachment)
    return BlobResponse(
        iterator=_chunks(reader),
        media_type=attachment.mime,
        status_code=200,
        headers={
            "Content-Disposition": content_disposition(attachment.filename),
            "Content-Length": str(reader.info.size),
            "Cache-Control": "no-store",
            "X-Content-Type-Options": "nosniff",
        },
    )


async def _chunks(reader: BlobReader) -> AsyncIterator[bytes]:
    async with reader:
        async for chunk in reader:
            yield chunk
