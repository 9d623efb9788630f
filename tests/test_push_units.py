"""Web Push without sockets: when to push and what it says, answer tokens, endpoint checks, key checks,
the queue's bounds. The real sends are in tests/test_push_e2e.py."""

import asyncio
import base64
from collections.abc import Callable
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from pheby.errors import BadRequest
from pheby.protocol import frames as ev
from pheby.push.delivery import PushDelivery
from pheby.push.endpoints import EndpointPolicy, EndpointRefused, Resolver
from pheby.push.notices import Notice, Notices
from pheby.push.subscriptions import SubscriptionKeys, check_keys
from pheby.push.tokens import AnswerTokens, Grant
from pheby.push.vapid import VapidIdentity, b64url, subject_of
from pheby.settings import Settings


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def approval(approval_id: str = "a1", command: str = "rm -rf /tmp/build-output") -> ev.ApprovalRequest:
    return ev.ApprovalRequest(
        approval_id=approval_id,
        session_key="pheby:c1",
        conversation_id="c1",
        run_id="r1",
        command=command,
        description="Destructive shell command (rm -rf)",
        choices=["once", "session", "always", "deny"],
    )


def clarify(choices: list[str] | None) -> ev.ClarifyRequest:
    return ev.ClarifyRequest(
        clarify_id="q1", session_key="pheby:c1", conversation_id="c1", run_id="r1", question="Where?", choices=choices
    )


def notices(clock: Clock, tokens: AnswerTokens | None = None, **kwargs: object) -> Notices:
    options: dict[str, object] = {"run_seconds": 30.0, "decision_seconds": 600.0, **kwargs}
    return Notices(tokens or AnswerTokens(clock), clock=clock, **options)  # type: ignore[arg-type]


# --- when to push, what it says -----------------------------------------------------------------


def test_an_approval_in_the_background_pushes_its_two_actions_and_its_dismiss_follows() -> None:
    clock = Clock()
    tokens = AnswerTokens(clock)
    machine = notices(clock, tokens)
    assert machine.observe("acc", approval(), foreground=True) == []  # someone is looking: no push

    (notice,) = machine.observe("acc", approval("a2"), foreground=False)
    payload = notice.payload
    assert (notice.event, notice.urgency, notice.ttl, notice.topic) == ("approval", "high", 600, "approval-a2")
    assert {k: payload[k] for k in ("type", "tag", "conversation_id", "url", "approval_id")} == {
        "type": "approval",
        "tag": "approval-a2",
        "conversation_id": "c1",
        "url": "/?conversation=c1",
        "approval_id": "a2",
    }
    assert payload["title"] == "Approval needed"
    assert "/tmp/build-output" not in payload["body"]  # paths are scrubbed like error text
    assert "rm -rf" in payload["body"]
    actions = payload["actions"]
    assert [(a["action"], a["title"]) for a in actions] == [("once", "Approve once"), ("deny", "Deny")]
    assert actions[0]["token"] != actions[1]["token"]

    (dismiss,) = machine.observe(
        "acc", ev.ApprovalResolved(approval_id="a2", choice="deny", accepted=False), foreground=True
    )
    assert dismiss.payload["type"] == "dismiss"
    assert dismiss.payload["tag"] == "approval-a2"
    assert tokens.redeem(actions[0]["token"], "once") is None  # the decision resolved: its tokens are void
    # A decision that was never pushed has nothing to dismiss.
    assert (
        machine.observe("acc", ev.ApprovalResolved(approval_id="a1", choice="once", accepted=True), foreground=False)
        == []
    )


def test_a_clarification_offers_at_most_two_choices_and_with_preview_off_no_text_at_all() -> None:
    clock = Clock()
    (notice,) = notices(clock).observe("acc", clarify(["staging", "production", "both"]), foreground=False)
    assert [(a["action"], a["title"]) for a in notice.payload["actions"]] == [
        ("choice-1", "staging"),
        ("choice-2", "production"),
    ]
    assert notice.payload["body"] == "Where?"
    (free_text,) = notices(clock).observe("acc", clarify(None), foreground=False)
    assert free_text.payload["actions"] == []

    quiet = notices(clock, preview="none")
    (hidden,) = quiet.observe("acc", clarify(["staging", "production"]), foreground=False)
    (hidden_approval,) = quiet.observe("acc", approval(command="deploy --token sk-live-123456"), foreground=False)
    text = str(hidden.payload) + str(hidden_approval.payload)
    for secret in ("Where?", "staging", "production", "deploy", "sk-live"):
        assert secret not in text
    assert hidden_approval.payload["body"] == "The agent needs your approval"


def test_a_key_in_a_command_never_reaches_a_push() -> None:
    (notice,) = notices(Clock()).observe(
        "acc",
        approval(command="curl -H 'Authorization: Bearer abcdef123456' https://10.1.2.3/x API_KEY=sk-abc12345"),
        foreground=False,
    )
    body = notice.payload["body"]
    for leaked in ("abcdef123456", "10.1.2.3", "sk-abc12345"):
        assert leaked not in body


def test_a_run_pushes_its_end_only_when_it_took_the_threshold_and_no_one_looks() -> None:
    clock = Clock()
    machine = notices(clock)

    def run(run_id: str, seconds: float, *, foreground: bool) -> list[Notice]:
        machine.observe("acc", ev.RunAccepted(conversation_id="c1", run_id=run_id), foreground=True)
        machine.observe(
            "acc", ev.MessageStart(conversation_id="c1", run_id=run_id, message_id=f"m-{run_id}"), foreground=True
        )
        clock.now += seconds
        machine.observe(
            "acc",
            ev.MessageComplete(conversation_id="c1", message_id=f"m-{run_id}", text="All done: 42"),
            foreground=True,
        )
        return machine.observe(
            "acc", ev.RunFinished(conversation_id="c1", run_id=run_id, status="completed"), foreground=foreground
        )

    assert run("short", 29.0, foreground=False) == []
    assert run("watched", 31.0, foreground=True) == []
    (notice,) = run("long", 31.0, foreground=False)
    assert (notice.event, notice.payload["type"], notice.payload["body"]) == (
        "run_finished",
        "run_finished",
        "All done: 42",
    )
    assert notice.urgency == "normal"


def test_a_delivery_pushes_with_its_task_name_unless_someone_looks() -> None:
    machine = notices(Clock())
    assert machine.delivered("acc", "c9", "r9", "Morning brief", "Sunny", foreground=True) == []
    (notice,) = machine.delivered("acc", "c9", "r9", "Morning brief", "Sunny", foreground=False)
    assert (notice.event, notice.payload["title"], notice.payload["body"]) == ("delivery", "Morning brief", "Sunny")


# --- answer tokens ------------------------------------------------------------------------------


def test_a_token_answers_once_only_its_own_action_and_only_in_time() -> None:
    clock = Clock()
    tokens = AnswerTokens(clock)
    grant = Grant("acc", "approval", "a1", "once")
    minted = tokens.mint({"once": grant, "deny": Grant("acc", "approval", "a1", "deny")}, 60)
    assert tokens.redeem(minted["once"], "deny") is None  # an action it was not given for
    assert tokens.redeem(minted["once"][:-1] + ("A" if minted["once"][-1] != "A" else "B"), "once") is None  # altered
    assert tokens.redeem(minted["once"], "once") == grant
    assert tokens.redeem(minted["once"], "once") is None  # used
    assert tokens.redeem(minted["deny"], "deny") is None  # its sibling went with it
    assert len(tokens) == 0

    late = tokens.mint({"once": grant}, 60)
    clock.now += 60
    assert tokens.redeem(late["once"], "once") is None  # expired


# --- endpoints ----------------------------------------------------------------------------------


class FixedResolver(Resolver):
    def __init__(self, *answers: list[str]) -> None:
        self.answers = list(answers)

    async def resolve(self, host: str, port: int) -> list[str]:
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


@pytest.mark.anyio
@pytest.mark.parametrize(
    "endpoint",
    [
        "http://push.example.com/x",
        "https://10.0.0.1/x",
        "https://169.254.169.254/latest/meta-data",
        "https://[::1]/x",
        "https://[::ffff:127.0.0.1]/x",
        "https://100.64.0.1/x",
        "https://0.0.0.0/x",
        "https://localhost/x",  # the system resolver: 127.0.0.1
        "https://user:pw@push.example.com/x",
        "ftp://push.example.com/x",
        "not a url",
        "https://" + "a" * 3000 + ".com/",
    ],
)
async def test_internal_or_odd_endpoints_are_refused(endpoint: str) -> None:
    with pytest.raises(EndpointRefused):
        await EndpointPolicy().target(endpoint)


@pytest.mark.anyio
async def test_a_name_is_refused_if_any_of_its_addresses_is_internal_and_checked_again_each_time() -> None:
    policy = EndpointPolicy(resolver=FixedResolver(["93.184.216.34", "10.0.0.7"]))
    with pytest.raises(EndpointRefused):
        await policy.target("https://push.example.com/x")

    rebinding = EndpointPolicy(resolver=FixedResolver(["93.184.216.34"], ["127.0.0.1"]))
    target = await rebinding.target("https://push.example.com/x")
    assert (target.host, target.address, target.allowed_host) == ("push.example.com", "93.184.216.34", False)
    with pytest.raises(EndpointRefused):  # the second look resolves inside: no send
        await rebinding.target("https://push.example.com/x")


@pytest.mark.anyio
async def test_allowed_hosts_may_be_internal_and_http() -> None:
    policy = EndpointPolicy(allow_hosts=("127.0.0.1", "Push.Internal"))
    assert (await policy.target("http://127.0.0.1:9/push/1")).allowed_host
    assert (await policy.target("https://push.internal/x")).allowed_host
    with pytest.raises(EndpointRefused):
        await policy.target("http://127.0.0.2/push/1")


# --- keys and the VAPID identity -----------------------------------------------------------------


def test_keys_must_be_a_p256_point_and_a_16_byte_secret() -> None:
    point = (
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    )
    good_auth = b64url(bytes(16))
    check_keys(SubscriptionKeys(p256dh=b64url(point), auth=good_auth))
    off_curve = point[:-1] + bytes([point[-1] ^ 1])
    for keys in (
        SubscriptionKeys(p256dh=b64url(off_curve), auth=good_auth),
        SubscriptionKeys(p256dh=b64url(b"\x04" + bytes(64)), auth=good_auth),
        SubscriptionKeys(p256dh="***", auth=good_auth),
        SubscriptionKeys(p256dh=b64url(point), auth=b64url(bytes(15))),
        SubscriptionKeys(p256dh=b64url(point), auth=b64url(bytes(17))),
    ):
        with pytest.raises(BadRequest):
            check_keys(keys)


def test_the_vapid_key_is_made_once_kept_private_and_can_be_supplied(make_settings: Callable[..., Settings]) -> None:
    settings = make_settings()
    first = VapidIdentity.for_settings(settings)
    key_file = settings.data_dir / "vapid_private_key.pem"
    assert key_file.stat().st_mode & 0o777 == 0o600
    assert VapidIdentity.for_settings(settings).public_key == first.public_key  # the same after a restart
    assert len(base64.urlsafe_b64decode(first.public_key + "==")) == 65

    scalar = ec.generate_private_key(ec.SECP256R1()).private_numbers().private_value.to_bytes(32, "big")
    supplied = VapidIdentity.for_settings(make_settings(vapid_private_key=b64url(scalar)))
    assert supplied.public_key != first.public_key
    assert subject_of(make_settings(public_url="https://pheby.example.com")) == "https://pheby.example.com"
    assert subject_of(make_settings(vapid_subject="mailto:me@example.com")) == "mailto:me@example.com"


# --- the queue's bounds -------------------------------------------------------------------------


def test_the_queue_drops_the_oldest_push_past_its_bounds_per_account_and_in_all() -> None:
    delivery = PushDelivery(None, None, per_account=3, total=5)  # type: ignore[arg-type]  # only queued here

    def notice(account: str, n: int) -> Notice:
        return Notice(account, "approval", {"tag": f"t{n}"}, 60, "high")

    for n in range(5):
        delivery.submit(notice("a", n))
    assert delivery.queued() == 3
    assert delivery.outcomes["dropped"] == 2
    for n in range(5):
        delivery.submit(notice("b", n))
    assert delivery.queued() == 5
    assert delivery.outcomes["dropped"] == 2 + 2 + 1  # one oldest overall (a's), then two of b's own


@pytest.mark.anyio
async def test_a_notice_for_an_account_in_front_of_its_person_elsewhere_is_not_sent() -> None:
    """Another process has the account in front of its person as the notice goes out (`Hub.foreground_elsewhere`):
    it is not sent, and no subscription is even looked up."""
    asked: list[str] = []

    async def elsewhere(account_id: str) -> bool:
        asked.append(account_id)
        return account_id == "looking"

    class NoSubscriptions:
        async def wanting(self, account_id: str, event: str) -> list[Any]:
            raise AssertionError(f"looked up {account_id}'s subscriptions")

    delivery = PushDelivery(NoSubscriptions(), None, foreground_elsewhere=elsewhere)  # type: ignore[arg-type]
    running = asyncio.create_task(delivery.run())
    try:
        delivery.submit(Notice("looking", "approval", {"tag": "t"}, 60, "high"))
        for _ in range(100):
            if delivery.outcomes["foreground"]:
                break
            await asyncio.sleep(0.01)
        assert asked == ["looking"]
        assert delivery.outcomes["foreground"] == 1
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
