"""Reading a `MEDIA:` deliverable from disk, safely: regular files under the allowed roots only.

A path outside the roots, a symlink anywhere on the way, or anything but a regular file is
refused before a byte is read. The file is opened without following links and checked again
on the open descriptor, so a swap between check and open gains nothing.
"""

import os
import stat
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import anyio

CHUNK = 1024 * 1024


class MediaRefused(Exception):
    """The path may not be delivered; the message says why (for the log, never for a client)."""


def _within(path: str, roots: Sequence[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip(os.sep) + os.sep) for root in roots)


def open_media_file(raw_path: str, roots: Sequence[Path], max_bytes: int) -> tuple[int, int]:
    """Open a deliverable for reading; returns (fd, size). Blocking: call in a worker thread."""
    if not os.path.isabs(raw_path) or "\x00" in raw_path:
        raise MediaRefused("not an absolute path")
    path = os.path.normpath(raw_path)
    # A root may be configured through a link of the operator's; below it, nothing may be one.
    allowed = [os.path.normpath(str(r)) for r in roots] + [os.path.realpath(r) for r in roots]
    root = next((r for r in allowed if _within(path, [r])), None)
    if root is None:
        raise MediaRefused("outside the allowed roots")
    current = root
    for part in Path(os.path.relpath(path, root)).parts:
        current = os.path.join(current, part)
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            raise MediaRefused("missing") from None
        if stat.S_ISLNK(mode):
            raise MediaRefused("a symlink")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise MediaRefused("not a regular file")
        if info.st_size > max_bytes:
            raise MediaRefused("too large")
    except BaseException:
        os.close(fd)
        raise
    return fd, info.st_size


async def read_fd_chunks(fd: int) -> AsyncIterator[bytes]:
    """The file's bytes in chunks, read in worker threads; closes the descriptor at the end."""
    try:
        while chunk := await anyio.to_thread.run_sync(os.read, fd, CHUNK):
            yield chunk
    finally:
        os.close(fd)
