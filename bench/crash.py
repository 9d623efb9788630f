"""Crash safety: SIGKILL the server at random moments under a write load; nothing acknowledged is lost.

Run: `.venv/bin/python bench/crash.py [--rounds N] [--seed S] [--keep]`

Each round drives a write load at `pheby serve` (local disk, SQLite, a process of its own, on loopback):
Hope and Pheby uploads (one a slow client, so a put is in flight at the kill), artifact PATCH chains
and conversations created over the WebSocket, all generated from the seed. At a moment drawn from the
seed the server gets SIGKILL; it is restarted on the same data dir, and once `/healthz` answers and its
start-up blob sweep has run, every write acknowledged so far is checked: uploads download
byte-identical, every acknowledged artifact revision is listed with its content, every conversation is
listed with its name, and no temp file the kills left in `blobs/.tmp` remains.

Prints rounds, acknowledged writes, lost, corrupt, restart failures and leftover temp files; the target
is 0 of each, and the exit code is 1 when one is missed. The seed is printed, and `--seed` reproduces a
run's load and kill moments (the server's timing, and so what exactly a kill cuts off, varies). The
logic is `tests/crash_safety.py`, which `tests/test_crash_safety.py` runs for 3 short rounds.
"""

import argparse
import secrets
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from bench.support import run_rounds
from tests.crash_safety import CrashConfig, run_crash_rounds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="kills, each followed by a restart and the checks")
    parser.add_argument("--seed", type=int, default=None, help="the load's and the kill moments' seed (default: new)")
    parser.add_argument("--keep", action="store_true", help="keep the data dir and server logs (path printed)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    seed = secrets.randbelow(2**32) if args.seed is None else args.seed
    config = CrashConfig(rounds=args.rounds, seed=seed)
    print(f"seed {seed} (again: bench/crash.py --rounds {args.rounds} --seed {seed})", flush=True)

    return run_rounds(
        "pheby-bench-crash-",
        args.keep,
        lambda work: run_crash_rounds(config, work, progress=lambda line: print(line, flush=True)),
    )


if __name__ == "__main__":
    sys.exit(main())
