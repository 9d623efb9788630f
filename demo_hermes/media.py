"""Files the demo agent delivers with ``MEDIA:`` tags: a small valid PNG and a Markdown document."""

import secrets
import struct
import zlib
from pathlib import Path

__all__ = ["write_demo_document", "write_demo_png", "write_empty_file"]

PNG_SIZE = 16


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png_bytes(size: int = PNG_SIZE) -> bytes:
    """An 8-bit RGB gradient image, encoded by hand so the demo needs no imaging library."""
    rows = b"".join(
        b"\x00" + b"".join(bytes((x * 255 // (size - 1), y * 255 // (size - 1), 128)) for x in range(size))
        for y in range(size)
    )
    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", header)
        + _png_chunk(b"IDAT", zlib.compress(rows))
        + _png_chunk(b"IEND", b"")
    )


def _new_path(media_dir: Path, stem: str, suffix: str) -> Path:
    media_dir.mkdir(parents=True, exist_ok=True)
    return (media_dir / f"{stem}-{secrets.token_hex(4)}{suffix}").resolve()


def write_demo_png(media_dir: Path) -> Path:
    path = _new_path(media_dir, "demo-image", ".png")
    path.write_bytes(png_bytes())
    return path


def write_empty_file(media_dir: Path) -> Path:
    """A file with nothing in it: a deliverable that can't be stored."""
    path = _new_path(media_dir, "demo-empty", ".txt")
    path.write_bytes(b"")
    return path


def write_demo_document(media_dir: Path) -> Path:
    path = _new_path(media_dir, "demo-document", ".md")
    path.write_text(
        "# Demo report\n\nThis document was written by the demo agent.\n\n"
        "| item | status |\n| --- | --- |\n| build | green |\n| tests | green |\n",
        encoding="utf-8",
    )
    return path
