"""GET /api/artifacts/{artifact_id}/export?revision=N — the content as a UTF-8 text download.

Always `text/plain` and an attachment, whatever the content looks like: an export is never rendered
inline (no HTML, nothing executable), and `.md` / `.txt` is all it claims to be.
"""

from typing import Annotated
from urllib.parse import quote

from litestar import MediaType, Response, get
from litestar.di import NamedDependency
from litestar.params import FromPath

from handlers.artifacts_get import REVISION
from handlers.support.downloads import download_stem
from handlers.support.openapi import download_operation, errors
from pheby.auth import Principal
from pheby.services import Services


def export_filename(title: str, kind: str) -> str:
    """A download name from the title: no separators, quotes or control characters, never hidden or empty."""
    return f"{download_stem(title, 'artifact')}{'.md' if kind == 'markdown' else '.txt'}"


def attachment_disposition(filename: str) -> str:
    """RFC 6266: an ASCII fallback for old clients plus the exact UTF-8 name."""
    fallback = "".join(c if c.isascii() else "_" for c in filename)
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(filename, safe='')}"


@get(
    "/artifacts/{artifact_id:str}/export",
    tags=["artifacts"],
    operation_class=download_operation(200, ["text/plain"]),
    responses=errors(400, 404),
)
async def export_artifact(
    current_user: NamedDependency[Principal],
    services: NamedDependency[Services],
    artifact_id: FromPath[str],
    revision: Annotated[int | None, REVISION] = None,
) -> Response[bytes]:
    artifact = await services.artifacts.get(current_user.account.id, artifact_id, revision)
    return Response(
        artifact.content.encode("utf-8"),
        media_type=MediaType.TEXT,  # Litestar adds `; charset=utf-8` to text types
        headers={
            "Content-Disposition": attachment_disposition(export_filename(artifact.title, artifact.kind)),
            "Cache-Control": "no-store",
            "X-Content-Type-Options": "nosniff",
        },
    )
