"""Upload quotas that hold under concurrent uploads: reserve before storing, release after.

Usage is what the database holds plus what uploads in flight have reserved; both are checked
and the reservation made under one lock, so ten parallel uploads can't all squeeze under a limit.
An upload of known length reserves it up front; one without (chunked) reserves as its bytes
arrive, a step ahead, so a small chunked upload near the quota is judged by its real size.
"""

import asyncio
from collections import Counter
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from pheby.errors import TooLarge

StoredBytes = Callable[[str | None], Awaitable[int]]  # account id (None = everyone) → bytes stored


class Reservation:
    """Bytes held for one upload in flight; it can grow while the upload streams."""

    def __init__(self, quota: "UploadQuota", account_id: str) -> None:
        self._quota = quota
        self._account_id = account_id
        self.amount = 0

    async def grow_to(self, wanted: int, *, at_least: int | None = None) -> None:
        """Hold `wanted` bytes in all, or failing that `at_least`; 413 when even that would pass a limit."""
        if wanted <= self.amount:
            return
        needed = (at_least or wanted) - self.amount
        self.amount += await self._quota._take(self._account_id, wanted - self.amount, needed)

    async def metered(self, chunks: AsyncIterable[bytes], *, step: int, ceiling: int) -> AsyncIterator[bytes]:
        """Pass `chunks` through, growing the reservation ahead of them, up to `ceiling`: by `step` at first,
        then by as much as it holds (so it holds at most `step` or twice what arrived, whichever is more),
        and a 64 MiB upload asks the database a handful of times, not once per `step`. Only what arrived
        must fit the quota: the part ahead is taken only as far as the quota has room."""
        total = 0
        async for chunk in chunks:
            total += len(chunk)
            if total > self.amount:
                ahead = self.amount + max(step, self.amount)
                await self.grow_to(min(max(total, ahead), ceiling), at_least=min(total, ceiling))
            yield chunk


class UploadQuota:
    def __init__(self, stored_bytes: StoredBytes, *, per_account: int, global_limit: int | None = None) -> None:
        """`global_limit` None: only the per-account limit applies."""
        self._stored_bytes = stored_bytes
        self._per_account = per_account
        self._global_limit = global_limit
        self._lock = asyncio.Lock()
        self._reserved: Counter[str] = Counter()

    @asynccontextmanager
    async def reserve(self, account_id: str, amount: int = 0) -> AsyncIterator[Reservation]:
        """Hold `amount` bytes (more later through the reservation); 413 when either limit would be passed."""
        reservation = Reservation(self, account_id)
        try:
            await reservation.grow_to(amount)
            yield reservation
        finally:
            self._reserved[account_id] -= reservation.amount
            if self._reserved[account_id] <= 0:
                del self._reserved[account_id]

    async def _take(self, account_id: str, wanted: int, needed: int) -> int:
        """Reserve `wanted` more bytes if both limits allow, else `needed`; return how many were taken."""
        async with self._lock:
            account_left = self._per_account - await self._stored_bytes(account_id) - self._reserved[account_id]
            global_left = (
                account_left
                if self._global_limit is None
                else self._global_limit - await self._stored_bytes(None) - sum(self._reserved.values())
            )
            if needed > account_left:
                raise TooLarge("This upload would pass your storage quota")
            if needed > global_left:
                raise TooLarge("The server's attachment storage is full")
            taken = min(wanted, account_left, global_left)
            self._reserved[account_id] += taken
            return taken
