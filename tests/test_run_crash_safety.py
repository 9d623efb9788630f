"""Crash safety of runs: a SIGKILL loses no acknowledged answer, leaves no run active and ends none twice.

The `live` test runs `tests/run_crash_safety.py`, what `bench/run_crash.py` runs for 15 rounds, for 2 short
rounds (one against each demo gateway): `pheby serve` in a subprocess is killed while runs, approvals and
clarifications are under way, restarted on the same data dir, and every acknowledged answer must show in its
run's final answer, every run must end within the bound, once, and an acknowledged answer sent again must be
refused. What it asserts does not depend on timing: whatever a kill cuts off, nothing acknowledged may be lost.
"""

from pathlib import Path

import pytest

from tests.run_crash_safety import RunCrashConfig, run_run_crash_rounds

pytestmark = [pytest.mark.anyio, pytest.mark.live]

SHORT = RunCrashConfig(rounds=2, seed=20261207, clients=2, conversations=3, kill_after=(0.8, 1.5))


async def test_a_sigkill_while_runs_and_decisions_are_under_way_loses_no_acknowledged_answer(tmp_path: Path) -> None:
    result = await run_run_crash_rounds(SHORT, tmp_path)
    report = "\n".join(result.report())
    assert result.rounds == SHORT.rounds, report
    assert result.missed_targets() == [], report
    assert len(result.runs) >= 4, report  # the load ran
