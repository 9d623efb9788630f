"""The decision desk: the runs' questions asked of the clients, and their answers taken to Hermes.

Approvals come from Hermes's stream (or, unseen, from its status: `pheby.runs.unseen`), clarifications from
the stream or the companion plugin. Each is journaled before the clients are asked, so a restart keeps it
answerable under its id; a client's answer is taken to whoever holds the question (Hermes or the plugin)
and journaled before it is acknowledged (`*.resolved`). One pending decision's lifecycle is
`pheby.runs.decisions`; this keeps which run each pending decision belongs to.
"""

import logging
import secrets
from typing import Protocol

from msgspec import UNSET, UnsetType

import hermes_client as hc
from pheby.errors import ApprovalNotFound, BadRequest, ClarifyNotFound, NotFound
from pheby.protocol import frames as ev
from pheby.protocol.hub import Hub
from pheby.runs.active import ActiveRun
from pheby.runs.decisions import Answer, Decision, Kind, Resolved, resolved_id
from pheby.runs.forwarding import AnswerApproval, AnswerClarify, NoOtherOwners, RunOwners
from pheby.runs.journal import RunJournal
from pheby.runs.unseen import UnseenApprovals, unseen_request
from pheby.store.conversations import Conversations

log = logging.getLogger("pheby.runs")


def session_key(conversation_id: str) -> str:
    return f"agent:main:pheby:dm:{conversation_id}"


class ClarifyHolder(Protocol):
    """Who holds a clarification the companion plugin asked (`pheby.plugin.conversation_settings`)."""

    async def answer_clarify(self, clarify_id: str, response: str) -> bool: ...


class DecisionDesk:
    def __init__(
        self,
        hub: Hub,
        journal: RunJournal,
        conversations: Conversations,
        plugin: ClarifyHolder | None,
        owners: RunOwners | None = None,
    ) -> None:
        self._hub = hub
        self._journal = journal
        self._owners = owners or NoOtherOwners()
        self._conversations = conversations
        self._plugin = plugin
        self._runs: dict[str, ActiveRun] = {}  # approval and clarify ids → their run

    def adopt(self, run: ActiveRun) -> None:
        """A run carried on from the journal: its pending decisions are answerable again."""
        for decision in run.decisions:
            self._runs[decision.id] = run

    def let_go(self, run: ActiveRun) -> None:
        """The run is another process's now: its decisions are answered there, not here."""
        for decision in run.decisions:
            self._runs.pop(decision.id, None)

    def settle_all(self, run: ActiveRun) -> None:
        """The run ended: each decision being answered keeps its responder's answer, the rest expire."""
        for resolved in run.decisions.settle_all():
            self._runs.pop(resolved_id(resolved), None)
            self._hub.broadcast(run.account.id, resolved)

    def expire_waiting(self, run: ActiveRun, kind: Kind, *, by_plugin_only: bool = False) -> None:
        """Hermes (or the plugin) answered them itself: the decisions of `kind` no client is answering expire."""
        for decision in run.decisions:
            if decision.kind == kind and not decision.answering and (decision.by_plugin or not by_plugin_only):
                self.expire(run, decision.id)

    # --- asking ----------------------------------------------------------------------------

    async def ask_approval(self, run: ActiveRun, event: hc.ApprovalRequest) -> None:
        conversation = await self._conversations.get(run.account.id, run.conversation_id)
        keys = list(event.pattern_keys or ([event.pattern_key] if event.pattern_key else []))
        if conversation.yolo or (keys and set(keys) <= await self._conversations.approved_patterns(conversation.id)):
            # YOLO, or a pattern approved for the session earlier: answer "once" without asking.
            try:
                await run.client.respond_approval(run.hermes_run_id, "once")
            except hc.HermesError as exc:
                log.warning("auto-approval for run %s failed: %s", run.run_id, exc)
            return
        approval = ev.ApprovalRequest(
            approval_id=secrets.token_hex(6),
            session_key=session_key(run.conversation_id),
            conversation_id=run.conversation_id,
            run_id=run.run_id,
            command=event.command,
            description=event.description or "",
            choices=list(event.choices or ["once", "session", "always", "deny"]),
        )
        await self.ask(run, Decision(approval.approval_id, approval, pattern_keys=keys), event.seq)

    async def ask_clarify(
        self,
        run: ActiveRun,
        held_id: str,
        question: str,
        choices: list[str] | None,
        *,
        by_plugin: bool,
        seq: int | UnsetType = UNSET,
    ) -> str:
        """Ask the clients; the clarify id. A question asked again (the plugin delivers what a stopped server
        never acknowledged) is the one already pending."""
        for pending in run.decisions:
            if pending.kind == "clarify" and pending.held_id == held_id and pending.by_plugin == by_plugin:
                return pending.id
        clarify = ev.ClarifyRequest(
            clarify_id=secrets.token_hex(5),
            session_key=session_key(run.conversation_id),
            conversation_id=run.conversation_id,
            run_id=run.run_id,
            question=question,
            choices=choices,
        )
        await self.ask(run, Decision(clarify.clarify_id, clarify, held_id=held_id, by_plugin=by_plugin), seq)
        return clarify.clarify_id

    async def ask(self, run: ActiveRun, decision: Decision, seq: int | UnsetType = UNSET) -> None:
        """Journal the decision (with the stream's position past the event that asked it, so a resumed
        stream never asks it again), then ask the clients."""
        if type(seq) is int:
            run.position = seq
        await self._journal.decision_asked(run, decision)
        if run.finished.is_set():
            return  # the run ended (or was taken over) meanwhile: nobody here is left to answer
        run.decisions.ask(decision)
        self._runs[decision.id] = run
        run.phase.move("awaiting_decision")  # a run being cancelled stays cancelling
        self._hub.broadcast(run.account.id, decision.request)

    def retire_clarify(self, run: ActiveRun, held_id: str, *, by_plugin: bool) -> None:
        """Hermes (or the plugin) stopped waiting for an answer: unless a client's answer is on its way
        (its reply resolves it), the question expired."""
        for decision in run.decisions:
            if (
                decision.kind == "clarify"
                and decision.held_id == held_id
                and decision.by_plugin == by_plugin
                and not decision.answering
            ):
                self.expire(run, decision.id)

    async def _resolve(self, run: ActiveRun, decision_id: str, answer: Answer) -> None:
        """A client's answer was taken: journaled before it is acknowledged."""
        await self._journal.decision_settled(decision_id)
        self._resolved(run, decision_id, run.decisions.resolve(decision_id, answer))

    def expire(self, run: ActiveRun, decision_id: str) -> None:
        event = run.decisions.expire(decision_id)
        if event is not None:
            self._journal.forget_decision(decision_id)  # in the background: an expiry acknowledges nobody
        self._resolved(run, decision_id, event)

    def _resolved(self, run: ActiveRun, decision_id: str, event: Resolved | None) -> None:
        if event is None:
            return
        self._runs.pop(decision_id, None)
        if not run.decisions:
            run.phase.move("running")  # refused once the run is cancelling or finished
        self._hub.broadcast(run.account.id, event)

    async def while_unread(self, run: ActiveRun, waits: UnseenApprovals, status: hc.RunStatus) -> None:
        """Hermes's word on a run whose stream nobody reads: an approval asked unseen, or stale ones."""
        run.caught_up.set()
        waiting = run.decisions.has("approval")
        match waits.seen(status.status, approval_waiting=waiting):
            case "ask_unseen":
                ids = (secrets.token_hex(6), session_key(run.conversation_id), run.conversation_id, run.run_id)
                request = unseen_request(*ids)
                await self.ask(run, Decision(request.approval_id, request, unseen=True))
            case "expire_waiting":
                self.expire_waiting(run, "approval")

    # --- answers ------------------------------------------------------------------------

    def _begin_answer(
        self, account_id: str, decision_id: str, kind: Kind, answer: Answer, unknown: type[NotFound]
    ) -> tuple[ActiveRun, Decision]:
        """The run and pending decision a client's answer is for, now marked as being answered; `unknown`
        when it is unknown, stale, another account's, or another client's answer is already on its way."""
        run = self._runs.get(decision_id)
        decision = (
            run.decisions.begin_answer(decision_id, kind, answer)
            if run is not None and run.account.id == account_id
            else None
        )
        if run is None or decision is None:
            raise unknown()
        return run, decision

    async def _owner_elsewhere(self, account_id: str, decision_id: str) -> str | None:
        """The process that owns the run asking this decision, if that is not this one."""
        if decision_id in self._runs:
            return None
        owner = await self._journal.owner_of_decision(account_id, decision_id)
        return owner if owner != self._journal.leases.holder else None

    async def respond_approval(
        self, account_id: str, approval_id: str, choice: str, request_id: str | UnsetType, *, forwarded: bool = False
    ) -> None:
        """Take a client's answer to Hermes; a run another process owns gets it there (unless `forwarded`)."""
        if not forwarded and (owner := await self._owner_elsewhere(account_id, approval_id)) is not None:
            command = AnswerApproval(
                account_id=account_id, approval_id=approval_id, choice=choice, request_id=_or_none(request_id)
            )
            await self._owners.forward(owner, command)
            return
        answer = Answer(choice, request_id)
        run, decision = self._begin_answer(account_id, approval_id, "approval", answer, ApprovalNotFound)
        if decision.unseen and choice != "deny":
            run.decisions.answer_not_taken(approval_id)
            raise BadRequest("Nobody here saw what this approval is for: it can only be denied")
        try:
            await run.client.respond_approval(run.hermes_run_id, choice)
        except (hc.HermesNotFound, hc.HermesRejected):
            if approval_id not in run.decisions:
                return  # the run ended meanwhile and resolved it with this answer
            self.expire(run, approval_id)
            raise ApprovalNotFound() from None
        except BaseException as exc:
            if isinstance(exc, Exception) and approval_id not in run.decisions:
                return  # the run ended meanwhile and resolved it with this answer
            run.decisions.answer_not_taken(approval_id)  # Hermes never took it: it waits for an answer again
            raise
        if choice == "session":
            for key in decision.pattern_keys:
                await self._conversations.approve_pattern(run.conversation_id, key)
        await self._resolve(run, approval_id, answer)

    async def respond_clarify(
        self, account_id: str, clarify_id: str, response: str, request_id: str | UnsetType, *, forwarded: bool = False
    ) -> None:
        if not forwarded and (owner := await self._owner_elsewhere(account_id, clarify_id)) is not None:
            command = AnswerClarify(
                account_id=account_id, clarify_id=clarify_id, response=response, request_id=_or_none(request_id)
            )
            await self._owners.forward(owner, command)
            return
        answer = Answer(response, request_id)
        run, decision = self._begin_answer(account_id, clarify_id, "clarify", answer, ClarifyNotFound)
        try:
            answered = await self._answer_clarify(run, decision, response)
        except BaseException as exc:
            if isinstance(exc, Exception) and clarify_id not in run.decisions:
                return  # the run ended meanwhile and resolved it with this answer
            run.decisions.answer_not_taken(clarify_id)
            raise
        if clarify_id not in run.decisions:
            return  # the run ended meanwhile and resolved it with this answer
        if not answered:
            self.expire(run, clarify_id)
            raise ClarifyNotFound()
        await self._resolve(run, clarify_id, answer)

    async def _answer_clarify(self, run: ActiveRun, decision: Decision, response: str) -> bool:
        """Hand the answer to whoever holds the question (the plugin or Hermes); False if it no longer waits."""
        if decision.by_plugin and self._plugin is not None:
            return await self._plugin.answer_clarify(decision.held_id, response)
        try:
            await run.client.respond_clarify(run.hermes_run_id, decision.held_id, response)
        except (hc.HermesNotFound, hc.HermesRejected):
            return False
        return True


def _or_none(request_id: str | UnsetType) -> str | None:
    return None if isinstance(request_id, UnsetType) else request_id
