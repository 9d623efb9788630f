"""Pushes to the Pheby server from one background thread, never from the agent's.

`push` and `push_media` only enqueue; they never wait on the network. The worker sends the queued
items one at a time, oldest first, and keeps each until the server acknowledges it (a 2xx answer):

- a connection error, a timeout, 5xx, 408 or 429 leaves the item at the head of the queue; it is
  retried after a backoff (`RETRY_FIRST_S` doubling to `RETRY_MAX_S`) and nothing behind it
  overtakes it, so a server that restarts (a deploy, kill -9) gets what it missed, in order;
- any other 4xx is a permanent refusal (unknown run, bad secret, too large): the item is dropped
  with a log line and the next one goes at once;
- a probe (the plugin's hello, `probe=True`) goes ahead of every queued item and ends the backoff
  at once: the server says hello to the plugin when it comes back, so the hello that answers it is
  how the outbox learns the server is back (and the server hears from the plugin before the
  backlog). A probe is tried once and never kept: the server's next handshake brings another.

What is kept is bounded. Count: `QUEUE_SIZE` items. Bytes: `MAX_QUEUED_BYTES`, the sum of the JSON
sizes of the queued events, a MEDIA: file counting as its size on disk (at most the plugin's max
media bytes; its bytes are read only when it is sent). Age: an item queued more than `MAX_AGE_S`
ago is dropped (with a log line) rather than sent. When a new item would exceed the count or byte
cap, the *oldest* items are dropped (each with a log line) until it fits: the newest pushes are the
ones a run still in progress needs (its current tool call, its open question), the oldest are the
likeliest to be stale (their run may be over, and the server falls back to Hermes's own stream for
tool events it never got). An item larger than the whole byte cap (only a MEDIA: file can be) is
still kept when nothing older is left to drop. Each cap is a module constant, and the `Outbox`
constructor takes overrides.

`on_done(ok, reply)` is called once per item, from the worker: `(True, <the JSON reply>)` when it
was delivered, `(False, {"status": <code>})` when it was refused, `(False, None)` when it was
dropped (cap, age, unreadable file) or, for a probe, not delivered. An item waiting for a retry
gets no call, so a clarification's sender keeps waiting, as long as its own timeout allows
(`Bridge.ask_clarify`, which also stops on a cancel): the agent thread waits no longer than it
did. A clarification whose wait ended before it was delivered (timed out, cancelled, shut down)
stays queued and reaches the server late; the bridge has then pushed `clarify.expired` after it,
and the queue's order delivers that right behind the request, so the server closes the question
again at once (the user may see it briefly). The late reply to the request is ignored.
"""

import json
import logging
import mimetypes
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

logger = logging.getLogger("pheby_bridge")

EVENTS_PATH = "/internal/hermes-plugin/events"
MEDIA_PATH = "/internal/hermes-plugin/media"
SECRET_HEADER = "X-Pheby-Plugin-Secret"  # noqa: S105 - a header name, not a secret
QUEUE_SIZE = 512  # items kept at most (probes aside)
MAX_QUEUED_BYTES = 8 * 1024 * 1024  # JSON sizes of the queued events plus sizes of the queued MEDIA: files
MAX_AGE_S = 600.0  # an item not delivered this long after its push is dropped
MAX_PROBES = 4  # hellos waiting to be tried (each handshake of the server brings one)
RETRY_FIRST_S = 0.25
RETRY_MAX_S = 3.0
EVENT_TIMEOUT_S = 2.0
MEDIA_TIMEOUT_S = 15.0
RETRIED_STATUSES = frozenset({408, 429})

Done = Callable[[bool, Any], None]


class _Outcome(Enum):
    DELIVERED = "delivered"
    REFUSED = "refused"  # permanent: not worth another try
    RETRY = "retry"  # the server is down, busy or slow


@dataclass
class _Item:
    body: bytes = b""  # the event's JSON (empty for a MEDIA: file)
    kind: str = ""  # for log lines: the event's name, or "media"
    media_path: str = ""
    media_query: dict[str, Any] = field(default_factory=dict)
    on_done: Done | None = None
    probe: bool = False
    size: int = 0
    born: float = 0.0
    evicted: bool = False  # dropped by a cap while being sent: not retried


class Outbox:
    def __init__(
        self,
        service_url: str,
        secret: str,
        max_media_bytes: int,
        *,
        max_items: int = QUEUE_SIZE,
        max_bytes: int = MAX_QUEUED_BYTES,
        max_age_s: float = MAX_AGE_S,
        retry_first_s: float = RETRY_FIRST_S,
        retry_max_s: float = RETRY_MAX_S,
    ) -> None:
        self._url = service_url
        self._secret = secret
        self._max_media = max_media_bytes
        self._max_items = max_items
        self._max_bytes = max_bytes
        self._max_age = max_age_s
        self._retry_first = retry_first_s
        self._retry_max = retry_max_s
        self._cond = threading.Condition()
        self._items: deque[_Item] = deque()  # oldest first; the one being sent is taken out (`_busy`)
        self._probes: deque[_Item] = deque()
        self._busy: _Item | None = None
        self._bytes = 0  # sizes of `_items` and of `_busy` unless it was evicted
        self._retry_at = 0.0
        self._delay = retry_first_s
        self._closed = False
        self._thread: threading.Thread | None = None
        # No proxies: the service is on loopback (or a private address) and must not be relayed.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    # --- enqueueing (any thread, never blocks on the network) ---------------------------

    def push(self, event: dict[str, Any], on_done: Done | None = None, probe: bool = False) -> bool:
        try:
            body = json.dumps(event, ensure_ascii=False, default=str).encode("utf-8")
        except (TypeError, ValueError):
            logger.warning("pheby_bridge: an event that cannot be encoded is not pushed")
            _call(on_done, False, None)
            return False
        kind = str(event.get("event") or "event")
        return self._put(_Item(body=body, kind=kind, on_done=on_done, probe=probe, size=len(body)))

    def push_media(self, path: str, query: dict[str, Any], on_done: Done | None = None) -> bool:
        try:
            size = min(os.path.getsize(path), self._max_media)
        except OSError:
            size = 0  # sent (and refused) like any other: reading it will fail again
        return self._put(_Item(kind="media", media_path=path, media_query=query, on_done=on_done, size=size))

    def close(self) -> None:
        """Stop the worker after its current attempt; what is still queued is dropped unreported."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _put(self, item: _Item) -> bool:
        dropped: list[tuple[_Item, str]] = []
        with self._cond:
            if self._closed:
                refused = "the outbox is closed"
            elif item.probe and len(self._probes) >= MAX_PROBES:
                refused = "too many hellos are waiting"
            else:
                refused = ""
                item.born = time.monotonic()
                if item.probe:
                    self._probes.append(item)
                else:
                    dropped = self._expire(item.born)
                    self._make_room(item, dropped)
                    self._items.append(item)
                    self._bytes += item.size
                self._start_worker()
                self._cond.notify_all()
        _report(dropped)
        if refused:
            logger.warning("pheby_bridge: %s; a %s push is not kept", refused, item.kind)
            _call(item.on_done, False, None)
            return False
        return True

    def _make_room(self, item: _Item, dropped: list[tuple[_Item, str]]) -> None:
        """Drop the oldest items until `item` fits under the count and byte caps (or nothing older is left)."""
        while self._count() + 1 > self._max_items or self._bytes + item.size > self._max_bytes:
            busy = self._busy
            if busy is not None and not busy.evicted:
                busy.evicted = True  # it is the oldest; reported when its attempt ends, if that fails
                self._bytes -= busy.size
                logger.warning("pheby_bridge: outbox full; the %s push being sent will not be retried", busy.kind)
            elif self._items:
                oldest = self._items.popleft()
                self._bytes -= oldest.size
                dropped.append((oldest, "the outbox is full"))
            else:
                return

    def _count(self) -> int:
        busy = self._busy is not None and not self._busy.evicted
        return len(self._items) + (1 if busy else 0)

    def _expire(self, now: float) -> list[tuple[_Item, str]]:
        """Take the queued items past their age off the queue (oldest first, so they are at its head)."""
        dropped: list[tuple[_Item, str]] = []
        while self._items and now - self._items[0].born > self._max_age:
            oldest = self._items.popleft()
            self._bytes -= oldest.size
            dropped.append((oldest, f"not delivered within {self._max_age:g} s"))
        return dropped

    def _start_worker(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="pheby-bridge-outbox", daemon=True)
            self._thread.start()

    # --- the worker -------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            item = self._next()
            if item is None:
                return
            outcome, reply = _Outcome.RETRY, None
            try:
                outcome, reply = self._deliver(item)
            except Exception:  # never let the worker die; a surprise counts as the server being down
                logger.debug("pheby_bridge: push failed", exc_info=True)
            self._settle(item, outcome, reply)

    def _next(self) -> _Item | None:
        """The next item to send: a probe, else the head once its backoff is over (None: closed)."""
        while True:
            item: _Item | None = None
            with self._cond:
                if self._closed:
                    return None
                now = time.monotonic()
                dropped = self._expire(now)
                if self._probes:
                    item = self._probes.popleft()
                elif self._items and now >= self._retry_at:
                    item = self._busy = self._items.popleft()
                elif not dropped:
                    self._cond.wait(self._retry_at - now if self._items else None)
            _report(dropped)
            if item is not None:
                return item

    def _settle(self, item: _Item, outcome: _Outcome, reply: Any) -> None:
        with self._cond:
            now = time.monotonic()
            if outcome is not _Outcome.RETRY:  # the server answered: it is up
                self._retry_at, self._delay = 0.0, self._retry_first
            elif not item.probe:
                self._retry_at = now + self._delay
                self._delay = min(self._delay * 2, self._retry_max)
            if not item.probe:
                self._busy = None
                if not item.evicted:
                    if outcome is _Outcome.RETRY and now - item.born <= self._max_age:
                        self._items.appendleft(item)  # still the oldest; its bytes were never released
                        return
                    self._bytes -= item.size
        if outcome is _Outcome.REFUSED:
            logger.warning("pheby_bridge: the service refused a %s push (%s); dropped", item.kind, _status(reply))
        elif outcome is _Outcome.RETRY and not item.probe:
            why = "evicted by the outbox's caps" if item.evicted else f"not delivered within {self._max_age:g} s"
            logger.warning("pheby_bridge: a %s push was %s; dropped", item.kind, why)
        _call(item.on_done, outcome is _Outcome.DELIVERED, reply)

    def _deliver(self, item: _Item) -> tuple[_Outcome, Any]:
        if not item.media_path:
            return self._post(EVENTS_PATH, item.body, "application/json", EVENT_TIMEOUT_S)
        data = _read_limited(item.media_path, self._max_media)
        if data is None:
            return _Outcome.REFUSED, None
        query = dict(item.media_query, filename=os.path.basename(item.media_path))
        mime = mimetypes.guess_type(item.media_path)[0] or "application/octet-stream"
        path = f"{MEDIA_PATH}?{urllib.parse.urlencode(query)}"
        return self._post(path, data, mime, MEDIA_TIMEOUT_S)

    def _post(self, path: str, body: bytes, content_type: str, timeout: float) -> tuple[_Outcome, Any]:
        request = urllib.request.Request(  # noqa: S310 - the configured server URL (http or https)
            self._url + path,
            data=body,
            method="POST",
            headers={"Content-Type": content_type, SECRET_HEADER: self._secret},
        )
        try:
            with self._opener.open(request, timeout=timeout) as response:
                raw = response.read(64 * 1024)
        except urllib.error.HTTPError as exc:
            logger.info("pheby_bridge: the service answered %s to %s", exc.code, path.split("?")[0])
            permanent = 400 <= exc.code < 500 and exc.code not in RETRIED_STATUSES
            return (_Outcome.REFUSED if permanent else _Outcome.RETRY), {"status": exc.code}
        except (urllib.error.URLError, OSError, ValueError) as exc:
            logger.info("pheby_bridge: the service is unreachable (%s)", type(exc).__name__)
            return _Outcome.RETRY, None
        try:
            return _Outcome.DELIVERED, json.loads(raw or b"{}")
        except ValueError:
            return _Outcome.DELIVERED, {}


def _read_limited(path: str, limit: int) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        logger.info("pheby_bridge: cannot read a MEDIA file (%s)", type(exc).__name__)
        return None
    if len(data) > limit:
        logger.info("pheby_bridge: a MEDIA file is larger than %d bytes; not pushed", limit)
        return None
    return data


def _status(reply: Any) -> str:
    return f"HTTP {reply['status']}" if isinstance(reply, dict) and "status" in reply else "unreadable file"


def _report(dropped: list[tuple[_Item, str]]) -> None:
    for item, why in dropped:
        logger.warning("pheby_bridge: a %s push was dropped: %s", item.kind, why)
        _call(item.on_done, False, None)


def _call(callback: Done | None, ok: bool, reply: Any) -> None:
    if callback is None:
        return
    try:
        callback(ok, reply)
    except Exception:
        logger.debug("pheby_bridge: push callback failed", exc_info=True)
