"""The runs the companion plugin's pushes name by Hermes's run id, and what each push does to its run.

The plugin is installed in the server's Hermes: a run of an account with a gateway of its own is none of
its business, whatever id a push names. A finished run stays findable for a while (`RECENT_RUNS`), for
pushes that come after its end (its `MEDIA:` files).
"""

from collections import OrderedDict
from typing import Final

from pheby.runs.active import ActiveRun
from pheby.runs.decision_desk import DecisionDesk
from pheby.runs.plugin_inputs import (
    PluginClarifyAsked,
    PluginClarifyExpired,
    PluginInput,
    PluginMediaDone,
    PluginToolEnded,
    PluginToolStarted,
)

RECENT_RUNS: Final = 256  # finished runs late pushes can still find


class PluginRuns:
    def __init__(self, desk: DecisionDesk) -> None:
        self._desk = desk
        self._active: dict[str, ActiveRun] = {}
        self._recent: OrderedDict[str, ActiveRun] = OrderedDict()

    def watch(self, run: ActiveRun) -> None:
        """Hermes made the run: pushes naming its id find it."""
        self._active[run.hermes_run_id] = run

    def forget(self, run: ActiveRun, *, keep: bool) -> None:
        """The run ended (`keep`: late pushes still find it) or never started."""
        if self._active.pop(run.hermes_run_id, None) is not None and keep:
            self._recent[run.hermes_run_id] = run
            while len(self._recent) > RECENT_RUNS:
                self._recent.popitem(last=False)

    def run(self, hermes_run_id: str) -> ActiveRun | None:
        """The active, or recently finished, run behind a Hermes run id, of the plugin's gateway only."""
        run = self._active.get(hermes_run_id) or self._recent.get(hermes_run_id)
        return run if run is not None and _on_servers_hermes(run) else None

    def _active_run(self, hermes_run_id: str) -> ActiveRun | None:
        run = self._active.get(hermes_run_id)
        return run if run is not None and _on_servers_hermes(run) else None

    async def push(self, push: PluginInput) -> bool:
        """Take one push of the plugin; False when it found nothing to act on (for a clarification:
        no client can be asked, so the plugin lets the run go on)."""
        match push:
            case PluginToolStarted():
                run = self._active_run(push.hermes_run_id)
                if run is None or run.merge is None:
                    return False
                run.merge.plugin_started(push.began())
            case PluginToolEnded():
                run = self._active_run(push.hermes_run_id)
                if run is None or run.merge is None:
                    return False
                run.merge.plugin_completed(push.ended())
            case PluginClarifyAsked():
                run = self._active_run(push.hermes_run_id)
                if run is None or run.message_completed or run.finished.is_set() or not run.extras.clarify:
                    return False
                await self._desk.ask_clarify(run, push.clarify_id, push.question, push.choices, by_plugin=True)
            case PluginClarifyExpired():
                run = self._active_run(push.hermes_run_id)
                if run is None:
                    return False
                self._desk.retire_clarify(run, push.clarify_id, by_plugin=True)
            case PluginMediaDone():
                run = self.run(push.hermes_run_id)
                if run is None:
                    return False
                run.media_done.set()
        return True


def _on_servers_hermes(run: ActiveRun) -> bool:
    return not run.account.hermes.url
