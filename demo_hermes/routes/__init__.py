"""Every HTTP route of the demo Hermes, grouped by the Hermes API area it imitates."""

from demo_hermes.routes.dashboard import DASHBOARD_ROUTES
from demo_hermes.routes.health import HEALTH_ROUTES
from demo_hermes.routes.jobs import JOB_ROUTES
from demo_hermes.routes.newer import NEWER_ROUTES
from demo_hermes.routes.runs import RUN_ROUTES
from demo_hermes.routes.sessions import SESSION_ROUTES

__all__ = ["ALL_ROUTES"]

ALL_ROUTES = [*HEALTH_ROUTES, *RUN_ROUTES, *NEWER_ROUTES, *SESSION_ROUTES, *JOB_ROUTES, *DASHBOARD_ROUTES]
