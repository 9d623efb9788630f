"""Everything one demo Hermes holds in memory, and how a route handler reaches it."""

import asyncio
import functools
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from litestar import Request

from demo_hermes.config import DemoConfig
from demo_hermes.jobs import JobStore
from demo_hermes.newer import check_features, requested_settings
from demo_hermes.replay import DEFAULT_BACKLOG_LIMIT, ReplayRun
from demo_hermes.runs import Run, RunRegistry
from demo_hermes.sessions import SessionStore
from demo_hermes.turn import Holds, TurnSettings

__all__ = ["DemoOptions", "DemoState", "demo_state"]


@dataclass(frozen=True, kw_only=True)
class DemoOptions:
    """How a demo Hermes behaves, apart from its keys and media dir: the one list of its options."""

    delta_delay: float = 0.01  # seconds between streamed text deltas (``/demo slow`` always uses 50 ms)
    keepalive_seconds: float = 30.0  # silence after which a run stream gets a ``: keepalive`` comment
    max_concurrent_runs: int = 0  # 429 beyond this many active runs; 0 = unlimited, as in Hermes's config
    cron_tick_seconds: float = 1.0  # how often due jobs are looked for (Hermes ticks every 60 s)
    # Seconds ``POST …/approval`` and ``…/clarify`` wait after handing the answer to the agent before
    # replying, as a busy gateway may: the run's next events reach the stream first.
    answer_delay: float = 0.0
    # Seconds ``POST /v1/runs`` takes to answer once it has made the run (the agent already runs), as a
    # busy gateway may: for what happens to a run whose id the server doesn't know yet.
    create_delay: float = 0.0
    # The 0.22-era features it has (``demo_hermes.newer``: any of run_replay, run_steer, model_options,
    # runs_idempotency);
    # none = 0.19.0. Any iterable of names is taken; an unknown one is a ``ValueError``.
    features: frozenset[str] = frozenset()
    replay_backlog: int = DEFAULT_BACKLOG_LIMIT  # events a replaying run stream keeps

    def __post_init__(self) -> None:
        object.__setattr__(self, "features", check_features(self.features))


@dataclass
class DemoState:
    api_key: str
    dashboard_token: str
    media_dir: Path
    options: DemoOptions = field(default_factory=DemoOptions)
    sessions: SessionStore = field(default_factory=SessionStore)
    runs: RunRegistry = field(default_factory=RunRegistry)
    jobs: JobStore = field(default_factory=JobStore)
    config: DemoConfig = field(default_factory=DemoConfig)
    running_jobs: set[str] = field(default_factory=set)
    tasks: "set[asyncio.Task[None]]" = field(default_factory=set)
    holds: Holds = field(default_factory=Holds)  # where held streams wait for a test's cue

    def __post_init__(self) -> None:
        if "run_replay" in self.features:
            self.runs = RunRegistry(functools.partial(ReplayRun, backlog_limit=self.options.replay_backlog))

    def turn_settings(self, run: Run | None = None) -> TurnSettings:
        """A snapshot of the configuration, taken when a run or job starts (like Hermes's per-run reload);
        a run's own requested model, provider and effort win where the gateway has ``model_options``."""
        settings = TurnSettings(
            model=self.config.model,
            provider=self.config.provider,
            reasoning_effort=self.config.reasoning_effort,
            approval_timeout=self.config.approval_timeout,
            media_dir=self.media_dir,
            delta_delay=self.options.delta_delay,
        )
        return settings if run is None else requested_settings(settings, run, self.features)

    @property
    def features(self) -> frozenset[str]:
        return self.options.features

    def spawn(self, work: Coroutine[Any, Any, None]) -> "asyncio.Task[None]":
        """Run background work, holding a reference so it is neither collected nor forgotten at shutdown."""
        task = asyncio.get_running_loop().create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def cancel_tasks(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


def demo_state(request: Request[Any, Any, Any]) -> DemoState:
    state = request.app.state.demo
    if not isinstance(state, DemoState):
        raise TypeError("the demo Hermes app was built without its state")
    return state
