"""A cron run's output as an unsolicited turn in its task's conversation, whoever found it.

Two paths arrive here: job polling (`scheduler.job_poller`, reading finished `cron_…` sessions)
and the companion plugin, which pushes the output the moment the run finishes. Each cron session
is delivered once per account (`Conversations.mark_cron_session_seen`), so both may run.
"""

from collections.abc import Callable

from pheby.protocol.frames import ConversationUpdated
from pheby.protocol.hub import Hub
from pheby.runs import RunManager
from pheby.store.accounts import Account
from pheby.store.conversations import Conversations

SILENT = "[SILENT]"
# Told of each output filed: (account_id, conversation_id, run_id, task name, text); `pheby.push` is.
Delivered = Callable[[str, str, str, str, str], None]


def worth_delivering(text: str) -> bool:
    """Hermes suppresses a reply of exactly `[SILENT]`; so do we, and empty replies."""
    return bool(text.strip()) and text.strip() != SILENT


async def file_cron_output(
    conversations: Conversations,
    hub: Hub,
    runs: RunManager,
    account: Account,
    job_id: str,
    session_id: str,
    name: str,
    text: str,
    delivered: Delivered,
) -> None:
    """File the session under the task's conversation (created on its first output), push the turn to the
    account's clients and tell `delivered`."""
    conversation, created = await conversations.task_conversation(account.id, job_id, name)
    await conversations.add_session(conversation.id, session_id)
    await conversations.touch(conversation.id)
    if created:
        hub.broadcast(account.id, ConversationUpdated(conversation_id=conversation.id, name=conversation.name))
    run_id = await runs.push_unsolicited(account.id, conversation.id, text)
    delivered(account.id, conversation.id, run_id, conversation.name, text)
