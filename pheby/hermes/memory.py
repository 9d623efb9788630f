"""Memory controls: the two fixed Hermes memory files of the account's Hermes home, and nothing else.

Hermes has no memory API; its memory tool keeps `$HERMES_HOME/memories/MEMORY.md` (section `memory`)
and `USER.md` (section `user`) and snapshots them into the system prompt of every new run. This
module reads and replaces exactly those two files:

- no symlink is ever followed below the home: `memories/` and the files are opened with
  `O_NOFOLLOW` relative to a directory descriptor, so a link planted there is refused, its target
  untouched;
- a write is atomic: a temp file (0600) in the same directory, fsync, rename over the file, fsync of
  the directory; `memories/` is created 0700 when missing; empty content removes the file;
- a write names the revision it replaces (SHA-256 hex of the current content, of "" when absent):
  a per-file `asyncio.Lock` serialises read-compare-write in this process, so of concurrent writers
  holding one revision exactly one wins. Hermes itself writes these files too, so against its own
  edits the revision is a best-effort check, not a cross-process transaction.

File I/O runs in worker threads. Messages name sections, never paths.
"""

import asyncio
import contextlib
import errno
import hashlib
import os
import secrets
import stat
from pathlib import Path
from typing import Final

import anyio.to_thread
import msgspec

from pheby.errors import Conflict, NotFound, NotImplementedByUpstream, TooLarge, Unavailable
from pheby.hermes.pool import HermesClients
from pheby.store.accounts import Account

SECTION_FILES: Final[dict[str, str]] = {"memory": "MEMORY.md", "user": "USER.md"}
MEMORY_DIR: Final = "memories"
MAX_SECTION_BYTES: Final = 64 * 1024
_READ_CHUNK: Final = 64 * 1024

_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_NOFOLLOW_DIR_FLAGS: Final = _DIR_FLAGS | os.O_NOFOLLOW
# O_NONBLOCK: a FIFO planted in place of a file must not hang the reader.
_READ_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_TEMP_FLAGS: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class MemorySection(msgspec.Struct, frozen=True):
    section: str
    content: str
    revision: str


class MemorySections(msgspec.Struct, frozen=True):
    sections: list[MemorySection]


class MemoryUpdate(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """`PUT /api/memory/{section}`: the new content and the revision it replaces."""

    content: str
    revision: str


def revision_of(content: str) -> str:
    """The revision of a section: the SHA-256 hex digest of its UTF-8 content."""
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


class _Refused(Exception):
    """The storage is not in a shape this module will touch (a symlink, a non-regular file)."""


# --- blocking file work (worker threads) ------------------------------------------------------------


def _open_home(home: Path) -> int:
    """The Hermes home itself is configured by the operator and may be a link; below it nothing is followed."""
    return os.open(home, _DIR_FLAGS)


def _open_memory_dir(home_fd: int, *, create: bool) -> int | None:
    """`memories/` under the home (None if absent and not `create`); a symlink or non-directory is refused."""
    for _ in range(2):
        try:
            return os.open(MEMORY_DIR, _NOFOLLOW_DIR_FLAGS, dir_fd=home_fd)
        except FileNotFoundError:
            if not create:
                return None
            with contextlib.suppress(FileExistsError):  # created meanwhile (by Hermes): opened on the next pass
                os.mkdir(MEMORY_DIR, 0o700, dir_fd=home_fd)
        except OSError as exc:
            if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                raise _Refused("the memory directory is a symbolic link or not a directory") from exc
            raise
    raise _Refused("the memory directory keeps changing")


def _read_file(dir_fd: int | None, name: str) -> str:
    if dir_fd is None:
        return ""
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return ""
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _Refused("the memory file is a symbolic link; it was not followed") from exc
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _Refused("the memory file is not a regular file")
        chunks: list[bytes] = []
        while chunk := os.read(fd, _READ_CHUNK):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", errors="replace")


def _read_all(home: Path) -> list[MemorySection]:
    home_fd = _open_home(home)
    try:
        dir_fd = _open_memory_dir(home_fd, create=False)
        try:
            sections = []
            for section, name in SECTION_FILES.items():
                content = _read_file(dir_fd, name)
                sections.append(MemorySection(section=section, content=content, revision=revision_of(content)))
            return sections
        finally:
            if dir_fd is not None:
                os.close(dir_fd)
    finally:
        os.close(home_fd)


def _replace_file(dir_fd: int, name: str, data: bytes) -> None:
    """Atomically make `name` hold `data` (remove it when `data` is empty), durable before returning."""
    if not data:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=dir_fd)
        os.fsync(dir_fd)
        return
    temp = f".{name}.{secrets.token_hex(8)}.tmp"
    fd = os.open(temp, _TEMP_FLAGS, 0o600, dir_fd=dir_fd)
    try:
        try:
            os.fchmod(fd, 0o600)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp, dir_fd=dir_fd)
        raise
    os.fsync(dir_fd)


def _compare_and_write(home: Path, section: str, revision: str, content: str) -> MemorySection:
    name = SECTION_FILES[section]
    home_fd = _open_home(home)
    try:
        dir_fd = _open_memory_dir(home_fd, create=True)
        assert dir_fd is not None
        try:
            if revision_of(_read_file(dir_fd, name)) != revision:
                raise Conflict(f"The {section} section changed since it was read; reload it and try again")
            _replace_file(dir_fd, name, content.encode("utf-8"))
        finally:
            os.close(dir_fd)
    finally:
        os.close(home_fd)
    return MemorySection(section=section, content=content, revision=revision_of(content))


# --- the service ------------------------------------------------------------------------------------


class MemoryFiles:
    """Reads and writes the memory sections of an account's Hermes home."""

    def __init__(self, hermes: HermesClients) -> None:
        self._hermes = hermes
        self._locks: dict[str, asyncio.Lock] = {}

    def _home(self, account: Account) -> Path:
        home = self._hermes.home_for(account)
        if home is None:
            raise NotImplementedByUpstream("No Hermes home is configured, so memory cannot be managed")
        return home

    def _lock(self, home: Path, section: str) -> asyncio.Lock:
        key = os.path.join(os.path.abspath(home), MEMORY_DIR, SECTION_FILES[section])
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock

    async def sections(self, account: Account) -> list[MemorySection]:
        home = self._home(account)
        try:
            return await anyio.to_thread.run_sync(_read_all, home)
        except _Refused as exc:
            raise Unavailable(f"Memory storage refused: {exc}") from None
        except OSError:
            raise Unavailable("Memory storage is unavailable") from None

    async def write(self, account: Account, section: str, content: str, revision: str) -> MemorySection:
        if section not in SECTION_FILES:
            raise NotFound("Unknown memory section")
        home = self._home(account)
        if len(content.encode("utf-8")) > MAX_SECTION_BYTES:
            raise TooLarge(f"A memory section holds at most {MAX_SECTION_BYTES // 1024} KiB of UTF-8 text")
        async with self._lock(home, section):
            try:
                return await anyio.to_thread.run_sync(_compare_and_write, home, section, revision, content)
            except _Refused as exc:
                raise Unavailable(f"Memory storage refused: {exc}") from None
            except OSError:
                raise Unavailable("Memory storage is unavailable") from None
