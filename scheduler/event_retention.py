"""Event log retention (`pheby.events.log.prune`): every few minutes, by age and by count per account.

Every process that runs a scheduler prunes; a second prune of the same rows removes nothing.
"""

import logging

from pheby import metrics
from pheby.services import Services

log = logging.getLogger("pheby.retention")


async def prune_events(services: Services) -> int:
    if services.event_log is None:
        return 0
    settings = services.settings
    removed = await services.event_log.prune(settings.event_retention_seconds, settings.event_retention_count)
    metrics.EVENT_LOG_ROWS.set(await services.event_log.size())
    if removed:
        log.info("pruned %d logged events", removed)
    return removed
