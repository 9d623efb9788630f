"""What each distinct Hermes gateway offers natively, read from it, and which path each feature takes.

The server asks a gateway what it advertises (`GET /v1/capabilities`, with `/health` for its version;
`HermesClient.get_capabilities`), never which version it is. `HermesFeatures` keeps the last answer of
every distinct gateway (one per `HermesClients` client) and keeps it current:

- at start-up a background task (`watch`) reads every gateway the enabled accounts use, each read
  bounded by `READ_TIMEOUT_SECONDS`, so a slow or absent Hermes never holds up start-up;
- while some gateway cannot be read it is retried soon, backing off from `RETRY_FIRST_SECONDS` to
  `REREAD_SECONDS`: a restart is a spell of failed reads, so a Hermes that comes back (perhaps a newer
  one) is re-read within seconds of answering again;
- every `REREAD_SECONDS` each gateway is read again anyway (two cheap GETs), which catches a restart
  or upgrade that happened between two reads;
- a request that needs the answer before the first read finished reads it itself (`of`), bounded;
- the companion plugin's restart detection (a new Hermes process) triggers a read at once.

A failed read keeps the last answer (a gateway that is down for a moment has not lost its features);
a gateway never read counts as offering nothing native. Whether a run stream can be resumed is not
advertised: the client notes it from each stream it reads (`HermesClient.stream_numbered`).
"""

import asyncio
import logging
from typing import Any, Final, Literal

import msgspec

import hermes_client as hc
from pheby.hermes.pool import HermesClients
from pheby.plugin.extras import PluginExtras
from pheby.store.accounts import Account, Accounts

log = logging.getLogger("pheby.hermes")

READ_TIMEOUT_SECONDS: Final = 5.0  # one background read of one gateway
REQUEST_READ_TIMEOUT_SECONDS: Final = 2.0  # a read a client's request waits for
RETRY_FIRST_SECONDS: Final = 1.0
REREAD_SECONDS: Final = 60.0
NOTHING_NATIVE: Final = hc.HermesCapabilities()

# How a feature works for an account now: Hermes does it itself, the companion plugin does it, or not at all.
FeaturePath = Literal["native", "plugin", "declined"]


class FeaturePaths(msgspec.Struct, frozen=True, kw_only=True):
    """Which path is live for each feature that differs between gateways (`/api/capabilities`, `models.snapshot`)."""

    conversation_model: FeaturePath  # `model.set` with a conversation_id
    conversation_effort: FeaturePath  # `reasoning.set` with a conversation_id
    steer: FeaturePath  # `run.steer`
    stream_resume: FeaturePath  # a broken run stream picked up where it broke (`Last-Event-ID`)


class RunOptions(msgspec.Struct, frozen=True, kw_only=True):
    """What one run sends on `POST /v1/runs` for its conversation's own model and effort (None: not sent);
    made by `ConversationSettings.run_options`, here so the run engine can name it without an import cycle."""

    model: str | None = None
    provider: str | None = None
    model_options: dict[str, Any] | None = None


NO_RUN_OPTIONS: Final = RunOptions()


def feature_paths(capabilities: hc.HermesCapabilities, extras: PluginExtras, stream_numbered: bool) -> FeaturePaths:
    """The live path of each feature: native where the gateway advertises it, else the plugin's extra if live."""

    def path(native: bool, plugin: bool = False) -> FeaturePath:
        return "native" if native else "plugin" if plugin else "declined"

    return FeaturePaths(
        conversation_model=path(capabilities.model_options, extras.model),
        conversation_effort=path(capabilities.model_options, extras.reasoning),
        steer=path(capabilities.run_steer),
        stream_resume=path(stream_numbered),
    )


class HermesFeatures:
    def __init__(self, hermes: HermesClients, accounts: Accounts) -> None:
        self._hermes = hermes
        self._accounts = accounts
        self._known: dict[hc.HermesClient, hc.HermesCapabilities] = {}
        self._locks: dict[hc.HermesClient, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[object]] = set()

    def known(self, account: Account) -> hc.HermesCapabilities:
        """The last answer of the account's gateway (nothing native if it was never read)."""
        return self._known.get(self._hermes.for_account(account), NOTHING_NATIVE)

    async def of(self, account: Account) -> hc.HermesCapabilities:
        """What the account's gateway offers; read now (bounded) if it has not been read yet."""
        client = self._hermes.for_account(account)
        found = self._known.get(client)
        if found is not None:
            return found
        async with self._lock(client):
            found = self._known.get(client)  # another request may have read it meanwhile
            if found is not None:
                return found
            return await self.read(client, REQUEST_READ_TIMEOUT_SECONDS) or NOTHING_NATIVE

    def stream_resumable(self, account: Account) -> bool:
        """Whether the last run stream read from the account's gateway numbered its events (so it can resume)."""
        return self._hermes.for_account(account).stream_numbered is True

    def paths(self, account: Account, extras: PluginExtras) -> FeaturePaths:
        """The live path of each feature for the account (`extras`: its companion plugin's live extras)."""
        return feature_paths(self.known(account), extras, self.stream_resumable(account))

    def _lock(self, client: hc.HermesClient) -> asyncio.Lock:
        return self._locks.setdefault(client, asyncio.Lock())

    async def read(self, client: hc.HermesClient, within: float | None = None) -> hc.HermesCapabilities | None:
        """Ask the gateway what it offers (within `READ_TIMEOUT_SECONDS` unless told) and keep the answer;
        None (the last answer kept) when it can't say."""
        try:
            async with asyncio.timeout(READ_TIMEOUT_SECONDS if within is None else within):
                found = await client.get_capabilities()
        except (hc.HermesError, TimeoutError) as exc:
            log.debug("reading a Hermes gateway's capabilities failed (%s)", type(exc).__name__)
            return None
        before = self._known.get(client)
        if before is None or before.version != found.version or before.native != found.native:
            native = ", ".join(sorted(found.native)) or "nothing"
            log.info("a Hermes gateway (version %s) offers natively: %s", found.version or "unknown", native)
        self._known[client] = found
        return found

    async def read_all(self) -> bool:
        """Read every gateway the enabled accounts use; whether each one answered."""
        clients = {self._hermes.for_account(account) for account in await self._accounts.list_enabled()}
        results = await asyncio.gather(*(self.read(client) for client in clients))
        return all(result is not None for result in results)

    async def watch(self) -> None:
        """For the life of the server (a background task): read every gateway now, again soon while some
        can't be read (backing off), and every `REREAD_SECONDS` anyway."""
        retry = RETRY_FIRST_SECONDS
        while True:
            try:
                answered = await self.read_all()
            except Exception:
                log.exception("reading the Hermes gateways' capabilities failed")
                answered = False
            if answered:
                delay, retry = REREAD_SECONDS, RETRY_FIRST_SECONDS
            else:
                delay, retry = retry, min(retry * 2, REREAD_SECONDS)
            await asyncio.sleep(delay)

    def hermes_restarted(self) -> None:
        """A (re)started Hermes was seen (the companion plugin's new process): read what the gateways offer now."""
        task = asyncio.get_running_loop().create_task(self.read_all(), name="hermes-features-reread")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
