"""Attachment retention: the hourly sweep that deletes expired bytes and tombstones their rows."""

import logging

from pheby.services import Services

log = logging.getLogger("pheby.retention")


async def expire_attachments(services: Services) -> int:
    expired = await services.attachments.expire()
    if expired:
        log.info("expired %d attachments", expired)
    return expired
