"""The command line of ``python -m demo_hermes``: its flags, and the ``DemoHermesServer`` they describe.

Every field of ``DemoOptions`` has a flag (``--delta-delay`` for ``delta_delay``, ...); ``--replay`` is
every 0.22-era feature (``demo_hermes.newer.NEWER_FEATURES``), ``--features a,b`` any of them; without
either it is the 0.19.0 gateway. The keys default to ``DEMO_HERMES_API_KEY`` and
``DEMO_HERMES_DASHBOARD_TOKEN`` (so that they need not show in ``ps``), else to generated ones.
"""

import argparse
import dataclasses
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from demo_hermes.newer import NEWER_FEATURES, check_features
from demo_hermes.server import DemoHermesServer
from demo_hermes.state import DemoOptions

__all__ = ["API_KEY_ENV", "DASHBOARD_TOKEN_ENV", "build_parser", "server_from_args"]

API_KEY_ENV: Final = "DEMO_HERMES_API_KEY"
DASHBOARD_TOKEN_ENV: Final = "DEMO_HERMES_DASHBOARD_TOKEN"  # noqa: S105 - a variable's name, not a secret
_DEFAULTS: Final = DemoOptions()


def _seconds(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text}")
    return value


def _positive_seconds(text: str) -> float:
    value = _seconds(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be more than 0 seconds")
    return value


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"not a count: {text}")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"not a port: {text}")
    return value


def _features(text: str) -> frozenset[str]:
    try:
        return check_features(name.strip() for name in text.split(",") if name.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (known: {', '.join(sorted(NEWER_FEATURES))})") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m demo_hermes",
        description="Serve the demo Hermes on 127.0.0.1 until SIGTERM or SIGINT. Once it listens it prints one "
        'JSON line to stdout: {"ready": true, "base_url", "port", "pid", "media_dir", "features"}.',
    )
    parser.add_argument("--port", type=_port, default=0, help="the loopback port; 0 (default) is a free one")
    parser.add_argument("--api-key", help=f"the gateway's bearer key (default: ${API_KEY_ENV}, else generated)")
    parser.add_argument(
        "--dashboard-token", help=f"the dashboard's session token (default: ${DASHBOARD_TOKEN_ENV}, else generated)"
    )
    parser.add_argument("--media-dir", type=Path, help="where delivered files go (default: a temp dir removed at exit)")
    parser.set_defaults(features=frozenset())
    gateway = parser.add_mutually_exclusive_group()
    gateway.add_argument(
        "--replay",
        action="store_const",
        const=NEWER_FEATURES,
        dest="features",
        help="a 0.22-era gateway: every feature (" + ", ".join(sorted(NEWER_FEATURES)) + ")",
    )
    gateway.add_argument("--features", type=_features, help="a 0.22-era gateway with these features, comma-separated")
    parser.add_argument(
        "--approval-timeout",
        type=_positive_seconds,
        help="seconds an approval waits before it is denied (config.yaml's approvals.timeout; default 60)",
    )
    behaviour = parser.add_argument_group("behaviour (the fields of DemoOptions)")
    behaviour.add_argument(
        "--delta-delay", type=_seconds, default=_DEFAULTS.delta_delay, help="seconds between streamed text deltas"
    )
    behaviour.add_argument(
        "--keepalive-seconds",
        type=_seconds,
        default=_DEFAULTS.keepalive_seconds,
        help="silence after which a run stream gets a keepalive comment",
    )
    behaviour.add_argument(
        "--max-concurrent-runs",
        type=_count,
        default=_DEFAULTS.max_concurrent_runs,
        help="429 beyond this many active runs; 0 = unlimited",
    )
    behaviour.add_argument(
        "--cron-tick-seconds",
        type=_positive_seconds,
        default=_DEFAULTS.cron_tick_seconds,
        help="how often due jobs are looked for",
    )
    behaviour.add_argument(
        "--answer-delay",
        type=_seconds,
        default=_DEFAULTS.answer_delay,
        help="seconds an approval or clarify answer waits before its reply",
    )
    behaviour.add_argument(
        "--create-delay",
        type=_seconds,
        default=_DEFAULTS.create_delay,
        help="seconds POST /v1/runs waits before its reply (the run already runs)",
    )
    behaviour.add_argument(
        "--replay-backlog",
        type=_count,
        default=_DEFAULTS.replay_backlog,
        help="events a replaying run stream keeps",
    )
    return parser


def server_from_args(args: Sequence[str], environ: Mapping[str, str]) -> DemoHermesServer:
    """The (not yet started) server the command line asks for; ``SystemExit(2)`` for a bad one."""
    parsed = build_parser().parse_args(args)
    # Every field of DemoOptions has a flag stored under its name (``--replay`` and ``--features`` in ``features``).
    options = {field.name: getattr(parsed, field.name) for field in dataclasses.fields(DemoOptions)}
    server = DemoHermesServer(
        api_key=parsed.api_key or environ.get(API_KEY_ENV) or None,
        dashboard_token=parsed.dashboard_token or environ.get(DASHBOARD_TOKEN_ENV) or None,
        media_dir=parsed.media_dir,
        port=parsed.port,
        **options,
    )
    if parsed.approval_timeout is not None:
        server.state.config.merge({"approvals": {"timeout": parsed.approval_timeout}})
    return server
