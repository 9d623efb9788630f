"""The plugin's state: what the server asked for, per-session settings, pending clarifications.

One `Bridge` per Hermes process, shared by the hooks, the middleware and the platform adapter
(the inbound channel). Every method is safe to call from any thread.
"""

import hmac
import importlib
import logging
import threading
import time
import uuid
from collections import OrderedDict
from typing import Any

from .config import BridgeConfig
from .outbox import Outbox

logger = logging.getLogger("pheby_bridge")

PROTOCOL = 1
VERSION = "1.0.0"
# Everything this plugin can do; the server says which of these it wants (its PHEBY_PLUGIN_* switches).
FEATURES = ("tool_events", "clarify", "model", "reasoning", "yolo", "media", "cron", "history")
# The Hermes internals each extra calls, beyond the hooks and middleware it registers ("module:attr.attr").
# An extra whose internals this Hermes lacks is left out of the handshake, so the server falls back.
_RUN_KEY = ("gateway.session_context:get_session_env", "tools.approval:get_current_session_key")
NEEDS: dict[str, tuple[str, ...]] = {
    "tool_events": _RUN_KEY,
    "clarify": (*_RUN_KEY, "tools.clarify_tool:clarify_tool", "tools.interrupt:is_interrupted"),
    "model": _RUN_KEY,
    "reasoning": _RUN_KEY,
    "yolo": (*_RUN_KEY, "tools.approval:enable_session_yolo", "tools.approval:disable_session_yolo"),
    "media": (
        *_RUN_KEY,
        "gateway.platforms.base:BasePlatformAdapter.extract_media",
        "gateway.platforms.base:BasePlatformAdapter.filter_media_delivery_paths",
    ),
    "cron": (),
    "history": (*_RUN_KEY, "hermes_state:SessionDB.get_messages_as_conversation"),
}
DEFAULT_CLARIFY_TIMEOUT_S = 120.0
MAX_SESSIONS = 2048
WAIT_SLICE_S = 0.2
# How long a clarification waits for the server to take it: a restarting server is back within seconds, one
# that is gone must not hold the agent for the whole clarify timeout.
DELIVERY_GRACE_S = 10.0


def has_internal(spec: str) -> bool:
    """Whether this Hermes has `module:attr.attr` (imported, never called)."""
    module_name, _, path = spec.partition(":")
    try:
        found: Any = importlib.import_module(module_name)
        for attr in filter(None, path.split(".")):
            found = getattr(found, attr)
    except Exception:  # noqa: BLE001 - missing, renamed or failing to import: this Hermes lacks it
        return False
    return True


def available_features() -> tuple[str, ...]:
    """The extras whose Hermes internals this Hermes has."""
    return tuple(name for name in FEATURES if all(has_internal(spec) for spec in NEEDS[name]))


class ClarifyUnanswered(Exception):
    """The question got no answer: timed out, cancelled, or the server could not be asked."""


class _Pending:
    def __init__(self) -> None:
        self.event = threading.Event()
        self.answer: str | None = None
        self.failed = ""
        self.settled = False  # the outbox is done with the request (delivered, refused or dropped)


class Bridge:
    def __init__(self, config: BridgeConfig) -> None:
        self.config = config
        self.outbox = Outbox(config.service_url, config.secret, config.max_media_bytes)
        self.boot_id = uuid.uuid4().hex
        self._lock = threading.Lock()
        self._wanted: frozenset[str] = frozenset()
        self._clarify_timeout = DEFAULT_CLARIFY_TIMEOUT_S
        self._sessions: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._pending: dict[str, Any] = {}
        self.yolo_runs: set[str] = set()
        self.features: tuple[str, ...] = available_features()
        lacking = [name for name in FEATURES if name not in self.features]
        if lacking:
            logger.info("pheby_bridge: this Hermes lacks what %s need; they stay off", ", ".join(lacking))

    # --- what the server wants --------------------------------------------------------

    def wants(self, feature: str) -> bool:
        return feature in self._wanted and feature in self.features

    def lose(self, *features: str) -> None:
        """These extras can't work here after all (Hermes refused a hook or middleware they need)."""
        self.features = tuple(name for name in self.features if name not in features)

    def _apply_server_view(self, body: Any) -> None:
        if not isinstance(body, dict):
            return
        extras = body.get("extras")
        if isinstance(extras, list):
            self._wanted = frozenset(str(e) for e in extras if str(e) in FEATURES)
        timeout = body.get("clarify_timeout")
        if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and 0 < timeout <= 86400:
            self._clarify_timeout = float(timeout)

    def hello_body(self) -> dict[str, Any]:
        return {
            "plugin": "pheby_bridge",
            "version": VERSION,
            "protocol": PROTOCOL,
            "boot_id": self.boot_id,
            "features": list(self.features),
        }

    def say_hello(self) -> None:
        """Tell the server this Hermes (re)started; its reply says which extras to provide."""

        def done(ok: bool, reply: Any) -> None:
            if ok:
                self._apply_server_view(reply)

        self.outbox.push(dict(self.hello_body(), event="plugin.hello"), on_done=done, probe=True)

    # --- per-session settings ---------------------------------------------------------

    def session(self, session_id: str) -> dict[str, Any] | None:
        if not session_id:
            return None
        with self._lock:
            return self._sessions.get(session_id)

    def _set_session(self, session_id: str, values: dict[str, Any]) -> None:
        with self._lock:
            self._sessions[session_id] = values
            self._sessions.move_to_end(session_id)
            while len(self._sessions) > MAX_SESSIONS:
                self._sessions.popitem(last=False)

    # --- inbound (POST /api/platforms/pheby_bridge/events) -----------------------------

    def check_secret(self, auth_header: str) -> bool:
        scheme, _, value = (auth_header or "").partition(" ")
        if scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(value.strip().encode(), self.config.secret.encode())

    def handle(self, payload: dict[str, Any]) -> dict[str, Any]:
        kind = payload.get("type")
        if kind == "hello":
            self._apply_server_view(payload)
            self.say_hello()  # proves the way back to the server works, too
            return self.hello_body()
        if kind == "session.settings":
            session_id = payload.get("session_id")
            if not isinstance(session_id, str) or not session_id:
                return {"ok": False, "error": "session_id is required"}
            values = {
                "model": _text(payload.get("model")),
                "effort": _text(payload.get("effort")),
                "yolo": payload.get("yolo") is True,
                "history": payload.get("history") is True,
            }
            self._set_session(session_id, values)
            return {"ok": True, "boot_id": self.boot_id}
        if kind == "clarify.answer":
            return {"resolved": self.answer_clarify(payload.get("clarify_id"), payload.get("response"))}
        return {"ok": False, "error": "unknown event type"}

    # --- clarify ----------------------------------------------------------------------

    def ask_clarify(
        self, run_id: str, session_id: str, tool_call_id: str, question: str, choices: list[Any] | None
    ) -> str:
        """Ask the server's clients and wait (on the agent thread) for the answer; raise if none comes.

        The wait ends on the answer, the timeout, a cancel or a refusal, or when the server has not taken
        the request within `DELIVERY_GRACE_S` (the request stays in the outbox meanwhile: a server that
        restarts gets it). A wait that ends on the timeout, or on a cancel, shutdown or the grace before the
        server took the request, pushes `clarify.expired` behind the request, so a request delivered late is
        closed again at once rather than left open.
        """
        from tools.interrupt import is_interrupted

        clarify_id = uuid.uuid4().hex[:12]
        pending = _Pending()
        with self._lock:
            self._pending[clarify_id] = pending
        timeout = self._clarify_timeout

        def delivered(ok: bool, reply: Any) -> None:
            pending.settled = True
            if not ok or not (isinstance(reply, dict) and reply.get("accepted") is True):
                pending.failed = "the Pheby server could not ask the user"
                pending.event.set()

        try:
            self.outbox.push(
                {
                    "event": "clarify.request",
                    "run_id": run_id,
                    "session_id": session_id,
                    "tool_call_id": tool_call_id,
                    "clarify_id": clarify_id,
                    "question": question,
                    "choices": choices,
                    "timeout": timeout,
                },
                on_done=delivered,
            )
            asked = time.monotonic()
            deadline = asked + timeout
            while True:
                pending.event.wait(WAIT_SLICE_S)
                if pending.answer is not None:
                    return pending.answer
                expired = {"event": "clarify.expired", "run_id": run_id, "clarify_id": clarify_id}
                if pending.failed:
                    if not pending.settled:  # released (shutdown) while the request was still queued
                        self.outbox.push(expired)
                    raise ClarifyUnanswered(pending.failed)
                if is_interrupted():
                    if not pending.settled:
                        self.outbox.push(expired)
                    raise ClarifyUnanswered("the run was cancelled")
                if time.monotonic() >= deadline:
                    self.outbox.push(expired)
                    raise ClarifyUnanswered(f"the user did not answer within {timeout:g} seconds")
                if not pending.settled and time.monotonic() - asked >= DELIVERY_GRACE_S:
                    self.outbox.push(expired)
                    raise ClarifyUnanswered("the Pheby server is not reachable to ask the user")
        finally:
            with self._lock:
                self._pending.pop(clarify_id, None)

    def answer_clarify(self, clarify_id: Any, response: Any) -> bool:
        if not isinstance(clarify_id, str) or not isinstance(response, str):
            return False
        with self._lock:
            pending = self._pending.get(clarify_id)
        if pending is None or pending.event.is_set():
            return False
        pending.answer = response
        pending.event.set()
        return True

    def release_all(self, reason: str) -> None:
        """Unblock every waiting clarification (the gateway is shutting down)."""
        with self._lock:
            pending = list(self._pending.values())
        for entry in pending:
            entry.failed = reason
            entry.event.set()


def _text(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None
