"""``python -m demo_hermes``: the demo Hermes as a process of its own (flags: ``demo_hermes.cli``).

It serves on ``127.0.0.1:<port>`` until SIGTERM or SIGINT, then stops and exits 0. Once it listens it
prints one JSON line to stdout and flushes it, so that a parent can read the port::

    {"ready": true, "base_url": "http://127.0.0.1:43123", "port": 43123, "pid": 1234, "media_dir": "...",
     "features": []}

The keys are not printed: the parent passes them in. Should the server fail while running, it exits 1.
"""

import json
import os
import signal
import sys
from collections.abc import Sequence
from typing import Final

from demo_hermes.cli import server_from_args
from demo_hermes.server import DemoHermesServer

__all__ = ["main", "ready_line"]

STOP_SIGNALS: Final = frozenset({signal.SIGTERM, signal.SIGINT})
WATCH_INTERVAL: Final = 0.5  # how often, while waiting for a signal, it looks whether uvicorn still runs


def ready_line(server: DemoHermesServer) -> str:
    return json.dumps(
        {
            "ready": True,
            "base_url": server.base_url,
            "port": server.port,
            "pid": os.getpid(),
            "media_dir": str(server.media_dir.absolute()),
            "features": sorted(server.options.features),
        }
    )


def main(argv: Sequence[str] | None = None) -> int:
    # Blocked before uvicorn's thread starts, so that thread inherits the mask and the signals wait for
    # sigtimedwait here; uvicorn installs no handlers of its own outside the main thread.
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    server = server_from_args(sys.argv[1:] if argv is None else argv, os.environ)
    try:
        server.start()
    except (OSError, RuntimeError) as exc:
        print(f"demo Hermes: cannot serve: {exc}", file=sys.stderr)
        server.stop()
        return 1
    try:
        print(ready_line(server), flush=True)
        while server.running:
            if signal.sigtimedwait(STOP_SIGNALS, WATCH_INTERVAL) is not None:
                return 0
        print("demo Hermes: the server stopped on its own", file=sys.stderr)
        return 1
    finally:
        server.stop()


if __name__ == "__main__":
    raise SystemExit(main())
