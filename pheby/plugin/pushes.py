"""What the companion Hermes plugin pushes to the server, and where each push goes.

The plugin posts JSON events to `POST /internal/hermes-plugin/events` and MEDIA: file bytes to
`POST /internal/hermes-plugin/media`, keyed by the `/v1/runs` run id. Both routes take only the
plugin's shared secret (`X-Pheby-Plugin-Secret`, compared in constant time) from a loopback peer
(or one listed in PHEBY_PLUGIN_PEERS) that is not a reverse proxy relaying someone else; no user
credential opens them, and without a configured plugin they do not exist (404).
"""

import asyncio
import logging
from collections.abc import AsyncIterable, Awaitable, Mapping
from typing import Any, Final, Protocol

import msgspec

import hermes_client as hc
from pheby.errors import Conflict, Forbidden, NotFound, Unauthorized
from pheby.hermes.pool import HermesClients
from pheby.plugin.link import PluginLink
from pheby.protocol.frames import ToolStatus
from pheby.protocol.hub import Hub
from pheby.runs import RunManager
from pheby.runs.cron_delivery import Delivered, file_cron_output, worth_delivering
from pheby.runs.plugin_inputs import (
    PluginClarifyAsked,
    PluginClarifyExpired,
    PluginMediaDone,
    PluginToolEnded,
    PluginToolStarted,
)
from pheby.store.accounts import Account, Accounts
from pheby.store.attachments import Attachments, attachment_added
from pheby.store.conversations import Conversations
from pheby.store.task_owners import TaskOwners

log = logging.getLogger(__name__)


class BackgroundTasks(Protocol):
    """`Services.background`: keeps a task alive; `finish_at_shutdown` lets it end before shutdown."""

    def __call__(self, task: asyncio.Task[Any], *, finish_at_shutdown: bool = ...) -> None: ...


SECRET_HEADER: Final = "x-pheby-plugin-secret"  # noqa: S105 - a header name, not a secret
PROXY_HEADERS: Final = ("forwarded", "x-forwarded-for")
# Statuses of Hermes's post_tool_call hook for a call that was stopped rather than failing on its own.
INTERRUPTED_STATUSES: Final = frozenset({"cancelled", "canceled", "interrupted"})


class _Push(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, tag_field="event"):
    pass


class PluginHello(_Push, frozen=True, tag="plugin.hello"):
    plugin: str
    version: str
    protocol: int
    boot_id: str
    features: list[str]


class ToolStart(_Push, frozen=True, tag="tool.start"):
    run_id: str
    session_id: str
    tool_call_id: str
    tool: str
    args: dict[str, Any]


class ToolEnd(_Push, frozen=True, tag="tool.end"):
    run_id: str
    session_id: str
    tool_call_id: str
    tool: str
    duration_ms: int | None
    status: str
    error: str | None


class ClarifyAsked(_Push, frozen=True, tag="clarify.request"):
    run_id: str
    session_id: str
    tool_call_id: str
    clarify_id: str
    question: str
    choices: list[str] | None
    timeout: float


class ClarifyExpired(_Push, frozen=True, tag="clarify.expired"):
    run_id: str
    clarify_id: str


class MediaDone(_Push, frozen=True, tag="media.done"):
    run_id: str
    offered: int
    pushed: int


class CronOutput(_Push, frozen=True, tag="cron.output"):
    session_id: str
    job_id: str
    text: str


def _tool_status(plugin_status: str) -> ToolStatus:
    """The tool.event status for the status word of Hermes's post_tool_call hook."""
    if plugin_status == "ok":
        return "completed"
    return "cancelled" if plugin_status.lower() in INTERRUPTED_STATUSES else "failed"


Push = PluginHello | ToolStart | ToolEnd | ClarifyAsked | ClarifyExpired | MediaDone | CronOutput
PUSH_DECODER: Final = msgspec.json.Decoder(Push)


class PluginEvents:
    def __init__(
        self,
        *,
        link: PluginLink,
        runs: RunManager,
        conversations: Conversations,
        hub: Hub,
        accounts: Accounts,
        task_owners: TaskOwners,
        hermes: HermesClients,
        attachments: Attachments,
        background: BackgroundTasks,
        delivered: Delivered,
    ) -> None:
        self._link = link
        self._delivered = delivered
        self._background = background
        self._runs = runs
        self._conversations = conversations
        self._hub = hub
        self._accounts = accounts
        self._task_owners = task_owners
        self._hermes = hermes
        self._attachments = attachments

    def authenticate(self, headers: Mapping[str, str], peer: str | None) -> None:
        """Only the plugin: unknown route without one configured, then the peer, then the secret."""
        if not self._link.configured:
            raise NotFound()
        if not self._link.peer_allowed(peer) or any(name in headers for name in PROXY_HEADERS):
            raise Forbidden("Plugin events are accepted from loopback (or PHEBY_PLUGIN_PEERS) only")
        presented_secret = headers.get(SECRET_HEADER)
        if not presented_secret or not self._link.secret_matches(presented_secret):
            raise Unauthorized("Invalid plugin secret")

    async def handle(self, push: Push) -> dict[str, Any]:
        runs = self._runs
        match push:
            case PluginHello(boot_id=boot_id, features=features):
                return self._link.plugin_said_hello(boot_id, features)
            case ToolStart():
                await runs.plugin_runs.push(PluginToolStarted(push.run_id, push.tool_call_id, push.tool, push.args))
            case ToolEnd():
                outcome = _tool_status(push.status)
                await runs.plugin_runs.push(
                    PluginToolEnded(push.run_id, push.tool_call_id, push.tool, push.duration_ms, outcome, push.error)
                )
            case ClarifyAsked():
                asked = PluginClarifyAsked(push.run_id, push.clarify_id, push.question, push.choices)
                return {"accepted": await runs.plugin_runs.push(asked)}
            case ClarifyExpired():
                await runs.plugin_runs.push(PluginClarifyExpired(push.run_id, push.clarify_id))
            case MediaDone():
                await runs.plugin_runs.push(PluginMediaDone(push.run_id))
            case CronOutput():
                return {"delivered": await self._cron_output(push)}
        return {"ok": True}

    async def store_media(
        self, hermes_run_id: str, filename: str, content_type: str | None, chunks: AsyncIterable[bytes]
    ) -> None:
        """A MEDIA: file of a run's final text, as bytes: an outbound attachment of its conversation."""
        run = self._runs.plugin_runs.run(hermes_run_id)
        if run is None:
            raise NotFound("No such run")
        if run.media_fallback or not run.extras.media:
            raise Conflict("This run's files are delivered another way")
        attachment = await self._attachments.store_pushed_deliverable(
            run.account.id, run.conversation_id, run.message_id, filename, content_type, chunks
        )
        self._hub.broadcast(
            run.account.id,
            attachment_added(run.conversation_id, attachment),
        )

    async def _cron_output(self, push: CronOutput) -> bool:
        if not worth_delivering(push.text):
            return False
        account = await self._cron_account(push.job_id)
        if account is None or not self._link.extras().cron:
            return False
        if not await self._conversations.mark_cron_session_seen(account.id, push.session_id):
            return False  # job polling got there first
        name = await self._job_name(account, push.job_id)
        # Filed in the background: storing its MEDIA: files may take longer than the plugin waits for an answer.
        filing = file_cron_output(
            self._conversations,
            self._hub,
            self._runs,
            account,
            push.job_id,
            push.session_id,
            name,
            push.text,
            self._delivered,
        )
        task = asyncio.create_task(_logged(filing, push.session_id), name=f"cron-{push.session_id}")
        self._background(task, finish_at_shutdown=True)  # the session is marked seen: polling won't redo it
        return True

    async def _cron_account(self, job_id: str) -> Account | None:
        """The account that made the job here, else the owner account (as job polling decides)."""
        users = [a for a in await self._accounts.list_enabled() if self._link.serves(self._hermes.url_for(a))]
        if not users:
            return None
        owner_id = await self._task_owners.owner(self._hermes.url_for(users[0]), job_id)
        default = next((a for a in users if a.is_owner), users[0])
        return next((a for a in users if a.id == owner_id), default)

    async def _job_name(self, account: Account, job_id: str) -> str:
        try:
            return (await self._hermes.for_account(account).get_job(job_id)).name or f"Scheduled task {job_id}"
        except hc.HermesError:
            return f"Scheduled task {job_id}"


async def _logged(filing: Awaitable[object], session_id: str) -> None:
    try:
        await filing
    except Exception:
        log.exception("filing the cron output of %s failed", session_id)
