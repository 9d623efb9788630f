"""The hourly sweep (and one at start-up) of blobs without a live row and of what failed puts left.

A storage failure skips the sweep with one warning line; the next run picks up where it left off.
"""

import asyncio
import logging

from pheby.services import Services
from pheby.store.attachments import SweepResult
from storage import StorageError

log = logging.getLogger("pheby.retention")


async def sweep_blobs(services: Services) -> SweepResult | None:
    try:
        result = await services.attachments.sweep()
    except StorageError as exc:
        log.warning("blob sweep skipped: storage failed (%s)", type(exc).__name__)
        return None
    except asyncio.CancelledError:  # the server is stopping: the job ends here, not as a logged traceback
        log.info("blob sweep stopped by shutdown; the next one goes on")
        return None
    if result.orphans or result.temporary:
        log.info("swept %d orphaned blobs and %d leftovers of failed uploads", result.orphans, result.temporary)
    return result
