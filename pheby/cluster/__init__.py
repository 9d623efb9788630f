"""Several server processes as one: the WebSocket hub's fan-out through the account event log.

`hub`: `ClusterHub`, the hub a process uses when `PHEBY_REDIS_URL` is set; `wire`: how its events
and live text travel between processes; `outbox`: the live text and the rings waiting to be published;
`backlog`: the events waiting for the database; `presence`: the accounts in front of their person on some
process (Web Push stays quiet for them).

May import: `pheby.protocol`, `pheby.events` and the basics (`pheby.db`, `pheby.errors`, `pheby.metrics`).
"""

from pheby.cluster.hub import ClusterHub

__all__ = ["ClusterHub"]
