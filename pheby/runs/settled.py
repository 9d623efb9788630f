"""Finished turns kept for snapshots until the stored transcript is sure to hold them.

A `conversation.open` reads the stored transcript (an await), then takes the run state and queues
its reply in one step. A run that finishes during the read has sent its `run.finished` before the
reply, but the transcript read may predate Hermes storing the turn. So each finished run leaves its
turn here (the user's words as history shows them, the final answer, their ids), and every snapshot
merges the turns its transcript lacks, in order, without duplicates.

A turn is dropped once the after-turn work found it stored and no snapshot read that began before
that is still under way (so no read can miss it), or when more than `per_conversation` turns of a
conversation (or `total` in all) are kept, or after `max_age` seconds.
"""

import itertools
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from pheby.protocol.frames import HistoryMessage

PER_CONVERSATION = 32
TOTAL = 4096
MAX_AGE_SECONDS = 600.0


@dataclass
class SettledTurn:
    run_id: str
    user_message_id: str  # the ids the run's events used; the history's once `stored` says them
    answer_message_id: str
    user_text: str
    answer_text: str
    stored_before: int  # the newest Hermes message id before the run: the turn's messages come after
    finished_at: float
    stored_at: int | None = None  # the read sequence number when the transcript was seen holding it


class SettledTurns:
    def __init__(
        self,
        per_conversation: int = PER_CONVERSATION,
        max_age: float = MAX_AGE_SECONDS,
        total: int = TOTAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._per_conversation = per_conversation
        self._max_age = max_age
        self._total = total
        self._clock = clock
        # Conversations in the order a turn of theirs last finished, so the stalest go first.
        self._turns: OrderedDict[str, deque[SettledTurn]] = OrderedDict()
        self._count = 0
        self._sequence = itertools.count(1)
        self._reads: dict[int, int] = {}  # read token → the sequence number it began at

    def __len__(self) -> int:
        return self._count

    def add(self, conversation_id: str, turn: SettledTurn) -> None:
        turns = self._turns.setdefault(conversation_id, deque())
        self._turns.move_to_end(conversation_id)
        turns.append(turn)
        self._count += 1
        if len(turns) > self._per_conversation:
            turns.popleft()
            self._count -= 1
        # The stalest conversations: past their age, or beyond the total, their turns go.
        while self._turns:
            stalest_id, stalest = next(iter(self._turns.items()))
            if self._count <= self._total and self._clock() - stalest[-1].finished_at < self._max_age:
                break
            self._count -= len(stalest)
            del self._turns[stalest_id]

    def stored(self, conversation_id: str, run_id: str, user_id: str | None, answer_id: str | None) -> None:
        """The after-turn work read the transcript and found the turn in it (with these history ids)."""
        for turn in self._turns.get(conversation_id, ()):
            if turn.run_id == run_id:
                if user_id:
                    turn.user_message_id = user_id
                if answer_id:
                    turn.answer_message_id = answer_id
                turn.stored_at = next(self._sequence)
        self._prune(conversation_id)

    def kept_after(self, conversation_id: str) -> int | None:
        """The oldest `stored_before` of the conversation's kept turns: their messages come after it."""
        return min((turn.stored_before for turn in self._turns.get(conversation_id, ())), default=None)

    def forget(self, conversation_id: str) -> None:
        self._count -= len(self._turns.pop(conversation_id, ()))

    @contextmanager
    def reading(self, conversation_id: str) -> Iterator[None]:
        """Around a snapshot's read of the stored transcript: its turns are kept until it is done."""
        token = next(self._sequence)
        self._reads[token] = token
        try:
            yield
        finally:
            del self._reads[token]
            self._prune(conversation_id)

    def merged(self, conversation_id: str, shown: Sequence[HistoryMessage]) -> list[HistoryMessage]:
        """`shown` (a full transcript as history shows it) with the kept turns it lacks appended, in order."""
        self._prune(conversation_id)
        messages = list(shown)
        used: set[str] = set()
        for turn in self._turns.get(conversation_id, ()):
            for role, message_id, text in (
                ("user", turn.user_message_id, turn.user_text),
                ("assistant", turn.answer_message_id, turn.answer_text),
            ):
                if not text.strip():
                    continue
                found = _find(messages, role, message_id, text, turn.stored_before, used)
                if found is not None:
                    used.add(found)
                    continue
                messages.append(HistoryMessage(message_id=message_id, role=role, text=text, ts=None))  # type: ignore[arg-type]
                used.add(message_id)
        return messages

    def _prune(self, conversation_id: str) -> None:
        turns = self._turns.get(conversation_id)
        if turns is None:
            return
        oldest_read = min(self._reads.values(), default=None)
        now = self._clock()
        kept = deque(
            turn
            for turn in turns
            if now - turn.finished_at < self._max_age
            and (turn.stored_at is None or (oldest_read is not None and oldest_read < turn.stored_at))
        )
        self._count -= len(turns) - len(kept)
        if kept:
            self._turns[conversation_id] = kept
        else:
            del self._turns[conversation_id]


def _find(
    messages: Sequence[HistoryMessage], role: str, message_id: str, text: str, after: int, used: set[str]
) -> str | None:
    """The id of the stored message that is this part of the turn, if the transcript has it."""
    for message in messages:
        if message.message_id in used or message.role != role:
            continue
        if message.message_id == message_id:
            return message.message_id
        if message.text == text and _number(message.message_id) > after:
            return message.message_id
    return None


def _number(message_id: str) -> int:
    try:
        return int(message_id[1:])
    except ValueError:
        return -1
