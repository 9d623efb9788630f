"""What history keeps of each turn after its run.

(Before a run, `HistoryPages.turns_before_run` has the transcript logged, so Hermes's context compression
can't hide those turns later: `pheby.hermes.history.with_logged`.) Once Hermes has stored the turn, it
is logged and the turn's files are re-anchored: during a run the user's turn is
`user-<run id>` and the answer `draft-<run id>`; history calls them `m<Hermes id>`, and a
reconnecting client must be able to put each file under its message.
"""

from collections import Counter
from collections.abc import Awaitable, Callable

import hermes_client as hc
from pheby.db import IntegrityError
from pheby.errors import NotFound
from pheby.hermes.history import turn_message_ids
from pheby.hermes.history_pages import HistoryPages
from pheby.runs.active import ActiveRun
from pheby.runs.settled import SettledTurns
from pheby.store.conversations import Conversations

# (conversation id, {message id used during the run: the history's id of that message}) → re-anchor files.
AnchorTurn = Callable[[str, dict[str, str]], Awaitable[None]]


class TurnLog:
    def __init__(
        self,
        conversations: Conversations,
        settled: SettledTurns,
        anchor_turn: AnchorTurn | None,
        transitions: Counter[str],
        history: HistoryPages,
    ) -> None:
        self._conversations = conversations
        self._history = history
        self._settled = settled
        self._anchor_turn = anchor_turn
        self._transitions = transitions

    async def after_turn(self, run: ActiveRun) -> None:
        """Once Hermes has stored the run's turn: log it, anchor its files, and tell the kept turns."""
        try:
            conversation = await self._conversations.get(run.account.id, run.conversation_id)
            # Also lets the next conversation.open, and the next run, read what is kept.
            stored, shown = await self._history.read_and_log(run.client, conversation)
        except (NotFound, hc.HermesError, IntegrityError):
            return  # deleted meanwhile, or Hermes can't say: the run's ids stay
        user_id, answer_id = turn_message_ids(stored, shown, run.stored_before, run.sent_text)
        ids = {run.user_message_id: user_id} if user_id else {}
        if answer_id and run.message_completed:
            ids[run.message_id] = answer_id
        if ids and self._anchor_turn is not None:
            await self._anchor_turn(run.conversation_id, ids)
            self._transitions[run.conversation_id] += 1
        if user_id and (answer_id or not run.draft.strip()):
            # The transcript holds the turn now: snapshots from here on read it there.
            self._settled.stored(run.conversation_id, run.run_id, user_id, answer_id)
