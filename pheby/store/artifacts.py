"""Hope artifacts: documents with a revision counter and every version kept — all the SQL of the domain.

Every edit stores a whole version (content and time), so an artifact's revision is also its number of
versions. A version keeps its content only: title and kind are the artifact's current ones. Deleting
leaves a tombstone whose versions are unreachable but retained, and they keep counting against the
limits: a limit refuses the request (413) and is never met by trimming old versions.

Writes run in one BEGIN IMMEDIATE transaction each, so the revision compare-and-swap of an edit, the
limit checks and the change-feed record see and change one consistent state.
"""

import time
import unicodedata
import uuid
from collections.abc import Callable
from typing import Literal

import msgspec

from pheby.db import Connection, Database, Row
from pheby.errors import Conflict, NotFound, TooLarge, Unprocessable
from pheby.settings import Settings
from pheby.store import changes

ArtifactKind = Literal["text", "markdown", "code"]
KINDS: dict[str, ArtifactKind] = {"text": "text", "markdown": "markdown", "code": "code"}
TITLE_MAX = 160
LIST_PAGE = 200
KiB = 1024
MiB = 1024 * KiB
# SQLite integers are signed 64-bit; a larger number from a client is simply not a revision.
_SQLITE_INT_MAX = 2**63 - 1
# Characters that would break a title onto several lines (or into a header): C0/C1 controls, separators.
_FORBIDDEN_TITLE_CATEGORIES = frozenset({"Cc", "Zl", "Zp"})


class ArtifactLimits(msgspec.Struct, frozen=True, kw_only=True):
    """What one account (and the server) may keep. Defaults are the spec's."""

    content_max_bytes: int = 512 * KiB
    artifacts_per_account: int = 200  # tombstones included: they keep their versions
    versions_max: int = 100  # per artifact, the first one included
    account_bytes: int = 32 * MiB  # UTF-8 bytes of every retained version of an account
    global_bytes: int = 256 * MiB  # the same, over all accounts

    @classmethod
    def from_settings(cls, settings: Settings) -> "ArtifactLimits":
        return cls(
            content_max_bytes=settings.artifact_content_max_bytes,
            artifacts_per_account=settings.artifacts_per_account,
            versions_max=settings.artifact_versions_max,
            account_bytes=settings.artifact_account_bytes,
            global_bytes=settings.artifact_global_bytes,
        )


class Artifact(msgspec.Struct, frozen=True, kw_only=True):
    """An artifact with the content of one version (the current one unless a revision was asked for)."""

    id: str
    title: str
    kind: ArtifactKind
    revision: int
    content: str
    created_at: int
    updated_at: int  # of a historical revision: when that version was written


class ArtifactSummary(msgspec.Struct, frozen=True, kw_only=True):
    """A list entry: the artifact without its content."""

    id: str
    title: str
    kind: ArtifactKind
    revision: int
    created_at: int
    updated_at: int


class ArtifactVersion(msgspec.Struct, frozen=True, kw_only=True):
    revision: int
    created_at: int


class ArtifactBody(msgspec.Struct, frozen=True):
    """The `{artifact}` body that creating, reading and editing answer with."""

    artifact: Artifact


def clean_title(title: str) -> str:
    """The title without surrounding blanks; 1-160 characters on one line, else `invalid` (422)."""
    cleaned = title.strip()
    if not 1 <= len(cleaned) <= TITLE_MAX:
        raise Unprocessable(f"title must be 1-{TITLE_MAX} characters")
    if any(unicodedata.category(char) in _FORBIDDEN_TITLE_CATEGORIES for char in cleaned):
        raise Unprocessable("title must be one line without control characters")
    return cleaned


def check_kind(kind: str) -> ArtifactKind:
    checked = KINDS.get(kind)
    if checked is None:
        raise Unprocessable(f"kind must be one of: {', '.join(KINDS)}")
    return checked


class Artifacts:
    """The artifacts service. `clock` is injectable so times can be tested."""

    def __init__(
        self, db: Database, limits: ArtifactLimits | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        self._db = db
        self.limits = limits or ArtifactLimits()
        self._clock = clock

    def _content_size(self, content: str) -> int:
        size = len(content.encode("utf-8"))
        if size > self.limits.content_max_bytes:
            raise TooLarge(f"content is larger than {self.limits.content_max_bytes} bytes of UTF-8")
        return size

    async def list_live(self, account_id: str) -> list[ArtifactSummary]:
        """The account's live artifacts, most recently edited first, at most `LIST_PAGE`."""
        rows = await self._db.run(
            lambda c: c.execute(
                "SELECT id, title, kind, revision, created_at, updated_at FROM artifacts "
                "WHERE account_id = ? AND deleted_at IS NULL ORDER BY updated_at DESC, created_at DESC, id LIMIT ?",
                (account_id, LIST_PAGE),
            ).fetchall()
        )
        return [
            ArtifactSummary(
                id=r["id"],
                title=r["title"],
                kind=r["kind"],
                revision=r["revision"],
                created_at=r["created_at"],
                updated_at=r["updated_at"],
            )
            for r in rows
        ]

    async def create(self, account_id: str, title: str, kind: str, content: str) -> Artifact:
        title, checked_kind, size = clean_title(title), check_kind(kind), self._content_size(content)
        artifact_id, now = uuid.uuid4().hex, int(self._clock())

        def q(conn: Connection) -> None:
            (count,) = conn.execute("SELECT COUNT(*) FROM artifacts WHERE account_id = ?", (account_id,)).fetchone()
            if count >= self.limits.artifacts_per_account:
                raise TooLarge(
                    f"An account keeps at most {self.limits.artifacts_per_account} artifacts, deleted ones included"
                )
            self._check_storage(conn, account_id, size)
            conn.execute(
                "INSERT INTO artifacts (id, account_id, title, kind, revision, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, 1, ?, ?)",
                (artifact_id, account_id, title, checked_kind, now, now),
            )
            _add_version(conn, account_id, artifact_id, 1, content, size, now)
            changes.record(conn, account_id, "artifact", artifact_id, deleted=False)

        await self._db.transaction(q)
        return Artifact(
            id=artifact_id,
            title=title,
            kind=checked_kind,
            revision=1,
            content=content,
            created_at=now,
            updated_at=now,
        )

    async def get(self, account_id: str, artifact_id: str, revision: int | None = None) -> Artifact:
        """The artifact with its current content, or with the content and time of `revision`."""
        if revision is not None and not 1 <= revision <= _SQLITE_INT_MAX:
            raise NotFound("Artifact version not found")

        def q(conn: Connection) -> Artifact:
            row = _live(conn, account_id, artifact_id)
            wanted = row["revision"] if revision is None else revision
            version = conn.execute(
                "SELECT content, created_at FROM artifact_versions WHERE artifact_id = ? AND revision = ?",
                (artifact_id, wanted),
            ).fetchone()
            if version is None:
                raise NotFound("Artifact version not found")
            return Artifact(
                id=row["id"],
                title=row["title"],
                kind=row["kind"],
                revision=wanted,
                content=version["content"],
                created_at=row["created_at"],
                updated_at=version["created_at"],
            )

        return await self._db.run(q)

    async def versions(self, account_id: str, artifact_id: str) -> list[ArtifactVersion]:
        """Every version of the artifact, newest first (bounded by `versions_max`)."""

        def q(conn: Connection) -> list[ArtifactVersion]:
            _live(conn, account_id, artifact_id)
            rows = conn.execute(
                "SELECT revision, created_at FROM artifact_versions WHERE artifact_id = ? ORDER BY revision DESC",
                (artifact_id,),
            ).fetchall()
            return [ArtifactVersion(revision=r["revision"], created_at=r["created_at"]) for r in rows]

        return await self._db.run(q)

    async def update(
        self,
        account_id: str,
        artifact_id: str,
        revision: int | None,
        *,
        title: str | None = None,
        kind: str | None = None,
        content: str | None = None,
    ) -> Artifact:
        """Edit the artifact if `revision` is still its current one; the edit is the next revision.

        Of several edits made against one revision exactly one succeeds: the check and the write are
        one transaction, and every later one finds the revision moved on (409).
        """
        new_title = None if title is None else clean_title(title)
        new_kind = None if kind is None else check_kind(kind)
        new_size = None if content is None else self._content_size(content)
        now = int(self._clock())

        def q(conn: Connection) -> Artifact:
            row = _live(conn, account_id, artifact_id)
            current = row["revision"]
            if revision is None:
                raise Conflict(f"revision is required: the artifact is at revision {current}")
            if revision != current:
                raise Conflict(f"Stale revision {revision}: the artifact is at revision {current}")
            if title is None and kind is None and content is None:
                raise Unprocessable("Nothing to change: give title, kind or content")
            if current >= self.limits.versions_max:
                raise TooLarge(f"An artifact keeps at most {self.limits.versions_max} versions")
            if content is None or new_size is None:  # title or kind only: the new version repeats the content
                kept = conn.execute(
                    "SELECT content, size FROM artifact_versions WHERE artifact_id = ? AND revision = ?",
                    (artifact_id, current),
                ).fetchone()
                body, size = kept["content"], kept["size"]
            else:
                body, size = content, new_size
            self._check_storage(conn, account_id, size)
            next_title = row["title"] if new_title is None else new_title
            next_kind = row["kind"] if new_kind is None else new_kind
            cursor = conn.execute(
                "UPDATE artifacts SET title = ?, kind = ?, revision = ?, updated_at = ? WHERE id = ? AND revision = ?",
                (next_title, next_kind, current + 1, now, artifact_id, current),
            )
            assert cursor.rowcount == 1  # the transaction holds the write lock since the read above
            _add_version(conn, account_id, artifact_id, current + 1, body, size, now)
            changes.record(conn, account_id, "artifact", artifact_id, deleted=False)
            return Artifact(
                id=artifact_id,
                title=next_title,
                kind=next_kind,
                revision=current + 1,
                content=body,
                created_at=row["created_at"],
                updated_at=now,
            )

        return await self._db.transaction(q)

    async def delete(self, account_id: str, artifact_id: str) -> None:
        """Tombstone the artifact: it and its versions are gone for the client, retained on disk."""
        now = int(self._clock())

        def q(conn: Connection) -> None:
            cursor = conn.execute(
                "UPDATE artifacts SET deleted_at = ? WHERE id = ? AND account_id = ? AND deleted_at IS NULL",
                (now, artifact_id, account_id),
            )
            if cursor.rowcount != 1:
                raise NotFound("Artifact not found")
            changes.record(conn, account_id, "artifact", artifact_id, deleted=True)

        await self._db.transaction(q)

    def _check_storage(self, conn: Connection, account_id: str, added: int) -> None:
        """Refuse `added` more retained bytes past the account's or the server's limit."""
        account_bytes, total_bytes = conn.execute(
            "SELECT COALESCE((SELECT bytes FROM artifact_usage WHERE account_id = ?), 0), "
            "COALESCE((SELECT SUM(bytes) FROM artifact_usage), 0)",
            (account_id,),
        ).fetchone()
        if account_bytes + added > self.limits.account_bytes:
            raise TooLarge(
                f"This account's artifact versions would exceed {self.limits.account_bytes} bytes "
                "(deleted artifacts' versions count too)"
            )
        if total_bytes + added > self.limits.global_bytes:
            raise TooLarge("The server's storage for artifact versions is full")


def _live(conn: Connection, account_id: str, artifact_id: str) -> Row:
    """The account's artifact unless deleted; another account's id is just as not found."""
    row: Row | None = conn.execute(
        "SELECT * FROM artifacts WHERE id = ? AND account_id = ? AND deleted_at IS NULL", (artifact_id, account_id)
    ).fetchone()
    if row is None:
        raise NotFound("Artifact not found")
    return row


def _add_version(
    conn: Connection, account_id: str, artifact_id: str, revision: int, content: str, size: int, now: int
) -> None:
    conn.execute(
        "INSERT INTO artifact_versions (artifact_id, revision, content, size, created_at) VALUES (?, ?, ?, ?, ?)",
        (artifact_id, revision, content, size, now),
    )
    conn.execute(
        "INSERT INTO artifact_usage (account_id, bytes) VALUES (?, ?) "
        "ON CONFLICT (account_id) DO UPDATE SET bytes = artifact_usage.bytes + excluded.bytes",
        (account_id, size),
    )
