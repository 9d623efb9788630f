"""The app factory: `create_app(settings)` wires routes, dependencies, errors and the lifespan."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from litestar import Litestar
from litestar.datastructures import ResponseHeader
from litestar.middleware import DefineMiddleware
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import SwaggerRenderPlugin
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
    auth_logout,
    capabilities,
    connectors,
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
    research,
    tasks_create,
    tasks_delete,
    tasks_list,
    tasks_pause,
    tasks_resume,
    tasks_run,
    tasks_update,
    web_asset,
    web_index,
)
from handlers.body_timeout import BodyIdleTimeout
from handlers.dependencies import DEPENDENCIES
from handlers.errors import EXCEPTION_HANDLERS
from handlers.ws.endpoint import pheby_socket
from pheby.services import open_services
from pheby.settings import Settings
from scheduler import running_scheduler

ROUTES: list[ControllerRouterHandler] = [
    health.healthz,
    auth_login.login,
    auth_logout.logout,
    me.me,
    pheby_socket,
    attachments_upload.upload_attachment,
    attachments_download.download_attachment,
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
    connectors.connectors,
    research.research,
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
    internal_plugin_events.plugin_event,
    internal_plugin_media.plugin_media,
    web_index.web_index,
    web_asset.web_asset,
]


def create_app(settings: Settings) -> Litestar:
    """Build the ASGI app for `settings`; resources open in the lifespan and close after it."""

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        async with open_services(settings) as services, running_scheduler(services) as scheduler:
            app.state.services = services
            app.state.scheduler = scheduler
            yield

    return Litestar(
        route_handlers=ROUTES,
        dependencies=DEPENDENCIES,
        exception_handlers=EXCEPTION_HANDLERS,  # type: ignore[arg-type]
        middleware=[DefineMiddleware(BodyIdleTimeout, seconds=settings.body_idle_timeout)],
        lifespan=[lifespan],
        openapi_config=OpenAPIConfig(
            title="Pheby server", version="1", path="/schema", render_plugins=[SwaggerRenderPlugin()]
        ),
        response_headers=[ResponseHeader(name="X-Content-Type-Options", value="nosniff")],
        debug=False,
        logging_config=None,  # logging is the process's (pheby.server.configure_logging), not the app's
    )
