"""POST /api/artifacts — a new artifact at revision 1."""

from typing import Annotated

import msgspec
from litestar import post
from litestar.di import NamedDependency

from handlers.support.openapi import errors, json_body
from pheby.auth import Principal
from pheby.services import Services
from pheby.store.artifacts import KINDS, TITLE_MAX, ArtifactBody

# The value rules are the service's (a title that breaks them is 422, not a body-shape 400), so the
# body's schema states them (`extra_json_schema`) without msgspec enforcing them at decoding.
_BLANK = r"\t\n\x0b\x0c\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"  # what str.strip() drops
_VISIBLE = r"[^\x00-\x20\x7f-\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
_ONE_LINE = r"[^\x00-\x1f\x7f-\x9f\u2028\u2029]"  # no control characters, no line or paragraph separator
TITLE_SCHEMA = {
    "type": "string",
    "pattern": f"^[{_BLANK}]*{_VISIBLE}(?:{_ONE_LINE}{{0,{TITLE_MAX - 2}}}{_VISIBLE})?[{_BLANK}]*$",
    "description": f"One line of 1-{TITLE_MAX} characters once surrounding blanks are trimmed",
}
KIND_SCHEMA = {"type": "string", "enum": list(KINDS)}
CONTENT_SCHEMA = {"type": "string", "maxLength": 512 * 1024, "description": "At most 512 KiB of UTF-8 (configurable)"}


class CreateArtifactRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    title: Annotated[str, msgspec.Meta(extra_json_schema=TITLE_SCHEMA)]
    kind: Annotated[str, msgspec.Meta(extra_json_schema=KIND_SCHEMA)] = "markdown"
    content: Annotated[str, msgspec.Meta(extra_json_schema=CONTENT_SCHEMA)] = ""


EXAMPLE = {"title": "Trip plan", "kind": "markdown", "content": "# Day 1\n"}


@post("/artifacts", tags=["artifacts"], status_code=201, responses=errors(400, 408, 413, 422))
async def create_artifact(
    current_user: NamedDependency[Principal],
    services: NamedDependency[Services],
    data: Annotated[CreateArtifactRequest, json_body(CreateArtifactRequest, examples=[EXAMPLE])],
) -> ArtifactBody:
    artifact = await services.artifacts.create(current_user.account.id, data.title, data.kind, data.content)
    return ArtifactBody(artifact=artifact)
