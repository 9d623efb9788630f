"""What a file is: filename rules, the Hope MIME allow-list with signature checks, and display kinds."""

import codecs
import unicodedata
from collections.abc import AsyncIterable, AsyncIterator

from pheby.errors import UnsupportedMediaType

HOPE_MIME_TYPES = frozenset({"text/plain", "text/markdown", "application/pdf", "image/png", "image/jpeg", "image/webp"})
INLINE_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/webp", "image/gif"})
VOICE_TYPES = frozenset({"audio/ogg", "audio/opus", "audio/amr", "audio/3gpp", "audio/webm"})
FILENAME_MAX_BYTES = 255

_SIGNATURES: dict[str, tuple[bytes, ...]] = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "application/pdf": (b"%PDF-",),
}
_SNIFF_BYTES = 12


def filename_problem(name: str) -> str | None:
    """Why `name` can't be a display filename, or None when it is fine."""
    if not name or not name.strip():
        return "filename is empty"
    if len(name.encode()) > FILENAME_MAX_BYTES:
        return f"filename is longer than {FILENAME_MAX_BYTES} bytes"
    if "/" in name or "\\" in name or name in (".", ".."):
        return "filename must not contain path separators"
    if any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in name):
        return "filename must not contain control characters"
    return None


def base_mime(content_type: str | None) -> str:
    """`text/markdown; charset=utf-8` → `text/markdown`; missing → `application/octet-stream`."""
    value = (content_type or "").split(";")[0].strip().lower()
    return value or "application/octet-stream"


def is_text(mime: str) -> bool:
    return mime.startswith("text/")


def attachment_kind(mime: str) -> str:
    """The Pheby descriptor's `kind`: image, voice, video, audio or document."""
    if mime.startswith("image/"):
        return "image"
    if mime in VOICE_TYPES:
        return "voice"
    if mime.startswith("video/"):
        return "video"
    if mime.startswith("audio/"):
        return "audio"
    return "document"


def _signature_matches(mime: str, head: bytes) -> bool:
    if mime == "image/webp":
        return head[:4] == b"RIFF" and head[8:12] == b"WEBP"
    return any(head.startswith(sig) for sig in _SIGNATURES.get(mime, (b"",)))


async def checked_stream(chunks: AsyncIterable[bytes], mime: str) -> AsyncIterator[bytes]:
    """Pass the bytes through, refusing (415) a body whose first bytes or encoding don't match `mime`.

    Signatures are checked on the first bytes; text must decode as UTF-8 from start to end. The
    check runs while streaming, so a mismatch stops the upload before anything is kept.
    """
    head = b""
    checked_head = False
    decoder = codecs.getincrementaldecoder("utf-8")() if is_text(mime) else None
    async for chunk in chunks:
        if not checked_head:
            head += chunk[: _SNIFF_BYTES - len(head)]
            if len(head) >= _SNIFF_BYTES or is_text(mime):
                _check_head(mime, head)
                checked_head = True
        if decoder is not None:
            _decode(decoder, chunk, final=False)
        yield chunk
    if not checked_head:
        _check_head(mime, head)
    if decoder is not None:
        _decode(decoder, b"", final=True)


def _check_head(mime: str, head: bytes) -> None:
    if not is_text(mime) and not _signature_matches(mime, head):
        raise UnsupportedMediaType(f"The file's contents are not {mime}")


def _decode(decoder: codecs.IncrementalDecoder, data: bytes, *, final: bool) -> None:
    try:
        decoder.decode(data, final)
    except UnicodeDecodeError:
        raise UnsupportedMediaType("Text files must be UTF-8") from None
