"""A completed run's `MEDIA:` files: pushed by the companion plugin, else copied from disk."""

import asyncio
import logging
from collections.abc import Awaitable, Callable

from pheby.runs.active import ActiveRun, AssistantTurn

log = logging.getLogger("pheby.runs")

PLUGIN_MEDIA_WAIT_SECONDS = 5.0  # how long a finished run waits for the plugin's word on its files

DeliverMedia = Callable[[AssistantTurn, list[str]], Awaitable[None]]


class MediaDelivery:
    def __init__(self, deliver_from_disk: DeliverMedia | None) -> None:
        self._deliver_from_disk = deliver_from_disk

    async def deliver(self, run: ActiveRun, paths: list[str]) -> None:
        """The files of a run's final text: the plugin pushes their bytes when it can, else they are read."""
        if paths and not (run.extras.media and await self._plugin_media_arrived(run)):
            await self.from_disk(run.turn, paths)

    async def _plugin_media_arrived(self, run: ActiveRun) -> bool:
        """Without the plugin's word in time, the files are read from disk after all."""
        try:
            await asyncio.wait_for(run.media_done.wait(), PLUGIN_MEDIA_WAIT_SECONDS)
        except TimeoutError:
            log.warning("the plugin did not deliver the MEDIA: files of run %s; reading them from disk", run.run_id)
            run.media_fallback = True
            return False
        return True

    async def from_disk(self, turn: AssistantTurn, paths: list[str]) -> None:
        if self._deliver_from_disk is None or not paths:
            return
        try:
            await self._deliver_from_disk(turn, paths)
        except Exception:
            log.exception("delivering the MEDIA: files of %s failed", turn.message_id)
