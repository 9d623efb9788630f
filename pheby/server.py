"""Running the app under uvicorn: one worker holds the WebSockets, run streams and scheduler.

The app itself is built above this package (`handlers.support.app.create_app`) and handed in: the
`pheby` command's entry point (`pheby_main`) gives `pheby.cli` the factory, so `pheby` never imports
`handlers`.
"""

import asyncio
import json
import logging
import signal
import socket
import sys
from datetime import UTC, datetime
from types import FrameType

import uvicorn
from litestar import Litestar

from pheby import gc_tuning
from pheby.protocol.ws_compression import CompressedWebSocketProtocol
from pheby.protocol.ws_protocol import PhebyWebSocketProtocol
from pheby.services import Services
from pheby.settings import Settings

log = logging.getLogger("pheby.server")

# The hard ceiling of an inbound WebSocket message. The protocol's limit is 2 MiB, and the app
# answers a frame over it with `too_large` (the connection stays open), but only for frames
# uvicorn hands over: one over this ceiling is refused from its header, unread, and the
# connection closed with 1009 (message too big) and no error frame. Every authenticated connection
# may buffer one message this big, so it stays small: 4 MiB (no real frame comes near 2 MiB; a chat
# text is at most 64,000 characters). Before `hello` the ceiling is 64 KiB (pheby.protocol.ws_protocol).
WS_MAX_SIZE = 4 * 1024 * 1024
WS_PING_SECONDS = 30.0
# Shutdown budget before uvicorn closes the sockets: the runs' hand-over (their readers stop, the journal
# records where each is) gets this long, then every connection this long to flush its send queue.
RUN_SHUTDOWN_SECONDS = 5.0
DRAIN_SECONDS = 5.0
# uvicorn's main loop wakes ten times a second to see whether it should exit and, every tenth time,
# to renew the Date header; once a second does both, and a signal wakes it at once.
TICK_SECONDS = 1.0


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ts (UTC, ISO 8601), level, logger, message, and exc when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(log_format: str) -> None:
    """Everything to stderr in one format, `text` or `json` (one object a line)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonFormatter()
        if log_format == "json"
        else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per Hermes request is noise
    logging.getLogger("uvicorn.access").addFilter(drop_query_string)


def drop_query_string(record: logging.LogRecord) -> bool:
    """uvicorn's access lines without the query string: an OIDC callback's code and state, a download's
    parameters, are one-time credentials or the client's data, never log material."""
    if isinstance(record.args, tuple) and len(record.args) == 5:
        client, method, path, version, status = record.args
        if isinstance(path, str) and "?" in path:
            record.args = (client, method, path.split("?", 1)[0], version, status)
    return True


class ServerWebSocketProtocol(CompressedWebSocketProtocol, PhebyWebSocketProtocol):
    """uvicorn's WebSocket protocol with both of the server's changes, each calling `super()`:
    permessage-deflate at a bounded cost (`pheby.protocol.ws_compression`; listed first, so it replaces the
    extension list the other's `__init__` built) and 64 KiB frames until `hello`, then `WS_MAX_SIZE`
    (`pheby.protocol.ws_protocol`; websockets applies that limit to the decompressed size too)."""


def build_uvicorn_config(settings: Settings, app: Litestar) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        workers=1,
        lifespan="on",
        ws=ServerWebSocketProtocol.with_pre_hello_budget(settings.ws_pre_hello_bytes),
        ws_max_size=WS_MAX_SIZE,
        ws_ping_interval=WS_PING_SECONDS,
        ws_ping_timeout=WS_PING_SECONDS,
        ws_per_message_deflate=settings.ws_compression,
        timeout_graceful_shutdown=10,
        log_config=None,
        proxy_headers=False,  # X-Forwarded-For is honoured only from PHEBY_TRUSTED_PROXIES, by the app
    )


class PhebyServer(uvicorn.Server):
    """`uvicorn.Server` whose shutdown hands the runs over to the next process before the sockets close.

    `shutdown()` here first stops listening, hands the active runs over (they go on in Hermes; the
    journal records where each is, and the next process carries them on: `pheby.runs.reattach`) and
    drains every connection's send queue, all bounded in time; then uvicorn's own shutdown closes the
    sockets with 1012 (service restart: clients reconnect) and runs the lifespan shutdown (scheduler,
    database).

    SIGTERM (systemd, ECS, `docker stop`) and Ctrl-C are the normal ways to stop, so after a graceful
    shutdown the process exits 0 rather than re-raising the signal as uvicorn does by default.

    The main loop ticks once a second (`TICK_SECONDS`), not ten times: an idle server costs a wake-up
    a second, and a signal ends the wait at once.
    """

    _tick: "asyncio.Future[None] | None" = None
    _loop: asyncio.AbstractEventLoop | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig in (signal.SIGTERM, signal.SIGINT):
            # Not recorded for uvicorn to re-raise after the shutdown: a graceful stop exits 0.
            if self.should_exit and sig == signal.SIGINT:
                self.force_exit = True  # a second Ctrl-C stops waiting for connections
            self.should_exit = True
        else:
            super().handle_exit(sig, frame)
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._end_tick)  # a signal handler may interrupt the loop's own code

    def _end_tick(self) -> None:
        if self._tick is not None and not self._tick.done():
            self._tick.set_result(None)

    async def main_loop(self) -> None:
        gc_tuning.tune_after_start_up()  # the lifespan's start-up is over: what it made lives as long as the process
        self._loop = loop = asyncio.get_running_loop()
        counter = 0  # uvicorn renews the Date header when the counter is a multiple of 10
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 10) % 864000
            self._tick = tick = loop.create_future()
            timer = loop.call_later(TICK_SECONDS, self._end_tick)
            try:
                await tick
            finally:
                timer.cancel()
            should_exit = await self.on_tick(counter)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()  # stop accepting; uvicorn closing them again later is harmless
        app = self.config.app
        services = app.state.get("services") if isinstance(app, Litestar) else None
        if isinstance(services, Services):
            await settle(services)
        await super().shutdown(sockets)


async def settle(services: Services) -> None:
    """Hand the active runs over, then flush every connection's queued frames (bounded)."""
    log.info(
        "stopping: handing %d run(s) over, then closing %d WebSocket(s)",
        services.runs.active_count(),
        len(services.hub.all_connections()),
    )
    try:
        await asyncio.wait_for(services.runs.shutdown(), RUN_SHUTDOWN_SECONDS)
    except TimeoutError:
        log.warning("the runs' hand-over did not end within %.0f s; closing connections anyway", RUN_SHUTDOWN_SECONDS)
    connections = services.hub.all_connections()
    if not connections:
        return
    try:
        await asyncio.wait_for(asyncio.gather(*(c.drain_and_stop() for c in connections)), DRAIN_SECONDS + 1)
    except TimeoutError:
        log.warning("some WebSocket send queues did not drain in time")


def serve(settings: Settings, app: Litestar) -> bool:
    """Serve `app` until SIGINT/SIGTERM; False if the server never started (the lifespan failed)."""
    server = PhebyServer(build_uvicorn_config(settings, app))
    server.run()
    return server.started
