"""What leaves the server scrubbed: secret-looking keys in tool arguments, and Hermes error text."""

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


# --- error text -----------------------------------------------------------------------------------

ERROR_TEXT_MAX = 300
_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S*", re.IGNORECASE)
_BEARER = re.compile(r"\b(bearer|basic)\s+\S+", re.IGNORECASE)
_ASSIGNED_SECRET = re.compile(
    r"\b(api[_-]?key|access[_-]?key|secret|token|password|passwd|authorization|x-api-key)(['\"]?\s*[:=]\s*['\"]?)[^\s'\",;}]+",
    re.IGNORECASE,
)
_KEY_PREFIXED = re.compile(r"\b(?:sk|pk|rk|ak|key|ghp|gho|xox[abp]|hf)[-_][A-Za-z0-9_\-]{4,}")
_AWS_KEY = re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{12,}\b")
_JWT = re.compile(r"\beyJ[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]+(?:\.[A-Za-z0-9_\-]+)?")
_LONG_HEX = re.compile(r"\b[0-9a-fA-F]{24,}\b")
# A long run of base64 characters with at least one digit: an opaque token, not a word.
_LONG_TOKEN = re.compile(r"(?<![\w/])(?=[A-Za-z0-9+/_\-]*\d)[A-Za-z0-9+/_\-]{32,}={0,2}")
_IP_PORT = re.compile(r"\[?\b(?:\d{1,3}\.){3}\d{1,3}\b\]?(?::\d{1,5})?|\[[0-9a-fA-F:]+\](?::\d{1,5})?")
_HOST_PORT = re.compile(r"\b(?:localhost|[a-z0-9][a-z0-9-]*(?:\.[a-z0-9-]+)*):\d{2,5}\b", re.IGNORECASE)
_HOSTNAME = re.compile(
    r"\b(?:localhost|(?:[a-z0-9][a-z0-9-]*\.){2,}[a-z]{2,24}"
    r"|[a-z0-9][a-z0-9-]*\.(?:com|net|org|io|ai|dev|app|cloud|co|internal|local|lan|corp|home|arpa))\b",
    re.IGNORECASE,
)
_WINDOWS_PATH = re.compile(r"\b[A-Za-z]:\\[^\s'\"`,;)]*")
_UNIX_PATH = re.compile(r"(?<![\w:/.<])(?:~|\.{1,2})?/[^\s'\"`,;)]+")


def sanitize_error(text: str) -> str:
    """Error text from Hermes (or a provider behind it) made fit for a client.

    Hermes quotes provider responses, base URLs, file paths on its host and sometimes key fragments;
    none of that may reach a chat client. URLs, hosts and addresses, paths and anything key-like are
    replaced by a placeholder, whitespace is collapsed and the length bounded.
    """
    return scrub(text, ERROR_TEXT_MAX)


def scrub(text: str, max_chars: int) -> str:
    """`text` with URLs, hosts and addresses, paths and anything key-like replaced by a placeholder,
    whitespace collapsed, at most `max_chars` long: text fit to leave the server (errors, push previews)."""
    text = _URL.sub("<url>", text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} <redacted>", text)
    text = _ASSIGNED_SECRET.sub(lambda m: f"{m.group(1)}{m.group(2)}<redacted>", text)
    for pattern in (_JWT, _AWS_KEY, _KEY_PREFIXED, _LONG_HEX):
        text = pattern.sub("<redacted>", text)
    text = _IP_PORT.sub("<host>", text)
    text = _HOST_PORT.sub("<host>", text)
    text = _WINDOWS_PATH.sub("<path>", text)
    text = _UNIX_PATH.sub("<path>", text)
    text = _HOSTNAME.sub("<host>", text)
    text = _LONG_TOKEN.sub("<redacted>", text)
    text = " ".join(text.split())
    if len(text) > max_chars:
        text = text[: max_chars - 1] + "…"
    return text
