"""Hermes's wire conventions: JSON bodies as aiohttp writes them, and its three error envelopes.

- gateway routes: ``{"error": {"message", "type", "param", "code"}}`` (``_openai_error`` in 0.19.0)
- ``/api/jobs`` routes: ``{"error": "<message>"}``
- dashboard routes (FastAPI): ``{"detail": "<message>"}``
"""

import json
from typing import Any

from litestar import Request, Response

__all__ = [
    "HermesHTTPError",
    "api_error",
    "dashboard_error",
    "handle_hermes_error",
    "jobs_error",
    "json_response",
    "read_json",
]


class HermesHTTPError(Exception):
    """An error response in one of Hermes's envelopes; raised by handlers, rendered by the app."""

    def __init__(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        super().__init__(f"HTTP {status}: {body}")
        self.status = status
        self.body = body
        self.headers = headers or {}


def api_error(
    status: int,
    message: str,
    code: str | None = None,
    *,
    error_type: str = "invalid_request_error",
    headers: dict[str, str] | None = None,
) -> HermesHTTPError:
    body = {"error": {"message": message, "type": error_type, "param": None, "code": code}}
    return HermesHTTPError(status, body, headers)


def jobs_error(status: int, message: str) -> HermesHTTPError:
    return HermesHTTPError(status, {"error": message})


def dashboard_error(status: int, detail: str) -> HermesHTTPError:
    return HermesHTTPError(status, {"detail": detail})


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response[bytes]:
    """Serialise like aiohttp's ``json_response`` (stdlib ``json.dumps``), so key order and types match."""
    return Response(
        content=json.dumps(body).encode(),
        status_code=status,
        media_type="application/json; charset=utf-8",
        headers=headers,
    )


def handle_hermes_error(_: Request[Any, Any, Any], exc: HermesHTTPError) -> Response[bytes]:
    return json_response(exc.body, exc.status, exc.headers)


async def read_json(request: Request[Any, Any, Any], invalid: HermesHTTPError) -> Any:
    """The request body as JSON; ``invalid`` is raised for a body that is not JSON at all."""
    raw = await request.body()
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise invalid from None
