"""When to push and what a push says: the account's events in, notices out. No I/O.

`Notices.observe` sees every event broadcast to an account (the hub calls it) and answers the
notices to push: an `approval.request` or `clarify.request` while no connection of the account is in
the foreground, a `run.finished` of a run that took at least the threshold, and, through
`Notices.delivered`, a scheduled task's output. A decision that was pushed gets a `dismiss` notice
with the same tag when it resolves (answered, expired or cancelled), wherever the account is.

A payload is `{"type", "tag", "conversation_id", "title", "body", "url"}`, plus `approval_id` /
`clarify_id` and `actions` (each with its answer token) for decisions. Text is scrubbed of URLs,
hosts, paths and anything key-like (`pheby.redact.scrub`); with preview `none` no conversation text
is sent at all.
"""

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pheby.protocol import frames as ev
from pheby.push.subscriptions import PushEvent
from pheby.push.tokens import AnswerTokens, Grant
from pheby.redact import scrub

Urgency = Literal["very-low", "low", "normal", "high"]
Preview = Literal["text", "none"]
TITLE_MAX = 80
BODY_MAX = 200
CHOICE_ACTIONS = 2  # what a notification shows of a clarification's choices
RESULT_TTL_SECONDS = 24 * 3600
TRACKED_MAX = 10_000  # runs and pushed decisions remembered, the oldest forgotten first


@dataclass(frozen=True)
class Notice:
    """One push for every subscription of `account_id` that asked for `event`."""

    account_id: str
    event: PushEvent
    payload: dict[str, Any]
    ttl: int
    urgency: Urgency

    @property
    def topic(self) -> str:
        """RFC 8030 `Topic`: a later push of the same topic replaces an undelivered earlier one."""
        tag: str = self.payload["tag"]
        return tag


@dataclass
class _Run:
    started: float
    text: str = ""  # its message.complete's


@dataclass(frozen=True)
class _Pushed:
    account_id: str
    event: PushEvent
    conversation_id: str
    tag: str


def conversation_url(conversation_id: str) -> str:
    return f"/?conversation={conversation_id}"


class Notices:
    def __init__(
        self,
        tokens: AnswerTokens,
        *,
        run_seconds: float,
        decision_seconds: float,
        preview: Preview = "text",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._tokens = tokens
        self._run_seconds = run_seconds
        self._decision_seconds = decision_seconds
        self._preview = preview
        self._clock = clock
        self._runs: OrderedDict[str, _Run] = OrderedDict()  # run_id → the run, from its run.accepted
        self._run_of_message: OrderedDict[str, str] = OrderedDict()  # message_id → run_id, from message.start
        self._pushed: OrderedDict[str, _Pushed] = OrderedDict()  # decision id → its notice

    def observe(self, account_id: str, event: ev.Event, *, foreground: bool) -> list[Notice]:
        match event:
            case ev.RunAccepted():
                _remember(self._runs, event.run_id, _Run(self._clock()))
            case ev.MessageStart():
                _remember(self._run_of_message, event.message_id, event.run_id)
            case ev.MessageComplete():
                run = self._runs.get(self._run_of_message.pop(event.message_id, ""))
                if run is not None:
                    run.text = event.text
            case ev.ApprovalRequest() if not foreground:
                return [self._approval(account_id, event)]
            case ev.ClarifyRequest() if not foreground:
                return [self._clarify(account_id, event)]
            case ev.ApprovalResolved():
                return self._dismiss(event.approval_id)
            case ev.ClarifyResolved():
                return self._dismiss(event.clarify_id)
            case ev.RunFinished():
                return self._run_finished(account_id, event, foreground=foreground)
        return []

    def delivered(
        self, account_id: str, conversation_id: str, run_id: str, name: str, text: str, *, foreground: bool
    ) -> list[Notice]:
        """A scheduled task's output was filed as a turn of its conversation."""
        if foreground:
            return []
        payload = self._payload(
            "delivery",
            f"task-{run_id[:16]}",
            conversation_id,
            title=self._text(name, "Scheduled task", TITLE_MAX),
            body=self._text(text, "A scheduled task has delivered its result", BODY_MAX),
        )
        return [Notice(account_id, "delivery", payload, RESULT_TTL_SECONDS, "normal")]

    # --- decisions --------------------------------------------------------------------------

    def _approval(self, account_id: str, request: ev.ApprovalRequest) -> Notice:
        offered = [(choice, title) for choice, title in (("once", "Approve once"), ("deny", "Deny"))]
        offered = [(choice, title) for choice, title in offered if choice in request.choices] or [("deny", "Deny")]
        grants = {choice: Grant(account_id, "approval", request.approval_id, choice) for choice, _ in offered}
        tokens = self._tokens.mint(grants, self._decision_seconds)
        detail = " — ".join(part for part in (request.command, request.description) if part)
        payload = self._payload(
            "approval",
            f"approval-{request.approval_id}",
            request.conversation_id,
            title="Approval needed",
            body=self._text(detail, "The agent needs your approval", BODY_MAX),
            approval_id=request.approval_id,
            actions=[{"action": choice, "title": title, "token": tokens[choice]} for choice, title in offered],
        )
        return self._decision(account_id, "approval", request.approval_id, request.conversation_id, payload)

    def _clarify(self, account_id: str, request: ev.ClarifyRequest) -> Notice:
        choices = (request.choices or [])[:CHOICE_ACTIONS]
        actions = {f"choice-{n}": choice for n, choice in enumerate(choices, start=1)}
        grants = {action: Grant(account_id, "clarify", request.clarify_id, value) for action, value in actions.items()}
        tokens = self._tokens.mint(grants, self._decision_seconds)
        payload = self._payload(
            "clarify",
            f"clarify-{request.clarify_id}",
            request.conversation_id,
            title="Your agent has a question",
            body=self._text(request.question, "The agent has a question for you", BODY_MAX),
            clarify_id=request.clarify_id,
            actions=[
                {"action": action, "title": self._text(value, f"Option {n}", TITLE_MAX), "token": tokens[action]}
                for n, (action, value) in enumerate(actions.items(), start=1)
            ],
        )
        return self._decision(account_id, "clarify", request.clarify_id, request.conversation_id, payload)

    def _decision(
        self, account_id: str, event: PushEvent, decision_id: str, conversation_id: str, payload: dict[str, Any]
    ) -> Notice:
        _remember(self._pushed, decision_id, _Pushed(account_id, event, conversation_id, payload["tag"]))
        return Notice(account_id, event, payload, int(self._decision_seconds), "high")

    def _dismiss(self, decision_id: str) -> list[Notice]:
        self._tokens.void(decision_id)
        pushed = self._pushed.pop(decision_id, None)
        if pushed is None:
            return []
        payload = self._payload("dismiss", pushed.tag, pushed.conversation_id, title="", body="")
        return [Notice(pushed.account_id, pushed.event, payload, int(self._decision_seconds), "high")]

    # --- results ------------------------------------------------------------------------------

    def _run_finished(self, account_id: str, event: ev.RunFinished, *, foreground: bool) -> list[Notice]:
        run = self._runs.pop(event.run_id, None)
        if foreground or run is None or self._clock() - run.started < self._run_seconds:
            return []
        title, fallback = {
            "completed": ("Your agent has finished", "The answer is ready"),
            "failed": ("The run failed", "The agent could not finish"),
            "cancelled": ("The run was stopped", "The agent stopped before it finished"),
        }[event.status]
        payload = self._payload(
            "run_finished",
            f"run-{event.run_id[:16]}",
            event.conversation_id,
            title=title,
            body=self._text(run.text, fallback, BODY_MAX),
        )
        return [Notice(account_id, "run_finished", payload, RESULT_TTL_SECONDS, "normal")]

    # --- shapes -------------------------------------------------------------------------------

    def _payload(
        self, type_: str, tag: str, conversation_id: str, *, title: str, body: str, **extra: Any
    ) -> dict[str, Any]:
        return {
            "type": type_,
            "tag": tag,
            "conversation_id": conversation_id,
            "title": title,
            "body": body,
            "url": conversation_url(conversation_id),
            **extra,
        }

    def _text(self, text: str, fallback: str, limit: int) -> str:
        """Conversation text fit for a notification, or `fallback` with preview off (or nothing to show)."""
        if self._preview == "none":
            return fallback
        return scrub(text, limit) or fallback


def _remember(table: "OrderedDict[str, Any]", key: str, value: Any) -> None:
    table[key] = value
    while len(table) > TRACKED_MAX:
        table.popitem(last=False)
