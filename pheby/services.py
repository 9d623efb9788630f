"""The long-lived resources of one server process, built in the app lifespan."""

import asyncio
import functools
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from hermes_client.tls import shared_tls_context
from pheby import metrics
from pheby.auth import Authenticator
from pheby.cancelling import cancel_and_wait
from pheby.cluster import ClusterHub
from pheby.cluster.presence import Presence
from pheby.db import Database
from pheby.errors import PhebyError
from pheby.events import EventLog, RedisBell
from pheby.hermes.features import HermesFeatures
from pheby.hermes.history_pages import HistoryPages
from pheby.hermes.memory import MemoryFiles
from pheby.hermes.model_choice import ModelChoices
from pheby.hermes.pool import HermesClients
from pheby.hermes.session_deletes import SessionDeletes
from pheby.hermes.tasks import Tasks
from pheby.plugin.conversation_settings import ConversationSettings
from pheby.plugin.link import PluginLink
from pheby.plugin.pushes import PluginEvents
from pheby.process_lease import ServerLease
from pheby.protocol.coalesce import CoalescingHub
from pheby.push.service import Push
from pheby.revocation import Revocations
from pheby.run_owners import BellRunOwners
from pheby.runs import AssistantTurn, RunManager
from pheby.runs.commands import carry_out
from pheby.runs.journal import RunJournal
from pheby.runs.keeper import RunKeeper
from pheby.runs.leases import RunLeases
from pheby.runs.reattach import reattach, take_over
from pheby.search.index import SearchIndex
from pheby.settings import Settings
from pheby.signin.oidc import OidcSignIn
from pheby.signin.passkeys import Passkeys
from pheby.store.accounts import Accounts
from pheby.store.artifacts import ArtifactLimits, Artifacts
from pheby.store.attachments import Attachments, attachment_added
from pheby.store.changes import ChangeFeed
from pheby.store.conversations import Conversations
from pheby.store.lockout import AddressSlots, FailureLimiter, LoginGuard
from pheby.store.oidc import OidcStore
from pheby.store.second_factor import CodeAttempts, SecondFactors
from pheby.store.sessions import Sessions
from pheby.store.task_owners import TaskOwners
from storage import BlobStore, StorageError, open_blob_store

log = logging.getLogger("pheby.services")
BACKGROUND_FINISH_SECONDS = 5.0  # how long shutdown waits for background work that must not be cut off


class Services:
    """Everything a handler may need, kept on `app.state.services` (a plain class: DI checks isinstance)."""

    def __init__(self, *, settings: Settings, db: Database, accounts: Accounts, authenticator: Authenticator,
                 blobs: BlobStore, hermes: HermesClients) -> None:  # fmt: skip
        self.settings = settings
        self.db = db
        self.accounts = accounts
        self.authenticator = authenticator
        self.blobs = blobs
        self.hermes = hermes
        self.login_guard = LoginGuard(db)
        self.sessions = Sessions(db)  # a person's sessions, listed and ended (the Security page)
        self.hello_limiter = FailureLimiter(db, "hello")
        self.push_action_limiter = FailureLimiter(db, "push_action", limit=10)  # answers with a wrong token
        self.second_factors = SecondFactors(db)  # TOTP secrets, recovery codes, sign-in tickets
        self.code_attempts = CodeAttempts(db)  # the limits on guessing their codes
        self.oidc = OidcSignIn(settings, OidcStore(db), accounts)  # OpenID Connect sign-in
        self.passkeys = Passkeys(db, accounts)  # registration and sign-in (`pheby.signin.passkeys`)
        self.sockets_before_hello = AddressSlots(limit=8)
        hub_options: dict[str, Any] = {
            "max_sockets": settings.ws_max_connections,
            "delta_window_seconds": settings.ws_delta_window_ms / 1000,
            "append_window_seconds": settings.ws_append_window_ms / 1000,
        }
        # With Redis, the deployment's processes share each account's events (`pheby.cluster`).
        self.event_log = (
            EventLog(db, RedisBell(settings.redis_url, prefix=settings.redis_prefix)) if settings.redis_url else None
        )
        self.hub = (
            CoalescingHub(**hub_options)
            if self.event_log is None
            else ClusterHub(
                log=self.event_log,
                presence=Presence(settings.redis_url, prefix=settings.redis_prefix),
                **hub_options,
            )
        )
        self.conversations = Conversations(db)
        self.history = HistoryPages(db, self.conversations)  # conversation.open's pages, from the log when in sync
        self.search = SearchIndex(db)  # the account's conversations, found by their words
        self.task_owners = TaskOwners(db)
        self.tasks = Tasks(hermes, self.task_owners)
        self.memory = MemoryFiles(hermes)
        self.artifacts = Artifacts(db, ArtifactLimits.from_settings(settings))
        self.change_feed = ChangeFeed(db)
        # What each gateway offers natively (read at start-up and kept current by `watch`).
        self.hermes_features = HermesFeatures(hermes, accounts)
        self.models = ModelChoices(hermes, self.hermes_features)
        self.attachments = Attachments(db, blobs, settings)
        # A deleted conversation's uploads are no longer left where the agent could read them.
        self.conversations.when_deleted(self.attachments.remove_agent_copies)
        # The companion Hermes plugin: its link, the per-conversation settings it applies, its pushes.
        self.plugin_link = PluginLink(settings, when_hermes_restarts=self.hermes_features.hermes_restarted)
        self.conversation_settings = ConversationSettings(
            db, self.conversations, hermes, self.models, self.plugin_link, self.hermes_features
        )
        # What a restart, or another process, needs to carry the runs on; who owns each.
        self.run_journal = RunJournal(db, leases=RunLeases(db, seconds=settings.run_lease_seconds))
        # With Redis, a run another process owns gets its clients' commands there, as letters on the bell.
        self.run_owners = (
            None
            if self.event_log is None or self.event_log.bell is None
            else BellRunOwners(
                self.event_log.bell,
                self.run_journal.leases.holder,
                lambda command: carry_out(self.runs, self.hub, command),
            )
        )
        self.runs = RunManager(
            self.hub,
            self.conversations,
            hermes.for_account,
            self.history,
            self._deliver_media,
            self.conversation_settings,
            anchor_turn=self.attachments.anchor,
            attachments=self.attachments,
            features=self.hermes_features,
            journal=self.run_journal,
            owners=self.run_owners,
        )
        self._background: set[asyncio.Task[Any]] = set()
        self._finishing: set[asyncio.Task[Any]] = set()
        self.revocations = Revocations(
            db=db,
            accounts=accounts,
            hub=self.hub,
            runs=self.runs,
            conversations=self.conversations,
            background=self.background,
        )
        metrics.watch(
            connections=self.hub.connection_count,
            sockets=self.hub.sockets,
            owed_bytes=self.hub.owed_bytes,
            runs_active=self.runs.active_count,
        )
        # Web Push: decisions and results reach an account none of whose clients is in the foreground.
        self.push = Push(settings, db, self.hub, self.runs, tls=shared_tls_context(trust_env=False))
        # A deleted conversation's Hermes sessions, deleted again should a 0.22-era title write bring them back.
        self.session_deletes = SessionDeletes(self.background)
        self.plugin_events = PluginEvents(
            link=self.plugin_link,
            runs=self.runs,
            conversations=self.conversations,
            hub=self.hub,
            accounts=accounts,
            task_owners=self.task_owners,
            hermes=hermes,
            attachments=self.attachments,
            background=self.background,
            delivered=self.push.delivered,
        )

    async def _deliver_media(self, turn: AssistantTurn, paths: list[str]) -> None:
        """Copy a turn's `MEDIA:` files into storage and announce each to the account's clients.

        Every way a turn's files arrive from the server's disk comes here (runs, cron output found by
        job polling or pushed by the plugin), so `store_deliverable` decides, once per file, whether the
        account may have it. A file that can't be stored (empty, grown past the limit, a storage error)
        is skipped alone.
        """
        account = await self.accounts.get(turn.account_id)
        for path in paths:
            try:
                attachment = await self.attachments.store_deliverable(
                    account, turn.conversation_id, turn.message_id, path
                )
            except PhebyError as exc:
                log.warning("MEDIA: file not stored (%s)", exc.message)
                continue
            except StorageError as exc:
                log.warning("MEDIA: file not stored (storage failed: %s)", type(exc).__name__)
                continue
            except Exception:
                log.exception("MEDIA: file could not be stored")
                continue
            if attachment is not None:
                self.hub.broadcast(
                    turn.account_id,
                    attachment_added(turn.conversation_id, attachment),
                )

    def background(self, task: asyncio.Task[Any], *, finish_at_shutdown: bool = False) -> None:
        """Keep a fire-and-forget task alive until it ends; on shutdown it is cancelled, or, with
        `finish_at_shutdown` (short work that must not be lost halfway), given a moment to end first."""
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        if finish_at_shutdown:
            self._finishing.add(task)
            task.add_done_callback(self._finishing.discard)

    async def stop_background(self) -> None:
        if self._finishing:
            await asyncio.wait(list(self._finishing), timeout=BACKGROUND_FINISH_SECONDS)
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)


async def _close_cluster_hub(hub: ClusterHub) -> None:
    await hub.aclose()
    if hub.event_log.bell is not None:
        await hub.event_log.bell.aclose()


@asynccontextmanager
async def open_services(settings: Settings) -> AsyncIterator[Services]:
    """Open the database (migrating it), the owner account, the blob store and Hermes clients; close after."""
    async with AsyncExitStack() as stack:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        db = settings.open_database()
        await db.open()
        stack.push_async_callback(db.close)
        if db.engine == "postgresql":
            # Alone, or beside the processes of the same Redis; LeaseHeld: another process is in the way.
            lease = ServerLease(db, shared=bool(settings.redis_url))
            await lease.take()
            stack.push_async_callback(lease.release)
        accounts = Accounts(db)
        owner = await accounts.ensure_owner()
        blobs = open_blob_store(
            settings.storage,
            data_dir=settings.data_dir,
            s3_bucket=settings.s3_bucket or None,
            s3_prefix=settings.s3_prefix,
            s3_endpoint_url=settings.s3_endpoint_url or None,
        )
        stack.push_async_callback(blobs.aclose)
        hermes = HermesClients(settings)
        stack.push_async_callback(hermes.aclose)
        services = Services(
            settings=settings,
            db=db,
            accounts=accounts,
            authenticator=Authenticator(settings, accounts, owner),
            blobs=blobs,
            hermes=hermes,
        )
        await services.search.prepare()  # e.g. after a migration that queued every row's terms again
        if isinstance(services.hub, ClusterHub):  # closed after everything that may broadcast
            await services.hub.start()
            stack.push_async_callback(_close_cluster_hub, services.hub)
        if services.run_owners is not None and isinstance(services.hub, ClusterHub):
            services.hub.feed.deliver_letters(services.run_owners.on_letter)
            await services.run_owners.start()
            stack.push_async_callback(services.run_owners.aclose)
        stack.push_async_callback(services.push.aclose)
        stack.push_async_callback(services.plugin_link.aclose)
        stack.push_async_callback(services.hermes_features.aclose)
        stack.push_async_callback(services.stop_background)
        stack.push_async_callback(services.run_journal.leases.aclose)
        stack.push_async_callback(services.runs.shutdown)
        services.background(asyncio.create_task(services.revocations.watch(), name="revocations"))
        if db.engine == "postgresql":
            services.background(asyncio.create_task(lease.hold(), name="server-lease"))
        services.background(asyncio.create_task(services.push.run(), name="push-delivery"))
        # Not awaited: a slow or absent Hermes must not hold up start-up (each read is bounded, and retried).
        services.background(asyncio.create_task(services.hermes_features.watch(), name="hermes-features"))
        if services.plugin_link.configured:
            services.background(asyncio.create_task(services.plugin_link.run(), name="plugin-link"))
        # Runs a stopped process left go on before the first client is served (their readers in the background).
        left = (services.run_journal, accounts, services.conversations, hermes.for_account, services.runs)
        await reattach(*left)
        # From then on, the runs of any process that dies or stalls (on this database) are taken over here.
        keeper = RunKeeper(services.runs, services.run_journal.leases, functools.partial(take_over, *left))
        keeping = asyncio.create_task(keeper.keep(), name="run-keeper")
        stack.push_async_callback(cancel_and_wait, keeping)  # before the hand-over: it takes over no more
        yield services
