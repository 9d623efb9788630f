"""Each account's Web Push subscriptions: the browser's `PushSubscription` shape, checked and kept.

A subscription is the push service endpoint of one browser or device plus the keys messages are
encrypted to (`p256dh`, a P-256 point; `auth`, 16 bytes). The same endpoint subscribed again by the
same account updates its row and keeps its id. An account holds at most `MAX_PER_ACCOUNT`; only its
own are listed or removed. A subscription is sent to only while the credential that made it works: a
revoked or expired token (a lost phone's session), a disabled account, or, for the owner secret, a
revocation of the account's credentials since, stops its pushes.
"""

import json
import time
import uuid
from collections.abc import Callable
from typing import Annotated, Literal, get_args

import msgspec
from cryptography.hazmat.primitives.asymmetric import ec

from pheby.db import Connection, Database
from pheby.errors import BadRequest, Conflict
from pheby.push.endpoints import ENDPOINT_MAX
from pheby.push.vapid import b64url_decode

PushEvent = Literal["approval", "clarify", "run_finished", "delivery"]
PUSH_EVENTS: tuple[PushEvent, ...] = get_args(PushEvent)
MAX_PER_ACCOUNT = 20
AUTH_SECRET_BYTES = 16


class SubscriptionKeys(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    p256dh: Annotated[str, msgspec.Meta(max_length=128)]
    auth: Annotated[str, msgspec.Meta(max_length=64)]


class BrowserSubscription(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """`PushSubscription.toJSON()` as a browser gives it (`expirationTime` is accepted and ignored)."""

    endpoint: Annotated[str, msgspec.Meta(max_length=ENDPOINT_MAX)]
    keys: SubscriptionKeys
    expirationTime: float | None = None  # the browser spells it so


class Subscription(msgspec.Struct, frozen=True):
    """What a client is shown of a subscription: never its keys, and of its endpoint only the origin."""

    id: str
    endpoint_origin: str
    events: list[PushEvent]
    created_at: float


class StoredSubscription(msgspec.Struct, frozen=True):
    """A subscription with what sending to it needs."""

    id: str
    account_id: str
    endpoint: str
    p256dh: bytes
    auth: bytes
    events: frozenset[str]


def check_keys(keys: SubscriptionKeys) -> tuple[bytes, bytes]:
    """The decoded keys, or `BadRequest`: p256dh must be a point on P-256, auth 16 bytes."""
    try:
        p256dh, auth = b64url_decode(keys.p256dh), b64url_decode(keys.auth)
    except ValueError:
        raise BadRequest("keys must be base64url") from None
    try:
        ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), p256dh)
    except ValueError:
        raise BadRequest("keys.p256dh is not a P-256 public key") from None
    if len(p256dh) != 65:  # uncompressed: what RFC 8291 sends the key as
        raise BadRequest("keys.p256dh must be an uncompressed P-256 point")
    if len(auth) != AUTH_SECRET_BYTES:
        raise BadRequest(f"keys.auth must be {AUTH_SECRET_BYTES} bytes")
    return p256dh, auth


def endpoint_origin(endpoint: str) -> str:
    scheme, _, rest = endpoint.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0].rpartition('@')[2]}"


class PushSubscriptions:
    def __init__(self, db: Database, clock: Callable[[], float] = time.time) -> None:
        self._db = db
        self._clock = clock

    async def save(
        self,
        account_id: str,
        subscription: BrowserSubscription,
        events: list[PushEvent] | None,
        token_id: str | None,
    ) -> Subscription:
        """Insert, or update the account's row with this endpoint; `Conflict` past the per-account bound.

        The endpoint itself is checked by the caller (`pheby.push.endpoints`)."""
        check_keys(subscription.keys)  # stored as the client spelled them, once shown to be keys
        wanted = list(dict.fromkeys(events if events is not None else PUSH_EVENTS))
        new_id, now = uuid.uuid4().hex, self._clock()

        def q(conn: Connection) -> Subscription:
            row = conn.execute(
                "SELECT id, created_at FROM push_subscriptions WHERE account_id = ? AND endpoint = ?",
                (account_id, subscription.endpoint),
            ).fetchone()
            values = (subscription.keys.p256dh, subscription.keys.auth, json.dumps(wanted), token_id)
            if row is not None:
                conn.execute(
                    "UPDATE push_subscriptions SET p256dh = ?, auth = ?, events = ?, token_id = ?, created_at = ?"
                    " WHERE id = ?",
                    (*values, now, row[0]),
                )
                return Subscription(row[0], endpoint_origin(subscription.endpoint), wanted, now)
            (count,) = conn.execute(
                "SELECT COUNT(*) FROM push_subscriptions WHERE account_id = ?", (account_id,)
            ).fetchone()
            if count >= MAX_PER_ACCOUNT:
                raise Conflict(f"An account may hold at most {MAX_PER_ACCOUNT} push subscriptions; remove one first")
            conn.execute(
                "INSERT INTO push_subscriptions (id, account_id, endpoint, p256dh, auth, events, token_id, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (new_id, account_id, subscription.endpoint, *values, now),
            )
            return Subscription(new_id, endpoint_origin(subscription.endpoint), wanted, now)

        return await self._db.transaction(q, durable=True)

    async def of_account(self, account_id: str) -> list[Subscription]:
        rows = await self._db.run(
            lambda c: c.execute(
                "SELECT id, endpoint, events, created_at FROM push_subscriptions WHERE account_id = ?"
                " ORDER BY created_at, id",
                (account_id,),
            ).fetchall()
        )
        return [Subscription(r[0], endpoint_origin(r[1]), json.loads(r[2]), r[3]) for r in rows]

    async def delete(self, account_id: str, subscription_id: str) -> bool:
        """Remove one of the account's subscriptions; False when it has none of that id."""
        cursor = await self._db.run(
            lambda c: c.execute(
                "DELETE FROM push_subscriptions WHERE id = ? AND account_id = ?", (subscription_id, account_id)
            )
        )
        return cursor.rowcount > 0

    async def forget(self, subscription_id: str) -> None:
        """The push service said the subscription is gone (404 / 410)."""
        await self._db.run(lambda c: c.execute("DELETE FROM push_subscriptions WHERE id = ?", (subscription_id,)))

    async def wanting(self, account_id: str, event: str) -> list[StoredSubscription]:
        """The account's subscriptions that asked for `event`, whose credential still works."""
        now = self._clock()
        rows = await self._db.run(
            lambda c: c.execute(
                "SELECT s.id, s.endpoint, s.p256dh, s.auth, s.events FROM push_subscriptions s"
                " JOIN accounts a ON a.id = s.account_id"
                " LEFT JOIN auth_tokens t ON t.id = s.token_id"
                " WHERE s.account_id = ? AND NOT a.disabled AND CASE WHEN s.token_id IS NULL"
                "   THEN a.credentials_revoked_at IS NULL OR a.credentials_revoked_at < s.created_at"
                "   ELSE t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > ?) END",
                (account_id, now),
            ).fetchall()
        )
        found = []
        for r in rows:
            events = frozenset(json.loads(r[4]))
            if event in events:
                found.append(
                    StoredSubscription(r[0], account_id, r[1], b64url_decode(r[2]), b64url_decode(r[3]), events)
                )
        return found
