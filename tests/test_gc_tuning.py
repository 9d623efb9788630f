"""The garbage collector of `pheby serve` (`pheby.gc_tuning`): start-up's objects frozen out of collections and
the thresholds set, once the lifespan's start-up is over; read back from the process's own `/metrics`."""

from collections.abc import Callable
from pathlib import Path

import pytest

from pheby.gc_tuning import THRESHOLDS
from tests.demo_hermes_process import DemoHermesProcess
from tests.server_deployment import Deployment

pytestmark = [pytest.mark.anyio, pytest.mark.live]


async def test_pheby_serve_freezes_what_start_up_made_and_sets_the_thresholds(
    tmp_path: Path, make_demo_hermes_process: Callable[..., DemoHermesProcess]
) -> None:
    deployment = Deployment(tmp_path, make_demo_hermes_process())
    try:
        await deployment.start()
        assert await deployment.metric("pheby_gc_frozen_objects") > 10_000  # modules, the app, the services
        thresholds = [await deployment.metric(f'pheby_gc_threshold{{generation="{g}"}}') for g in range(3)]
        assert tuple(thresholds) == THRESHOLDS
    finally:
        await deployment.close()
