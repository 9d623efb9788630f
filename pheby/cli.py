"""The `pheby` console command: `serve`, `account create|password|token|disable|enable|revoke|list|hermes`,
the sign-in operator commands `account totp-off|passkeys-off|link-oidc`, `hermes install-plugin`, `backup`
and `restore` (`pheby.backup`), and `migrate-db` (`pheby.migrate_db`).

`serve` needs the app factory, which lives above `pheby` (`handlers.support.app.create_app`): the
console script (`pheby_main.main`) passes it in as `app_factory`.
"""

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from pheby.db import Database, SchemaTooNew, check_schema_version
from pheby.errors import BadRequest, PhebyError
from pheby.settings import DEFAULT_DATA_DIR, Settings, SettingsError, load_settings
from pheby.store.accounts import Account, Accounts, HermesAccountSettings
from pheby.store.passkeys import PasskeyStore
from pheby.store.second_factor import SecondFactors

if TYPE_CHECKING:  # importing Litestar would slow every account command
    from litestar import Litestar

DATA_DIR_HELP = "data directory (env PHEBY_DATA_DIR)"
AppFactory = Callable[[Settings], "Litestar"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pheby", description="Pheby server")
    parser.add_argument("--data-dir", type=Path, default=None, help=DATA_DIR_HELP)
    # Global options are accepted after the subcommand too: every leaf command also takes them, and
    # leaves the top-level value alone unless given (SUPPRESS), so the later one wins.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--data-dir", type=Path, default=argparse.SUPPRESS, help=DATA_DIR_HELP)
    commands = _Subcommands(parser.add_subparsers(dest="command", required=True), common)

    serve = commands.add_parser("serve", help="run the server (one uvicorn worker)")
    serve.add_argument("--host", default=None, help="listen address (env PHEBY_HOST, default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help="listen port (env PHEBY_PORT, default 8620)")
    serve.add_argument("--log-format", choices=["text", "json"], default=None, help="env PHEBY_LOG_FORMAT")
    serve.add_argument("--workers", type=int, default=1, help="must be 1: one process holds every WebSocket")

    account = _Subcommands(
        commands.add_parser("account", help="manage accounts", leaf=False).add_subparsers(dest="action", required=True),
        common,
    )
    create = account.add_parser(
        "create",
        help="create an account; prints JSON {id, name}",
        description="Accounts that use the server's Hermes share one agent: its memory, its tools and the "
        "files it can reach. The server keeps each account's conversations, attachments and artifacts apart; "
        "give an account its own gateway (`pheby account hermes NAME --url ...`) to give it an agent of its own.",
    )
    create.add_argument("name")
    create.add_argument("--password-stdin", action="store_true", help="read the password from standard input")
    password = account.add_parser(
        "password",
        help="set an account's password (a first one, or a forgotten one) and end all its sessions; "
        "prints JSON {id, name, ended_sessions}",
        description="The operator's reset: no current password is asked. The account's API tokens stay.",
    )
    password.add_argument("name")
    password.add_argument("--password-stdin", action="store_true", required=True, help="read it from stdin")
    token = account.add_parser("token", help="issue a new bearer token; prints JSON {token}")
    token.add_argument("name")
    disable = account.add_parser(
        "disable", help="disable an account: its tokens stop working, its runs are cancelled, its sockets close"
    )
    disable.add_argument("name")
    enable = account.add_parser("enable", help="enable a disabled account again (its unrevoked tokens work again)")
    enable.add_argument("name")
    revoke = account.add_parser(
        "revoke",
        help="revoke every token and session of an account: its runs are cancelled, its sockets close; "
        "prints JSON {id, name, revoked}",
    )
    revoke.add_argument("name")
    totp_off = account.add_parser(
        "totp-off",
        help="turn an account's second factor (TOTP) off, for one who lost the authenticator and the recovery "
        "codes; prints JSON {id, name, totp}",
    )
    totp_off.add_argument("name")
    passkeys_off = account.add_parser(
        "passkeys-off",
        help="remove every passkey of an account (they sign in no more); prints JSON {id, name, removed}",
    )
    passkeys_off.add_argument("name")
    account.add_parser("list", help="list the accounts as JSON (no secrets)")
    link_oidc = account.add_parser(
        "link-oidc",
        help="let an identity of the OpenID Connect provider sign in as an account; prints JSON",
        description="SUBJECT is the provider's `sub` for the person (stable, unlike an e-mail address).",
    )
    link_oidc.add_argument("name")
    link_oidc.add_argument("subject")
    link_oidc.add_argument("--issuer", default=None, help="the provider (default: PHEBY_OIDC_ISSUER)")
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

    hermes = commands.add_parser("hermes", help="the companion Hermes plugin", leaf=False)
    plugin = _Subcommands(hermes.add_subparsers(dest="action", required=True), common)
    install = plugin.add_parser("install-plugin", help="install or refresh the plugin in a Hermes home; prints JSON")
    install.add_argument("--home", type=Path, required=True, help="the gateway's HERMES_HOME")
    install.add_argument(
        "--server-url", default=None, help="how the plugin reaches this server (default: http://PHEBY_HOST:PHEBY_PORT)"
    )

    backup = commands.add_parser(
        "backup",
        help="back up the data dir into DEST (an empty or new directory), while the server runs; prints JSON",
        description="The database (SQLite's online backup), then with local storage the blobs it references, "
        "the data dir's secrets and a manifest of every file's size and SHA-256. Run it with the server's "
        "environment (PHEBY_STORAGE and its settings).",
    )
    backup.add_argument("dest", type=Path, metavar="DEST")
    restore = commands.add_parser(
        "restore",
        help="restore a backup into the data dir (which must be empty or missing); prints JSON",
        description="Checks the backup against its manifest (sizes, SHA-256, the database's integrity) and "
        "refuses a damaged one, restoring nothing. Stop the server first.",
    )
    restore.add_argument("source", type=Path, metavar="SRC")
    migrate = commands.add_parser(
        "migrate-db",
        help="copy the data dir's SQLite database, once, into an empty PostgreSQL database; prints JSON",
        description="Stop the server first. Every table is copied in one PostgreSQL transaction (all or "
        "nothing) and each one's row count checked before the commit; a target holding any rows (a second "
        "run, or a server already started on it) is refused. The data dir must be at this code's schema: "
        "start the server once on SQLite to migrate an older one. Blobs stay where they are. Then set "
        "PHEBY_DATABASE_URL to the same URL and start the server.",
    )
    migrate.add_argument(
        "--to",
        required=True,
        metavar="URL",
        help="the target, postgresql://USER@HOST/DB; give the password in ~/.pgpass or PGPASSWORD rather than "
        "in the URL (it is never printed)",
    )
    return parser


class _Subcommands:
    """Adds subcommands; each leaf command also accepts the global options (`common`)."""

    def __init__(self, group: "argparse._SubParsersAction[argparse.ArgumentParser]", common: argparse.ArgumentParser):
        self._group = group
        self._common = common

    def add_parser(self, name: str, *, leaf: bool = True, **kwargs: Any) -> argparse.ArgumentParser:
        parents = [self._common] if leaf else []
        return self._group.add_parser(name, parents=parents, **kwargs)


def main(argv: Sequence[str] | None = None, app_factory: AppFactory | None = None) -> int:
    """Run one command; `serve` needs `app_factory` (the console script passes it)."""
    args = _parser().parse_args(argv)
    data_dir = args.data_dir
    try:
        if args.command == "serve":
            if args.workers != 1:
                print(
                    "pheby serve: exactly one worker is supported: the WebSockets, run streams and "
                    "scheduler live in one process",
                    file=sys.stderr,
                )
                return 2
            if app_factory is None:
                print(
                    "pheby serve: no app to serve (run the `pheby` command, or `python -m pheby_main`)", file=sys.stderr
                )
                return 2
            return _serve(args, data_dir, app_factory)
        if args.command in ("backup", "restore"):
            return _backup_command(args, data_dir)
        if args.command == "migrate-db":
            return _migrate_db_command(args, data_dir)
        settings = load_settings(data_dir=data_dir)
        if args.command == "hermes":
            return _install_plugin(settings, args)
        result = asyncio.run(_account_command(settings, args))
    except (SettingsError, SchemaTooNew) as exc:
        print(f"pheby: {exc}", file=sys.stderr)
        return 2
    except PhebyError as exc:
        print(f"pheby: {exc.message}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


def check_schema_of(data_dir: Path | None) -> None:
    """Raise `SchemaTooNew` if a newer server migrated the data dir's database (`PHEBY_DATA_DIR` unless
    `data_dir`). Writes nothing: it runs before `load_settings`, which may write a generated secret there."""
    settings = load_settings(data_dir=data_dir, secret=_NO_SECRET)
    if not settings.database_url:  # PostgreSQL's own migration step refuses a newer schema, changing nothing
        check_schema_version(settings.database_path)


def _serve(args: argparse.Namespace, data_dir: Path | None, app_factory: AppFactory) -> int:
    """`pheby serve`: the schema's version, settings, start-up checks (refusals are one line on stderr), then
    uvicorn. A data dir a newer server migrated is refused before anything is written to it."""
    try:
        check_schema_of(data_dir)
    except SchemaTooNew as exc:
        print(f"pheby serve: {exc}", file=sys.stderr)
        return 2
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
    return 0 if serve(settings, app_factory(settings)) else 3


# A backup, a migration and the schema check read no owner secret; giving load_settings one keeps it from generating one
# into the data dir.
_NO_SECRET = "backup-needs-no-owner-secret"  # noqa: S105 - a placeholder, never used to authenticate


def _backup_command(args: argparse.Namespace, data_dir: Path | None) -> int:
    """`pheby backup DEST` and `pheby restore SRC`: refusals exit 2, failures 1, one line on stderr."""
    from pheby.backup import BackupFailed, BackupRefused, backup, restore
    from storage import StorageError

    result: msgspec.Struct
    try:
        if args.command == "backup":
            settings = load_settings(data_dir=data_dir, secret=_NO_SECRET)
            result = asyncio.run(backup(settings, args.dest))
        else:  # into the data dir as the server would find it, without loading (or generating) anything there
            target = data_dir or Path(os.environ.get("PHEBY_DATA_DIR") or DEFAULT_DATA_DIR)
            result = asyncio.run(restore(args.source, target))
    except BackupRefused as exc:
        print(f"pheby {args.command}: {exc}", file=sys.stderr)
        return 2
    except (BackupFailed, StorageError) as exc:
        print(f"pheby {args.command}: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"pheby {args.command}: {exc.filename or ''}: {exc.strerror or type(exc).__name__}", file=sys.stderr)
        return 1
    print(json.dumps(msgspec.to_builtins(result)))
    return 0


def _migrate_db_command(args: argparse.Namespace, data_dir: Path | None) -> int:
    """`pheby migrate-db --to URL`: refusals exit 2, failures 1, one line on stderr that never names the URL."""
    from pheby.migrate_db import MigrateFailed, MigrateRefused, migrate_db

    try:
        # The data dir as the server finds it; no owner secret is read, nor generated into it.
        source = load_settings(data_dir=data_dir, secret=_NO_SECRET).database_path
        result = migrate_db(source, args.to)
    except (MigrateRefused, SettingsError) as exc:
        print(f"pheby migrate-db: {exc}", file=sys.stderr)
        return 2
    except MigrateFailed as exc:
        print(f"pheby migrate-db: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(msgspec.to_builtins(result)))
    return 0


def _install_plugin(settings: Settings, args: argparse.Namespace) -> int:
    """`pheby hermes install-plugin`: the plugin into HERMES_HOME, the shared secret to both sides."""
    from pheby.plugin.install import InstallError, install_plugin, server_url

    try:
        result = install_plugin(args.home, args.server_url or server_url(settings), settings.data_dir)
    except (InstallError, OSError) as exc:
        print(f"pheby hermes install-plugin: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(msgspec.to_builtins(result)))
    return 0


async def _account_command(settings: Settings, args: argparse.Namespace) -> object:
    db = settings.open_database()
    await db.open()
    try:
        accounts = Accounts(db)
        await accounts.ensure_owner()
        if args.action == "create":
            password = sys.stdin.readline().rstrip("\r\n") if args.password_stdin else None
            account = await accounts.create(args.name, password or None)
            return {"id": account.id, "name": account.name}
        if args.action == "password":
            account = await accounts.get_by_name(args.name)
            changed = await accounts.set_password(account.id, sys.stdin.readline().rstrip("\r\n"))
            assert changed is not None  # no current password to be wrong
            return {"id": account.id, "name": account.name, "ended_sessions": len(changed.ended_sessions)}
        if args.action == "token":
            account = await accounts.get_by_name(args.name)
            issued = await accounts.issue_token(account.id, "api", None)
            return {"token": issued.token}
        if args.action == "hermes":
            return await _set_hermes(accounts, args)
        if args.action == "link-oidc":
            return await _link_oidc(settings, db, accounts, args)
        if args.action == "list":
            return [_listed(a) for a in await accounts.list_all()]
        if args.action == "passkeys-off":
            account = await accounts.get_by_name(args.name)
            return {"id": account.id, "name": account.name, "removed": await PasskeyStore(db).delete_all(account.id)}
        if args.action == "revoke":
            account, revoked = await accounts.revoke_all(args.name)
            return {"id": account.id, "name": account.name, "revoked": revoked}
        if args.action == "totp-off":
            account = await accounts.get_by_name(args.name)
            await SecondFactors(db).disable(account.id)
            return {"id": account.id, "name": account.name, "totp": False}
        account = await accounts.set_disabled(args.name, args.action == "disable")
        return {"id": account.id, "name": account.name, "disabled": account.disabled}
    finally:
        await db.close()


async def _link_oidc(settings: Settings, db: Database, accounts: Accounts, args: argparse.Namespace) -> object:
    from pheby.signin.oidc import OidcSignIn
    from pheby.store.oidc import OidcStore

    issuer = (args.issuer or settings.oidc_issuer).rstrip("/")
    if not issuer:
        raise BadRequest("No provider: set PHEBY_OIDC_ISSUER or pass --issuer")
    if not args.subject or len(args.subject) > 255:
        raise BadRequest("The subject is 1-255 characters")
    account = await OidcSignIn(settings, OidcStore(db), accounts).link(args.name, args.subject, issuer)
    return {"id": account.id, "name": account.name, "issuer": issuer, "subject": args.subject}


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
    return {"id": account.id, "name": account.name, "hermes": _shown_hermes(account.hermes)}


def _shown_hermes(own: HermesAccountSettings) -> dict[str, object]:
    """An account's own Hermes settings without its secrets (only whether each is set)."""
    return {
        "url": own.url,
        "home": own.home,
        "dashboard_url": own.dashboard_url,
        "media_roots": list(own.media_roots),
        "api_key": own.api_key is not None,
        "dashboard_token": own.dashboard_token is not None,
    }


def _listed(account: Account) -> dict[str, object]:
    """One account for `account list`: no password hash, no tokens, no Hermes keys."""
    return {
        "id": account.id,
        "name": account.name,
        "is_owner": account.is_owner,
        "disabled": account.disabled,
        "created_at": account.created_at,
        "hermes": _shown_hermes(account.hermes),
    }
