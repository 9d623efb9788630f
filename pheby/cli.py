"""The `pheby` console command: `serve`, `account create|token|disable|hermes` and `hermes install-plugin`."""

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import msgspec

from pheby.accounts import Accounts, HermesAccountSettings
from pheby.db import Database
from pheby.errors import PhebyError
from pheby.settings import Settings, SettingsError, load_settings


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pheby", description="Pheby server")
    parser.add_argument("--data-dir", type=Path, default=None, help="data directory (env PHEBY_DATA_DIR)")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the server (one uvicorn worker)")
    serve.add_argument("--host", default=None, help="listen address (env PHEBY_HOST, default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help="listen port (env PHEBY_PORT, default 8620)")
    serve.add_argument("--data-dir", dest="serve_data_dir", type=Path, default=None, help="data directory")
    serve.add_argument("--log-format", choices=["text", "json"], default=None, help="env PHEBY_LOG_FORMAT")
    serve.add_argument("--workers", type=int, default=1, help="must be 1: one process holds every WebSocket")

    account = commands.add_parser("account", help="manage accounts").add_subparsers(dest="action", required=True)
    create = account.add_parser("create", help="create an account; prints JSON {id, name}")
    create.add_argument("name")
    create.add_argument("--password-stdin", action="store_true", help="read the password from standard input")
    token = account.add_parser("token", help="issue a new bearer token; prints JSON {token}")
    token.add_argument("name")
    disable = account.add_parser("disable", help="disable an account (its tokens stop working)")
    disable.add_argument("name")
    own = account.add_parser(
        "hermes",
        help="give an account its own Hermes (no options: back to the server's); prints JSON without secrets",
        description="Secrets are read from standard input, one line each, in the order of the flags asking.",
    )
    own.add_argument("name")
    own.add_argument("--url", default=None, help="the account's own gateway (then none of the server's credentials)")
    own.add_argument("--home", default=None, help="the account's Hermes home, for memory controls")
    own.add_argument("--dashboard-url", default=None, help="the account's Hermes dashboard")
    own.add_argument(
        "--media-root",
        dest="media_roots",
        action="append",
        default=[],
        type=os.path.abspath,
        metavar="DIR",
        help="a directory of this server's disk the account's MEDIA: files may be copied from (repeatable; "
        "not with --url)",
    )
    own.add_argument("--api-key-stdin", action="store_true", help="read the account's API key from stdin")
    own.add_argument("--dashboard-token-stdin", action="store_true", help="then read its dashboard token")

    hermes = commands.add_parser("hermes", help="the companion Hermes plugin")
    plugin = hermes.add_subparsers(dest="action", required=True)
    install = plugin.add_parser("install-plugin", help="install or refresh the plugin in a Hermes home; prints JSON")
    install.add_argument("--home", type=Path, required=True, help="the gateway's HERMES_HOME")
    install.add_argument(
        "--server-url", default=None, help="how the plugin reaches this server (default: http://PHEBY_HOST:PHEBY_PORT)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    data_dir = getattr(args, "serve_data_dir", None) or args.data_dir
    try:
        if args.command == "serve":
            if args.workers != 1:
                print(
                    "pheby serve: exactly one worker is supported: the WebSockets, run streams and "
                    "scheduler live in one process",
                    file=sys.stderr,
                )
                return 2
            return _serve(args, data_dir)
        settings = load_settings(data_dir=data_dir)
        if args.command == "hermes":
            return _install_plugin(settings, args)
        result = asyncio.run(_account_command(settings, args))
    except SettingsError as exc:
        print(f"pheby: {exc}", file=sys.stderr)
        return 2
    except PhebyError as exc:
        print(f"pheby: {exc.message}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


def _serve(args: argparse.Namespace, data_dir: Path | None) -> int:
    """`pheby serve`: settings, start-up checks (refusals are one line on stderr), then uvicorn."""
    try:
        settings = load_settings(host=args.host, port=args.port, data_dir=data_dir, log_format=args.log_format)
    except OSError as exc:  # writing the generated secret into the data dir
        reason = exc.strerror or type(exc).__name__
        print(f"pheby serve: PHEBY_DATA_DIR: cannot write {exc.filename or data_dir} ({reason})", file=sys.stderr)
        return 2
    from pheby.server import configure_logging, serve  # keeps account commands light
    from pheby.startup_checks import StartupRefused, run_startup_checks

    configure_logging(settings.log_format)
    try:
        asyncio.run(run_startup_checks(settings))
    except StartupRefused as exc:
        print(f"pheby serve: {exc}", file=sys.stderr)
        return 2
    return 0 if serve(settings) else 3


def _install_plugin(settings: Settings, args: argparse.Namespace) -> int:
    """`pheby hermes install-plugin`: the plugin into HERMES_HOME, the shared secret to both sides."""
    from pheby.plugin_install import InstallError, install_plugin, server_url

    try:
        result = install_plugin(args.home, args.server_url or server_url(settings), settings.data_dir)
    except (InstallError, OSError) as exc:
        print(f"pheby hermes install-plugin: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(msgspec.to_builtins(result)))
    return 0


async def _account_command(settings: Settings, args: argparse.Namespace) -> dict[str, object]:
    db = Database(settings.database_path)
    await db.open()
    try:
        accounts = Accounts(db)
        await accounts.ensure_owner()
        if args.action == "create":
            password = sys.stdin.readline().rstrip("\r\n") if args.password_stdin else None
            account = await accounts.create(args.name, password or None)
            return {"id": account.id, "name": account.name}
        if args.action == "token":
            account = await accounts.get_by_name(args.name)
            issued = await accounts.issue_token(account.id, "api", None)
            return {"token": issued.token}
        if args.action == "hermes":
            return await _set_hermes(accounts, args)
        account = await accounts.set_disabled(args.name, True)
        return {"id": account.id, "name": account.name, "disabled": True}
    finally:
        await db.close()


async def _set_hermes(accounts: Accounts, args: argparse.Namespace) -> dict[str, object]:
    api_key = sys.stdin.readline().strip() if args.api_key_stdin else ""
    dashboard_token = sys.stdin.readline().strip() if args.dashboard_token_stdin else ""
    hermes = HermesAccountSettings(
        url=args.url or None,
        api_key=api_key or None,
        home=args.home or None,
        dashboard_url=args.dashboard_url or None,
        dashboard_token=dashboard_token or None,
        media_roots=tuple(args.media_roots),
    )
    await accounts.set_hermes(args.name, hermes)
    account = await accounts.get_by_name(args.name)
    own = account.hermes
    shown = {"url": own.url, "home": own.home, "dashboard_url": own.dashboard_url, "media_roots": list(own.media_roots)}
    secrets = {"api_key": own.api_key is not None, "dashboard_token": own.dashboard_token is not None}
    return {"id": account.id, "name": account.name, "hermes": shown | secrets}


if __name__ == "__main__":
    raise SystemExit(main())
