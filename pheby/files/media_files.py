"""Reading a `MEDIA:` deliverable from disk, safely: regular files under the allowed roots only.

The path is opened one component at a time from the root's directory descriptor, each with
O_NOFOLLOW: a symlink anywhere below the root (one planted there, or a directory swapped for one
while we walk) is refused by the kernel at the moment of opening, so no check can go stale before
the open. Anything but a regular file is refused on the open descriptor before a byte is read.

Which roots apply is the account's: `pheby.store.accounts.media_roots_for` (the owner: PHEBY_MEDIA_ROOTS; another
account: only the roots `pheby account hermes NAME --media-root DIR` gave it; an account with its
own gateway: none, its files are not on the server's disk).
"""

import errno
import os
import stat
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import anyio

CHUNK = 1024 * 1024
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # NONBLOCK: a FIFO can't hang us


class MediaRefused(Exception):
    """The path may not be delivered; the message says why (for the log, never for a client)."""


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def open_media_file(raw_path: str, roots: Sequence[Path], max_bytes: int) -> tuple[int, int]:
    """Open a deliverable for reading; returns (fd, size). Blocking: call in a worker thread."""
    if not os.path.isabs(raw_path) or "\x00" in raw_path:
        raise MediaRefused("not an absolute path")
    path = os.path.normpath(raw_path)
    # A root may be configured through a link of the operator's; below it, nothing may be one.
    allowed = [os.path.normpath(str(r)) for r in roots] + [os.path.realpath(r) for r in roots]
    root = next((r for r in allowed if _within(path, r)), None)
    if root is None:
        raise MediaRefused("outside the allowed roots")
    parts = Path(os.path.relpath(path, root)).parts
    if not parts or parts == (".",):
        raise MediaRefused("not a regular file")
    fd = _open_below(root, parts)
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


def _open_below(root: str, parts: Sequence[str]) -> int:
    """Open root/<parts> through directory descriptors, never through a symlink."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            try:
                next_fd = os.open(part, _FILE_FLAGS if last else _DIR_FLAGS, dir_fd=fd)
            except OSError as err:
                if err.errno == errno.ENOENT:
                    raise MediaRefused("missing") from None
                if err.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise MediaRefused("a symlink, or not a directory, on the way") from None
                raise
            os.close(fd)
            fd = next_fd
    except BaseException:
        os.close(fd)
        raise
    return fd


async def read_fd_chunks(fd: int) -> AsyncIterator[bytes]:
    """The file's bytes in chunks, read in worker threads; closes the descriptor at the end."""
    try:
        while chunk := await anyio.to_thread.run_sync(os.read, fd, CHUNK):
            yield chunk
    finally:
        os.close(fd)
