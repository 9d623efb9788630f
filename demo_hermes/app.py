"""``create_demo_app``: the demo Hermes as one ASGI app (gateway API and dashboard API on one port)."""

import contextlib
import hmac
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

from litestar import Litestar, Request
from litestar.datastructures import State

from demo_hermes.execution import run_cron_ticker
from demo_hermes.routes import ALL_ROUTES
from demo_hermes.state import DemoOptions, DemoState, demo_state
from demo_hermes.wire import HermesHTTPError, api_error, dashboard_error, handle_hermes_error

__all__ = ["create_demo_app"]

PUBLIC_PATHS: Final = frozenset({"/health", "/v1/health", "/api/model/info"})
DASHBOARD_PATHS: Final = ("/api/model/", "/api/config")
DASHBOARD_TOKEN_HEADER: Final = "x-hermes-session-token"  # noqa: S105 - a header name, not a secret
GATEWAY_MODEL_OPTIONS_PATH: Final = "/api/model/options"  # also a gateway route where model_options is on


def _matches(given: str | None, expected: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


def authenticate(request: Request[Any, Any, Any]) -> None:
    """The gateway wants ``Authorization: Bearer <API_SERVER_KEY>``; the dashboard its session token."""
    path = request.url.path
    if path in PUBLIC_PATHS:
        return
    state = demo_state(request)
    authorization = request.headers.get("authorization")
    gateway_key_ok = _matches(authorization, f"Bearer {state.api_key}")
    if path == GATEWAY_MODEL_OPTIONS_PATH and "model_options" in state.features and gateway_key_ok:
        return
    if path.startswith(DASHBOARD_PATHS):
        token = state.dashboard_token
        if not (
            _matches(request.headers.get(DASHBOARD_TOKEN_HEADER), token) or _matches(authorization, f"Bearer {token}")
        ):
            raise dashboard_error(401, "Unauthorized")
        return
    if not gateway_key_ok:
        raise api_error(401, "Invalid API key", "invalid_api_key")


def create_demo_app(
    api_key: str, media_dir: Path, *, dashboard_token: str | None = None, options: DemoOptions | None = None
) -> Litestar:
    """Build the demo Hermes.

    Args:
        api_key: the bearer key every gateway route requires (like ``API_SERVER_KEY``).
        media_dir: where ``/demo image``, ``/demo document`` and ``/demo files`` write the files they deliver.
        dashboard_token: the dashboard session token; defaults to ``api_key``.
        options: how it behaves (``DemoOptions``: delays, limits, 0.22-era features).
    """
    state = DemoState(
        api_key=api_key,
        dashboard_token=dashboard_token or api_key,
        media_dir=Path(media_dir),
        options=options or DemoOptions(),
    )

    @contextlib.asynccontextmanager
    async def background_work(_: Litestar) -> AsyncIterator[None]:
        state.spawn(run_cron_ticker(state))
        try:
            yield
        finally:
            await state.cancel_tasks()

    return Litestar(
        route_handlers=ALL_ROUTES,
        before_request=authenticate,
        exception_handlers={HermesHTTPError: handle_hermes_error},
        lifespan=[background_work],
        state=State({"demo": state}),
        openapi_config=None,
        logging_config=None,  # the host process (local_dev, pytest) owns logging
    )


def new_api_key() -> str:
    """A key that passes Hermes's own rule for ``API_SERVER_KEY`` (at least 16 characters)."""
    return f"demo-{secrets.token_hex(16)}"
