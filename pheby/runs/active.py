"""One active run: its phase, translation state, pending decisions and plugin extras."""

import asyncio
import time
import uuid
from typing import NamedTuple

import hermes_client as hc
from pheby.plugin.extras import NO_EXTRAS, PluginExtras
from pheby.protocol import frames as ev
from pheby.runs.decisions import Decisions
from pheby.runs.phase import RunPhase
from pheby.runs.reader import ReadNow
from pheby.runs.tool_merge import ToolMerge
from pheby.runs.translate import RunView
from pheby.store.accounts import Account
from pheby.store.conversations import Conversation


class AssistantTurn(NamedTuple):
    """The assistant turn a run's (or a pushed output's) MEDIA: files belong to."""

    account_id: str
    conversation_id: str
    message_id: str


class ActiveRun:
    """The live state of one run, enough to rebuild a client's view after a reconnect."""

    def __init__(
        self, account: Account, conversation: Conversation, client: hc.HermesClient, run_id: str | None = None
    ) -> None:
        self.run_id = run_id or uuid.uuid4().hex
        self.account = account
        self.conversation_id = conversation.id
        self.client = client
        self.hermes_run_id = ""
        self.message_id = f"draft-{self.run_id}"
        self.user_message_id = f"user-{self.run_id}"
        self.user_text = ""  # the user's own words, as history shows them
        self.sent_text = ""  # the input as Hermes stores it (attachments inlined)
        self.stored_before = 0  # the newest Hermes message id when the run started: its turn comes after
        self.phase = RunPhase()
        self.view = RunView(self.run_id, conversation.id, self.message_id)
        self.decisions = Decisions()
        self.finished = asyncio.Event()
        self.started = asyncio.Event()  # set once Hermes has made the run, or `release` ended the attempt
        # When the credential of the client that asked for it was checked: a revocation since ends the run.
        self.judged_at = 0.0
        self.reserved_at = time.monotonic()
        self.cancel_requested = False
        self.ending = False  # its end is being journaled; `finished` follows
        self.reattached = False  # carried on from a stopped process's journal
        self.epoch = 0  # of its lease (`pheby.runs.leases`) once journaled: this process's writes name it
        self.taken_over = False  # another process owns it now: this one let it go, saying nothing
        self.caught_up = asyncio.Event()  # its reader has heard from Hermes (a batch, a status) or it ended
        self.position: int | None = None  # the number of the last Hermes event consumed, where they are numbered
        self.performing: int | None = None  # the number of the Hermes event being performed now (its outputs')
        self.read_now = ReadNow()  # set: the reader no longer waits for held-back text before a read
        self.reader: asyncio.Task[None] | None = None
        # The companion plugin's extras for this run (decided at start), and their state.
        self.extras: PluginExtras = NO_EXTRAS
        self.merge: ToolMerge | None = None
        self.media_done = asyncio.Event()
        self.media_fallback = False

    @property
    def made(self) -> bool:
        """Whether Hermes has made the run (so it can be stopped)."""
        return bool(self.hermes_run_id)

    @property
    def draft(self) -> str:
        return self.view.draft

    @property
    def message_completed(self) -> bool:
        """After message.complete only attachment.added and run.finished follow."""
        return self.view.message_completed

    @property
    def tools(self) -> dict[str, ev.ToolState]:
        return self.view.tools

    @property
    def status(self) -> str:
        return self.phase.wire_status(
            approvals_pending=self.decisions.has("approval"), clarifications_pending=self.decisions.has("clarify")
        )

    @property
    def turn(self) -> AssistantTurn:
        return AssistantTurn(self.account.id, self.conversation_id, self.message_id)

    def snapshot(self) -> ev.RunSnapshot:
        return ev.RunSnapshot(run_id=self.run_id, status=self.status, message_id=self.message_id, text=self.draft)
