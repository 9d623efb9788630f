"""Run the server on the embedded default: local disk, SQLite, and the demo Hermes.

    python local_dev.py [--host 127.0.0.1] [--port 8620] [--data-dir ./.local]

`PHEBY_SECRET` comes from the environment; when unset one is generated, kept in the data dir
and printed. With `HERMES_URL` unset, a demo Hermes (a scripted agent, no LLM) starts
in-process on a free loopback port.
"""

import argparse
import os
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from handlers.support.app import create_app
from pheby.cli import check_schema_of
from pheby.db import SchemaTooNew
from pheby.server import configure_logging, serve
from pheby.settings import SettingsError, load_settings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8620)
    parser.add_argument("--data-dir", type=Path, default=Path("./.local"))
    args = parser.parse_args()
    try:
        check_schema_of(args.data_dir)  # before the demo Hermes makes its media dir there
    except (SettingsError, SchemaTooNew) as exc:
        print(f"local_dev: {exc}", file=sys.stderr)
        return 2
    with ExitStack() as stack:
        overrides: dict[str, Any] = {}
        hermes_line = f"Hermes: {os.environ.get('HERMES_URL', '')}"
        if not os.environ.get("HERMES_URL"):
            from demo_hermes import DemoHermesServer  # only needed without a real Hermes

            media_dir = (args.data_dir / "demo-media").resolve()
            demo = stack.enter_context(DemoHermesServer(media_dir=media_dir))
            overrides = {
                "hermes_url": demo.base_url,
                "hermes_api_key": demo.api_key,
                "hermes_dashboard_url": demo.base_url,
                "hermes_dashboard_token": demo.dashboard_token,
                "media_roots": (media_dir,),
            }
            hermes_line = f"Hermes: demo agent, no LLM, at {demo.base_url}"
        try:
            settings = load_settings(host=args.host, port=args.port, data_dir=args.data_dir, **overrides)
        except SettingsError as exc:
            print(f"local_dev: {exc}", file=sys.stderr)
            return 2
        configure_logging(settings.log_format)
        secret_line = (
            "PHEBY_SECRET: from the environment"
            if os.environ.get("PHEBY_SECRET")
            else f"PHEBY_SECRET: {settings.secret} (generated, kept in {settings.data_dir / 'secret'})"
        )
        print(f"Pheby server on http://{settings.host}:{settings.port}  (WebSocket /ws, docs /schema)", flush=True)
        # `localhost`, not the loopback address: passkeys work on `http://localhost` only (a secure context).
        web_host = "localhost" if settings.host in ("127.0.0.1", "localhost") else settings.host
        print(f"Pheby Web: open http://{web_host}:{settings.port}/ and paste the secret", flush=True)
        print(hermes_line, flush=True)
        print(f"Storage: {settings.storage}, data dir {settings.data_dir}", flush=True)
        print(secret_line, flush=True)
        serve(settings, create_app(settings))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
