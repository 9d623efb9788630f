"""Password hashes: scrypt (hashlib), stored as `scrypt$N$r$p$salt$hash` (base64 salt and hash).

New hashes meet OWASP ASVS 5.0 (scrypt N=2^17, r=8, p=1: 128 MiB and about half a second of one core
each); a hash made with older, cheaper parameters still verifies, and `verify` says when it should be
made again at the current cost (the next successful sign-in does). Every scrypt call sets `maxmem`
from the parameters it runs with, and parameters whose memory passes `MAX_MEMORY_BYTES` are refused:
a hash read from the database can't make the server allocate more than that.
"""

import hashlib
import hmac
import secrets
from base64 import b64decode, b64encode

import msgspec

SALT_BYTES = 16
DIGEST_BYTES = 32
MAX_MEMORY_BYTES = 256 * 2**20  # twice the current cost's: room for a later raise, no room for a forged row


class ScryptCost(msgspec.Struct, frozen=True):
    n: int
    r: int
    p: int

    @property
    def memory_bytes(self) -> int:
        """What one hash holds: scrypt's 128·r·N·p bytes of V, plus its 128·r·p bytes of B and a margin
        for OpenSSL's own accounting (it counts V as 128·r·(N+2))."""
        return 128 * self.r * self.p * (self.n + 2) + 128 * self.r * self.p + 2**16

    def at_least(self, other: "ScryptCost") -> bool:
        return self.n >= other.n and self.r >= other.r and self.p >= other.p


# OWASP ASVS 5.0, V11.4.2 (and the OWASP password storage cheat sheet): N ≥ 2^17, r = 8, p = 1.
SCRYPT_COST = ScryptCost(n=2**17, r=8, p=1)


class Verified(msgspec.Struct, frozen=True):
    """A check's outcome; `rehashed` is the password hashed at the current cost when the stored hash was
    weaker (store it in place of the old one), else None."""

    ok: bool
    rehashed: str | None = None


def hash_password(password: str, cost: ScryptCost = SCRYPT_COST) -> str:
    salt = secrets.token_bytes(SALT_BYTES)
    digest = _scrypt(password, salt, cost)
    return f"scrypt${cost.n}${cost.r}${cost.p}${b64encode(salt).decode()}${b64encode(digest).decode()}"


def check_password(password: str, encoded: str | None, cost: ScryptCost = SCRYPT_COST) -> bool:
    """Constant-time check; a missing hash still costs one scrypt at `cost`, so timing reveals nothing."""
    if not encoded:
        hash_password(password, cost)
        return False
    stored_cost, salt, digest = _decode(encoded)
    return hmac.compare_digest(_scrypt(password, salt, stored_cost), digest)


def verify(password: str, encoded: str | None, cost: ScryptCost = SCRYPT_COST) -> Verified:
    """Check `password` against `encoded`, and hash it again at `cost` if it is right and `encoded` weaker.

    Both hashes run in the caller's thread one after the other, so a caller holding one slot of a
    hashing limiter never holds two hashes' memory at once.
    """
    if not check_password(password, encoded, cost):
        return Verified(ok=False)
    if encoded and not _decode(encoded)[0].at_least(cost):
        return Verified(ok=True, rehashed=hash_password(password, cost))
    return Verified(ok=True)


def _scrypt(password: str, salt: bytes, cost: ScryptCost) -> bytes:
    if cost.memory_bytes > MAX_MEMORY_BYTES:
        raise ValueError("scrypt parameters past the memory bound")
    return hashlib.scrypt(
        password.encode(), salt=salt, n=cost.n, r=cost.r, p=cost.p, maxmem=cost.memory_bytes, dklen=DIGEST_BYTES
    )


def _decode(encoded: str) -> tuple[ScryptCost, bytes, bytes]:
    scheme, n, r, p, salt, digest = encoded.split("$")
    if scheme != "scrypt":
        raise ValueError(f"unknown password hash scheme {scheme!r}")
    return ScryptCost(n=int(n), r=int(r), p=int(p)), b64decode(salt), b64decode(digest)
