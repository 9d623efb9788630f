"""The garbage collector of a long-lived server process, set once its start-up is over (`pheby.server`).

Reference counting frees almost everything the server makes and drops (frames, events, requests); the
collector is there for cycles, and what it costs is its full collections, which walk every object the
process holds. At a few hundred concurrent runs those stopped the event loop for 40-120 ms, the first thing
to pass the delta latency budget (docs/performance.md). So:
- what start-up made (modules, the app, the services) is frozen out of every collection (`gc.freeze`): it
  lives as long as the process;
- the youngest generation is collected after more allocations (`THRESHOLDS`): fewer young collections, so
  fewer promotions, and full collections come less often.
"""

import gc
from typing import Final

from pheby import metrics

# (young, middle, old), against CPython's (700, 10, 10); with the freeze, `bench/capacity.py` finds the event
# loop's p99 ping at 300 / 450 streaming runs 26 / 37 ms, against 91 / 176 ms untuned (README).
THRESHOLDS: Final = (10_000, 20, 20)


def tune_after_start_up() -> None:
    """Collect what start-up left behind, freeze what is alive, and set the thresholds (once a process)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
    metrics.GC_FROZEN_OBJECTS.set(gc.get_freeze_count())
    for generation, threshold in enumerate(gc.get_threshold()):
        metrics.GC_THRESHOLD.labels(str(generation)).set(threshold)
