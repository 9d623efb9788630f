"""Crash safety of runs: SIGKILL the server at random moments while runs, decisions and answers are under way.

Run: `.venv/bin/python bench/run_crash.py [--rounds N] [--seed S] [--gateway both|one-consumer|replay] [--keep]`

Each round, against the demo Hermes in a process of its own, several clients over a few conversations start
runs of mixed kinds (`/demo slow`, `/demo approve`, `/demo approve 1`, `/demo clarify`, plain text,
`/demo chunks ...`) and answer each approval and clarification as it arrives. At a moment drawn from the seed
`pheby serve` gets SIGKILL; it is restarted on the same data dir, the clients reconnect and answer what is
pending, and: no acknowledged answer is lost (the run's final answer says what was answered), every run
ends within 30 s of the restart, no run ends twice, an acknowledged answer sent again after the restart is
refused as not found, every final answer is one the agent can give, and the journal is empty at the end.
By default half the rounds run against the 0.19.0 gateway (one consumer per stream: a re-attached run is
followed by its status) and half against the 0.22-era one (`--replay`: the stream is reopened).

Prints runs started, decisions asked, answered and acknowledged, and the failure counts; the targets are 0
of each, and the exit code is 1 when one is missed. The seed is printed, and `--seed` reproduces a run's load
and kill moments (the server's timing, and so what exactly a kill cuts off, varies). The logic is
`tests/run_crash_safety.py`, which `tests/test_run_crash_safety.py` runs for 2 rounds.
"""

import argparse
import secrets
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from bench.support import run_rounds
from tests.run_crash_safety import GATEWAYS, RunCrashConfig, run_run_crash_rounds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="kills, each followed by a restart and the checks")
    parser.add_argument("--seed", type=int, default=None, help="the load's and the kill moments' seed (default: new)")
    parser.add_argument(
        "--gateway",
        choices=["both", *GATEWAYS],
        default="both",
        help="the demo Hermes's gateway: one-consumer (0.19.0), replay (0.22-era), or both, half the rounds each",
    )
    parser.add_argument("--keep", action="store_true", help="keep the data dirs and logs (path printed)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    seed = secrets.randbelow(2**32) if args.seed is None else args.seed
    gateways = tuple(GATEWAYS) if args.gateway == "both" else (args.gateway,)
    config = RunCrashConfig(rounds=args.rounds, seed=seed, gateways=gateways)
    again = f"bench/run_crash.py --rounds {args.rounds} --seed {seed} --gateway {args.gateway}"
    print(f"seed {seed} (again: {again})", flush=True)

    return run_rounds(
        "pheby-bench-run-crash-",
        args.keep,
        lambda work: run_run_crash_rounds(config, work, progress=lambda line: print(line, flush=True)),
    )


if __name__ == "__main__":
    sys.exit(main())
