"""Answer tokens: the one credential a notification's action button carries.

A token answers one decision of one account with one of the actions its notification offered, once,
before the decision's notification expires (at most 15 minutes). Only its SHA-256 digest is kept, in
memory, beside the pending decision it answers: decisions live in the run engine's memory too, so a
restart ends both. Redeeming any of a decision's tokens, or the decision resolving, voids them all.
"""

import hashlib
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from pheby.runs.decisions import Kind

MAX_TOKENS = 20_000  # every pending, pushed decision's tokens; the oldest go first past it


@dataclass(frozen=True)
class Grant:
    """What a redeemed token allows: answer this decision with this value."""

    account_id: str
    kind: Kind
    decision_id: str
    value: str  # the approval choice, or the clarification's response


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class AnswerTokens:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._grants: OrderedDict[str, tuple[Grant, str, float]] = OrderedDict()  # digest → grant, action, expiry
        self._by_decision: dict[str, list[str]] = {}

    def mint(self, grant_of: dict[str, Grant], expires_in: float) -> dict[str, str]:
        """One fresh token per offered action (action name → grant); returns action name → token."""
        expires = self._clock() + expires_in
        tokens: dict[str, str] = {}
        for action, grant in grant_of.items():
            token = secrets.token_urlsafe(32)
            digest = _digest(token)
            self._grants[digest] = (grant, action, expires)
            self._by_decision.setdefault(grant.decision_id, []).append(digest)
            tokens[action] = token
        while len(self._grants) > MAX_TOKENS:
            oldest, (grant, _, _) = self._grants.popitem(last=False)
            digests = self._by_decision.get(grant.decision_id)
            if digests is not None and oldest in digests:
                digests.remove(oldest)
        return tokens

    def redeem(self, token: str, action: str) -> Grant | None:
        """The grant of a live token offered for `action`, voiding every token of its decision; else None
        (unknown, used, expired, altered, or another action than the one it was given for)."""
        entry = self._grants.get(_digest(token))
        if entry is None:
            return None
        grant, offered, expires = entry
        if offered != action or self._clock() >= expires:
            return None
        self.void(grant.decision_id)
        return grant

    def void(self, decision_id: str) -> None:
        for digest in self._by_decision.pop(decision_id, []):
            self._grants.pop(digest, None)

    def __len__(self) -> int:
        return len(self._grants)
