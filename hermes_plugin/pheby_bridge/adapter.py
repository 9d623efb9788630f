"""The inbound channel: a minimal gateway platform whose only job is the API server's event route.

`POST /api/platforms/pheby_bridge/events` (on the API server's own port) reaches
`dispatch_http_event` after `verify_http_event_request` accepted `Authorization: Bearer <secret>`.
The platform never carries chat messages.
"""

import logging
from typing import Any

from gateway.config import Platform, PlatformConfig
from gateway.platforms.base import BasePlatformAdapter, SendResult

from .bridge import Bridge
from .config import PLATFORM

logger = logging.getLogger("pheby_bridge")


class PhebyBridgeAdapter(BasePlatformAdapter):
    def __init__(self, config: PlatformConfig, bridge: Bridge) -> None:
        super().__init__(config=config, platform=Platform(PLATFORM))
        self._bridge = bridge

    async def connect(self, *, is_reconnect: bool = False) -> bool:
        self._mark_connected()
        self._bridge.say_hello()
        logger.info("[pheby_bridge] ready; events reach the Pheby server at %s", self._bridge.config.service_url)
        return True

    async def disconnect(self) -> None:
        self._bridge.release_all("the gateway is shutting down")
        self._mark_disconnected()

    async def send(
        self, chat_id: str, content: str, reply_to: str | None = None, metadata: dict[str, Any] | None = None
    ) -> SendResult:
        return SendResult(success=False, error="pheby_bridge carries no chat messages")

    async def get_chat_info(self, chat_id: str) -> dict[str, Any]:
        return {"name": chat_id, "type": "dm"}

    async def verify_http_event_request(self, auth_header: str) -> tuple[bool, str | None]:
        if self._bridge.check_secret(auth_header):
            return True, None
        return False, "bad_pheby_bridge_secret"

    async def dispatch_http_event(self, payload: dict[str, Any]) -> dict[str, Any]:
        return self._bridge.handle(payload)
