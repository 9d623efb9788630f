"""The suite's parallel layout holds: `--dist loadgroup` runs every test of an xdist group on one worker.

The real gateways are session fixtures of their group's worker; were groups ignored (pytest 9.2 with
pytest-xdist 3.8 drops the `@group` suffix of test ids), each worker would start gateways of its own."""

import subprocess
import sys
from pathlib import Path

GROUPED = """
import os
import pytest

@pytest.mark.xdist_group("one")
@pytest.mark.parametrize("i", range(6))
def test_grouped(i, tmp_path_factory):
    (tmp_path_factory.getbasetemp().parent.parent / f"ran-{i}").write_text(os.environ["PYTEST_XDIST_WORKER"])
"""


PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", "/dev/null"]


def test_a_group_runs_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    base = tmp_path / "base"
    base.mkdir()
    ran = subprocess.run(
        [*PYTEST, "-n", "2", "--dist", "loadgroup", "--basetemp", str(base / "tmp"), "test_grouped.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    workers = {path.read_text() for path in base.glob("ran-*")}
    assert len(list(base.glob("ran-*"))) == 6
    assert len(workers) == 1, workers
