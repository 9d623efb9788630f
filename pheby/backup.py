"""`pheby backup DEST` and `pheby restore SRC`: a data dir copied while the server runs, and put back.

Backup, into an empty or new directory:

1. The database, with SQLite's online backup API in one step: one read transaction, so the copy is the
   database as some commit left it, while the server goes on writing (in WAL mode readers and the writer
   don't wait for each other). The copy is switched to a rollback journal: one self-contained file.
2. With local storage, the blobs that copy references (its live attachment rows), streamed through the
   `LocalDiskStore` and hashed on the way. Blobs come after the database because the server writes a
   blob before its row and removes it only after tombstoning the row: every blob the copy references
   existed when the copy was taken. One removed since (its row tombstoned after the copy) makes the
   database be copied again, until a copy finds all of its blobs; a blob still referenced and still
   missing is a damaged data dir, and the backup fails. With S3 the blobs stay in the bucket (bucket
   versioning covers them: docs/deploy.md) and the manifest names the bucket.
3. The data dir's secrets, if present (the owner secret, the VAPID key, the plugin's secret), 0600.
4. `manifest.json`, last and atomically (a temp file fsynced, then renamed): every file's relative path,
   size and SHA-256, the schema version and the time. A directory without it is no backup.

Restore, into an empty or new data dir: the manifest is checked against the directory first (every
file listed is there with its size, nothing unlisted that the server would read, paths that stay
inside); then each file is copied into a staging directory inside the data dir, hashed as it is copied
(blobs through the `LocalDiskStore`, so they land where and as the server keeps them); the staged
database must pass `PRAGMA integrity_check`, be of the manifest's schema (not newer than this code's)
and reference only blobs the backup holds. Only then are the files moved into place. Any refusal or
failure removes the staging directory (and the data dir, if restore created it): nothing
half-restored is left.
"""

import contextlib
import errno
import hashlib
import os
import secrets
import shutil
import sqlite3
import stat
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, Literal

import msgspec

from pheby.db import newest_version, schema_version
from pheby.plugin.install import SERVER_SECRET_FILE as PLUGIN_SECRET_FILE
from pheby.push.vapid import KEY_FILE as VAPID_KEY_FILE
from pheby.settings import Settings, StorageKind
from storage import BlobNotFound, BlobTooLarge, InvalidKey, LocalDiskStore
from storage.base import split_key

MANIFEST = "manifest.json"
DATABASE = "pheby.sqlite3"
BLOBS = "blobs"
# The data dir's secrets: the generated owner secret (`resolve_secret`), the VAPID key, the plugin's
# shared secret. Each is backed up if present.
SECRET_FILES = ("secret", VAPID_KEY_FILE, PLUGIN_SECRET_FILE)
# What the server would read next to the database: never restored unlisted.
_DATABASE_SIDECARS = tuple(f"{DATABASE}{suffix}" for suffix in ("-wal", "-shm", "-journal"))
FORMAT: Final = "pheby-backup"
FORMAT_VERSION: Final = 1
_CHUNK = 1024 * 1024
_COPIES = 5  # database copies before giving up on blobs that keep being deleted under the backup
# The blobs a database references: its live attachment rows' (a tombstoned row's bytes are gone).
_LIVE_BLOBS = "SELECT blob_key, size FROM attachments WHERE deleted_at IS NULL"
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class BackupRefused(Exception):
    """The backup or restore can't go ahead as asked (a damaged backup, a non-empty directory, ...).

    The message is one line and names the file at fault; nothing was written, or all of it was removed.
    """


class BackupFailed(Exception):
    """The source is damaged or the copy failed; what was written was removed."""


class FileEntry(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """One file of a backup: `path` relative to the backup's directory, `/`-separated."""

    path: str
    size: int
    sha256: str
    content_type: str | None = None  # blobs: the content type the store keeps with them


class Manifest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """`manifest.json`: what a backup holds."""

    format: Literal["pheby-backup"]
    version: Literal[1]
    created_at: str  # ISO-8601 UTC
    schema_version: int
    storage: StorageKind
    s3_bucket: str | None = None
    s3_prefix: str | None = None
    files: list[FileEntry]


class BackupResult(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What `pheby backup` prints: counts and relative paths, never a secret."""

    manifest: str
    created_at: str
    schema_version: int
    storage: StorageKind
    files: int
    bytes: int
    database_bytes: int
    blobs: int
    blob_bytes: int
    secrets: list[str]
    database_copies: int
    s3_bucket: str | None = None


class RestoreResult(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What `pheby restore` prints."""

    backup_created_at: str
    schema_version: int
    storage: StorageKind
    files: int
    bytes: int
    blobs: int
    secrets: list[str]
    ignored: list[str]  # files in the backup's directory that are not part of it (not restored)
    s3_bucket: str | None = None


# --- backup ------------------------------------------------------------------------------------


async def backup(settings: Settings, dest: Path) -> BackupResult:
    """Back up `settings.data_dir` into `dest` (an empty or missing directory); see the module docstring."""
    if settings.database_url:
        raise BackupRefused(
            "the metadata is in PostgreSQL (PHEBY_DATABASE_URL): back it up with pg_dump or the provider's "
            "snapshots, and the blobs with the storage's own copies"
        )
    source = settings.database_path
    if not source.is_file():
        raise BackupRefused(f"no database at {source}: nothing to back up (is PHEBY_DATA_DIR right?)")
    created = _claim_empty_dir(dest, "DEST")
    try:
        return await _backup(settings, dest)
    except BaseException:
        _empty(dest, created)
        raise


async def _backup(settings: Settings, dest: Path) -> BackupResult:
    store = LocalDiskStore(settings.data_dir / BLOBS) if settings.storage == "local" else None
    blobs: dict[str, FileEntry] = {}
    missing_before: set[str] = set()
    copies = 0
    while True:
        copies += 1
        created_at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        schema_version, referenced = _copy_database(settings.database_path, dest / DATABASE)
        if store is None:
            break
        for key in set(blobs) - referenced:  # deleted since an earlier copy of the database
            (dest / blobs.pop(key).path).unlink()
        missing: set[str] = set()
        for key in sorted(referenced - set(blobs)):
            try:
                blobs[key] = await _copy_blob(store, key, dest)
            except BlobNotFound:
                missing.add(key)
        if not missing:
            break
        if damaged := sorted(missing & missing_before):
            raise BackupFailed(
                f"{BLOBS}/{damaged[0]}: the database references it but the blob store has no such blob "
                f"({len(damaged)} in all; the data dir is damaged, or PHEBY_STORAGE is not the server's)"
            )
        if copies == _COPIES:
            raise BackupFailed(f"blobs kept being deleted while the database was copied ({copies} times); try again")
        missing_before = missing
    database = _entry_of(dest, DATABASE)
    kept_secrets = [_copy_file(settings.data_dir / name, dest, name) for name in SECRET_FILES]
    secret_entries = [entry for entry in kept_secrets if entry is not None]
    files = [database, *(blobs[key] for key in sorted(blobs)), *secret_entries]
    _sync_tree(dest)
    manifest = Manifest(
        format=FORMAT,
        version=FORMAT_VERSION,
        created_at=created_at,
        schema_version=schema_version,
        storage=settings.storage,
        s3_bucket=settings.s3_bucket if store is None else None,
        s3_prefix=settings.s3_prefix if store is None else None,
        files=files,
    )
    _write_atomically(dest / MANIFEST, msgspec.json.format(msgspec.json.encode(manifest), indent=2) + b"\n")
    return BackupResult(
        manifest=MANIFEST,
        created_at=created_at,
        schema_version=schema_version,
        storage=settings.storage,
        files=len(files),
        bytes=sum(entry.size for entry in files),
        database_bytes=database.size,
        blobs=len(blobs),
        blob_bytes=sum(entry.size for entry in blobs.values()),
        secrets=[entry.path for entry in secret_entries],
        database_copies=copies,
        s3_bucket=manifest.s3_bucket,
    )


def _copy_database(source: Path, target: Path) -> tuple[int, set[str]]:
    """Copy the live database into `target` (0600, rollback journal); return its schema version and the
    blob keys of its live attachment rows."""
    target.unlink(missing_ok=True)
    os.close(os.open(target, _FILE_FLAGS, 0o600))  # an empty file is an empty database, created 0600
    # mode=rw: never create a database where there is none.
    try:
        src = sqlite3.connect(f"{source.absolute().as_uri()}?mode=rw", uri=True, timeout=30)
        try:
            dst = sqlite3.connect(target)
            try:
                src.backup(dst)  # pages=-1: every page in one step, one read transaction
                dst.execute("PRAGMA journal_mode=DELETE")
                return schema_version(dst), {row[0] for row in dst.execute(_LIVE_BLOBS)}
            finally:
                dst.close()
        finally:
            src.close()
    except sqlite3.Error as exc:
        raise BackupFailed(f"{source}: {exc}") from None


async def _copy_blob(store: LocalDiskStore, key: str, dest: Path) -> FileEntry:
    """Stream one blob from the store into `dest/blobs/<key>`; BlobNotFound if it is gone."""
    path = f"{BLOBS}/{key}"
    target = dest / path
    async with await store.open(key) as reader:
        _make_dirs(dest, Path(path).parent.parts)
        digest, size = hashlib.sha256(), 0
        with _new_file(target) as out:
            async for chunk in reader:
                digest.update(chunk)
                size += len(chunk)
                out.write(chunk)
            out.sync()
        return FileEntry(path=path, size=size, sha256=digest.hexdigest(), content_type=reader.info.content_type)


def _copy_file(source: Path, dest: Path, name: str) -> FileEntry | None:
    """Copy one file of the data dir to `dest/name` (0600), or None if there is none."""
    try:
        src = source.open("rb")
    except FileNotFoundError:
        return None
    with src, _new_file(dest / name) as out:
        digest, size = hashlib.sha256(), 0
        while chunk := src.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
            out.write(chunk)
        out.sync()
    return FileEntry(path=name, size=size, sha256=digest.hexdigest())


def _entry_of(root: Path, path: str) -> FileEntry:
    digest, size = _hash_file(root / path)
    return FileEntry(path=path, size=size, sha256=digest)


# --- restore -----------------------------------------------------------------------------------


async def restore(source: Path, data_dir: Path) -> RestoreResult:
    """Restore the backup in `source` into `data_dir` (an empty or missing directory); see the docstring."""
    manifest = _read_manifest(source)
    ignored = _check_listing(source, manifest)
    created = _claim_empty_dir(data_dir, "the data dir")
    staging = data_dir / f".restore-{secrets.token_hex(8)}"
    try:
        staging.mkdir(mode=0o700)
        await _stage(source, staging, manifest)
        _check_database(staging, manifest)
        _sync_tree(staging)
        names = sorted(os.listdir(staging), key=lambda name: name == DATABASE)  # the database last
        for name in names:
            os.rename(staging / name, data_dir / name)
        staging.rmdir()
        _fsync_dir(data_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        _empty(data_dir, created)
        raise
    blobs = [entry for entry in manifest.files if entry.path.startswith(f"{BLOBS}/")]
    return RestoreResult(
        backup_created_at=manifest.created_at,
        schema_version=manifest.schema_version,
        storage=manifest.storage,
        files=len(manifest.files),
        bytes=sum(entry.size for entry in manifest.files),
        blobs=len(blobs),
        secrets=[entry.path for entry in manifest.files if entry.path in SECRET_FILES],
        ignored=ignored,
        s3_bucket=manifest.s3_bucket,
    )


def _read_manifest(source: Path) -> Manifest:
    if not source.is_dir():
        raise BackupRefused(f"{source}: no such directory")
    try:
        raw = (source / MANIFEST).read_bytes()
    except FileNotFoundError:
        raise BackupRefused(f"{MANIFEST}: missing (not a backup, or one that did not finish)") from None
    try:
        manifest = msgspec.json.decode(raw, type=Manifest)
    except msgspec.ValidationError as exc:
        raise BackupRefused(f"{MANIFEST}: not a Pheby backup manifest ({exc})") from None
    except msgspec.DecodeError:
        raise BackupRefused(f"{MANIFEST}: damaged (not JSON)") from None
    seen: set[str] = set()
    for entry in manifest.files:
        _check_path(entry, manifest.storage)
        if entry.path in seen:
            raise BackupRefused(f"{MANIFEST}: {entry.path} is listed twice")
        seen.add(entry.path)
    if DATABASE not in seen:
        raise BackupRefused(f"{MANIFEST}: lists no {DATABASE}")
    return manifest


def _check_path(entry: FileEntry, storage: StorageKind) -> None:
    """A path the manifest may list: the database, a secret, or (local storage) a blob with a valid key."""
    if entry.size < 0 or len(entry.sha256) != 64 or entry.sha256.strip("0123456789abcdef"):
        raise BackupRefused(f"{MANIFEST}: {entry.path}: bad size or SHA-256")
    if entry.path == DATABASE or entry.path in SECRET_FILES:
        return
    top, _, key = entry.path.partition("/")
    if top == BLOBS and storage == "local" and _is_key(key):
        return
    raise BackupRefused(f"{MANIFEST}: {entry.path!r} is no file of a {storage}-storage backup")


def _is_key(key: str) -> bool:
    """A key the local store can hold (its `.tmp` is its own)."""
    try:
        return split_key(key)[0] != ".tmp"
    except InvalidKey:
        return False


def _check_listing(source: Path, manifest: Manifest) -> list[str]:
    """Every listed file is there, a plain file of its size; nothing unlisted that matters. Returns the
    unlisted files that don't (not restored)."""
    listed = {entry.path: entry for entry in manifest.files}
    found: set[str] = set()
    ignored: list[str] = []
    for path, mode, size in _walk(source):
        if path == MANIFEST:
            continue
        entry = listed.get(path)
        if entry is None:
            if path.startswith(f"{BLOBS}/") or path in (DATABASE, *_DATABASE_SIDECARS, *SECRET_FILES):
                raise BackupRefused(f"{path}: not in {MANIFEST} (the backup was changed after it was taken)")
            ignored.append(path)
            continue
        if not stat.S_ISREG(mode):
            raise BackupRefused(f"{path}: not a plain file")
        if size != entry.size:
            raise BackupRefused(f"{path}: {size} bytes, {MANIFEST} says {entry.size} (the file is damaged)")
        found.add(path)
    for path in listed:
        if path not in found:
            raise BackupRefused(f"{path}: listed in {MANIFEST} but missing")
    return ignored


def _walk(root: Path) -> Iterator[tuple[str, int, int]]:
    """(relative path, lstat mode, size) of every non-directory below `root`, never through a symlink."""
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath).relative_to(root)
        for name in [*filenames, *(d for d in dirnames if os.path.islink(os.path.join(dirpath, d)))]:
            st = os.lstat(os.path.join(dirpath, name))
            yield (base / name).as_posix(), st.st_mode, st.st_size


async def _stage(source: Path, staging: Path, manifest: Manifest) -> None:
    """Copy every listed file into `staging`, checking each one's SHA-256 as it is copied."""
    store = LocalDiskStore(staging / BLOBS)
    for entry in manifest.files:
        if entry.path.startswith(f"{BLOBS}/"):
            hashed = _Hashed(source / entry.path)
            try:
                await store.put(
                    entry.path.removeprefix(f"{BLOBS}/"),
                    hashed.chunks(),
                    max_size=entry.size,
                    content_type=entry.content_type,
                    create_only=True,
                )
            except BlobTooLarge:  # it grew since it was listed
                raise BackupRefused(f"{entry.path}: larger than {MANIFEST} says (the file is damaged)") from None
            digest = hashed.hexdigest()
        else:
            with (source / entry.path).open("rb") as src, _new_file(staging / entry.path) as out:
                sha = hashlib.sha256()
                while chunk := src.read(_CHUNK):
                    sha.update(chunk)
                    out.write(chunk)
                out.sync()
            digest = sha.hexdigest()
        if digest != entry.sha256:
            raise BackupRefused(f"{entry.path}: its SHA-256 does not match {MANIFEST} (the file is damaged)")


class _Hashed:
    """A file's bytes as chunks for `BlobStore.put`, hashed on the way."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._sha = hashlib.sha256()

    async def chunks(self) -> AsyncIterator[bytes]:
        with self._path.open("rb") as src:
            while chunk := src.read(_CHUNK):
                self._sha.update(chunk)
                yield chunk

    def hexdigest(self) -> str:
        return self._sha.hexdigest()


def _check_database(staging: Path, manifest: Manifest) -> None:
    """The staged database opens, passes integrity_check, is of the manifest's schema (one this code
    knows) and, with local storage, references only blobs the backup holds, of their sizes."""
    uri = f"{(staging / DATABASE).absolute().as_uri()}?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True)
        try:
            problems = [row[0] for row in conn.execute("PRAGMA integrity_check")]
            if problems != ["ok"]:
                raise BackupRefused(f"{DATABASE}: integrity_check failed ({'; '.join(problems[:3])})")
            version = schema_version(conn)
            referenced: dict[str, int] = dict(conn.execute(_LIVE_BLOBS))
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise BackupRefused(f"{DATABASE}: the database is damaged ({exc})") from None
    if version != manifest.schema_version:
        raise BackupRefused(f"{DATABASE}: schema {version}, {MANIFEST} says {manifest.schema_version}")
    if version > (known := newest_version()):
        raise BackupRefused(
            f"{DATABASE}: schema {version} is newer than this version's ({known}): restore with the Pheby that took it"
        )
    if manifest.storage != "local":
        return
    held = {entry.path: entry.size for entry in manifest.files}
    for key, size in sorted(referenced.items()):
        path = f"{BLOBS}/{key}"
        if path not in held:
            raise BackupRefused(f"{path}: {DATABASE} references it but the backup does not hold it")
        if held[path] != size:
            raise BackupRefused(f"{path}: {held[path]} bytes, {DATABASE} says {size}")


# --- files -------------------------------------------------------------------------------------


def _claim_empty_dir(path: Path, what: str) -> bool:
    """Refuse unless `path` is an empty directory or missing (then create it, 0700); True if created."""
    try:
        entries = os.listdir(path)
    except FileNotFoundError:
        path.mkdir(parents=True, mode=0o700)
        return True
    except NotADirectoryError:
        raise BackupRefused(f"{what} {path} is not a directory") from None
    if entries:
        raise BackupRefused(f"{what} {path} is not empty ({len(entries)} entries): give an empty or new directory")
    return False


def _empty(path: Path, created: bool) -> None:
    """Remove what was written into `path`, which was empty (or missing: `created`) before."""
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir(path):
            child = path / name
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)
        if created:
            path.rmdir()


class _Writer:
    """A new file being written: created with O_EXCL, never through a symlink, 0600."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view) :]

    def sync(self) -> None:
        os.fsync(self.fd)


@contextlib.contextmanager
def _new_file(path: Path) -> Iterator[_Writer]:
    fd = os.open(path, _FILE_FLAGS, 0o600)
    try:
        yield _Writer(fd)
    finally:
        os.close(fd)


def _make_dirs(root: Path, parts: tuple[str, ...]) -> None:
    """root/parts..., each directory created 0700."""
    path = root
    for part in parts:
        path = path / part
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700)


def _hash_file(path: Path) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    with path.open("rb") as src:
        while chunk := src.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def _write_atomically(path: Path, data: bytes) -> None:
    temp = path.with_name(f".{path.name}.tmp")
    with _new_file(temp) as out:
        out.write(data)
        out.sync()
    os.rename(temp, path)
    _fsync_dir(path.parent)


def _sync_tree(root: Path) -> None:
    """fsync every directory below and at `root`, so the names of the files written are durable too."""
    for dirpath, _, _ in os.walk(root):
        _fsync_dir(Path(dirpath))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    except OSError as err:  # some file systems can't fsync a directory
        if err.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)
