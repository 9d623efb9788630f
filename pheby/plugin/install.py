"""`pheby hermes install-plugin`: put the companion plugin into a Hermes home and configure both sides.

It copies `hermes_plugin/pheby_bridge` to `HERMES_HOME/plugins/pheby_bridge`, and changes only
what the plugin needs in `config.yaml`: `pheby_bridge` in `plugins.enabled` (and out of
`plugins.disabled`), `clarify` in `platform_toolsets.api_server`, and the `platforms.pheby_bridge`
entry that tells the plugin where the server is. Everything else in the file is kept; a file that
already has all of it is not rewritten. The shared secret is written once (mode 0600) to
`HERMES_HOME/pheby_bridge.secret` for the plugin and to `<data dir>/hermes_plugin.secret` for the
server, and reused by every later run.
"""

import os
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import Any

import msgspec
import yaml

from pheby.settings import Settings

PLUGIN_NAME = "pheby_bridge"
PLUGIN_SOURCE = Path(__file__).resolve().parents[2] / "hermes_plugin" / PLUGIN_NAME
HERMES_SECRET_FILE = "pheby_bridge.secret"  # noqa: S105 - a file name, not a secret
SERVER_SECRET_FILE = "hermes_plugin.secret"  # noqa: S105 - a file name, not a secret
API_SERVER_TOOLSET = "hermes-api-server"
CLARIFY_TOOLSET = "clarify"
MIN_SECRET_LENGTH = 16


class InstallError(Exception):
    """The plugin could not be installed; the message names what is wrong."""


class InstallResult(msgspec.Struct, frozen=True):
    plugin_dir: str
    config_path: str
    config_changed: bool
    service_url: str


def install_plugin(home: Path, service_url: str, data_dir: Path) -> InstallResult:
    """Install or refresh the plugin in `home`; idempotent."""
    if not service_url.startswith(("http://", "https://")):
        raise InstallError(f"the server URL must start with http:// or https://: {service_url!r}")
    if not PLUGIN_SOURCE.is_dir():
        raise InstallError(f"the plugin source is missing: {PLUGIN_SOURCE}")
    config_path = home / "config.yaml"
    loaded, mode = _read_config(config_path)  # a broken config.yaml stops the install before anything changes
    home.mkdir(parents=True, exist_ok=True)
    plugin_dir = _copy_plugin(home / "plugins")
    secret = _shared_secret(home / HERMES_SECRET_FILE, data_dir / SERVER_SECRET_FILE)
    _write_secret(home / HERMES_SECRET_FILE, secret)
    _write_secret(data_dir / SERVER_SECRET_FILE, secret)
    updated = configure(loaded, service_url.rstrip("/"))
    changed = updated != loaded
    if changed:
        _atomic_write(config_path, yaml.safe_dump(updated, sort_keys=False, allow_unicode=True).encode(), mode)
    return InstallResult(
        plugin_dir=str(plugin_dir), config_path=str(config_path), config_changed=changed, service_url=service_url
    )


def server_url(settings: Settings) -> str:
    """How a plugin on this host reaches the server by default (a wildcard listen address means loopback)."""
    host = settings.host if settings.host not in ("", "0.0.0.0", "::") else "127.0.0.1"  # noqa: S104
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{settings.port}"


def read_server_secret(data_dir: Path) -> str:
    """The server's copy of the shared secret, or '' when the plugin was never installed from here."""
    try:
        secret = (data_dir / SERVER_SECRET_FILE).read_text(encoding="utf-8").strip()
    except OSError:
        return ""
    return secret if len(secret) >= MIN_SECRET_LENGTH else ""


def _copy_plugin(plugins_dir: Path) -> Path:
    plugins_dir.mkdir(parents=True, exist_ok=True)
    target = plugins_dir / PLUGIN_NAME
    staging = Path(tempfile.mkdtemp(prefix=f".{PLUGIN_NAME}-", dir=plugins_dir))
    try:
        shutil.copytree(PLUGIN_SOURCE, staging / PLUGIN_NAME, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        if target.is_symlink() or target.is_file():
            target.unlink()
        elif target.exists():
            shutil.rmtree(target)
        (staging / PLUGIN_NAME).rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _shared_secret(*paths: Path) -> str:
    for path in paths:
        try:
            value = path.read_text(encoding="utf-8").strip()
        except OSError:
            continue
        if len(value) >= MIN_SECRET_LENGTH:
            return value
    return secrets.token_urlsafe(32)


def _write_secret(path: Path, secret: str) -> None:
    try:
        if path.read_text(encoding="utf-8").strip() == secret:
            os.chmod(path, 0o600)
            return
    except OSError:
        pass
    _atomic_write(path, (secret + "\n").encode(), 0o600)


def _atomic_write(path: Path, data: bytes, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _section(parent: dict[str, Any], key: str) -> dict[str, Any]:
    value = parent.get(key)
    if not isinstance(value, dict):
        value = {}
        parent[key] = value
    return value


def configure(config: dict[str, Any], service_url: str) -> dict[str, Any]:
    """`config` with what the plugin needs added; every other key and value is left as it was."""
    result: dict[str, Any] = yaml.safe_load(yaml.safe_dump(config)) or {}  # a deep copy
    plugins = _section(result, "plugins")
    enabled = plugins.get("enabled")
    enabled = list(enabled) if isinstance(enabled, list) else []
    if PLUGIN_NAME not in enabled:
        enabled.append(PLUGIN_NAME)
    plugins["enabled"] = enabled
    disabled = plugins.get("disabled")
    if isinstance(disabled, list) and PLUGIN_NAME in disabled:
        plugins["disabled"] = [name for name in disabled if name != PLUGIN_NAME]

    toolsets = _section(result, "platform_toolsets")
    api_server = toolsets.get("api_server")
    names = list(api_server) if isinstance(api_server, list) else [API_SERVER_TOOLSET]
    if CLARIFY_TOOLSET not in names:
        names.append(CLARIFY_TOOLSET)
    toolsets["api_server"] = names

    platform = _section(_section(result, "platforms"), PLUGIN_NAME)
    platform["enabled"] = True
    extra = _section(platform, "extra")
    extra["service_url"] = service_url
    extra["secret_file"] = HERMES_SECRET_FILE
    return result


def _read_config(path: Path) -> tuple[dict[str, Any], int]:
    """The parsed config.yaml ({} when there is none yet) and the file mode to keep."""
    try:
        text = path.read_text(encoding="utf-8")
        mode = path.stat().st_mode & 0o777
    except FileNotFoundError:
        return {}, 0o600
    try:
        loaded = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        raise InstallError(f"{path} is not valid YAML; fix it first ({type(exc).__name__})") from None
    if not isinstance(loaded, dict):
        raise InstallError(f"{path} does not hold a mapping; fix it first")
    return loaded, mode
