"""The server's Prometheus metrics, declared once, in the process's default registry.

Every layer may count here (it is one of the basics). Labels are bounded sets: a protocol error code, a
frame type, a run status, an outcome, a route template; never an id, a name, a path or a user's text.
The values that are read when scraped (sockets open, bytes owed, runs going) come from the live
objects `watch` is given. `/metrics` (`handlers/metrics.py`) serves them behind `PHEBY_METRICS_TOKEN`.
HTTP requests are counted by route template by Litestar's Prometheus middleware (`pheby_http_*`).
"""

from collections.abc import Callable
from functools import cache

from prometheus_client import Counter, Gauge, Histogram

# --- the process --------------------------------------------------------------------------------
GC_FROZEN_OBJECTS = Gauge("pheby_gc_frozen_objects", "Objects start-up left, frozen out of collections (gc.freeze)")
GC_THRESHOLD = Gauge("pheby_gc_threshold", "The garbage collector's threshold, by generation", ["generation"])

# --- WebSockets ---------------------------------------------------------------------------------
WS_CONNECTIONS = Gauge("pheby_ws_connections", "Authenticated WebSocket connections open")
WS_SOCKETS = Gauge("pheby_ws_sockets", "WebSockets open, before or after hello")
HELLOS_REFUSED = Counter(
    "pheby_ws_hellos_refused_total", "WebSockets refused before or at hello, by error code", ["code"]
)
FRAMES_SENT = Counter("pheby_ws_frames_sent_total", "Frames queued to WebSocket clients, by type", ["type"])
SEND_QUEUE_BYTES = Gauge("pheby_ws_send_queue_bytes", "Bytes owed to WebSocket clients, all connections together")
BACKPRESSURE_CLOSES = Counter(
    "pheby_ws_backpressure_closes_total", "WebSockets closed (1013) because their client did not read fast enough"
)
DELTAS_FOLDED = Counter(
    "pheby_ws_deltas_folded_total",
    "Append deltas folded into one of the same message still waiting in a connection's queue (the socket was behind)",
)
EVENT_TO_FRAME = Histogram(
    "pheby_ws_event_to_frame_seconds",
    "From an event's arrival (a run's: read from Hermes) to its frame written to a socket",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0),
)

# --- runs ---------------------------------------------------------------------------------------
RUNS_ACTIVE = Gauge("pheby_runs_active", "Runs going now")
RUNS_FINISHED = Counter("pheby_runs_finished_total", "Runs ended, by final status", ["status"])
RUN_TAKEOVERS = Counter(
    "pheby_run_takeovers_total",
    "Runs this process took over from the journal: their owner stopped, died, or was paused past its lease",
)
RUNS_LET_GO = Counter(
    "pheby_runs_let_go_total", "Runs this process let go of because another process had taken them over"
)
RUNS_REATTACHED = Counter(
    "pheby_runs_reattached_total",
    "Runs carried on from a stopped process's journal, by how they ended: completed, failed, cancelled",
    ["outcome"],
)
RUN_SECONDS = Histogram(
    "pheby_run_duration_seconds",
    "From run.accepted to run.finished",
    buckets=(0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600),
)

# --- Hermes -------------------------------------------------------------------------------------
HERMES_REQUESTS = Counter(
    "pheby_hermes_requests_total",
    "Requests to Hermes gateways, by outcome: ok, rejected (4xx), failed (5xx), unavailable",
    ["outcome"],
)
HERMES_REACHABLE = Gauge("pheby_hermes_reachable", "1 when the last request to a Hermes gateway reached it, else 0")

# --- files and storage --------------------------------------------------------------------------
UPLOAD_BYTES = Counter("pheby_upload_bytes_total", "Bytes of uploads stored, by surface: pheby, hope", ["surface"])
UPLOADS = Counter("pheby_uploads_total", "Uploads by surface and outcome: stored, refused", ["surface", "outcome"])
STORAGE_ERRORS = Counter("pheby_storage_errors_total", "Blob storage operations that failed")

# --- guards -------------------------------------------------------------------------------------
LOGIN_FAILURES = Counter("pheby_login_failures_total", "Failed password logins")
BEARER_FAILURES = Counter("pheby_bearer_failures_total", "Wrong bearer credentials on /api/* and /attachments")
LOCKOUTS = Counter(
    "pheby_lockouts_total", "Attempts refused because their address or username is locked out, by scope", ["scope"]
)

# --- push ---------------------------------------------------------------------------------------
PUSH_SENDS = Counter(
    "pheby_push_sends_total",
    "Web Push sends, by outcome: delivered, gone, retried, failed, refused, dropped; "
    "foreground: not sent, its account being in front of its person through another process",
    ["outcome"],
)


# --- the event log and its bell (pheby.events) ------------------------------------------------------
EVENTS_APPENDED = Counter("pheby_events_appended_total", "Rows appended to the accounts' event logs")
EVENTS_PRUNED = Counter("pheby_events_pruned_total", "Event log rows removed by retention")
EVENTS_DELIVERED = Counter("pheby_events_delivered_total", "Logged events a feed delivered to its process")
EVENT_GAP_REPAIRS = Counter(
    "pheby_event_gap_repairs_total",
    "Times a feed read events from the log that no ring had announced, by cause: ring, resync, check, poll",
    ["cause"],
)
EVENT_RESYNCS = Counter(
    "pheby_event_resyncs_total", "Times the bell reconnected (or dropped rings) and the feed re-read every position"
)
EVENT_SNAPSHOTS = Counter(
    "pheby_event_snapshots_total", "Times a feed's position was older than the log retains (a full snapshot is owed)"
)
EVENT_PUBLISH_FAILURES = Counter(
    "pheby_event_publish_failures_total", "Rings not published (the bell was down); the log still holds the events"
)
EVENT_BELL_LAG = Histogram(
    "pheby_event_bell_lag_seconds",
    "From a ring's publish to the delivery of its event by a feed (clocks of two hosts may differ)",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)
BELL_CONNECTED = Gauge("pheby_event_bell_connected", "1 while the bell's subscriber connection is up, else 0")
EVENT_LOG_ROWS = Gauge("pheby_event_log_rows", "Events the account event logs hold (read when they are pruned)")
LIVE_DROPPED = Counter(
    "pheby_live_dropped_total", "Live messages (a run's streaming text) dropped: the bell's queue was full"
)
LIVE_PUBLISH_FAILURES = Counter(
    "pheby_live_publish_failures_total", "Live messages not published (the bell was down); the next makes up for it"
)
EVENTS_UNLOGGED = Counter(
    "pheby_events_unlogged_total",
    "Events the cluster hub could not append (the database was down): delivered to this process's clients only",
)


@cache
def frames_sent(frame_type: str) -> Counter:
    """The counter of one frame type (frame types are the protocol's: a bounded set)."""
    return FRAMES_SENT.labels(frame_type)


def hermes_request(outcome: str) -> None:
    """A request to Hermes ended so (`hermes_client.HermesClient`'s `on_outcome`)."""
    HERMES_REQUESTS.labels(outcome).inc()
    HERMES_REACHABLE.set(0 if outcome == "unavailable" else 1)


def watch(
    *,
    connections: Callable[[], int],
    sockets: Callable[[], int],
    owed_bytes: Callable[[], int],
    runs_active: Callable[[], int],
) -> None:
    """Read these when scraped (the newest server of the process: tests start several)."""
    WS_CONNECTIONS.set_function(connections)
    WS_SOCKETS.set_function(sockets)
    SEND_QUEUE_BYTES.set_function(owed_bytes)
    RUNS_ACTIVE.set_function(runs_active)
