"""What the OpenAPI document says beyond the signatures: error answers, raw bodies, downloads.

Every error is documented with the one body `handlers.support.errors` sends (`ErrorResponse`); a route lists
the statuses it can answer with `responses=errors(...)`, and the `/api` router adds what its guard
answers. Routes that stream raw bytes (uploads, downloads) describe them with an `operation_class`
from here, since their bodies are no JSON type Litestar could read off the signature.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

import msgspec
from litestar.enums import ParamType, RequestEncodingType
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import (
    OpenAPIFormat,
    OpenAPIMediaType,
    OpenAPIResponse,
    OpenAPIType,
    Operation,
    Parameter,
    RequestBody,
    Schema,
)
from litestar.params import Body, BodyKwarg

from handlers.support.errors import ErrorResponse
from pheby.auth import MUTATING_METHODS

_DESCRIPTIONS = {
    400: "Malformed request: a parameter or body of the wrong type or shape",
    401: "No valid credentials",
    403: "A cookie-authenticated change without an allowed Origin header",
    404: "Not found, or not the caller's",
    408: "The request body stalled",
    409: "Conflicts with the current state (a missing or stale revision)",
    413: "Over a size limit or quota",
    415: "A content type outside the allow-list",
    422: "A value breaks a rule",
    429: "Too many attempts; try again later",
    501: "Not supported by the connected Hermes",
    502: "Hermes answered with an error",
    503: "Hermes or storage is unavailable",
}


def errors(*statuses: int) -> dict[int, ResponseSpec]:
    """`responses=` for these error statuses, each with the error body."""
    return {
        status: ResponseSpec(data_container=ErrorResponse, description=_DESCRIPTIONS[status], generate_examples=False)
        for status in statuses
    }


def guard_errors(http_methods: Iterable[str]) -> dict[int, ResponseSpec]:
    """What the `/api` guard answers: 401, 403 for a cookie change without Origin, 503 when storage is down."""
    return errors(401, 403, 503) if MUTATING_METHODS & set(http_methods) else errors(401, 503)


def _binary(media_types: Iterable[str], min_length: int | None = None) -> dict[str, OpenAPIMediaType]:
    binary = Schema(type=OpenAPIType.STRING, format=OpenAPIFormat.BINARY, min_length=min_length)
    return {m: OpenAPIMediaType(schema=binary) for m in sorted(media_types)}


def raw_body_operation(
    media_types: Iterable[str], parameters: Iterable[Parameter] = (), description: str = "The file's bytes (not empty)"
) -> type[Operation]:
    """An operation whose request body is the raw bytes of a file, in one of `media_types`."""
    body = RequestBody(content=_binary(media_types, min_length=1), required=True, description=description)
    extra = tuple(parameters)

    @dataclass
    class RawBodyOperation(Operation):
        _body: ClassVar[RequestBody] = body
        _extra: ClassVar[tuple[Parameter, ...]] = extra

        def __post_init__(self) -> None:
            self.request_body = self._body
            names = {p.name for p in self._extra}
            kept = [p for p in (self.parameters or []) if getattr(p, "name", None) not in names]
            self.parameters = [*kept, *self._extra] or None

    return RawBodyOperation


def download_operation(
    status: int,
    media_types: Iterable[str],
    headers: dict[str, Any] | None = None,
    schemas: dict[str, Schema] | None = None,
) -> type[Operation]:
    """An operation whose success answer is a file's bytes, in one of `media_types` (a media type in
    `schemas` is described by its schema instead: a JSON download)."""
    content = _binary(media_types) | {m: OpenAPIMediaType(schema=schema) for m, schema in (schemas or {}).items()}

    @dataclass
    class DownloadOperation(Operation):
        def __post_init__(self) -> None:
            responses = dict(self.responses or {})
            responses[str(status)] = OpenAPIResponse(description="The file's bytes", content=content, headers=headers)
            self.responses = responses

    return DownloadOperation


def _inlined(document: dict[str, Any]) -> dict[str, Any]:
    """A msgspec JSON Schema document with its `$defs` written in place (the OpenAPI document has no `$defs`)."""
    definitions = document.get("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                return inline(definitions[node["$ref"].rsplit("/", 1)[1]])
            return {key: inline(value) for key, value in node.items()}
        if isinstance(node, list):
            return [inline(item) for item in node]
        return node

    schema: dict[str, Any] = inline(document)
    schema.pop("$defs", None)
    return schema


def struct_schema(type_: type[Any]) -> Schema:
    """msgspec's JSON Schema of a struct as one self-contained schema (its `$defs` written in place)."""
    schema = _inlined(msgspec.json.schema(type_))
    return Schema(
        type=OpenAPIType.OBJECT,
        title=schema.get("title"),
        properties=schema["properties"],
        required=schema.get("required"),
        additional_properties=schema.get("additionalProperties"),
    )


def json_body(type_: type[Any], **extra: Any) -> BodyKwarg:
    """`Annotated[..., json_body(T)]`: the JSON body documented as msgspec's schema of `T`.

    That schema carries every `msgspec.Meta` constraint and `additionalProperties: false` for a
    struct that forbids unknown fields, which Litestar's own rendering leaves out; `extra` adds
    object-level keywords (`minProperties`, `anyOf`). Routes that validate the body themselves
    (`read_body` on a dict) document the struct they validate with.
    """
    schema = _inlined(msgspec.json.schema(type_))  # nested structs too
    keywords = {"properties": schema["properties"], "required": schema.get("required") or None}
    keywords |= {"additional_properties": schema.get("additionalProperties"), "title": schema["title"]}
    body: BodyKwarg = Body(media_type=RequestEncodingType.JSON, schema_extra={**keywords, **extra})
    return body


def header(name: str, schema: Schema, required: bool = True) -> Parameter:
    """A header a raw-body route reads itself (so it is not in its signature)."""
    return Parameter(name=name, param_in=ParamType.HEADER, schema=schema, required=required)


def query(name: str, schema: Schema, required: bool = True) -> Parameter:
    """A query parameter as the document states it, where the signature must stay lenient (see its route)."""
    return Parameter(name=name, param_in=ParamType.QUERY, schema=schema, required=required)
