"""Upload quotas that hold under concurrent uploads: reserve before storing, release after.

Usage is what the database holds plus what uploads in flight have reserved; both are checked
and the reservation made under one lock, so ten parallel uploads can't all squeeze under a limit.
"""

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from pheby.errors import TooLarge

StoredBytes = Callable[[str | None], Awaitable[int]]  # account id (None = everyone) → bytes stored


class UploadQuota:
    def __init__(self, stored_bytes: StoredBytes, *, per_account: int, global_limit: int) -> None:
        self._stored_bytes = stored_bytes
        self._per_account = per_account
        self._global_limit = global_limit
        self._lock = asyncio.Lock()
        self._reserved: Counter[str] = Counter()

    @asynccontextmanager
    async def reserve(self, account_id: str, amount: int) -> AsyncIterator[None]:
        """Hold `amount` bytes for an upload in flight; 413 when either limit would be passed."""
        async with self._lock:
            account_used = await self._stored_bytes(account_id) + self._reserved[account_id]
            if account_used + amount > self._per_account:
                raise TooLarge("This upload would pass your storage quota")
            global_used = await self._stored_bytes(None) + sum(self._reserved.values())
            if global_used + amount > self._global_limit:
                raise TooLarge("The server's attachment storage is full")
            self._reserved[account_id] += amount
        try:
            yield
        finally:
            self._reserved[account_id] -= amount
            if self._reserved[account_id] <= 0:
                del self._reserved[account_id]
