"""The server's side of the companion Hermes plugin (`hermes_plugin/pheby_bridge`): is it there, what is live.

Both directions must work before any extra is used:

- in: the server reaches the plugin through the API server's platform-event route
  (`POST /api/platforms/<platform>/events`, the plugin's own secret) — the handshake, run at
  start-up and every `PHEBY_PLUGIN_HANDSHAKE_SECONDS` (sooner, backing off from 1 s, while the
  link is not live), which also tells the plugin which extras this server wants;
- out: the plugin reaches the server (`POST /internal/hermes-plugin/events`) — every handshake
  makes it say `plugin.hello` back, and so does a Hermes that (re)started, which triggers a
  handshake at once.

The link is live while the last handshake succeeded and the plugin's last hello is recent and
from the same Hermes process (`boot_id`). A failed call to the plugin ends that until the next
handshake; the server then falls back to what Hermes offers without it. The extras apply to the
server's own Hermes (`HERMES_URL`) only.
"""

import asyncio
import hmac
import ipaddress
import logging
import time
from collections.abc import Callable
from typing import Any, Final

import httpx
import msgspec

from hermes_client.tls import shared_tls_context
from pheby.plugin.extras import EXTRAS, NO_EXTRAS, PluginExtras
from pheby.plugin.install import read_server_secret
from pheby.settings import Settings

log = logging.getLogger("pheby.plugin")

CALL_TIMEOUT_SECONDS: Final = 3.0
PING_SLACK_SECONDS: Final = 10.0
RETRY_FIRST_SECONDS: Final = 1.0
TICK_SECONDS: Final = 1.0


class SessionSettings(msgspec.Struct, frozen=True, kw_only=True):
    """What the plugin applies to one Hermes session's runs (the whole set each time)."""

    session_id: str
    model: str | None = None
    effort: str | None = None
    yolo: bool = False
    history: bool = False


class _PluginHello(msgspec.Struct, frozen=True):
    boot_id: str
    features: list[str] = msgspec.field(default_factory=list)


def plugin_secret(settings: Settings) -> str:
    """PHEBY_PLUGIN_SECRET, else the installer's copy in the data dir; never the owner secret."""
    secret = settings.plugin_secret or read_server_secret(settings.data_dir)
    if secret and hmac.compare_digest(secret.encode(), settings.secret.encode()):
        log.warning("the plugin secret equals PHEBY_SECRET; the plugin integration stays off")
        return ""
    return secret


class PluginLink:
    def __init__(
        self,
        settings: Settings,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        when_hermes_restarts: Callable[[], None] | None = None,
    ) -> None:
        self._when_hermes_restarts = when_hermes_restarts
        self._hermes_url = settings.hermes_url.rstrip("/")
        self._secret = plugin_secret(settings)
        self._path = f"/api/platforms/{settings.plugin_platform}/events"
        self._wanted = tuple(name for name in EXTRAS if name in settings.plugin_extras)
        self._clarify_timeout = settings.plugin_clarify_timeout
        self._interval = settings.plugin_handshake_seconds
        self._ping_ttl = 2 * settings.plugin_handshake_seconds + PING_SLACK_SECONDS
        self._next_handshake = 0.0
        self._retry = RETRY_FIRST_SECONDS
        self._peers = frozenset(settings.plugin_peers)
        self._http: httpx.AsyncClient | None = None
        if self.configured:
            self._http = httpx.AsyncClient(
                base_url=self._hermes_url,
                headers={"Authorization": f"Bearer {self._secret}"},
                timeout=httpx.Timeout(CALL_TIMEOUT_SECONDS),
                transport=transport,
                trust_env=False,
                verify=shared_tls_context(trust_env=False),
            )
        self._inbound_ok = False
        self._boot_id = ""
        self._features: frozenset[str] = frozenset()
        self._ping_boot = ""
        self._ping_at = 0.0
        self._handshake_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def configured(self) -> bool:
        """A secret and a Hermes URL: the integration is set up (whether or not the plugin answers)."""
        return bool(self._secret and self._hermes_url)

    def serves(self, hermes_url: str) -> bool:
        return self.configured and hermes_url.rstrip("/") == self._hermes_url

    @property
    def live(self) -> bool:
        return (
            self._inbound_ok
            and bool(self._boot_id)
            and self._ping_boot == self._boot_id
            and time.monotonic() - self._ping_at < self._ping_ttl
        )

    def extras(self) -> PluginExtras:
        if not self.live:
            return NO_EXTRAS
        on = {name: name in self._features for name in self._wanted}
        return PluginExtras(live=True, **on)

    def server_view(self) -> dict[str, Any]:
        """What this server asks of the plugin: the extras it wants and the clarify timeout."""
        return {"extras": list(self._wanted), "clarify_timeout": self._clarify_timeout}

    # --- authenticating the plugin's pushes ------------------------------------------------

    def secret_matches(self, presented: str) -> bool:
        return self.configured and hmac.compare_digest(presented.encode(), self._secret.encode())

    def peer_allowed(self, host: str | None) -> bool:
        if host is None:
            return False
        if host in self._peers:
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False

    # --- the two directions -----------------------------------------------------------------

    async def run(self) -> None:
        """The link's own loop for the life of the server (a background task): handshakes when due."""
        while True:
            try:
                await self.tick()
            except Exception:
                log.exception("the plugin handshake failed")
            await asyncio.sleep(TICK_SECONDS)

    async def tick(self) -> None:
        """A handshake when one is due."""
        now = time.monotonic()
        if not self.configured or now < self._next_handshake:
            return
        await self.handshake()
        if self.live:
            self._next_handshake, self._retry = now + self._interval, RETRY_FIRST_SECONDS
        else:  # not there yet (or its hello back has not arrived): try again soon, then less often
            self._next_handshake = now + self._retry
            self._retry = min(self._retry * 2, self._interval)

    async def handshake(self) -> bool:
        """Say hello to the plugin (which answers, and says hello back over its own channel)."""
        if not self.configured:
            return False
        async with self._handshake_lock:
            reply = await self._call({"type": "hello", **self.server_view()})
            hello = _decode_hello(reply)
            if hello is None:
                self._inbound_ok = False
                return False
            if hello.boot_id != self._boot_id:
                log.info("the companion plugin answered (Hermes process %s)", hello.boot_id[:8])
                if self._when_hermes_restarts is not None:  # a new Hermes process may offer other features
                    self._when_hermes_restarts()
            self._boot_id = hello.boot_id
            self._features = frozenset(hello.features)
            self._inbound_ok = True
            return True

    def plugin_said_hello(self, boot_id: str, features: list[str]) -> dict[str, Any]:
        """The plugin reached us; a new Hermes process also gets a handshake right away."""
        self._ping_boot, self._ping_at = boot_id, time.monotonic()
        if boot_id != self._boot_id or not self._inbound_ok:
            self._features = frozenset(features)
            task = asyncio.get_running_loop().create_task(self.handshake(), name="plugin-handshake")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return self.server_view()

    async def push_session(self, settings: SessionSettings) -> bool:
        """Hand the plugin a session's settings; False (and not live until the next handshake) if it fails."""
        reply = await self._call({"type": "session.settings", **msgspec.to_builtins(settings)})
        if not isinstance(reply, dict) or reply.get("ok") is not True:
            self._inbound_ok = False
            self._next_handshake, self._retry = 0.0, RETRY_FIRST_SECONDS
            return False
        return True

    async def answer_clarify(self, clarify_id: str, response: str) -> bool:
        reply = await self._call({"type": "clarify.answer", "clarify_id": clarify_id, "response": response})
        return isinstance(reply, dict) and reply.get("resolved") is True

    async def _call(self, payload: dict[str, Any]) -> Any:
        if self._http is None:
            return None
        try:
            response = await self._http.post(self._path, json=payload)
        except httpx.HTTPError as exc:
            log.info("the companion plugin is unreachable (%s)", type(exc).__name__)
            return None
        if response.status_code != 200:
            log.info("the companion plugin answered HTTP %s", response.status_code)
            return None
        try:
            return response.json()
        except ValueError:
            return None

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._http is not None:
            await self._http.aclose()


def _decode_hello(reply: Any) -> _PluginHello | None:
    if not isinstance(reply, dict) or reply.get("plugin") != "pheby_bridge":
        return None
    try:
        return msgspec.convert(reply, _PluginHello)
    except msgspec.ValidationError:
        return None
