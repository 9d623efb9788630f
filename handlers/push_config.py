"""GET /api/push/config — what a client needs to subscribe to Web Push: the VAPID key and the events."""

from litestar import get
from litestar.di import NamedDependency

from pheby.push.service import PushConfig
from pheby.services import Services


@get("/push/config", tags=["push"], sync_to_thread=False)
def push_config(services: NamedDependency[Services]) -> PushConfig:
    """`vapid_public_key` is the base64url uncompressed P-256 point browsers take as `applicationServerKey`."""
    return services.push.config
