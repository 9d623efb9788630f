"""Pushes to the Pheby server from one background thread, never from the agent's.

`push` only enqueues (a bounded queue; when it is full the event is dropped). The worker posts
each item with a short timeout. After a failure the service counts as down for a few seconds and
queued items are dropped at once instead of each waiting for its own timeout, so a service that
is down costs a run nothing but the extras. A probe (the plugin's hello) is always tried: it is how
the plugin learns that the service is back.
"""

import json
import logging
import mimetypes
import os
import queue
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger("pheby_bridge")

EVENTS_PATH = "/internal/hermes-plugin/events"
MEDIA_PATH = "/internal/hermes-plugin/media"
SECRET_HEADER = "X-Pheby-Plugin-Secret"  # noqa: S105 - a header name, not a secret
QUEUE_SIZE = 512
EVENT_TIMEOUT_S = 2.0
MEDIA_TIMEOUT_S = 15.0
DOWN_BACKOFF_S = 3.0

Done = Callable[[bool, Any], None]


@dataclass
class _Item:
    event: dict[str, Any] | None = None
    media_path: str = ""
    media_query: dict[str, Any] = field(default_factory=dict)
    on_done: Done | None = None
    probe: bool = False


class Outbox:
    def __init__(self, service_url: str, secret: str, max_media_bytes: int) -> None:
        self._url = service_url
        self._secret = secret
        self._max_media = max_media_bytes
        self._queue: queue.Queue[_Item] = queue.Queue(maxsize=QUEUE_SIZE)
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._down_until = 0.0
        # No proxies: the service is on loopback (or a private address) and must not be relayed.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    # --- enqueueing (any thread, never blocks) ----------------------------------------

    def push(self, event: dict[str, Any], on_done: Done | None = None, probe: bool = False) -> bool:
        return self._put(_Item(event=event, on_done=on_done, probe=probe))

    def push_media(self, path: str, query: dict[str, Any], on_done: Done | None = None) -> bool:
        return self._put(_Item(media_path=path, media_query=query, on_done=on_done))

    def _put(self, item: _Item) -> bool:
        self._ensure_worker()
        try:
            self._queue.put_nowait(item)
            return True
        except queue.Full:
            logger.warning("pheby_bridge: outbox full, dropping a push")
            _call(item.on_done, False, None)
            return False

    def _ensure_worker(self) -> None:
        if self._thread is not None:
            return
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="pheby-bridge-outbox", daemon=True)
                self._thread.start()

    # --- the worker -------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            ok, reply = False, None
            try:
                if item.probe or time.monotonic() >= self._down_until:
                    ok, reply = self._deliver(item)
                    self._down_until = 0.0 if ok else time.monotonic() + DOWN_BACKOFF_S
            except Exception:  # never let the worker die
                logger.debug("pheby_bridge: push failed", exc_info=True)
            _call(item.on_done, ok, reply)

    def _deliver(self, item: _Item) -> tuple[Any, ...]:
        if item.event is not None:
            body = json.dumps(item.event, ensure_ascii=False, default=str).encode("utf-8")
            return self._post(EVENTS_PATH, body, "application/json", EVENT_TIMEOUT_S)
        data = _read_limited(item.media_path, self._max_media)
        if data is None:
            return False, None
        query = dict(item.media_query, filename=os.path.basename(item.media_path))
        mime = mimetypes.guess_type(item.media_path)[0] or "application/octet-stream"
        path = f"{MEDIA_PATH}?{urllib.parse.urlencode(query)}"
        ok, reply = self._post(path, data, mime, MEDIA_TIMEOUT_S)
        # A file that was read but refused is not the service being down.
        return ok or reply is not None, reply

    def _post(self, path: str, body: bytes, content_type: str, timeout: float) -> tuple[Any, ...]:
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
            return False, {"status": exc.code}
        except (urllib.error.URLError, OSError, ValueError) as exc:
            logger.info("pheby_bridge: the service is unreachable (%s)", type(exc).__name__)
            return False, None
        try:
            return True, json.loads(raw or b"{}")
        except ValueError:
            return True, {}


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


def _call(callback: Done | None, ok: bool, reply: Any) -> None:
    if callback is None:
        return
    try:
        callback(ok, reply)
    except Exception:
        logger.debug("pheby_bridge: push callback failed", exc_info=True)
