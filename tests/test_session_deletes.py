"""`pheby.hermes.session_deletes`: a deleted conversation's Hermes sessions are deleted again at each check
for a while, whatever a check finds; its pacing is driven by a recorded sleep, no clock, no sockets.
(Against the real 0.22-era gateway whose late title writes a session back:
tests/test_conversation_delete_next_real_hermes.py.)"""

import asyncio
from typing import Any, cast

import pytest

import hermes_client as hc
from pheby.hermes.session_deletes import MAX_WATCHES, RECHECK_AFTER_SECONDS, SessionDeletes

pytestmark = pytest.mark.anyio


class Gateway:
    """The sessions a gateway holds; what each DELETE was asked, in order."""

    def __init__(self, *sessions: str) -> None:
        self.sessions = set(sessions)
        self.deletes: list[str] = []
        self.unavailable = False

    async def delete_session(self, session_id: str) -> None:
        self.deletes.append(session_id)
        if self.unavailable:
            raise hc.HermesUnavailable("down")
        if session_id not in self.sessions:
            raise hc.HermesNotFound("Session not found", status=404)
        self.sessions.discard(session_id)


class Pacing:
    """A sleep that records how long it was asked to wait, and lets a test act at each check."""

    def __init__(self, at_each: Any = None) -> None:
        self.waits: list[float] = []
        self.at_each = at_each

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        if self.at_each is not None:
            self.at_each(len(self.waits))
        await asyncio.sleep(0)


def watcher(pacing: Pacing, tasks: list[asyncio.Task[Any]]) -> SessionDeletes:
    return SessionDeletes(tasks.append, sleep=pacing)


async def test_a_session_that_comes_back_is_deleted_again_at_the_next_check() -> None:
    gateway = Gateway()
    # A late title writes s1 back before the second check.
    pacing = Pacing(at_each=lambda check: gateway.sessions.add("s1") if check == 2 else None)
    tasks: list[asyncio.Task[Any]] = []
    deletes = watcher(pacing, tasks)
    deletes.watch(cast(hc.HermesClient, gateway), ["s1", "s2"])
    await asyncio.gather(*tasks)
    assert gateway.sessions == set()
    assert gateway.deletes == ["s1", "s2"] * len(RECHECK_AFTER_SECONDS)
    # Each wait runs from the previous check: the checks land at RECHECK_AFTER_SECONDS from the delete.
    assert [sum(pacing.waits[: i + 1]) for i in range(len(pacing.waits))] == list(RECHECK_AFTER_SECONDS)
    assert deletes.watching() == 0


async def test_a_gateway_that_is_down_at_a_check_is_tried_at_the_next() -> None:
    gateway = Gateway("s1")
    pacing = Pacing(at_each=lambda check: setattr(gateway, "unavailable", check == 1))
    tasks: list[asyncio.Task[Any]] = []
    watcher(pacing, tasks).watch(cast(hc.HermesClient, gateway), ["s1"])
    await asyncio.gather(*tasks)
    assert gateway.sessions == set()


async def test_watches_are_bounded_and_none_is_started_for_no_sessions() -> None:
    gateway = Gateway()
    started = asyncio.Event()

    async def forever(seconds: float) -> None:
        started.set()
        await asyncio.Event().wait()

    tasks: list[asyncio.Task[Any]] = []
    deletes = SessionDeletes(tasks.append, sleep=forever)
    deletes.watch(cast(hc.HermesClient, gateway), [])
    assert tasks == []
    for i in range(MAX_WATCHES + 5):
        deletes.watch(cast(hc.HermesClient, gateway), [f"s{i}"])
    assert len(tasks) == MAX_WATCHES == deletes.watching()
    await started.wait()
    for task in tasks:  # what the services' shutdown does with their background tasks
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert deletes.watching() == 0
