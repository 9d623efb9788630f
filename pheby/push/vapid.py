"""The server's VAPID identity (RFC 8292): one P-256 key that signs every push request.

The key is made at first start and kept in the data dir (`vapid_private_key.pem`, mode 0600, like the
owner secret), unless `PHEBY_VAPID_PRIVATE_KEY` supplies one (PEM, or the base64url 32-byte scalar).
Browsers bind a subscription to the public key they were given, so the key must outlive restarts.
"""

import base64
import os
import time
from pathlib import Path
from urllib.parse import urlsplit

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from py_vapid import Vapid02

from pheby.settings import Settings

KEY_FILE = "vapid_private_key.pem"
CLAIM_SECONDS = 12 * 3600  # a JWT's lifetime; push services accept at most 24 h
FALLBACK_SUBJECT = "mailto:pheby@localhost"
SIGNED_KEPT = 256  # push service origins whose signature is kept


class VapidKeyError(Exception):
    """PHEBY_VAPID_PRIVATE_KEY (or the key file) is not a P-256 private key."""


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def subject_of(settings: Settings) -> str:
    """`sub`: PHEBY_VAPID_SUBJECT, else the server's public https origin, else a placeholder contact."""
    if settings.vapid_subject:
        return settings.vapid_subject
    if settings.public_url.startswith("https://"):
        return settings.public_url
    return FALLBACK_SUBJECT


class VapidIdentity:
    """Signs the `Authorization` header of a push request for one push service origin."""

    def __init__(self, private_key: ec.EllipticCurvePrivateKey, subject: str) -> None:
        if not isinstance(private_key.curve, ec.SECP256R1):
            raise VapidKeyError("the VAPID key must be a P-256 key")
        self._signer = Vapid02()
        self._signer.private_key = private_key
        self.subject = subject
        point = private_key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )
        self.public_key = b64url(point)  # what browsers take as `applicationServerKey`
        self._signed: dict[str, tuple[str, float]] = {}  # audience → its header, and until when to use it

    @classmethod
    def for_settings(cls, settings: Settings) -> "VapidIdentity":
        if settings.vapid_private_key:
            key = _parse_key(settings.vapid_private_key)
        else:
            key = _load_or_create(settings.data_dir / KEY_FILE)
        return cls(key, subject_of(settings))

    def authorization(self, endpoint: str, now: float | None = None) -> str:
        """`vapid t=<JWT>, k=<public key>` for a request to `endpoint` (aud: its origin); one signature per
        push service serves until half its lifetime has passed."""
        parts = urlsplit(endpoint)
        audience = f"{parts.scheme}://{parts.netloc}"
        now = time.time() if now is None else now
        kept = self._signed.get(audience)
        if kept is not None and now < kept[1]:
            return kept[0]
        claims = {"aud": audience, "exp": int(now + CLAIM_SECONDS), "sub": self.subject}
        header: str = self._signer.sign(claims)["Authorization"]
        if len(self._signed) >= SIGNED_KEPT:
            self._signed.clear()  # push service origins are few; a flood of them just signs again
        self._signed[audience] = (header, now + CLAIM_SECONDS / 2)
        return header


def _parse_key(text: str) -> ec.EllipticCurvePrivateKey:
    text = text.strip()
    try:
        if text.startswith("-----BEGIN"):
            key = serialization.load_pem_private_key(text.encode(), password=None)
        else:
            key = ec.derive_private_key(int.from_bytes(b64url_decode(text), "big"), ec.SECP256R1())
    except (ValueError, TypeError) as exc:
        raise VapidKeyError(f"not a P-256 private key ({type(exc).__name__})") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise VapidKeyError("not an elliptic-curve private key")
    return key


def _load_or_create(path: Path) -> ec.EllipticCurvePrivateKey:
    try:
        return _parse_key(path.read_text(encoding="ascii"))
    except FileNotFoundError:
        pass
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(partial, path)  # never a half-written key, whatever stops the server
    return key
