"""Redaction of secret-looking keys in tool arguments before they leave the server."""

import re
from typing import Any

REDACTED = "[redacted]"
# Matches key names such as api_key, apiKey, X-Auth-Token, client_secret, passwd, private_key.
_SECRET_KEY = re.compile(
    r"(key|token|secret|password|passwd|passphrase|authorization|auth|cookie|credential|private|session)",
    re.IGNORECASE,
)
# Keys that contain one of the words above but are not secrets.
_HARMLESS = frozenset({"keyword", "keywords", "key_count", "monkey", "author", "authors", "session_id"})


def is_secret_key(key: str) -> bool:
    return key.lower() not in _HARMLESS and _SECRET_KEY.search(key) is not None


def redact(value: Any) -> Any:
    """Copy `value` with every value under a secret-looking key replaced, at any nesting."""
    if isinstance(value, dict):
        return {k: REDACTED if isinstance(k, str) and is_secret_key(k) else redact(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    return value
