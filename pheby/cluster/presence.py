"""Which accounts have a connection in front of their person on another process: Web Push stays quiet for
them, as it does for a connection in the foreground here (`Hub.in_foreground`).

Every `RENEW_SECONDS` each process writes its accounts with a connection in the foreground to Redis: one
sorted set per account (`{prefix}foreground:{account}`) holding each such process (its hub's origin) scored
by an expiry `TTL_SECONDS` away; an account none of whose connections here is in front any more loses this
process's entry. A process that dies leaves entries that expire. Asking reads the entries of other processes
not expired yet. Redis down or slow: only this process's sockets count (a notice too many, never one lost).
"""

import asyncio
import logging
import time
from typing import Final

import redis.asyncio
import redis.exceptions
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from pheby.cancelling import raise_if_cancelled

log = logging.getLogger(__name__)

RENEW_SECONDS: Final = 2.0
TTL_SECONDS: Final = 10.0
ASK_SECONDS: Final = 1.0  # a question about an account's presence waits this long at most


class Presence:
    def __init__(self, url: str, *, prefix: str = "pheby:", origin: str = "") -> None:
        self._prefix = f"{prefix}foreground:"
        self.origin = origin
        self._redis = redis.asyncio.Redis.from_url(
            url, socket_connect_timeout=ASK_SECONDS, socket_timeout=ASK_SECONDS, retry=Retry(NoBackoff(), 0)
        )
        self._published: set[str] = set()  # the accounts this process last said it has in front

    async def publish(self, in_front: set[str]) -> None:
        """Say which accounts have a connection in front here now (and no longer the others)."""
        expires = time.time() + TTL_SECONDS
        gone = self._published - in_front
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for account_id in in_front:
                    pipe.zadd(self._key(account_id), {self.origin: expires})
                    pipe.expire(self._key(account_id), int(TTL_SECONDS) + 1)
                for account_id in gone:
                    pipe.zrem(self._key(account_id), self.origin)
                await pipe.execute()
        except (redis.exceptions.RedisError, OSError) as exc:
            raise_if_cancelled()
            log.debug("presence not published (%s)", type(exc).__name__)
            return
        raise_if_cancelled()
        self._published = set(in_front)

    async def elsewhere(self, account_id: str) -> bool:
        """Whether another process has a connection of the account in front of its person."""
        try:
            async with asyncio.timeout(ASK_SECONDS):
                found = await self._redis.zrangebyscore(self._key(account_id), time.time(), "+inf")
        except (redis.exceptions.RedisError, OSError, TimeoutError):
            raise_if_cancelled()
            return False
        raise_if_cancelled()
        return any(_text(member) != self.origin for member in found)

    async def aclose(self) -> None:
        await self._redis.aclose()

    def _key(self, account_id: str) -> str:
        return f"{self._prefix}{account_id}"


def _text(member: object) -> str:
    return member.decode(errors="replace") if isinstance(member, bytes) else str(member)
