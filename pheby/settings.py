"""Server settings: one frozen Struct built from the environment and command-line flags.

A bad value stops the server with one line naming the variable (`SettingsError`).
"""

import ipaddress
import os
import re
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from pheby.db import Database, open_database
from pheby.plugin.extras import EXTRAS, OFF_BY_DEFAULT, env_name, setting_name

StorageKind = Literal["local", "s3"]
MiB = 1024 * 1024
DEFAULT_DATA_DIR = Path(".local")


class Settings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Everything the server reads from its environment. Field docs name the variable."""

    host: str = "127.0.0.1"
    port: Annotated[int, msgspec.Meta(ge=0, le=65535)] = 8620
    data_dir: Path = DEFAULT_DATA_DIR
    # PHEBY_DATABASE_URL: postgresql://… to keep the metadata in PostgreSQL; empty: SQLite in the data dir.
    database_url: Annotated[str, msgspec.Meta(pattern=r"^(postgres(ql)?://.*)?$")] = ""
    # PHEBY_REDIS_URL: redis://… (or rediss://…) to share each account's events with the deployment's other
    # processes (`pheby.cluster`); needs PostgreSQL. PHEBY_REDIS_PREFIX: its keys' and channels' prefix.
    redis_url: Annotated[str, msgspec.Meta(pattern=r"^(rediss?://.*)?$")] = ""
    redis_prefix: Annotated[str, msgspec.Meta(max_length=64)] = "pheby:"
    # PHEBY_EVENT_RETENTION_SECONDS / PHEBY_EVENT_RETENTION_COUNT: how long, and how many per account, the
    # event log keeps; a client further behind gets a full snapshot.
    event_retention_seconds: Annotated[int, msgspec.Meta(ge=60)] = 24 * 3600
    event_retention_count: Annotated[int, msgspec.Meta(ge=100)] = 10_000
    # PHEBY_RUN_LEASE_SECONDS: how long a process owns a run without renewing it; past it, another process (or
    # the next one) takes the run over. It renews every third of it.
    run_lease_seconds: Annotated[float, msgspec.Meta(ge=3, le=300)] = 15.0
    # PHEBY_SECRET: authenticates the owner account. Filled in by `resolve_secret` when unset.
    secret: Annotated[str, msgspec.Meta(min_length=16)]
    # HERMES_URL / HERMES_API_KEY: the gateway's API server. Empty URL means "start the demo Hermes".
    hermes_url: str = ""
    hermes_api_key: str = ""
    hermes_home: Path | None = None
    hermes_dashboard_url: str = ""
    hermes_dashboard_token: str = ""
    # PHEBY_STORAGE: where attachment bytes live.
    storage: StorageKind = "local"
    s3_bucket: str = ""
    s3_prefix: str = ""
    s3_endpoint_url: str = ""
    attachment_retention_days: Annotated[int, msgspec.Meta(ge=0)] = 7
    job_poll_seconds: Annotated[float, msgspec.Meta(gt=0)] = 30.0
    # PHEBY_MEDIA_ROOTS: os.pathsep-separated roots that MEDIA: deliverables may be copied from.
    media_roots: tuple[Path, ...] = ()
    # PHEBY_AGENT_MEDIA_DIR: where uploads are written for the agent to read (default: data dir).
    agent_media_dir: Path | None = None
    # PHEBY_ALLOWED_ORIGINS: comma-separated origins allowed for cookie-authenticated mutations.
    # Empty means "the server's own origin only".
    allowed_origins: tuple[str, ...] = ()
    # PHEBY_TRUSTED_PROXIES: comma-separated addresses or networks (CIDR) whose X-Forwarded-For and
    # X-Forwarded-Proto are believed.
    trusted_proxies: tuple[str, ...] = ()
    # PHEBY_PUBLIC_URL: the origin clients use (e.g. https://pheby.example.com): the server's own origin
    # for the Origin rule, and https there makes the login cookie Secure. Empty: taken from each request.
    public_url: str = ""
    session_ttl_seconds: Annotated[int, msgspec.Meta(gt=0)] = 7 * 24 * 3600
    # PHEBY_REQUIRE_SECOND_FACTOR: a password alone never signs in (TOTP is asked too); passkeys and OIDC
    # are unaffected.
    require_second_factor: bool = False
    # OpenID Connect sign-in (`pheby.signin.oidc`): the provider's issuer URL and this server's client.
    oidc_issuer: str = ""
    oidc_client_id: str = ""
    oidc_client_secret: str = ""
    # PHEBY_OIDC_ALLOWED_CLAIMS: comma-separated `claim=value` pairs, one of which an identity must carry
    # (e.g. `groups=pheby,email_domain=example.com`); empty: any identity the provider vouches for.
    oidc_allowed_claims: tuple[str, ...] = ()
    # PHEBY_OIDC_CREATE_ACCOUNTS: an unlinked identity gets an account of its own at first sign-in.
    oidc_create_accounts: bool = False
    # PHEBY_OIDC_NAME: the provider's name on the "Sign in with …" button.
    oidc_name: str = "single sign-on"
    log_format: Literal["text", "json"] = "text"
    # PHEBY_WS_HELLO_TIMEOUT: seconds a new WebSocket has to say hello.
    ws_hello_timeout: Annotated[float, msgspec.Meta(gt=0)] = 10.0
    # PHEBY_WS_SEND_QUEUE_BYTES: bytes one WebSocket may owe its client before it is closed (1013).
    ws_send_queue_bytes: Annotated[int, msgspec.Meta(gt=0)] = 8 * MiB
    # PHEBY_WS_MAX_CONNECTIONS: WebSockets the server holds in all (with or without hello); more are refused.
    ws_max_connections: Annotated[int, msgspec.Meta(gt=0)] = 10_000
    # PHEBY_WS_PRE_HELLO_BYTES: what all WebSockets that have not said hello may have sent, together;
    # the socket that would pass it is refused (1013).
    ws_pre_hello_bytes: Annotated[int, msgspec.Meta(ge=64 * 1024)] = 16 * MiB
    # PHEBY_WS_DELTA_WINDOW_MS: at most one `message.delta` per run per this many ms (0: every delta).
    ws_delta_window_ms: Annotated[int, msgspec.Meta(ge=0, le=10_000)] = 100
    # PHEBY_WS_APPEND_WINDOW_MS: the same for connections that asked for append deltas (`delta_append`).
    ws_append_window_ms: Annotated[int, msgspec.Meta(ge=0, le=10_000)] = 0
    # PHEBY_WS_COMPRESSION: accept permessage-deflate from clients that offer it.
    ws_compression: bool = True
    # PHEBY_BODY_IDLE_TIMEOUT: seconds a request body may stall (no bytes at all) before a 408.
    body_idle_timeout: Annotated[float, msgspec.Meta(gt=0)] = 60.0
    # Attachment limits. Pheby uploads and agent deliverables are bounded per file and by retention;
    # Hope uploads also count against per-account and global quotas.
    attachment_max_bytes: Annotated[int, msgspec.Meta(gt=0)] = 64 * MiB
    # PHEBY_ATTACHMENT_ACCOUNT_QUOTA_BYTES: the live Pheby uploads one account may hold in all.
    attachment_account_quota_bytes: Annotated[int, msgspec.Meta(gt=0)] = 1024 * MiB
    hope_upload_max_bytes: Annotated[int, msgspec.Meta(gt=0)] = 8 * MiB
    hope_account_quota_bytes: Annotated[int, msgspec.Meta(gt=0)] = 64 * MiB
    hope_global_quota_bytes: Annotated[int, msgspec.Meta(gt=0)] = 512 * MiB
    # Artifact limits (PHEBY_ARTIFACT_*): a refused write is a 413, never trimmed history.
    artifact_content_max_bytes: Annotated[int, msgspec.Meta(gt=0)] = 512 * 1024
    artifacts_per_account: Annotated[int, msgspec.Meta(gt=0)] = 200
    artifact_versions_max: Annotated[int, msgspec.Meta(gt=0)] = 100
    artifact_account_bytes: Annotated[int, msgspec.Meta(gt=0)] = 32 * MiB
    artifact_global_bytes: Annotated[int, msgspec.Meta(gt=0)] = 256 * MiB
    # PHEBY_VISION_MODELS: comma-separated model names that accept images (qualifies `image`).
    vision_models: tuple[str, ...] = ()
    # PHEBY_JOB_POLLING: poll Hermes for cron output (the fallback when the companion plugin does not push it).
    job_polling: bool = True
    # The companion Hermes plugin (hermes_plugin/pheby_bridge, `pheby hermes install-plugin`).
    # PHEBY_PLUGIN_SECRET: the secret shared with it; default: what the installer wrote to the data dir.
    plugin_secret: str = ""
    # PHEBY_PLUGIN_PLATFORM: the plugin's platform name in Hermes's `/api/platforms/<name>/events`.
    plugin_platform: Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9_]+$")] = "pheby_bridge"
    # PHEBY_PLUGIN_PEERS: comma-separated addresses besides loopback that may push plugin events.
    plugin_peers: tuple[str, ...] = ()
    # The extras switched on, one boolean variable each (`pheby.plugin.extras`): PHEBY_PLUGIN_TOOL_EVENTS=false,
    # ... switches one off once Hermes offers it natively; PHEBY_PLUGIN_HISTORY (off by default) splices the
    # session's stored history, tool calls included, into model requests.
    plugin_extras: frozenset[str] = frozenset(EXTRAS) - OFF_BY_DEFAULT
    # PHEBY_PLUGIN_CLARIFY_TIMEOUT: seconds a clarify question waits for an answer before it expires.
    plugin_clarify_timeout: Annotated[float, msgspec.Meta(gt=0, le=86400)] = 120.0
    # PHEBY_PLUGIN_HANDSHAKE_SECONDS: how often the server checks that the plugin is there (and Hermes restarted).
    plugin_handshake_seconds: Annotated[float, msgspec.Meta(gt=0)] = 30.0
    # Web Push (`pheby.push`). PHEBY_VAPID_PRIVATE_KEY: the server's VAPID key (PEM, or the base64url
    # 32-byte scalar); default: generated into the data dir (0600) at first start.
    vapid_private_key: str = ""
    # PHEBY_VAPID_SUBJECT: the contact a push service may write to about this server (mailto: or https:);
    # default: PHEBY_PUBLIC_URL when it is https (`pheby.push.vapid.subject_of`).
    vapid_subject: Annotated[str, msgspec.Meta(pattern=r"^(mailto:[^\s@]+@[^\s@]+|https://\S+)?$")] = ""
    # PHEBY_PUSH_ALLOW_HOSTS: comma-separated push service hosts (names or addresses) let through the
    # internal-address refusal, `http` included: a test's or a private push service.
    push_allow_hosts: tuple[str, ...] = ()
    # PHEBY_PUSH_RUN_SECONDS: a run this long or longer pushes `run_finished` when it ends.
    push_run_seconds: Annotated[float, msgspec.Meta(ge=0)] = 30.0
    # PHEBY_PUSH_PREVIEW: `text` shows what the agent asks or says; `none` sends no conversation text.
    push_preview: Literal["text", "none"] = "text"
    # PHEBY_PUSH_DECISION_SECONDS: how long a pushed decision's notification and answer tokens live (≤ 15 min).
    push_decision_seconds: Annotated[float, msgspec.Meta(gt=0, le=900)] = 900.0
    # PHEBY_METRICS_TOKEN: the bearer token `/metrics` (Prometheus) asks for; unset, the route is not served.
    metrics_token: Annotated[str, msgspec.Meta(pattern=r"^(|\S{16,})$")] = ""
    # PHEBY_PUSH_TIMEOUT_SECONDS: one send to a push service, connect to answer.
    push_timeout_seconds: Annotated[float, msgspec.Meta(gt=0, le=60)] = 10.0

    @property
    def database_path(self) -> Path:
        """The SQLite metadata database inside the data dir (unused when `database_url` names PostgreSQL)."""
        return self.data_dir / "pheby.sqlite3"

    def open_database(self) -> Database:
        """The database these settings name (not yet opened)."""
        return open_database(self.database_url, self.database_path)


# Field name -> environment variable. Flags use the field names.
ENV_NAMES: dict[str, str] = {
    "host": "PHEBY_HOST",
    "port": "PHEBY_PORT",
    "data_dir": "PHEBY_DATA_DIR",
    "database_url": "PHEBY_DATABASE_URL",
    "redis_url": "PHEBY_REDIS_URL",
    "redis_prefix": "PHEBY_REDIS_PREFIX",
    "event_retention_seconds": "PHEBY_EVENT_RETENTION_SECONDS",
    "event_retention_count": "PHEBY_EVENT_RETENTION_COUNT",
    "run_lease_seconds": "PHEBY_RUN_LEASE_SECONDS",
    "secret": "PHEBY_SECRET",
    "hermes_url": "HERMES_URL",
    "hermes_api_key": "HERMES_API_KEY",
    "hermes_home": "HERMES_HOME",
    "hermes_dashboard_url": "HERMES_DASHBOARD_URL",
    "hermes_dashboard_token": "HERMES_DASHBOARD_TOKEN",
    "storage": "PHEBY_STORAGE",
    "s3_bucket": "PHEBY_S3_BUCKET",
    "s3_prefix": "PHEBY_S3_PREFIX",
    "s3_endpoint_url": "PHEBY_S3_ENDPOINT_URL",
    "attachment_retention_days": "PHEBY_ATTACHMENT_RETENTION_DAYS",
    "job_poll_seconds": "PHEBY_JOB_POLL_SECONDS",
    "media_roots": "PHEBY_MEDIA_ROOTS",
    "agent_media_dir": "PHEBY_AGENT_MEDIA_DIR",
    "allowed_origins": "PHEBY_ALLOWED_ORIGINS",
    "trusted_proxies": "PHEBY_TRUSTED_PROXIES",
    "public_url": "PHEBY_PUBLIC_URL",
    "session_ttl_seconds": "PHEBY_SESSION_TTL_SECONDS",
    "require_second_factor": "PHEBY_REQUIRE_SECOND_FACTOR",
    "oidc_issuer": "PHEBY_OIDC_ISSUER",
    "oidc_client_id": "PHEBY_OIDC_CLIENT_ID",
    "oidc_client_secret": "PHEBY_OIDC_CLIENT_SECRET",
    "oidc_allowed_claims": "PHEBY_OIDC_ALLOWED_CLAIMS",
    "oidc_create_accounts": "PHEBY_OIDC_CREATE_ACCOUNTS",
    "oidc_name": "PHEBY_OIDC_NAME",
    "log_format": "PHEBY_LOG_FORMAT",
    "ws_hello_timeout": "PHEBY_WS_HELLO_TIMEOUT",
    "ws_send_queue_bytes": "PHEBY_WS_SEND_QUEUE_BYTES",
    "ws_max_connections": "PHEBY_WS_MAX_CONNECTIONS",
    "ws_pre_hello_bytes": "PHEBY_WS_PRE_HELLO_BYTES",
    "ws_delta_window_ms": "PHEBY_WS_DELTA_WINDOW_MS",
    "ws_append_window_ms": "PHEBY_WS_APPEND_WINDOW_MS",
    "ws_compression": "PHEBY_WS_COMPRESSION",
    "body_idle_timeout": "PHEBY_BODY_IDLE_TIMEOUT",
    "attachment_max_bytes": "PHEBY_ATTACHMENT_MAX_BYTES",
    "attachment_account_quota_bytes": "PHEBY_ATTACHMENT_ACCOUNT_QUOTA_BYTES",
    "hope_upload_max_bytes": "PHEBY_HOPE_UPLOAD_MAX_BYTES",
    "hope_account_quota_bytes": "PHEBY_HOPE_ACCOUNT_QUOTA_BYTES",
    "hope_global_quota_bytes": "PHEBY_HOPE_GLOBAL_QUOTA_BYTES",
    "artifact_content_max_bytes": "PHEBY_ARTIFACT_CONTENT_MAX_BYTES",
    "artifacts_per_account": "PHEBY_ARTIFACTS_PER_ACCOUNT",
    "artifact_versions_max": "PHEBY_ARTIFACT_VERSIONS_MAX",
    "artifact_account_bytes": "PHEBY_ARTIFACT_ACCOUNT_BYTES",
    "artifact_global_bytes": "PHEBY_ARTIFACT_GLOBAL_BYTES",
    "vision_models": "PHEBY_VISION_MODELS",
    "job_polling": "PHEBY_JOB_POLLING",
    "plugin_secret": "PHEBY_PLUGIN_SECRET",
    "plugin_platform": "PHEBY_PLUGIN_PLATFORM",
    "plugin_peers": "PHEBY_PLUGIN_PEERS",
    **{setting_name(extra): env_name(extra) for extra in EXTRAS},  # read into `plugin_extras`
    "plugin_clarify_timeout": "PHEBY_PLUGIN_CLARIFY_TIMEOUT",
    "plugin_handshake_seconds": "PHEBY_PLUGIN_HANDSHAKE_SECONDS",
    "vapid_private_key": "PHEBY_VAPID_PRIVATE_KEY",
    "vapid_subject": "PHEBY_VAPID_SUBJECT",
    "push_allow_hosts": "PHEBY_PUSH_ALLOW_HOSTS",
    "push_run_seconds": "PHEBY_PUSH_RUN_SECONDS",
    "push_preview": "PHEBY_PUSH_PREVIEW",
    "push_decision_seconds": "PHEBY_PUSH_DECISION_SECONDS",
    "push_timeout_seconds": "PHEBY_PUSH_TIMEOUT_SECONDS",
    "metrics_token": "PHEBY_METRICS_TOKEN",
}

_LIST_SEPARATORS: dict[str, str] = {
    "media_roots": os.pathsep,
    "allowed_origins": ",",
    "trusted_proxies": ",",
    "oidc_allowed_claims": ",",
    "vision_models": ",",
    "plugin_peers": ",",
    "push_allow_hosts": ",",
}

# Each extra's switch as a flat boolean (`plugin_history`), as the variables and flags name them.
_ExtraSwitches = msgspec.defstruct(
    "ExtraSwitches",
    [(setting_name(extra), bool, extra not in OFF_BY_DEFAULT) for extra in EXTRAS],
    kw_only=True,
    forbid_unknown_fields=True,
)
_PATH_AT = re.compile(r"at `\$\.(\w+)")
_ORIGIN = re.compile(r"https?://[^/\s?#@]+")


class SettingsError(Exception):
    """A setting is missing or invalid; the message is one line naming the variable."""


def load_settings(environ: Mapping[str, str] | None = None, **flags: Any) -> Settings:
    """Build and validate settings from `environ` (default: os.environ) and flags (which win)."""
    env = os.environ if environ is None else environ
    raw: dict[str, Any] = {}
    for field, name in ENV_NAMES.items():
        value = env.get(name)
        if value is None or value == "":
            continue
        sep = _LIST_SEPARATORS.get(field)
        raw[field] = [part.strip() for part in value.split(sep) if part.strip()] if sep else value
    raw.update({k: v for k, v in flags.items() if v is not None})
    data_dir = Path(raw.get("data_dir", DEFAULT_DATA_DIR))
    if "secret" not in raw:
        raw["secret"] = resolve_secret(data_dir)
    switches = {name: raw.pop(name) for name in _ExtraSwitches.__struct_fields__ if name in raw}
    try:
        on = msgspec.convert(switches, _ExtraSwitches, strict=False)
        raw["plugin_extras"] = [extra for extra in EXTRAS if getattr(on, setting_name(extra))]
        settings = msgspec.convert(raw, Settings, strict=False, dec_hook=_decode_path)
    except msgspec.ValidationError as exc:
        raise SettingsError(_describe(exc)) from None
    _check_consistency(settings)
    if settings.public_url:
        settings = msgspec.structs.replace(settings, public_url=_public_origin(settings.public_url))
    return settings


def resolve_secret(data_dir: Path) -> str:
    """Read the generated owner secret from the data dir, creating it (0600) on first use."""
    path = data_dir / "secret"
    try:
        return path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        pass
    data_dir.mkdir(parents=True, exist_ok=True)
    secret = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(secret + "\n")
    return secret


def _decode_path(type_: type, value: Any) -> Any:
    if type_ is Path and isinstance(value, str | Path):
        return Path(value)
    raise msgspec.ValidationError(f"Expected `{type_.__name__}`")


def _describe(exc: msgspec.ValidationError) -> str:
    message = str(exc)
    match = _PATH_AT.search(message)
    if match is None:
        return f"invalid settings: {message}"
    name = ENV_NAMES.get(match.group(1), match.group(1))
    return f"{name}: {message.split(' - at ')[0]}"


def _check_consistency(settings: Settings) -> None:
    if settings.redis_url and not settings.database_url:
        raise SettingsError("PHEBY_REDIS_URL: needs PHEBY_DATABASE_URL=postgresql://… (processes share PostgreSQL)")
    if settings.storage == "s3" and not settings.s3_bucket:
        raise SettingsError("PHEBY_S3_BUCKET: required when PHEBY_STORAGE=s3")
    for origin in settings.allowed_origins:
        if not re.fullmatch(r"https?://[^/\s]+", origin):
            raise SettingsError(f"PHEBY_ALLOWED_ORIGINS: not an origin: {origin!r}")
    for proxy in settings.trusted_proxies:
        try:
            ipaddress.ip_network(proxy, strict=False)
        except ValueError:
            raise SettingsError(f"PHEBY_TRUSTED_PROXIES: not an address or network: {proxy!r}") from None
    if settings.public_url and not _ORIGIN.fullmatch(_public_origin(settings.public_url)):
        raise SettingsError(f"PHEBY_PUBLIC_URL: not an origin (https://host[:port]): {settings.public_url!r}")
    if settings.hermes_url and not re.match(r"https?://", settings.hermes_url):
        raise SettingsError("HERMES_URL: must start with http:// or https://")
    for rule in settings.oidc_allowed_claims:
        if not re.fullmatch(r"\s*[^=\s]+\s*=\s*\S.*", rule):
            raise SettingsError(f"PHEBY_OIDC_ALLOWED_CLAIMS: not claim=value: {rule!r}")
    if settings.oidc_issuer and not _OIDC_ISSUER.match(settings.oidc_issuer):
        raise SettingsError("PHEBY_OIDC_ISSUER: must start with https:// (http:// only on loopback)")


# An identity provider over plain http is only believable on this machine (a test's, or a local one).
_OIDC_ISSUER = re.compile(r"https://[^/\s]+|http://(127\.0\.0\.1|localhost|\[::1\])(:\d+)?(/|$)")


def _public_origin(url: str) -> str:
    """`PHEBY_PUBLIC_URL` as an Origin header spells it: lower case, no trailing slash."""
    return url.strip().rstrip("/").lower()
