"""`Push`: Web Push for one server, wired together: what handlers and the composition root call."""

import logging
import ssl

import httpx
import msgspec
from msgspec import UNSET

from pheby.db import Database
from pheby.errors import ApprovalNotFound, BadRequest, ClarifyNotFound, NotFound
from pheby.protocol import frames as ev
from pheby.protocol.hub import Hub
from pheby.push.delivery import PushDelivery
from pheby.push.endpoints import EndpointPolicy, EndpointRefused, Resolver
from pheby.push.notices import Notice, Notices
from pheby.push.sender import PushSender
from pheby.push.subscriptions import PUSH_EVENTS, BrowserSubscription, PushEvent, PushSubscriptions, Subscription
from pheby.push.tokens import AnswerTokens
from pheby.push.vapid import VapidIdentity
from pheby.runs import RunManager
from pheby.settings import Settings

log = logging.getLogger("pheby.push")

# The events `Notices.observe` acts on; every other broadcast (a delta, above all) is passed over at once.
OBSERVED = frozenset(
    {
        ev.RunAccepted, ev.MessageStart, ev.MessageComplete, ev.RunFinished, ev.ApprovalRequest,
        ev.ApprovalResolved, ev.ClarifyRequest, ev.ClarifyResolved,
    }
)  # fmt: skip
ANSWER_NOT_FOUND = "No such answer: it was used, it expired, or the question is no longer asked"


class PushConfig(msgspec.Struct, frozen=True):
    vapid_public_key: str
    events: list[PushEvent]


class Push:
    def __init__(
        self,
        settings: Settings,
        db: Database,
        hub: Hub,
        runs: RunManager,
        *,
        resolver: Resolver | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.identity = VapidIdentity.for_settings(settings)
        self.subscriptions = PushSubscriptions(db)
        self.policy = EndpointPolicy(settings.push_allow_hosts, resolver)
        self.tokens = AnswerTokens()
        self.notices = Notices(
            self.tokens,
            run_seconds=settings.push_run_seconds,
            decision_seconds=settings.push_decision_seconds,
            preview=settings.push_preview,
        )
        self.sender = PushSender(
            self.identity, self.policy, timeout=settings.push_timeout_seconds, transport=transport, tls=tls
        )
        self.delivery = PushDelivery(self.subscriptions, self.sender, foreground_elsewhere=hub.foreground_elsewhere)
        self._hub = hub
        self._runs = runs
        hub.listen(self._observe)

    @property
    def config(self) -> PushConfig:
        return PushConfig(vapid_public_key=self.identity.public_key, events=list(PUSH_EVENTS))

    async def subscribe(
        self,
        account_id: str,
        subscription: BrowserSubscription,
        events: list[PushEvent] | None,
        token_id: str | None,
    ) -> Subscription:
        """Keep the account's subscription, for as long as the credential `token_id` works (None: the owner
        secret); `BadRequest` for an endpoint the server may not call, or bad keys."""
        try:
            await self.policy.target(subscription.endpoint)
        except EndpointRefused as exc:
            raise BadRequest(f"The push endpoint can't be used: {exc}") from None
        return await self.subscriptions.save(account_id, subscription, events, token_id)

    async def answer(self, token: str, action: str) -> None:
        """Answer a decision from its notification: the same path as `approval.respond` / `clarify.respond`."""
        grant = self.tokens.redeem(token, action)
        if grant is None:
            raise NotFound(ANSWER_NOT_FOUND)
        try:
            if grant.kind == "approval":
                await self._runs.decision_desk.respond_approval(grant.account_id, grant.decision_id, grant.value, UNSET)
            else:
                await self._runs.decision_desk.respond_clarify(grant.account_id, grant.decision_id, grant.value, UNSET)
        except (ApprovalNotFound, ClarifyNotFound):
            raise NotFound(ANSWER_NOT_FOUND) from None

    def delivered(self, account_id: str, conversation_id: str, run_id: str, name: str, text: str) -> None:
        """A scheduled task's output was filed (`pheby.runs.cron_delivery`)."""
        foreground = self._hub.in_foreground(account_id)
        self._submit(self.notices.delivered(account_id, conversation_id, run_id, name, text, foreground=foreground))

    async def run(self) -> None:
        await self.delivery.run()

    async def aclose(self) -> None:
        await self.sender.aclose()

    def _observe(self, account_id: str, event: ev.Event) -> None:
        if type(event) not in OBSERVED:
            return
        try:
            notices = self.notices.observe(account_id, event, foreground=self._hub.in_foreground(account_id))
        except Exception:  # a broadcast must go on whatever a push does
            log.exception("push notice failed")
            return
        self._submit(notices)

    def _submit(self, notices: list[Notice]) -> None:
        for notice in notices:
            self.delivery.submit(notice)
