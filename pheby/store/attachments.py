"""Attachments of both surfaces: one table of metadata, bytes in the BlobStore.

Pheby uploads wait unclaimed until `chat.send` takes them; agent deliverables arrive from
`MEDIA:` tags (only from the roots the account may read); both kinds of uploads count against
quotas. A row is written (durably) only after its bytes are stored, and deleted by tombstoning it
before its bytes go; `sweep` removes bytes left without a live row either way. Each surface sees
its own projection (`pheby_descriptor`, `hope_object`). All the SQL of the domain is here.
"""

import base64
import contextlib
import logging
import mimetypes
import os
import time
import uuid
from collections.abc import AsyncIterable, Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import anyio
import msgspec

from pheby.db import Connection, Database, Row
from pheby.errors import BadRequest, Conflict, NotFound, TooLarge, Unprocessable, UnsupportedMediaType
from pheby.files.extraction import UNUSABLE, extract
from pheby.files.file_types import (
    HOPE_MIME_TYPES,
    INLINE_IMAGE_TYPES,
    attachment_kind,
    base_mime,
    checked_stream,
    filename_problem,
    is_text,
)
from pheby.files.media_files import MediaRefused, open_media_file, read_fd_chunks
from pheby.protocol.frames import AttachmentAdded, iso_utc
from pheby.settings import Settings
from pheby.store import changes
from pheby.store.accounts import Account, media_roots_for
from pheby.store.quotas import UploadQuota
from storage import BlobReader, BlobStore, BlobTooLarge, StorageError

log = logging.getLogger("pheby.store.attachments")

Surface = Literal["pheby", "hope"]
Direction = Literal["inbound", "outbound"]
INLINE_TEXT_MAX_BYTES = 100 * 1024
PROVIDER_IDS_MAX = 8
CHAT_IDS_MAX = 10
UNAVAILABLE = "Attachment unavailable"


class Attachment(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    account_id: str
    surface: Surface
    direction: Direction
    conversation_id: str | None
    message_id: str | None
    filename: str
    mime: str
    size: int
    blob_key: str
    extraction_status: str
    extracted_text: str | None
    created_at: float
    expires_at: float | None
    claimed_at: float | None


# --- projections -----------------------------------------------------------------------------


class PhebyDescriptor(msgspec.Struct, frozen=True):
    attachment_id: str
    filename: str
    mime_type: str
    size: int
    kind: str
    inline_image: bool
    direction: str
    conversation_id: str | None
    message_id: str | None
    created_at: str
    expires_at: str | None
    download_path: str


class HopeAttachment(msgspec.Struct, frozen=True):
    id: str
    filename: str
    mime: str
    size: int
    extraction_status: str
    created_at: int


def pheby_descriptor(a: Attachment) -> PhebyDescriptor:
    return PhebyDescriptor(
        attachment_id=a.id,
        filename=a.filename,
        mime_type=a.mime,
        size=a.size,
        kind=attachment_kind(a.mime),
        inline_image=a.mime in INLINE_IMAGE_TYPES,
        direction=a.direction,
        conversation_id=a.conversation_id,
        message_id=a.message_id,
        created_at=iso_utc(a.created_at, "seconds") or "",
        expires_at=iso_utc(a.expires_at, "seconds"),
        download_path=f"/attachments/{a.id}",
    )


def attachment_added(conversation_id: str, a: Attachment) -> AttachmentAdded:
    """The `attachment.added` frame of a conversation's new attachment (uploaded, delivered or pushed)."""
    return AttachmentAdded(conversation_id=conversation_id, attachment=pheby_descriptor(a))


def hope_object(a: Attachment) -> HopeAttachment:
    return HopeAttachment(
        id=a.id,
        filename=a.filename,
        mime=a.mime,
        size=a.size,
        extraction_status=a.extraction_status,
        created_at=int(a.created_at),
    )


def _row(row: Row) -> Attachment:
    return Attachment(**{k: row[k] for k in row.keys() if k != "deleted_at"})  # noqa: SIM118


_QUOTA_STEP = 1024 * 1024  # a chunked upload reserves quota this far ahead of its bytes
_LIVE = "deleted_at IS NULL AND (expires_at IS NULL OR expires_at > ?)"
_BLOB_PREFIX = "attachments/"
# A blob with no row is swept only once it is this old: an upload's blob is written before its row.
SWEEP_MIN_AGE_SECONDS = 3600.0


class SweepResult(msgspec.Struct, frozen=True):
    """What one sweep removed: blobs without a live row, and what failed puts left behind."""

    orphans: int
    temporary: int


class ClaimedInput(msgspec.Struct, frozen=True):
    """What `chat.send` hands to Hermes, and the attachments it will claim once the run starts."""

    text: str
    attachments: list[Attachment]


class Attachments:
    def __init__(self, db: Database, blobs: BlobStore, settings: Settings, clock: Callable[[], float] = time.time):
        self._db = db
        self._blobs = blobs
        self._settings = settings
        self._clock = clock
        self.quota = UploadQuota(
            self._hope_bytes,
            per_account=settings.hope_account_quota_bytes,
            global_limit=settings.hope_global_quota_bytes,
        )
        self.pheby_quota = UploadQuota(self._pheby_upload_bytes, per_account=settings.attachment_account_quota_bytes)

    @property
    def agent_media_dir(self) -> Path:
        return self._settings.agent_media_dir or (self._settings.data_dir / "agent-media")

    def _agent_folder(self, attachment: Attachment) -> Path:
        """Where an upload is written for the agent to read: a folder of its own in its account's."""
        return self.agent_media_dir / attachment.account_id / attachment.id

    # --- storing ---------------------------------------------------------------------------

    async def _store(
        self,
        *,
        account_id: str,
        surface: Surface,
        direction: Direction,
        filename: str,
        mime: str,
        chunks: AsyncIterable[bytes],
        max_bytes: int,
        conversation_id: str | None = None,
        message_id: str | None = None,
        claimed: bool = False,
    ) -> Attachment:
        """Stream bytes into storage, extract, and record the row; nothing is left if any step fails."""
        attachment_id = uuid.uuid4().hex
        key = f"attachments/{account_id}/{attachment_id}"
        try:
            info = await self._blobs.put(key, chunks, max_size=max_bytes, content_type=mime, create_only=True)
        except BlobTooLarge:
            raise TooLarge(f"Attachments are limited to {max_bytes} bytes") from None
        try:
            if info.size == 0:
                raise BadRequest("The file is empty")
            extraction = await extract(self._blobs, key, mime)
            now = self._clock()
            days = self._settings.attachment_retention_days
            expires_at = now + days * 86400 if days and surface == "pheby" else None
            attachment = Attachment(
                id=attachment_id,
                account_id=account_id,
                surface=surface,
                direction=direction,
                conversation_id=conversation_id,
                message_id=message_id,
                filename=filename,
                mime=mime,
                size=info.size,
                blob_key=key,
                extraction_status=extraction.status,
                extracted_text=extraction.text,
                created_at=now,
                expires_at=expires_at,
                claimed_at=now if claimed else None,
            )

            def insert(conn: Connection) -> None:
                fields = msgspec.structs.asdict(attachment)
                conn.execute(
                    f"INSERT INTO attachments ({', '.join(fields)}) VALUES ({', '.join('?' * len(fields))})",  # noqa: S608
                    tuple(fields.values()),
                )
                if surface == "hope":  # the feed lists what the Hope surface can fetch
                    changes.record(conn, account_id, "attachment", attachment_id, deleted=False)

            # Durable before the 201: a client that was told "stored" never finds the row gone after a crash.
            await self._db.transaction(insert, durable=True)
        except BaseException:
            with anyio.CancelScope(shield=True):
                try:
                    await self._blobs.delete(key)
                except StorageError as exc:  # the store is failing too: the sweep removes the orphan later
                    log.info("blob of a failed upload left for the sweep (%s)", type(exc).__name__)
            raise
        return attachment

    async def upload_pheby(
        self, account_id: str, conversation_id: str, filename: str, content_type: str | None, body: AsyncIterable[bytes]
    ) -> Attachment:
        """A Pheby upload: unclaimed, not listed or broadcast until `chat.send` takes it."""
        problem = filename_problem(filename)
        if problem is not None:
            raise BadRequest(problem)
        limit = self._settings.attachment_max_bytes
        # Counted against the account's quota as the bytes arrive (413 the moment it would pass).
        async with self.pheby_quota.reserve(account_id) as reservation:
            return await self._store(
                account_id=account_id,
                surface="pheby",
                direction="inbound",
                filename=filename,
                mime=base_mime(content_type),
                chunks=reservation.metered(body, step=_QUOTA_STEP, ceiling=limit),
                max_bytes=limit,
                conversation_id=conversation_id,
            )

    async def upload_hope(
        self,
        account_id: str,
        filename: str | None,
        content_type: str | None,
        declared_length: int | None,
        body: AsyncIterable[bytes],
    ) -> Attachment:
        """A Hope upload: allow-listed, signature-checked, counted against the quotas."""
        mime = base_mime(content_type)
        if mime not in HOPE_MIME_TYPES:
            raise UnsupportedMediaType(f"Unsupported type {mime}; allowed: {', '.join(sorted(HOPE_MIME_TYPES))}")
        problem = filename_problem(filename or "")
        if problem is not None:
            raise Unprocessable(problem)
        limit = self._settings.hope_upload_max_bytes
        if declared_length is not None and declared_length > limit:
            raise TooLarge(f"Uploads are limited to {limit} bytes")
        async with self.quota.reserve(account_id, declared_length or 0) as reservation:
            if declared_length is None:  # chunked: reserve as the bytes arrive
                body = reservation.metered(body, step=_QUOTA_STEP, ceiling=limit)
            return await self._store(
                account_id=account_id,
                surface="hope",
                direction="inbound",
                filename=filename or "",
                mime=mime,
                chunks=checked_stream(body, mime),
                max_bytes=limit if declared_length is None else declared_length,
            )

    async def _hope_bytes(self, account_id: str | None) -> int:
        where = "surface = 'hope' AND deleted_at IS NULL" + (" AND account_id = ?" if account_id else "")
        params: tuple[str, ...] = (account_id,) if account_id else ()
        sql = f"SELECT COALESCE(SUM(size), 0) FROM attachments WHERE {where}"  # noqa: S608 - fixed text, bound values
        row = await self._db.run(lambda c: c.execute(sql, params).fetchone())
        return int(row[0])

    async def _pheby_upload_bytes(self, account_id: str | None) -> int:
        """The bytes of the account's live Pheby uploads (deliverables don't count against it)."""
        now = self._clock()
        sql = (
            "SELECT COALESCE(SUM(size), 0) FROM attachments WHERE surface = 'pheby' AND direction = 'inbound' "  # noqa: S608
            f"AND account_id = ? AND {_LIVE}"
        )
        row = await self._db.run(lambda c: c.execute(sql, (account_id, now)).fetchone())
        return int(row[0])

    # --- reading ---------------------------------------------------------------------------

    async def get(self, account_id: str, attachment_id: str, surface: Surface | None = None) -> Attachment:
        """A live attachment of the account (not deleted, not expired), else 404."""
        now = self._clock()
        row = await self._db.run(
            lambda c: c.execute(
                f"SELECT * FROM attachments WHERE id = ? AND account_id = ? AND {_LIVE}",  # noqa: S608
                (attachment_id, account_id, now),
            ).fetchone()
        )
        if row is None or (surface is not None and row["surface"] != surface):
            raise NotFound(UNAVAILABLE)
        return _row(row)

    async def list_hope(self, account_id: str, limit: int = 200) -> list[Attachment]:
        now = self._clock()
        rows = await self._db.run(
            lambda c: c.execute(
                f"SELECT * FROM attachments WHERE account_id = ? AND surface = 'hope' AND {_LIVE} "  # noqa: S608
                "ORDER BY created_at DESC LIMIT ?",
                (account_id, now, limit),
            ).fetchall()
        )
        return [_row(r) for r in rows]

    async def for_conversation(self, account_id: str, conversation_id: str) -> list[Attachment]:
        """The conversation's unexpired attachments that clients may see (claimed uploads, deliverables)."""
        now = self._clock()
        rows = await self._db.run(
            lambda c: c.execute(
                f"SELECT * FROM attachments WHERE account_id = ? AND conversation_id = ? AND {_LIVE} "  # noqa: S608
                "AND claimed_at IS NOT NULL ORDER BY created_at",
                (account_id, conversation_id, now),
            ).fetchall()
        )
        return [_row(r) for r in rows]

    async def open_bytes(self, attachment: Attachment) -> BlobReader:
        return await self._blobs.open(attachment.blob_key)

    # --- deleting and expiry ---------------------------------------------------------------

    async def delete(self, account_id: str, attachment_id: str, surface: Surface | None = None) -> None:
        """Tombstone the row, then remove the bytes: a failure between leaves bytes nobody can fetch
        (the download is a 404 from then on), which the sweep removes."""
        attachment = await self.get(account_id, attachment_id, surface)
        await self._tombstone(attachment)
        await self._blobs.delete(attachment.blob_key)

    async def _tombstone(self, attachment: Attachment) -> None:
        now = self._clock()

        def q(conn: Connection) -> None:
            cursor = conn.execute(
                "UPDATE attachments SET deleted_at = ?, extracted_text = NULL WHERE id = ? AND deleted_at IS NULL",
                (now, attachment.id),
            )
            if cursor.rowcount and attachment.surface == "hope":
                changes.record(conn, attachment.account_id, "attachment", attachment.id, deleted=True)

        await self._db.transaction(q)
        await anyio.to_thread.run_sync(_remove_agent_copy, self._agent_folder(attachment))

    async def expire(self, now: float | None = None) -> int:
        """Tombstone every expired attachment's row, then delete its bytes (and its agent copy); returns how
        many. Bytes the store fails to delete are left to the sweep."""
        moment = self._clock() if now is None else now
        rows = await self._db.run(
            lambda c: c.execute(
                "SELECT * FROM attachments WHERE deleted_at IS NULL AND expires_at IS NOT NULL AND expires_at <= ?",
                (moment,),
            ).fetchall()
        )
        for row in rows:
            attachment = _row(row)
            await self._tombstone(attachment)
            try:
                await self._blobs.delete(attachment.blob_key)
            except StorageError as exc:
                log.warning("expired attachment's bytes left for the sweep (%s)", type(exc).__name__)
        return len(rows)

    async def sweep(self, now: float | None = None) -> SweepResult:
        """Remove blobs without a live row and what failed puts left behind.

        A blob whose row is tombstoned goes at once; one with no row at all only once it is over
        `SWEEP_MIN_AGE_SECONDS` old, since an upload in progress writes its blob before its row.
        Raises StorageError when the store fails (the next sweep goes on from there).
        """
        moment = self._clock() if now is None else now
        cutoff = moment - SWEEP_MIN_AGE_SECONDS
        blobs = await self._blobs.list(_BLOB_PREFIX)  # listed first: a row written after this has its blob listed
        rows = await self._db.run(lambda c: c.execute("SELECT blob_key, deleted_at FROM attachments").fetchall())
        live = {row["blob_key"] for row in rows if row["deleted_at"] is None}
        known = {row["blob_key"] for row in rows}
        orphans = 0
        for info in blobs:
            if info.key in live:
                continue
            if info.key not in known and (info.modified_at is None or info.modified_at >= cutoff):
                continue
            await self._blobs.delete(info.key)
            orphans += 1
        temporary = await self._blobs.sweep_temporary(cutoff)
        return SweepResult(orphans=orphans, temporary=temporary)

    async def remove_agent_copies(self, account_id: str, conversation_id: str) -> None:
        """Remove what was written for the agent to read from a (deleted) conversation's uploads."""
        rows = await self._db.run(
            lambda c: c.execute(
                "SELECT * FROM attachments WHERE account_id = ? AND conversation_id = ? AND direction = 'inbound'",
                (account_id, conversation_id),
            ).fetchall()
        )
        for row in rows:
            await anyio.to_thread.run_sync(_remove_agent_copy, self._agent_folder(_row(row)))

    # --- agent input -----------------------------------------------------------------------

    async def prepare_chat_input(
        self, account_id: str, conversation_id: str, text: str, attachment_ids: Sequence[str]
    ) -> ClaimedInput:
        """Check the ids a `chat.send` names and build the run input; nothing is claimed yet."""
        if len(set(attachment_ids)) != len(attachment_ids) or len(attachment_ids) > CHAT_IDS_MAX:
            raise BadRequest(f"attachment_ids must be at most {CHAT_IDS_MAX} distinct ids")
        attachments: list[Attachment] = []
        for attachment_id in attachment_ids:
            try:
                attachment = await self.get(account_id, attachment_id, "pheby")
            except NotFound:
                raise BadRequest(f"Unknown attachment {attachment_id[:40]}") from None
            if attachment.direction != "inbound" or attachment.conversation_id != conversation_id:
                raise BadRequest(f"Attachment {attachment_id} does not belong to this conversation")
            if attachment.claimed_at is not None:
                raise BadRequest(f"Attachment {attachment_id} was already sent")
            attachments.append(attachment)
        parts = [text]
        for attachment in attachments:
            # Inlined only when whole; anything else (truncated, encrypted, unreadable) goes by path, so the
            # agent may still open it with its own tools.
            if (
                is_text(attachment.mime)
                and attachment.size <= INLINE_TEXT_MAX_BYTES
                and attachment.extraction_status == "ready"
                and attachment.extracted_text
            ):
                parts.append(
                    f"[Attachment: {attachment.filename}]\n{attachment.extracted_text}\n[End of {attachment.filename}]"
                )
            else:
                path = await self._copy_for_agent(attachment)
                parts.append(
                    f"[Attachment: {attachment.filename} ({attachment.mime}, {attachment.size} bytes) at {path}]"
                )
        return ClaimedInput(text="\n\n".join(parts), attachments=attachments)

    async def _copy_for_agent(self, attachment: Attachment) -> Path:
        folder = self._agent_folder(attachment)
        path = folder / attachment.filename
        await anyio.to_thread.run_sync(lambda: folder.mkdir(parents=True, exist_ok=True, mode=0o700))
        async with await self._blobs.open(attachment.blob_key) as reader, await anyio.open_file(path, "wb") as out:
            async for chunk in reader:
                await out.write(chunk)
        return path.resolve()

    async def claim(self, attachments: Sequence[Attachment], message_id: str) -> list[Attachment]:
        """Anchor uploads to the turn that sent them (after the run was accepted)."""
        now = self._clock()

        def q(conn: Connection) -> None:
            for attachment in attachments:
                conn.execute(
                    "UPDATE attachments SET claimed_at = ?, message_id = ? WHERE id = ? AND claimed_at IS NULL",
                    (now, message_id, attachment.id),
                )

        await self._db.transaction(q)
        return [msgspec.structs.replace(a, claimed_at=now, message_id=message_id) for a in attachments]

    async def anchor(self, conversation_id: str, message_ids: dict[str, str]) -> None:
        """Give a turn's files the ids its messages have in history (see `RunManager._after_turn`)."""

        def q(conn: Connection) -> None:
            for old, new in message_ids.items():
                conn.execute(
                    "UPDATE attachments SET message_id = ? WHERE conversation_id = ? AND message_id = ?",
                    (new, conversation_id, old),
                )

        await self._db.transaction(q)

    async def provider_content(
        self, owner: str, attachment_ids: Sequence[str], vision: bool = False
    ) -> list[dict[str, Any]]:
        """OpenAI message-content parts for up to 8 of the owner's attachments."""
        distinct = list(dict.fromkeys(attachment_ids))
        if len(distinct) > PROVIDER_IDS_MAX:
            raise BadRequest(f"At most {PROVIDER_IDS_MAX} attachments per message")
        parts: list[dict[str, Any]] = []
        for attachment_id in distinct:
            attachment = await self.get(owner, attachment_id)
            status = attachment.extraction_status
            if status in UNUSABLE:
                raise Unprocessable(f"{attachment.filename} is {status} and can't be given to the model")
            if status == "image":
                if not vision or attachment.mime not in INLINE_IMAGE_TYPES:
                    raise Conflict("The selected model can't read images")
                async with await self._blobs.open(attachment.blob_key) as reader:
                    data = await reader.read()
                url = f"data:{attachment.mime};base64,{base64.b64encode(data).decode()}"
                parts.append({"type": "image_url", "image_url": {"url": url}})
            elif attachment.extracted_text:
                parts.append(
                    {"type": "text", "text": f"[Attachment: {attachment.filename}]\n{attachment.extracted_text}"}
                )
            else:
                parts.append(
                    {"type": "text", "text": f"[Attachment: {attachment.filename} ({attachment.mime}), no text]"}
                )
        return parts

    # --- deliverables ----------------------------------------------------------------------

    async def store_deliverable(
        self, account: Account, conversation_id: str, message_id: str, raw_path: str
    ) -> Attachment | None:
        """Copy a `MEDIA:` file into storage as an outbound attachment; None when it is refused.

        Only from the roots the account may read (`media_roots_for`): the owner's PHEBY_MEDIA_ROOTS, the
        roots another account was given, none for an account with its own gateway.
        """
        roots = media_roots_for(account, self._settings.media_roots)
        if not roots:
            log.warning("MEDIA: file skipped (the account may not deliver files from this server's disk)")
            return None
        max_bytes = self._settings.attachment_max_bytes
        try:
            fd, _ = await anyio.to_thread.run_sync(open_media_file, raw_path, roots, max_bytes)
        except (MediaRefused, OSError) as exc:
            log.warning("MEDIA: file skipped (%s)", exc if isinstance(exc, MediaRefused) else type(exc).__name__)
            return None
        filename = os.path.basename(raw_path)
        return await self._store_outbound(
            account.id, conversation_id, message_id, filename, _guess_mime(filename), read_fd_chunks(fd)
        )

    async def store_pushed_deliverable(
        self,
        account_id: str,
        conversation_id: str,
        message_id: str,
        filename: str,
        content_type: str | None,
        chunks: AsyncIterable[bytes],
    ) -> Attachment:
        """Store a `MEDIA:` file whose bytes the companion plugin pushed (Hermes's disk is never read)."""
        mime = base_mime(content_type)
        if mime == "application/octet-stream":
            mime = _guess_mime(filename)
        return await self._store_outbound(account_id, conversation_id, message_id, filename, mime, chunks)

    async def _store_outbound(
        self,
        account_id: str,
        conversation_id: str,
        message_id: str,
        filename: str,
        mime: str,
        chunks: AsyncIterable[bytes],
    ) -> Attachment:
        """An agent deliverable: outbound, anchored to the turn, announced (claimed) at once."""
        return await self._store(
            account_id=account_id,
            surface="pheby",
            direction="outbound",
            filename=filename if filename_problem(filename) is None else "file",
            mime=mime,
            chunks=chunks,
            max_bytes=self._settings.attachment_max_bytes,
            conversation_id=conversation_id,
            message_id=message_id,
            claimed=True,
        )


def _guess_mime(filename: str) -> str:
    guessed, _ = mimetypes.guess_type(filename)
    if filename.lower().endswith(".md"):
        return "text/markdown"
    return guessed or "application/octet-stream"


def _remove_agent_copy(folder: Path) -> None:
    """Remove an upload's agent folder (and its account's, once empty); also where earlier versions
    put it, directly under PHEBY_AGENT_MEDIA_DIR. Best effort: a failure is one warning line."""
    account_folder = folder.parent
    try:
        for candidate in (folder, account_folder.parent / folder.name):
            if not candidate.is_dir() or candidate.is_symlink():
                continue
            for child in candidate.iterdir():
                if child.is_file() and not child.is_symlink():
                    child.unlink()
            with contextlib.suppress(OSError):  # something else in it: leave it
                candidate.rmdir()
        with contextlib.suppress(OSError):  # not empty: the account has other copies
            account_folder.rmdir()
    except OSError as exc:
        log.warning("agent copy %s not removed (%s)", folder.name, exc.strerror or type(exc).__name__)
