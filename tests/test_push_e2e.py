"""Web Push for real: a real server on the demo Hermes sends to a loopback push service that checks VAPID
and decrypts like a browser's (`tests/push_service.py`), and the notification's answer goes back through
`POST /api/push/actions`."""

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from demo_hermes import DemoHermesServer
from pheby.push.delivery import CONCURRENCY
from pheby.push.tokens import Grant
from pheby.push.vapid import subject_of
from pheby.settings import Settings
from tests.conftest import TEST_NAMES
from tests.demo_hermes_server import client_for
from tests.live_server import LiveServer, hermes_settings, stopped
from tests.polling import until
from tests.push_service import BrowserSubscription, PushService, Received, RecordingListener
from tests.test_media_isolation import add_account
from tests.test_revocation import pheby_cli
from tests.ws_client import PhebyClient

pytestmark = [pytest.mark.anyio, pytest.mark.live]
PUSH_HOST = "127.0.0.1"
NO_PUSH_WAIT = 1.0  # how long a test waits to be sure a push does not come


@dataclass
class Pushing:
    server: LiveServer
    service: PushService
    http: httpx.AsyncClient  # authenticated as the owner

    async def subscribe(self, events: list[str] | None = None, token: str | None = None) -> BrowserSubscription:
        subscription = self.service.subscribe()
        body: dict[str, Any] = subscription.to_json()
        if events is not None:
            body["events"] = events
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        made = await self.http.post("/api/push/subscriptions", json=body, headers=headers)
        assert made.status_code == 201, made.text
        return subscription

    async def client(self, token: str | None = None, *, background: bool = True) -> PhebyClient:
        client = await PhebyClient.connect(self.server.ws_url, token or self.server.secret)
        if background:
            await client.request("presence.set", "presence.state", state="background")
        return client

    async def answer(self, token: str, action: str) -> httpx.Response:
        return await self.http.post("/api/push/actions", json={"token": token, "action": action}, headers={})


@pytest.fixture
def push_settings(live_settings: Callable[..., Settings]) -> Callable[..., Settings]:
    def make(**overrides: Any) -> Settings:
        return live_settings(**{"push_allow_hosts": (PUSH_HOST,), "push_run_seconds": 1.0, **overrides})

    return make


@asynccontextmanager
async def pushing_on(server: LiveServer, service: PushService) -> AsyncIterator[Pushing]:
    """The server's pushes checked by `service` (its VAPID key and subject), and an owner HTTP client."""
    service.expect_vapid(server.services.push.identity.public_key, subject_of(server.settings))
    async with httpx.AsyncClient(
        base_url=server.base_url, headers={"Authorization": f"Bearer {server.secret}"}, timeout=10
    ) as http:
        yield Pushing(server, service, http)


@pytest.fixture
async def pushing(
    start_live_server: Callable[[Settings], LiveServer],
    push_settings: Callable[..., Settings],
    push_service: PushService,
) -> AsyncIterator[Pushing]:
    async with pushing_on(start_live_server(push_settings()), push_service) as value:
        yield value


async def new_chat(client: PhebyClient, text: str) -> tuple[str, str]:
    created = await client.request("conversation.create", "conversation.created")
    accepted = await client.request("chat.send", "run.accepted", conversation_id=created["conversation_id"], text=text)
    return created["conversation_id"], accepted["run_id"]


def action_token(push: Received, action: str) -> str:
    token: str = next(a["token"] for a in push.payload["actions"] if a["action"] == action)
    return token


# --- decisions ----------------------------------------------------------------------------------


async def test_a_decision_pushed_before_a_restart_is_not_pushed_again_by_the_next_server(
    start_live_server: Callable[[Settings], LiveServer],
    push_settings: Callable[..., Settings],
    push_service: PushService,
) -> None:
    settings = push_settings()
    async with pushing_on(start_live_server(settings), push_service) as pushing:
        subscription = await pushing.subscribe()
        phone = await pushing.client()
        conversation_id, run_id = await new_chat(phone, "/demo approve")
        request = await phone.expect("approval.request", run_id=run_id)
        await subscription.wait_for(1, timeout=5)
        await phone.close()
        await stopped(pushing.server)  # handed over: the run goes on in Hermes, its approval journaled

    async with pushing_on(start_live_server(settings), push_service) as pushing:
        phone = await pushing.client()
        snapshot = await phone.request("conversation.open", "conversation.history", conversation_id=conversation_id)
        assert [a["approval_id"] for a in snapshot["approvals"]] == [request["approval_id"]]
        await asyncio.sleep(NO_PUSH_WAIT)
        assert len(subscription.received) == 1  # the new server asked nobody again
        resolved = await phone.request(
            "approval.respond", "approval.resolved", approval_id=request["approval_id"], choice="deny"
        )
        assert resolved["type"] == "approval.resolved", resolved
        await phone.arrived("run.finished", run_id=run_id)
        await phone.close()


async def test_an_approval_reaches_a_background_account_and_is_answered_from_the_notification(
    pushing: Pushing,
) -> None:
    subscription = await pushing.subscribe()
    phone, laptop = await pushing.client(), await pushing.client()
    asked = time.monotonic()
    conversation_id, run_id = await new_chat(phone, "/demo approve")
    request = await phone.expect("approval.request", run_id=run_id)

    (push,) = await subscription.wait_for(1, timeout=5)
    assert push.time - asked < 5
    payload = push.payload
    assert {k: payload[k] for k in ("type", "tag", "conversation_id", "url", "approval_id", "title")} == {
        "type": "approval",
        "tag": f"approval-{request['approval_id']}",
        "conversation_id": conversation_id,
        "url": f"/?conversation={conversation_id}",
        "approval_id": request["approval_id"],
        "title": "Approval needed",
    }
    assert "rm -rf" in payload["body"]
    assert "/tmp/build-output" not in payload["body"]  # no path of the agent's machine
    assert [(a["action"], a["title"]) for a in payload["actions"]] == [("once", "Approve once"), ("deny", "Deny")]
    assert push.urgency == "high"
    assert push.topic == payload["tag"]
    assert 0 < push.ttl <= 900

    answered = await pushing.answer(action_token(push, "once"), "once")
    assert answered.status_code == 200
    assert answered.json() == {"ok": True}
    for client in (phone, laptop):
        resolved = await client.expect("approval.resolved", approval_id=request["approval_id"])
        assert (resolved["choice"], resolved["accepted"]) == ("once", True)
    finished = await phone.expect("run.finished", run_id=run_id)
    assert finished["status"] == "completed"
    complete = phone.seen("message.complete", conversation_id=conversation_id)[-1]
    assert complete["text"].startswith("Approved (once)")
    for client in (phone, laptop):  # exactly one resolution each
        assert len(client.seen("approval.resolved", approval_id=request["approval_id"])) == 1

    again = await pushing.answer(action_token(push, "once"), "once")
    assert again.status_code == 404
    assert set(again.json()["error"]) == {"code", "message"}
    sibling = await pushing.answer(action_token(push, "deny"), "deny")  # the same decision's other button
    assert sibling.status_code == 404

    _, dismiss = await subscription.wait_for(2, timeout=5)
    assert dismiss.payload["type"] == "dismiss"
    assert dismiss.payload["tag"] == payload["tag"]
    assert pushing.service.connections_accepted == 1  # both pushes went over one kept-alive connection
    await phone.close()
    await laptop.close()


async def test_an_account_in_the_foreground_gets_no_push(pushing: Pushing) -> None:
    subscription = await pushing.subscribe()
    watching = await pushing.client(background=False)
    hidden = await pushing.client()  # one client in front of its user is enough
    _, run_id = await new_chat(watching, "/demo approve")
    request = await watching.expect("approval.request", run_id=run_id)
    await watching.request("approval.respond", "approval.resolved", approval_id=request["approval_id"], choice="deny")
    await watching.expect("run.finished", run_id=run_id)
    await asyncio.sleep(NO_PUSH_WAIT)
    assert subscription.attempts == []

    # Once it too goes to the background, the next decision is pushed.
    await watching.request("presence.set", "presence.state", state="background")
    await new_chat(watching, "/demo approve")
    (push,) = await subscription.wait_for(1, timeout=5)
    assert push.payload["type"] == "approval"
    await watching.close()
    await hidden.close()


async def test_a_clarification_offers_its_choices_and_the_one_chosen_is_the_answer(pushing: Pushing) -> None:
    subscription = await pushing.subscribe(events=["clarify"])
    phone = await pushing.client()
    conversation_id, run_id = await new_chat(phone, "/demo clarify")
    request = await phone.expect("clarify.request", run_id=run_id)
    (push,) = await subscription.wait_for(1, timeout=5)
    assert push.payload["type"] == "clarify"
    assert push.payload["clarify_id"] == request["clarify_id"]
    assert push.payload["body"] == "Deploy to staging or production?"
    assert [(a["action"], a["title"]) for a in push.payload["actions"]] == [
        ("choice-1", "staging"),
        ("choice-2", "production"),
    ]
    wrong_action = await pushing.answer(action_token(push, "choice-2"), "choice-1")
    assert wrong_action.status_code == 404  # a token answers only with the action it was offered for

    assert (await pushing.answer(action_token(push, "choice-2"), "choice-2")).status_code == 200
    await phone.expect("clarify.resolved", clarify_id=request["clarify_id"])
    await phone.expect("run.finished", run_id=run_id)
    complete = phone.seen("message.complete", conversation_id=conversation_id)[-1]
    assert complete["text"].startswith("You chose: production")
    _, dismiss = await subscription.wait_for(2, timeout=5)
    assert (dismiss.payload["type"], dismiss.payload["tag"]) == ("dismiss", push.payload["tag"])


async def test_tokens_that_are_foreign_altered_expired_or_for_another_action_change_nothing(
    start_live_server: Callable[[Settings], LiveServer],
    push_settings: Callable[..., Settings],
    push_service: PushService,
) -> None:
    server = start_live_server(push_settings(push_decision_seconds=2.0))
    async with pushing_on(server, push_service) as pushing:
        subscription = await pushing.subscribe()
        owner = await pushing.client()
        bob_id, bob_token = await add_account(server.settings, "bob")
        bob = await pushing.client(bob_token)
        _, run_id = await new_chat(owner, "/demo approve")
        request = await owner.expect("approval.request", run_id=run_id)
        (push,) = await subscription.wait_for(1, timeout=5)
        once = action_token(push, "once")

        altered = once[:-2] + ("AA" if not once.endswith("AA") else "BB")
        assert (await pushing.answer(altered, "once")).status_code == 404
        assert (await pushing.answer(once, "deny")).status_code == 404  # "once" offered, "deny" asked
        assert (await pushing.answer(once, "always")).status_code == 404  # never offered at all

        # A token bound to bob, for the owner's decision: the decision is not bob's to answer.
        foreign = server.services.push.tokens.mint(
            {"once": Grant(bob_id, "approval", request["approval_id"], "once")}, 60
        )
        assert (await pushing.answer(foreign["once"], "once")).status_code == 404
        await asyncio.sleep(0.3)
        assert owner.seen("approval.resolved") == []  # nothing changed
        assert bob.seen("approval.resolved") == []

        await asyncio.sleep(2.0)  # the notification's lifetime passes
        assert (await pushing.answer(once, "once")).status_code == 404
        assert owner.seen("approval.resolved") == []
        # The decision itself still waits, and its own client can answer it.
        await owner.request("approval.respond", "approval.resolved", approval_id=request["approval_id"], choice="deny")
        await owner.expect("run.finished", run_id=run_id)
        await owner.close()
        await bob.close()


async def test_a_subscription_is_pushed_to_only_while_the_credential_that_made_it_works(pushing: Pushing) -> None:
    settings = pushing.server.settings
    _, lost_phone_token = await add_account(settings, "bob")
    lost_phone = await pushing.subscribe(token=lost_phone_token)
    bob = await pushing.client(lost_phone_token)
    _, run_id = await new_chat(bob, "/demo approve")
    (push,) = await lost_phone.wait_for(1, timeout=5)
    assert push.payload["type"] == "approval"

    await pheby_cli(pushing.server, "revoke", "bob")  # the phone was lost: every credential of bob's ends
    await bob.closed(timeout=10)
    # The server sweeps a revoked account once more on its next tick (a second apart), ending whatever the
    # account started meanwhile, a new token's run included: let that pass first.
    await asyncio.sleep(2.5)
    new_token = (await pheby_cli(pushing.server, "token", "bob"))["token"]
    new_phone = await pushing.subscribe(token=new_token)
    bob = await pushing.client(new_token)
    _, run_id = await new_chat(bob, "/demo approve")
    await bob.expect("approval.request", run_id=run_id)
    (pushed,) = await new_phone.wait_for(1, timeout=5)
    assert pushed.payload["type"] == "approval"
    await asyncio.sleep(NO_PUSH_WAIT)
    # Nothing after the revoke, not even the dismiss of the decision the revoke ended (its tokens went with it).
    assert [r.payload["type"] for r in lost_phone.received] == ["approval"]

    await pheby_cli(pushing.server, "disable", "bob")
    await bob.closed(timeout=10)
    await asyncio.sleep(NO_PUSH_WAIT)
    assert [r.payload["type"] for r in new_phone.received] == ["approval"]  # a disabled account is pushed nothing


async def test_failed_answers_are_limited_per_address(pushing: Pushing) -> None:
    statuses = [(await pushing.answer(f"guess-{n}", "once")).status_code for n in range(11)]
    assert statuses == [404] * 10 + [429]


# --- results ------------------------------------------------------------------------------------


async def test_a_long_run_pushes_when_it_finishes_and_a_short_one_does_not(pushing: Pushing) -> None:
    subscription = await pushing.subscribe(events=["run_finished"])
    phone = await pushing.client()
    _, short_run = await new_chat(phone, "hello there")
    await phone.expect("run.finished", run_id=short_run)
    await asyncio.sleep(NO_PUSH_WAIT)
    assert subscription.attempts == []  # quicker than PHEBY_PUSH_RUN_SECONDS (1 s here)

    conversation_id, long_run = await new_chat(phone, "/demo slow")
    await phone.expect("run.finished", run_id=long_run, timeout=30)
    (push,) = await subscription.wait_for(1, timeout=5)
    assert (push.payload["type"], push.payload["conversation_id"]) == ("run_finished", conversation_id)
    assert push.payload["title"] == "Your agent has finished"
    assert push.payload["body"]
    assert push.urgency == "normal"
    await phone.close()


async def test_a_scheduled_tasks_delivery_is_pushed(
    start_live_server: Callable[[Settings], LiveServer],
    push_settings: Callable[..., Settings],
    push_service: PushService,
    make_demo_hermes: Callable[..., DemoHermesServer],
) -> None:
    hermes = make_demo_hermes()
    server = start_live_server(
        push_settings(**hermes_settings(hermes), media_roots=(hermes.media_dir,), job_poll_seconds=0.3)
    )
    async with pushing_on(server, push_service) as pushing:
        subscription = await pushing.subscribe(events=["delivery"])
        phone = await pushing.client()
        await asyncio.sleep(0.8)  # the first poll sets the baseline: older cron sessions are history
        async with client_for(hermes) as hermes_client:
            job = await hermes_client.create_job("Morning brief", "every 2h", "Summarise the news")
            await hermes_client.run_job(job.id)
        accepted = await phone.expect("run.accepted", timeout=15)
        (push,) = await subscription.wait_for(1, timeout=15)
        assert push.payload["type"] == "delivery"
        assert push.payload["conversation_id"] == accepted["conversation_id"]
        assert push.payload["title"] == "Morning brief"
        assert "Summarise the news" in push.payload["body"]
        await phone.close()


# --- push services that misbehave ----------------------------------------------------------------


async def test_a_gone_subscription_is_removed_and_a_busy_service_is_tried_again(pushing: Pushing) -> None:
    gone = await pushing.subscribe(events=["approval"])
    gone.answer_always(410)
    busy = await pushing.subscribe(events=["approval"])
    busy.answer(503, 503)
    phone = await pushing.client()
    _, run_id = await new_chat(phone, "/demo approve")
    await phone.expect("approval.request", run_id=run_id)

    (push,) = await busy.wait_for(1, timeout=10)
    assert [a.answered for a in busy.attempts] == [503, 503, 201]  # delivered once, on the third try
    assert push.payload["type"] == "approval"
    await until(lambda: len(gone.attempts) == 1, "the 410 was answered")
    await until(
        lambda: pushing.server.services.push.delivery.outcomes["gone"] == 1, "the gone subscription was forgotten"
    )
    listed = (await pushing.http.get("/api/push/subscriptions")).json()["subscriptions"]
    assert len(listed) == 1  # only the busy one is left
    assert len(gone.attempts) == 1  # a 410 is not tried again
    await phone.close()


async def test_a_redirect_is_never_followed(pushing: Pushing, recording_listener: RecordingListener) -> None:
    subscription = await pushing.subscribe(events=["approval"])
    subscription.redirect_to(f"{recording_listener.url}/elsewhere")
    phone = await pushing.client()
    await new_chat(phone, "/demo approve")
    await subscription.wait_for_attempts(1, timeout=5)
    await asyncio.sleep(NO_PUSH_WAIT)
    assert [a.answered for a in subscription.attempts] == [307]  # not retried either
    assert recording_listener.requests == []
    await phone.close()


async def test_an_endpoint_that_resolves_inside_by_send_time_gets_no_request(
    pushing: Pushing, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(TEST_NAMES, "push.rebind.test", ["93.184.216.34"])
    subscription = pushing.service.subscribe()
    body = {**subscription.to_json(), "endpoint": f"https://push.rebind.test:{pushing.service.port}/push/x"}
    assert (await pushing.http.post("/api/push/subscriptions", json=body)).status_code == 201
    monkeypatch.setitem(TEST_NAMES, "push.rebind.test", ["127.0.0.1"])  # DNS rebinding
    phone = await pushing.client()
    await new_chat(phone, "/demo approve")
    outcomes = pushing.server.services.push.delivery.outcomes
    await until(lambda: outcomes["refused"] == 1, "the send was refused")
    assert pushing.service.requests_total == 0
    await phone.close()


async def slow_run(client: PhebyClient) -> float:
    """Seconds from `chat.send` to run.finished of `/demo slow` (100 deltas, 50 ms apart)."""
    started = time.monotonic()
    _, run_id = await new_chat(client, "/demo slow")
    await client.expect("run.finished", run_id=run_id, timeout=30)
    return time.monotonic() - started


async def test_a_push_service_that_never_answers_delays_no_delta_and_holds_bounded_sends(
    start_live_server: Callable[[Settings], LiveServer],
    push_settings: Callable[..., Settings],
    push_service: PushService,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = start_live_server(push_settings(push_timeout_seconds=30.0, push_run_seconds=1000.0))
    async with pushing_on(server, push_service) as pushing:
        phone = await pushing.client()

        without_subscriptions = await slow_run(phone)

        hanging = await pushing.subscribe(events=["approval"])
        hanging.hang()
        for _ in range(CONCURRENCY + 3):  # more decisions than sends may be under way at once
            await new_chat(phone, "/demo approve")
        await hanging.wait_for_attempts(CONCURRENCY, timeout=10)
        with_a_hanging_service = await slow_run(phone)

        assert len(hanging.attempts) == CONCURRENCY  # the rest wait in the bounded queue
        assert server.services.push.delivery.queued() == 3
        assert with_a_hanging_service < without_subscriptions + 1.5, (without_subscriptions, with_a_hanging_service)
        await phone.close()
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
