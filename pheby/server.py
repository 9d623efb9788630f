"""Running the app under uvicorn: one worker holds the WebSockets, run streams and scheduler."""

import logging
import sys

import uvicorn

from handlers.app import create_app
from pheby.settings import Settings

# Above the protocol's 2 MiB frame limit, so a frame just over it is answered with `too_large`
# on an open connection; only a far larger one is cut off by uvicorn with 1009.
WS_MAX_SIZE = 4 * 1024 * 1024
WS_PING_SECONDS = 30.0


def configure_logging(log_format: str) -> None:
    fmt = (
        '{"ts":"%(asctime)s","level":"%(levelname)s","logger":"%(name)s","message":"%(message)s"}'
        if log_format == "json"
        else "%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.basicConfig(level=logging.INFO, format=fmt, stream=sys.stderr)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per Hermes request is noise


def build_uvicorn_config(settings: Settings) -> uvicorn.Config:
    return uvicorn.Config(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        workers=1,
        lifespan="on",
        ws_max_size=WS_MAX_SIZE,
        ws_ping_interval=WS_PING_SECONDS,
        ws_ping_timeout=WS_PING_SECONDS,
        timeout_graceful_shutdown=10,
        log_config=None,
        proxy_headers=False,  # X-Forwarded-For is honoured only from PHEBY_TRUSTED_PROXIES, by the app
    )


def serve(settings: Settings) -> None:
    """Serve until SIGINT/SIGTERM."""
    uvicorn.Server(build_uvicorn_config(settings)).run()
