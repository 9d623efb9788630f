"""Streaming an attachment's bytes: stored type, safe download name, nosniff, no caching."""

from collections.abc import AsyncIterator
from urllib.parse import quote

from litestar.response import Stream

from pheby.attachments import Attachment
from pheby.services import Services


def content_disposition(filename: str, disposition: str = "attachment") -> str:
    """RFC 6266: an ASCII fallback plus the UTF-8 name; quotes and separators can't break out."""
    fallback = "".join(c if c.isascii() and c.isprintable() and c not in '"\\;' else "_" for c in filename) or "file"
    return f"{disposition}; filename=\"{fallback}\"; filename*=UTF-8''{quote(filename, safe='')}"


async def attachment_download(services: Services, attachment: Attachment) -> Stream:
    reader = await services.attachments.open_bytes(attachment)

    async def body() -> AsyncIterator[bytes]:
        async with reader:
            async for chunk in reader:
                yield chunk

    return Stream(
        body(),
        media_type=attachment.mime,
        headers={
            "Content-Disposition": content_disposition(attachment.filename),
            "Content-Length": str(reader.info.size),
            "Cache-Control": "no-store",
            "X-Content-Type-Options": "nosniff",
        },
    )
