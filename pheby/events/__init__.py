"""Account events shared by every process: a durable log in the database, a bell, and a feed.

`log`: each account's ordered event log (`account_events`), its seq taken in the writer's transaction,
gap-free; the truth. `bell`: rings ("account A's log reached seq N") through Redis pub/sub, or within
one process; an unreliable transport that says when it may have lost rings (it also carries letters, messages
for one process). `feed`: a process's
delivery of its subscribed accounts' events, exactly once and in seq order, reading the log on a ring, a
resync, a periodic position check, or (the bell down) by polling.

May import: `pheby.db`, `pheby.errors`, `pheby.settings`, `pheby.metrics`, `pheby.cancelling` (the basics) and
itself.
"""

from pheby.events.bell import RESYNC, Bell, BellUnavailable, Letter, Live, LocalBell, RedisBell, Resync, Ring
from pheby.events.feed import Feed
from pheby.events.log import Appender, Event, EventLog, Truncated, append, heads, prune, read_after, ring

__all__ = [
    "RESYNC",
    "Appender",
    "Bell",
    "BellUnavailable",
    "Event",
    "EventLog",
    "Feed",
    "Letter",
    "Live",
    "LocalBell",
    "RedisBell",
    "Resync",
    "Ring",
    "Truncated",
    "append",
    "heads",
    "prune",
    "read_after",
    "ring",
]
