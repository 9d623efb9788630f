"""Crash safety: a SIGKILL loses no acknowledged write, and what it cuts off leaves nothing behind.

The `live` test runs `tests/crash_safety.py`, what `bench/crash.py` runs for 15 rounds, for 3 rounds of a
small load: `pheby serve` in a subprocess is killed under uploads, artifact edits and conversations being
created, restarted on the same data dir, and every acknowledged write must be there byte for byte, with
no temp file of the killed puts left once the start-up sweep has run. What it asserts does not depend
on timing: whatever a kill cuts off, nothing acknowledged may be missing.

The other tests are the narrow form of the last point: a process killed in the middle of a blob put
leaves its temp file in `blobs/.tmp`; the next server's start-up sweep must remove it, however fresh
(the put held a lock on it, which died with the process); while the put is alive, no sweep may take
its file, however old.
"""

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from litestar.testing import AsyncTestClient

from handlers.support.app import create_app
from pheby.settings import Settings
from storage import LocalDiskStore
from tests.conftest import StartUpSweep
from tests.crash_safety import REPO_ROOT, TEMP_DIR, CrashConfig, KiB, MiB, run_crash_rounds

pytestmark = pytest.mark.anyio

SMALL_LOAD = CrashConfig(
    rounds=3,
    seed=20261202,
    hope_uploaders=1,
    pheby_uploaders=1,
    trickle_uploaders=1,
    artifact_chains=2,
    conversation_creators=1,
    hope_max_bytes=256 * KiB,
    pheby_max_bytes=2 * MiB,
    artifact_max_chars=4 * KiB,
    kill_after=(0.3, 0.8),
)


@pytest.mark.live
@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
async def test_a_sigkill_under_load_loses_no_acknowledged_write_and_leaves_no_temp_file(
    tmp_path: Path, engine: str, request: pytest.FixtureRequest
) -> None:
    """On PostgreSQL the server is killed as on SQLite (PostgreSQL itself stays up), and its restart takes the
    database's server lease at once: the killed holder's pid is gone."""
    database_url: str = request.getfixturevalue("postgres_url") if engine == "postgresql" else ""
    result = await run_crash_rounds(SMALL_LOAD, tmp_path, database_url=database_url)
    report = "\n".join(result.report())
    assert result.rounds == SMALL_LOAD.rounds, report
    assert result.lost == [], report
    assert result.corrupt == [], report
    assert result.restart_failures == [], report
    assert result.leftover_temp_files == set(), report
    assert result.sweep_not_seen == 0, report


# A put that has written 2 MiB (two of the store's 1 MiB batches) and waits for bytes that never come.
KILLED_PUT = """
import asyncio, sys
from pathlib import Path
from storage import LocalDiskStore

async def body():
    yield b"x" * (2 * 1024 * 1024)
    await asyncio.Event().wait()

asyncio.run(LocalDiskStore(Path(sys.argv[1])).put("attachments/a/b", body(), max_size=1 << 30))
"""


@contextlib.contextmanager
def put_in_another_process(blobs: Path) -> Iterator[str]:
    """A put in a child process, in flight: its temp file's name once it holds 2 MiB. The child is
    killed (SIGKILL, by PID) at the end, as a crash would end it."""
    child = subprocess.Popen([sys.executable, "-c", KILLED_PUT, str(blobs)], cwd=REPO_ROOT)
    written: list[Path] = []
    try:
        deadline = time.monotonic() + 30
        while not written and time.monotonic() < deadline and child.poll() is None:
            time.sleep(0.02)
            written = [p for p in (blobs / ".tmp").glob("*") if p.stat().st_size >= 2 * MiB]
        assert child.poll() is None, "the put ended before it was killed"
        assert written, "the put wrote nothing within 30 s"
        yield written[0].name
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)


async def test_the_start_up_sweep_removes_the_temp_file_of_a_put_killed_in_flight(
    make_settings: Callable[..., Settings], start_up_sweep: StartUpSweep
) -> None:
    settings = make_settings()
    with put_in_another_process(settings.data_dir / "blobs") as temp:
        pass
    assert os.listdir(settings.data_dir / TEMP_DIR) == [temp]
    async with AsyncTestClient(create_app(settings)):
        await start_up_sweep()
        assert os.listdir(settings.data_dir / TEMP_DIR) == []


async def test_a_sweep_leaves_a_put_in_flight_in_another_process_however_old_its_file(tmp_path: Path) -> None:
    store = LocalDiskStore(tmp_path / "blobs")
    with put_in_another_process(store.root) as temp:
        then = time.time() - 2 * 3600
        os.utime(store.root / ".tmp" / temp, (then, then))
        assert await store.sweep_temporary(time.time()) == 0  # the put holds its file's lock
        assert os.listdir(store.root / ".tmp") == [temp]
    assert await store.sweep_temporary(time.time() - 3600) == 1  # killed: nothing holds it now
    assert os.listdir(store.root / ".tmp") == []
