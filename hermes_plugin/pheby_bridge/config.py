"""Where the Pheby server is and the secret both sides share, as `pheby hermes install-plugin` wrote them.

config.yaml::

    platforms:
      pheby_bridge:
        enabled: true
        extra:
          service_url: http://127.0.0.1:8620   # the Pheby server, as the plugin reaches it
          secret_file: pheby_bridge.secret      # relative to HERMES_HOME; mode 0600

Nothing here raises: a missing or broken configuration leaves the plugin inert.
"""

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger("pheby_bridge")

PLATFORM = "pheby_bridge"
DEFAULT_SECRET_FILE = "pheby_bridge.secret"  # noqa: S105 - a file name, not a secret
MIN_SECRET_LENGTH = 16


@dataclass(frozen=True)
class BridgeConfig:
    service_url: str
    secret: str
    max_media_bytes: int = 64 * 1024 * 1024


def hermes_home() -> Path:
    try:
        from hermes_constants import get_hermes_home

        return Path(get_hermes_home())
    except Exception:  # noqa: BLE001 - outside a Hermes process, or an older one: no home to ask
        return Path(os.environ.get("HERMES_HOME") or Path.home() / ".hermes")


def _load_yaml(text: str) -> Any:
    """PyYAML where Hermes ships it (0.19.0), else ruamel.yaml, which a Hermes without PyYAML ships instead."""
    try:
        import yaml
    except ImportError:
        from ruamel.yaml import YAML

        return YAML(typ="safe", pure=True).load(text)
    return yaml.safe_load(text)


def _platform_extra(home: Path) -> dict[str, Any]:
    try:
        data = _load_yaml((home / "config.yaml").read_text(encoding="utf-8")) or {}
    except Exception as exc:  # noqa: BLE001 - unreadable or invalid: the plugin stays inert
        logger.warning("pheby_bridge: cannot read config.yaml (%s)", type(exc).__name__)
        return {}
    platforms = data.get("platforms") if isinstance(data, dict) else None
    entry = platforms.get(PLATFORM) if isinstance(platforms, dict) else None
    extra = entry.get("extra") if isinstance(entry, dict) else None
    return extra if isinstance(extra, dict) else {}


def load_config(extra: dict[str, Any] | None = None) -> BridgeConfig | None:
    """The bridge configuration from `extra` (default: config.yaml), or None when it is incomplete."""
    home = hermes_home()
    values: dict[str, Any] = extra if extra is not None else _platform_extra(home)
    url = str(values.get("service_url") or "").rstrip("/")
    secret_file = Path(str(values.get("secret_file") or DEFAULT_SECRET_FILE))
    if not secret_file.is_absolute():
        secret_file = home / secret_file
    try:
        secret = secret_file.read_text(encoding="utf-8").strip()
    except OSError:
        secret = ""
    if not url.startswith(("http://", "https://")) or len(secret) < MIN_SECRET_LENGTH:
        logger.warning("pheby_bridge: not configured (service_url or secret missing); the plugin stays inert")
        return None
    max_media = values.get("max_media_bytes")
    if isinstance(max_media, int) and max_media > 0:
        return BridgeConfig(service_url=url, secret=secret, max_media_bytes=max_media)
    return BridgeConfig(service_url=url, secret=secret)
