"""The dashboard backend's model and config endpoints (``hermes serve``), FastAPI-style errors included."""

from typing import Any, Final

from litestar import Request, Response, get, post, put

from demo_hermes.config import PROVIDERS
from demo_hermes.state import demo_state
from demo_hermes.wire import HermesHTTPError, dashboard_error, json_response, read_json

__all__ = ["DASHBOARD_ROUTES"]

DEMO_CONTEXT_LENGTH: Final = 131072


def _invalid_json() -> HermesHTTPError:
    return dashboard_error(400, "Invalid JSON body")


@get("/api/model/options")
async def model_options(request: Request[Any, Any, Any]) -> Response[bytes]:
    config = demo_state(request).config
    return json_response({"providers": config.provider_options(), "model": config.model, "provider": config.provider})


@get("/api/model/info")
async def model_info(request: Request[Any, Any, Any]) -> Response[bytes]:
    config = demo_state(request).config
    return json_response(
        {
            "model": config.model,
            "provider": config.provider,
            "auto_context_length": DEMO_CONTEXT_LENGTH,
            "config_context_length": 0,
            "effective_context_length": DEMO_CONTEXT_LENGTH,
            "capabilities": {},
        }
    )


@post("/api/model/set", status_code=200)
async def set_model(request: Request[Any, Any, Any]) -> Response[bytes]:
    body = await read_json(request, _invalid_json())
    if not isinstance(body, dict):
        raise _invalid_json()
    scope, provider, model = body.get("scope", "main"), body.get("provider"), body.get("model")
    if scope != "main":
        raise dashboard_error(400, "The demo Hermes only has the main model slot")
    if not isinstance(provider, str) or provider not in {option["slug"] for option in PROVIDERS}:
        raise dashboard_error(400, f"Unknown provider: {provider}")
    if not isinstance(model, str) or not model.strip():
        raise dashboard_error(400, "model is required")
    base_url = body.get("base_url") if isinstance(body.get("base_url"), str) else None
    demo_state(request).config.set_model(provider, model.strip(), base_url)
    return json_response({"ok": True, "scope": "main", "provider": provider, "model": model.strip()})


@get("/api/config")
async def get_config(request: Request[Any, Any, Any]) -> Response[bytes]:
    return json_response(demo_state(request).config.for_web())


@put("/api/config")
async def put_config(request: Request[Any, Any, Any]) -> Response[bytes]:
    body = await read_json(request, _invalid_json())
    update = body.get("config") if isinstance(body, dict) else None
    if not isinstance(update, dict):
        raise HermesHTTPError(
            422, {"detail": [{"type": "missing", "loc": ["body", "config"], "msg": "Field required"}]}
        )
    demo_state(request).config.merge(update)
    return json_response({"ok": True})


DASHBOARD_ROUTES: Final = [model_options, model_info, set_model, get_config, put_config]
