"""Blobs as plain files under one root directory.

A put streams into a temp file in `<root>/.tmp` (same file system), fsyncs it, then renames it
into place; a create-only put hard-links it instead, so exactly one concurrent writer wins. A put
holds an exclusive `flock` on its temp file while it writes, so the sweep tells a put in flight (in
any process) from what a failed or killed one left, whatever its age.
Paths below the root are walked one directory at a time with O_NOFOLLOW: a symlink planted
inside the root is refused, never followed. The content type is kept in an extended attribute.
All file I/O runs in worker threads, in 1 MiB pieces.
"""

import asyncio
import builtins
import contextlib
import errno
import fcntl
import io
import logging
import os
import secrets
import stat
from collections.abc import AsyncIterable, AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import TypeVar, TypeVarTuple

import anyio
import msgspec
from anyio import to_thread

from storage.base import (
    DEFAULT_CONTENT_TYPE,
    BlobExists,
    BlobInfo,
    BlobNotFound,
    BlobReader,
    BlobStore,
    BlobTooLarge,
    InvalidKey,
    MiB,
    StorageError,
    split_key,
)

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

_TMP_DIR = ".tmp"  # reserved first key segment
_IO_SIZE = 1 * MiB  # each thread hop costs tens of microseconds, so move big pieces
# ...but hand them to write(2) in small ones: on the ext4/virtio disks measured, writes of 256 KiB
# and up were several times slower than 128 KiB ones.
_WRITE_PIECE = 128 * 1024
# Every _FLUSH_EVERY bytes, writeback of what was written is started without waiting for it, so
# the final fsync has little left. Linux's POSIX_FADV_DONTNEED starts writeback of dirty pages and
# returns (it also drops the pages already clean); an fdatasync here instead blocked the writer, the
# pipeline filled and receiving stalled (64 MiB uploads: ~570 -> ~750 MB/s with the hint).
_FLUSH_EVERY = 4 * MiB
_HAS_FADVISE = hasattr(os, "posix_fadvise")
_PIPELINE_DEPTH = 4  # batches of _IO_SIZE waiting to be written: the memory a put may hold
_XATTR = "user.pheby.content_type"
_HAS_XATTR = hasattr(os, "setxattr")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # NONBLOCK: a planted FIFO can't hang us
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
# The names of this process's temp files in flight (random, so one set serves every store): its own
# sweeps leave them whatever the file system's locks do (NFS emulates flock with POSIX locks, which
# never conflict within one process).
_WRITING: set[str] = set()

logger = logging.getLogger(__name__)


class LocalDiskStore(BlobStore):
    """Blobs as files under `root` (created on first use; the root itself may be a symlink)."""

    def __init__(self, root: Path) -> None:
        self.root = root.absolute()
        self._xattr_warned = False

    async def put(
        self,
        key: str,
        chunks: AsyncIterable[bytes],
        *,
        max_size: int,
        content_type: str | None = None,
        create_only: bool = False,
    ) -> BlobInfo:
        """Stream into a temp file, then move it into place; see `BlobStore.put`."""
        parts = _split(key)
        temp = await _run(self._new_temp)
        writer = _PipelinedWriter(temp)
        try:
            size = batched = 0
            batch: list[bytes] = []
            async for chunk in chunks:
                size += len(chunk)
                if size > max_size:
                    raise BlobTooLarge(f"{key!r}: over {max_size} bytes")
                batch.append(chunk)
                batched += len(chunk)
                if batched >= _IO_SIZE:
                    await writer.write(batch)
                    batch, batched = [], 0
            await writer.write(batch)
            await writer.finish()
            return await _run(self._commit, temp, key, parts, content_type or DEFAULT_CONTENT_TYPE, create_only)
        finally:
            with anyio.CancelScope(shield=True):  # also on cancellation: never leave a temp file
                await writer.stop()
                await to_thread.run_sync(temp.discard)

    async def open(self, key: str) -> BlobReader:
        """Open the file (refusing symlinks); raises BlobNotFound."""
        file, info = await _run(self._open_file, key, _split(key))
        return _FileReader(info, file)

    async def stat(self, key: str) -> BlobInfo:
        """Return the file's metadata; raises BlobNotFound."""
        file, info = await _run(self._open_file, key, _split(key))
        file.close()
        return info

    async def delete(self, key: str) -> None:
        """Unlink the file; a missing key is fine, a symlink is refused."""
        await _run(self._delete, key, _split(key))

    async def list(self, prefix: str = "") -> builtins.list[BlobInfo]:
        """Walk the tree (never through symlinks), pruning directories that can't match."""
        return await _run(self._list, prefix)

    async def check(self) -> None:
        """Create and remove a temp file: the root is a directory we can write in."""

        def probe() -> None:
            self._new_temp().discard()

        await _run(probe)

    async def sweep_temporary(self, older_than: float) -> int:
        """Remove the temp files no put holds (a put locks its own) and, where that can't be told, those
        last written before `older_than`; a put in flight keeps its file."""
        return await _run(self._sweep_temporary, older_than)

    # --- the blocking parts, run in worker threads ---

    def _open_root(self, key: str, *, create: bool) -> int:
        try:
            return os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            if not create:
                raise BlobNotFound(key) from None
        os.makedirs(self.root, 0o700, exist_ok=True)
        return os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def _open_dir(self, key: str, parts: Sequence[str], *, create: bool) -> int:
        """Open root/<parts> as a directory fd, one segment at a time, never through a symlink."""
        fd = self._open_root(key, create=create)
        try:
            for part in parts:
                if create:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o700, dir_fd=fd)
                        os.fsync(fd)  # a new directory's entry must survive a crash, like the file's
                try:
                    next_fd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as err:
                    raise _path_error(fd, part, key, err, writing=create) from err
                os.close(fd)
                fd = next_fd
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _new_temp(self) -> "_TempFile":
        root = self._open_root(_TMP_DIR, create=True)
        try:
            with contextlib.suppress(FileExistsError):
                os.mkdir(_TMP_DIR, 0o700, dir_fd=root)
            tmp_dir = os.open(_TMP_DIR, _DIR_FLAGS, dir_fd=root)
        finally:
            os.close(root)
        try:
            return _TempFile(tmp_dir)
        except BaseException:
            os.close(tmp_dir)
            raise

    def _commit(
        self, temp: "_TempFile", key: str, parts: Sequence[str], content_type: str, create_only: bool
    ) -> BlobInfo:
        """Make the temp file durable, then give it its name in one atomic step."""
        self._set_content_type(temp.fd, content_type)
        os.fsync(temp.fd)
        info = _info(key, os.fstat(temp.fd), content_type)
        parent = self._open_dir(key, parts[:-1], create=True)
        try:
            name = parts[-1]
            mode = _lstat_mode(parent, name)
            if mode is not None and not stat.S_ISREG(mode):
                raise InvalidKey(f"{key!r}: a symlink or directory is in the way")
            try:
                if create_only:  # link() fails if the name exists, so one concurrent writer wins
                    os.link(temp.name, name, src_dir_fd=temp.dir_fd, dst_dir_fd=parent)
                else:
                    os.rename(temp.name, name, src_dir_fd=temp.dir_fd, dst_dir_fd=parent)
            except FileExistsError:
                raise BlobExists(key) from None
            os.fsync(parent)  # the new directory entry must survive a crash too
        finally:
            os.close(parent)
        return info

    def _open_file(self, key: str, parts: Sequence[str]) -> tuple[io.FileIO, BlobInfo]:
        parent = self._open_dir(key, parts[:-1], create=False)
        try:
            fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=parent)
        except OSError as err:
            raise _path_error(parent, parts[-1], key, err, writing=False) from err
        finally:
            os.close(parent)
        file = io.FileIO(fd, "rb")  # closes the fd when dropped, even if a caller forgets aclose
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):  # a directory is a prefix of other keys, not a blob
                raise BlobNotFound(key)
            return file, _info(key, st, _get_content_type(fd))
        except BaseException:
            file.close()
            raise

    def _delete(self, key: str, parts: Sequence[str]) -> None:
        try:
            parent = self._open_dir(key, parts[:-1], create=False)
        except BlobNotFound:
            return
        try:
            mode = _lstat_mode(parent, parts[-1])
            if mode is not None and stat.S_ISLNK(mode):
                raise InvalidKey(f"{key!r}: a symlink is in the way")
            if mode is not None and stat.S_ISREG(mode):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(parts[-1], dir_fd=parent)
        finally:
            os.close(parent)

    def _list(self, prefix: str) -> builtins.list[BlobInfo]:
        try:
            root = self._open_root(prefix, create=False)
        except BlobNotFound:
            return []
        found: list[BlobInfo] = []
        try:
            # fwalk never descends into symlinked directories (follow_symlinks=False).
            for dirpath, dirnames, filenames, dir_fd in os.fwalk(".", dir_fd=root):
                rel = dirpath[2:] + "/" if dirpath != "." else ""
                dirnames[:] = [d for d in dirnames if (rel or d != _TMP_DIR) and _may_match(f"{rel}{d}/", prefix)]
                for name in filenames:
                    if not (key := rel + name).startswith(prefix):
                        continue
                    with contextlib.suppress(FileNotFoundError):  # deleted while we walk
                        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                        if stat.S_ISREG(st.st_mode):
                            found.append(msgspec.structs.replace(_info(key, st, None), modified_at=st.st_mtime))
        finally:
            os.close(root)
        return sorted(found, key=lambda info: info.key)

    def _sweep_temporary(self, older_than: float) -> int:
        try:
            root = self._open_root(_TMP_DIR, create=False)
        except BlobNotFound:
            return 0
        try:
            try:
                tmp_dir = os.open(_TMP_DIR, _DIR_FLAGS, dir_fd=root)
            except FileNotFoundError:
                return 0
        finally:
            os.close(root)
        removed = 0
        try:
            for name in os.listdir(tmp_dir):
                if name in _WRITING:  # a put of this process is writing it
                    continue
                with contextlib.suppress(FileNotFoundError):  # its put just finished or discarded it
                    st = os.stat(name, dir_fd=tmp_dir, follow_symlinks=False)
                    if not stat.S_ISDIR(st.st_mode) and _remove_unheld(tmp_dir, name, st.st_mtime < older_than):
                        removed += 1
        finally:
            os.close(tmp_dir)
        return removed

    def _set_content_type(self, fd: int, content_type: str) -> None:
        try:
            if not _HAS_XATTR:
                raise OSError(errno.ENOTSUP, "no extended attributes on this platform")
            os.setxattr(fd, _XATTR, content_type.encode())
        except OSError as err:
            if err.errno not in (errno.ENOTSUP, errno.EOPNOTSUPP):
                raise
            if not self._xattr_warned:
                self._xattr_warned = True
                logger.warning("%s has no extended attributes: content types are not kept", self.root)


class _PipelinedWriter:
    """Writes batches to a temp file in order, on worker threads, while the caller goes on receiving.

    At most `_PIPELINE_DEPTH` batches wait, which bounds memory; the disk work (writes and the
    periodic flushes) overlaps the network instead of adding to it. A failed write is raised to the
    caller on its next `write` or at `finish`.
    """

    def __init__(self, temp: "_TempFile") -> None:
        self._temp = temp
        self._queue: asyncio.Queue[list[bytes] | None] = asyncio.Queue(maxsize=_PIPELINE_DEPTH)
        self._error: BaseException | None = None
        self._task = asyncio.ensure_future(self._drain())

    async def _drain(self) -> None:
        while (batch := await self._queue.get()) is not None:
            if self._error is None:  # after a failure, keep draining so the caller never blocks
                try:
                    await _run(self._temp.write, batch)
                except Exception as exc:  # noqa: BLE001 - handed to the caller
                    self._error = exc

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    async def write(self, batch: list[bytes]) -> None:
        self._raise()
        await self._queue.put(batch)

    async def finish(self) -> None:
        """Wait until every batch is written; raise the first failure."""
        await self.stop()
        self._raise()

    async def stop(self) -> None:
        """End the writer (idempotent); the thread in flight can't be stopped, so it is waited for."""
        if not self._task.done():
            await self._queue.put(None)
            await asyncio.wait([self._task])


class _TempFile:
    """A file being written in `<root>/.tmp`, locked (flock) until `discard` removes it (safe to call twice).

    Its name is in `_WRITING` from before the file exists until after it is gone."""

    def __init__(self, dir_fd: int) -> None:
        self.dir_fd = dir_fd
        self.fd = -1
        for _ in range(3):
            self.name = secrets.token_hex(16)
            _WRITING.add(self.name)
            try:
                self.fd = os.open(self.name, _TEMP_FLAGS, 0o600, dir_fd=dir_fd)
                if not _lock(self.fd):  # another process's sweep took it between the open and the lock
                    os.close(self.fd)
                    self.fd = -1
            finally:
                if self.fd < 0:
                    _WRITING.discard(self.name)
            if self.fd >= 0:
                break
        else:
            raise OSError(errno.EAGAIN, "temp files were swept away as they were made")
        self._unflushed = 0
        self._flushed = 0

    def write(self, chunks: list[bytes]) -> None:
        # One writev per batch (one GIL hand-back, however many pieces), in pieces of _WRITE_PIECE.
        pieces: list[memoryview] = []
        for chunk in chunks:
            view = memoryview(chunk)
            pieces.extend(view[i : i + _WRITE_PIECE] for i in range(0, len(view), _WRITE_PIECE))
        while pieces:
            written = os.writev(self.fd, pieces)
            self._unflushed += written
            while pieces and written >= len(pieces[0]):
                written -= len(pieces.pop(0))
            if pieces and written:
                pieces[0] = pieces[0][written:]
        if self._unflushed >= _FLUSH_EVERY and _HAS_FADVISE:
            with contextlib.suppress(OSError):  # only a hint: the final fsync is what makes it durable
                os.posix_fadvise(self.fd, self._flushed, self._unflushed, os.POSIX_FADV_DONTNEED)
            self._flushed += self._unflushed
            self._unflushed = 0

    def discard(self) -> None:
        try:
            if self.fd >= 0:
                os.close(self.fd)
            with contextlib.suppress(FileNotFoundError):  # already renamed into place
                os.unlink(self.name, dir_fd=self.dir_fd)
            if self.dir_fd >= 0:
                os.close(self.dir_fd)
        except OSError as err:  # the sweep removes it later
            logger.warning("could not remove temp file %s (%s)", self.name, err.strerror or type(err).__name__)
        finally:
            self.fd = self.dir_fd = -1
            _WRITING.discard(self.name)


def _lock(fd: int) -> bool:
    """Lock a new temp file for its put; False if a sweep got it first (it unlinks what it locks)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:  # no locks on this file system: the sweep goes by age there
        return True
    return os.fstat(fd).st_nlink > 0


def _remove_unheld(dir_fd: int, name: str, old: bool) -> bool:
    """Unlink the temp file `name` unless a put in flight holds its lock, holding the lock meanwhile (a
    put whose new file a sweep locked first makes another); where no lock can be taken, only if `old`."""
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError:  # a symlink or something else planted there: by age
        fd = -1
    try:
        if fd >= 0:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False  # a put in flight, in another process
            except OSError:  # no locks on this file system
                if not old:
                    return False
        elif not old:
            return False
        os.unlink(name, dir_fd=dir_fd)
        return True
    finally:
        if fd >= 0:
            os.close(fd)


class _FileReader(BlobReader):
    def __init__(self, info: BlobInfo, file: io.FileIO) -> None:
        super().__init__(info)
        self._file = file

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            while chunk := await _run(os.read, self._file.fileno(), _IO_SIZE):
                yield chunk
        finally:
            self._file.close()

    async def aclose(self) -> None:
        self._file.close()


async def _run(fn: Callable[[*Ts], T], *args: *Ts) -> T:
    """Run blocking file I/O in a worker thread; OS errors become StorageError."""
    try:
        return await to_thread.run_sync(fn, *args)
    except OSError as err:
        raise StorageError(f"local blob store: {err}") from err


def _split(key: str) -> list[str]:
    parts = split_key(key)
    if parts[0] == _TMP_DIR:
        raise InvalidKey(f"{key!r}: {_TMP_DIR!r} is reserved")
    return parts


def _info(key: str, st: os.stat_result, content_type: str | None) -> BlobInfo:
    # A rename keeps inode and mtime, so put, stat and list agree; a rewrite changes them.
    etag = f"{st.st_ino:x}-{st.st_mtime_ns:x}-{st.st_size:x}"
    return BlobInfo(key=key, size=st.st_size, content_type=content_type, etag=etag)


def _get_content_type(fd: int) -> str | None:
    if not _HAS_XATTR:
        return None
    try:
        return os.getxattr(fd, _XATTR).decode()
    except OSError:  # no attribute (a file put there by hand) or no xattr support
        return None


def _lstat_mode(dir_fd: int, name: str) -> int | None:
    try:
        return os.lstat(name, dir_fd=dir_fd).st_mode
    except FileNotFoundError:
        return None


def _path_error(dir_fd: int, name: str, key: str, err: OSError, *, writing: bool) -> StorageError:
    """Explain why `name` under `dir_fd` could not be opened."""
    mode = None
    with contextlib.suppress(OSError):
        mode = _lstat_mode(dir_fd, name)
    if err.errno == errno.ELOOP or (mode is not None and stat.S_ISLNK(mode)):
        return InvalidKey(f"{key!r}: a symlink is in the way")
    if err.errno == errno.ENOTDIR and writing:
        return InvalidKey(f"{key!r}: a parent segment is a blob")
    if err.errno in (errno.ENOENT, errno.ENOTDIR) and not writing:
        return BlobNotFound(key)
    return StorageError(f"{key!r}: {err}")


def _may_match(dir_prefix: str, prefix: str) -> bool:
    """Whether a directory can hold keys starting with `prefix`."""
    return dir_prefix.startswith(prefix) or prefix.startswith(dir_prefix)
