"""Job polling: new Hermes cron sessions become unsolicited turns in a conversation for their task.

Hermes 0.19.0 cannot push cron output to an API client, so the server reads each new
`cron_<jobid>_<YYYYMMDD_HHMMSS>` session (source `cron`) once it has ended, files it under the
task's conversation (created on the first output) and pushes it as `run.*`/`message.*` events.
The companion plugin pushes the same output the moment a run finishes (`pheby.plugin.pushes`);
polling stays as the fallback (PHEBY_JOB_POLLING), and each session is delivered once either way.
"""

import logging
import re
from collections import defaultdict

import hermes_client as hc
from pheby.runs.cron_delivery import file_cron_output, worth_delivering
from pheby.services import Services
from pheby.store.accounts import Account

log = logging.getLogger("pheby.jobs")

CRON_SESSION = re.compile(r"^cron_(?P<job>[0-9a-f]{12})_\d{8}_\d{6}$")
POLL_PAGE = 100


async def poll_cron_sessions(services: Services) -> int:
    """One polling pass over every Hermes the accounts use; returns how many outputs were pushed."""
    accounts = await services.accounts.list_enabled()
    by_hermes: defaultdict[str, list[Account]] = defaultdict(list)
    for account in accounts:
        by_hermes[services.hermes.url_for(account)].append(account)
    pushed = 0
    for hermes_url, users in by_hermes.items():
        try:
            pushed += await _poll_one(services, hermes_url, users)
        except hc.HermesError as exc:
            log.info("job polling skipped a Hermes: %s", exc)
    return pushed


async def _poll_one(services: Services, hermes_url: str, users: list[Account]) -> int:
    client = services.hermes.for_account(users[0])
    baseline = await services.task_owners.baseline(hermes_url)
    sessions = (await client.list_sessions(source="cron", limit=POLL_PAGE)).data
    default_owner = next((a for a in users if a.is_owner), users[0])
    pushed = 0
    for session in sorted(sessions, key=lambda s: s.started_at or 0):
        match = CRON_SESSION.match(session.id)
        if match is None or session.ended_at is None:
            continue  # not a cron run, or still running
        job_id = match.group("job")
        owner_id = await services.task_owners.owner(hermes_url, job_id)
        account = next((a for a in users if a.id == owner_id), default_owner)
        if not await services.conversations.mark_cron_session_seen(account.id, session.id):
            continue
        if (session.started_at or 0) < baseline:
            continue  # ran before the server first watched this Hermes: history, not news
        if await _deliver(services, client, account, job_id, session):
            pushed += 1
    return pushed


async def _deliver(
    services: Services, client: hc.HermesClient, account: Account, job_id: str, session: hc.Session
) -> bool:
    messages = await client.session_messages(session.id)
    replies = [
        m.content for m in messages if m.role == "assistant" and isinstance(m.content, str) and m.content.strip()
    ]
    if not replies or not worth_delivering(replies[-1]):
        return False
    name = (session.title or "").split(" · ")[0].strip() or f"Scheduled task {job_id}"
    await file_cron_output(
        services.conversations,
        services.hub,
        services.runs,
        account,
        job_id,
        session.id,
        name,
        replies[-1],
        services.push.delivered,
    )
    return True
