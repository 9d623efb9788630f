"""Pheby bridge: the Pheby server's companion plugin for Hermes Agent 0.19.0 (a "sidecar" user plugin).

Outbound (plugin → server, loopback HTTP from a background queue, keyed by the `/v1/runs` run id):
tool calls with their ids and args, MEDIA: files as bytes, cron output. Inbound (server → plugin,
`POST /api/platforms/pheby_bridge/events` with the plugin's own secret): which extras to provide,
per-session model / effort / YOLO / history, and clarify answers.

It acts only on runs that come through the API server, and never blocks the agent thread on the
server: a server that is down costs a run nothing but the extras, and what the plugin could not
push meanwhile is kept (bounded in count, bytes and age) and delivered in order once the server is
back (`outbox`).
"""

import logging
from typing import Any

logger = logging.getLogger("pheby_bridge")


def register(ctx: Any) -> None:
    from .config import PLATFORM, load_config

    config = load_config()
    if config is None:
        return
    from .adapter import PhebyBridgeAdapter
    from .bridge import Bridge
    from .hooks import register_hooks
    from .middleware import register_middleware

    bridge = Bridge(config)
    register_hooks(ctx, bridge)
    register_middleware(ctx, bridge)
    ctx.register_platform(
        name=PLATFORM,
        label="Pheby bridge",
        adapter_factory=lambda platform_config: PhebyBridgeAdapter(platform_config, bridge),
        check_fn=lambda: True,
        validate_config=lambda platform_config: True,
        emoji="🔗",
        pii_safe=True,
        allow_update_command=False,
    )
