"""The app factory: `create_app(settings)` wires routes, dependencies, errors and the lifespan."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from litestar import Litestar, Router
from litestar.datastructures import ResponseHeader
from litestar.enums import ScopeType
from litestar.middleware import DefineMiddleware
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import SwaggerRenderPlugin
from litestar.openapi.spec import Components, SecurityScheme
from litestar.plugins.prometheus import PrometheusConfig
from litestar.routes import ASGIRoute, HTTPRoute, WebSocketRoute
from litestar.types import ControllerRouterHandler

from handlers import (
    artifacts_create,
    artifacts_delete,
    artifacts_export,
    artifacts_get,
    artifacts_list,
    artifacts_update,
    artifacts_versions,
    attachments_download,
    attachments_upload,
    auth_login,
    auth_login_totp,
    auth_logout,
    auth_oidc,
    auth_oidc_callback,
    auth_oidc_start,
    auth_passkey,
    auth_passkey_options,
    auth_passkeys_create,
    auth_passkeys_delete,
    auth_passkeys_list,
    auth_passkeys_options,
    auth_password,
    auth_reauthenticate,
    auth_session,
    auth_sessions_end,
    auth_sessions_end_others,
    auth_sessions_list,
    auth_totp_disable,
    auth_totp_enable,
    auth_totp_setup,
    auth_totp_status,
    capabilities,
    connectors,
    conversations_export,
    features_sync,
    health,
    hope_attachments_content,
    hope_attachments_create,
    hope_attachments_delete,
    hope_attachments_get,
    hope_attachments_list,
    internal_plugin_events,
    internal_plugin_media,
    me,
    memory_get,
    memory_put,
    metrics,
    push_actions,
    push_config,
    push_subscriptions_create,
    push_subscriptions_delete,
    push_subscriptions_list,
    readyz,
    research,
    search,
    tasks_create,
    tasks_delete,
    tasks_list,
    tasks_pause,
    tasks_resume,
    tasks_run,
    tasks_update,
    web_asset,
    web_index,
    web_manifest,
    web_service_worker,
)
from handlers.support.bodies import PhebyRequest
from handlers.support.body_timeout import BodyIdleTimeout
from handlers.support.dependencies import API_DEPENDENCIES, DEPENDENCIES, authenticated
from handlers.support.errors import EXCEPTION_HANDLERS
from handlers.support.openapi import guard_errors
from handlers.support.strict_transport import add_strict_transport_security
from handlers.ws.endpoint import pheby_socket
from pheby.services import open_services
from pheby.settings import Settings
from scheduler import running_scheduler

# Routes outside the `/api` router, each with its own credential rule (or none).
PUBLIC_ROUTES: list[ControllerRouterHandler] = [
    health.healthz,
    readyz.readyz,
    auth_login.login,  # the ways to get a credential: a password,
    auth_login_totp.login_totp,  # its code step: the ticket of a right password and a code
    auth_session.start_session_with_secret,  # the owner secret or an API token
    auth_oidc.oidc_offer,  # OpenID Connect: offered?, then to the provider and back (its state is the check)
    auth_oidc_start.oidc_start,
    auth_oidc_callback.oidc_callback,
    auth_passkey_options.passkey_sign_in_options,  # passkeys: the challenge, then the signed answer
    auth_passkey.passkey_sign_in,
    push_actions.answer_push_action,  # the answer token is the credential
    pheby_socket,  # authenticates with its hello message (or the cookie); a foreign Origin is refused first
    attachments_upload.upload_attachment,  # Bearer, ApiKey, X-Pheby-Secret or the session cookie
    attachments_download.download_attachment,
    internal_plugin_events.plugin_event,  # the plugin secret
    internal_plugin_media.plugin_media,
    web_index.web_index,  # Pheby Web: the page and its assets (it signs in itself)
    web_asset.web_asset,
    web_manifest.web_manifest,
    web_service_worker.web_service_worker,
]

# Mounted under `/api` behind the `authenticated` guard: a route added here is protected by that alone.
API_ROUTES: list[ControllerRouterHandler] = [
    auth_logout.logout,
    auth_sessions_list.list_sessions,
    auth_sessions_end.end_session,
    auth_sessions_end_others.end_other_sessions,
    auth_password.change_own_password,
    me.me,
    auth_totp_status.totp_status,
    auth_totp_setup.totp_setup,
    auth_totp_enable.totp_enable,
    auth_totp_disable.totp_disable,
    auth_reauthenticate.reauthenticate_session,
    auth_passkeys_options.passkey_registration_options,
    auth_passkeys_create.add_passkey,
    auth_passkeys_list.list_passkeys,
    auth_passkeys_delete.delete_passkey,
    hope_attachments_create.create_hope_attachment,
    hope_attachments_list.list_hope_attachments,
    hope_attachments_get.get_hope_attachment,
    hope_attachments_content.get_hope_attachment_content,
    hope_attachments_delete.delete_hope_attachment,
    artifacts_list.list_artifacts,
    artifacts_create.create_artifact,
    artifacts_get.get_artifact,
    artifacts_versions.list_artifact_versions,
    artifacts_update.update_artifact,
    artifacts_export.export_artifact,
    artifacts_delete.delete_artifact,
    features_sync.features_sync,
    conversations_export.export_conversation,
    connectors.connectors,
    research.research,
    search.search,
    capabilities.capabilities,
    tasks_list.list_tasks,
    tasks_create.create_task,
    tasks_update.update_task,
    tasks_delete.delete_task,
    tasks_pause.pause_task,
    tasks_resume.resume_task,
    tasks_run.run_task,
    memory_get.get_memory,
    memory_put.put_memory,
    push_config.push_config,
    push_subscriptions_create.create_push_subscription,
    push_subscriptions_list.list_push_subscriptions,
    push_subscriptions_delete.delete_push_subscription,
]

ROUTES: list[ControllerRouterHandler] = [*PUBLIC_ROUTES, *API_ROUTES]


def api_router() -> Router:
    """Every `/api` route but login, behind the one guard; handlers get the caller as `current_user`."""
    router = Router(
        path="/api",
        route_handlers=API_ROUTES,
        guards=[authenticated],
        dependencies=API_DEPENDENCIES,
        security=[{"bearer": []}, {"session": []}],
    )
    rebuilt: list[HTTPRoute | ASGIRoute | WebSocketRoute] = []
    for route in router.routes:
        if isinstance(route, HTTPRoute):
            for handler in route.route_handlers:  # the router's own copies
                handler.responses = {**guard_errors(handler.http_methods), **(handler.responses or {})}
            # Litestar's automatic OPTIONS handler answers `Allow` with the methods of the route it was made
            # for, the one of the first handler of a path; a route made once from all of them lists them all.
            handlers = [h for h in route.route_handlers if h.handler_name != "options_handler"]
            route = HTTPRoute(path=route.path, route_handlers=handlers)
        rebuilt.append(route)
    router.routes = rebuilt
    return router


def create_app(settings: Settings) -> Litestar:
    """Build the ASGI app for `settings`; resources open in the lifespan and close after it."""

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        async with open_services(settings) as services, running_scheduler(services) as scheduler:
            app.state.services = services
            app.state.scheduler = scheduler
            yield

    # Served only to a scraper holding the token, and only when one is set.
    operator_routes: list[ControllerRouterHandler] = [metrics.metrics] if settings.metrics_token else []
    return Litestar(
        route_handlers=[*PUBLIC_ROUTES, *operator_routes, api_router()],
        dependencies=DEPENDENCIES,
        exception_handlers=EXCEPTION_HANDLERS,  # type: ignore[arg-type]
        request_class=PhebyRequest,
        middleware=[
            DefineMiddleware(BodyIdleTimeout, seconds=settings.body_idle_timeout),
            # HTTP requests by route template, method and status (`pheby_http_requests_total`, ...).
            PrometheusConfig(
                app_name="pheby",
                prefix="pheby_http",
                group_path=True,
                exclude=["^/metrics$"],
                exclude_unhandled_paths=True,  # a 404 for a made-up path is no route: its path is no label
                scopes={ScopeType.HTTP},
            ).middleware,
        ],
        lifespan=[lifespan],
        openapi_config=OpenAPIConfig(
            title="Pheby server",
            version="1",
            path="/schema",
            render_plugins=[SwaggerRenderPlugin()],
            components=Components(
                security_schemes={
                    "bearer": SecurityScheme(type="http", scheme="bearer", description="PHEBY_SECRET or a token"),
                    "session": SecurityScheme(type="apiKey", name="hope_session", security_scheme_in="cookie"),
                }
            ),
        ),
        response_headers=[ResponseHeader(name="X-Content-Type-Options", value="nosniff")],
        before_send=[add_strict_transport_security] if settings.public_url.startswith("https://") else [],
        debug=False,
        logging_config=None,  # logging is the process's (pheby.server.configure_logging), not the app's
    )
