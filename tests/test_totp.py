"""The second factor of password sign-in (TOTP and recovery codes): the code step, its limits, on and off.

Codes are made with pyotp from the key the setup answered, at the time of an injected clock
(`services.second_factors.clock`), so a test moves to the next 30-second step without waiting.
"""

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import httpx
import pyotp
import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from handlers.support.app import create_app
from pheby.services import Services
from pheby.settings import Settings
from tests.app_client import BASE
from tests.conftest import TEST_SECRET
from tests.database import dump as database_dump
from tests.database import query
from tests.test_auth import add_account, login

pytestmark = [pytest.mark.anyio, pytest.mark.both_engines]
STEP = 30


class Clock:
    """The second factor's time: codes and tickets are judged at `now`."""

    def __init__(self) -> None:
        self.now = float(int(time.time()) // STEP * STEP)  # the start of a step: the next is 30 s away

    def __call__(self) -> float:
        return self.now


class Alice:
    """Alice's account, her API token (to turn TOTP on and off) and, once on, her key and recovery codes."""

    def __init__(self, token: str) -> None:
        self.headers = {"Authorization": f"Bearer {token}"}
        self.key = ""
        self.recovery_codes: list[str] = []

    def code(self, clock: Clock, steps: int = 0) -> str:
        return pyotp.TOTP(self.key).at(clock.now + steps * STEP)


@pytest.fixture
async def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings(session_ttl_seconds=3600)


@pytest.fixture
async def token(settings: Settings) -> str:
    return (await add_account(settings, "alice"))[1]


@pytest.fixture
async def client(settings: Settings, token: str) -> AsyncIterator[AsyncTestClient[Litestar]]:
    async with AsyncTestClient(create_app(settings), base_url=BASE) as c:
        yield c


@pytest.fixture
def clock(client: AsyncTestClient[Litestar]) -> Clock:
    services: Services = client.app.state.services
    clock = Clock()
    services.second_factors.clock = clock
    return clock


@pytest.fixture
async def alice(client: AsyncTestClient[Litestar], clock: Clock, token: str) -> Alice:
    """Alice with TOTP on; the clock is past the step of the code that turned it on."""
    alice = Alice(token)
    setup = await client.post("/api/auth/totp/setup", headers=alice.headers)
    assert setup.status_code == 200, setup.text
    alice.key = setup.json()["key"]
    assert setup.json()["uri"].startswith("otpauth://totp/Pheby:alice?secret=")
    enabled = await client.post("/api/auth/totp/enable", json={"code": alice.code(clock)}, headers=alice.headers)
    assert enabled.status_code == 200, enabled.text
    alice.recovery_codes = enabled.json()["recovery_codes"]
    clock.now += STEP
    return alice


async def ticket_of(client: AsyncTestClient[Litestar]) -> str:
    response = await login(client)
    assert response.status_code == 202, response.text
    ticket: str = response.json()["ticket"]
    return ticket


async def with_code(client: AsyncTestClient[Litestar], ticket: str, code: str) -> httpx.Response:
    return await client.post("/api/auth/login/totp", json={"ticket": ticket, "code": code})


def wrong(code: str) -> str:
    return f"{(int(code) + 500_000) % 1_000_000:06d}"


def session_methods(settings: Settings) -> list[str]:
    rows = query(settings, "SELECT method FROM auth_tokens WHERE kind = 'session' ORDER BY created_at")
    return [row[0] for row in rows]


async def test_password_then_code_signs_in(
    client: AsyncTestClient[Litestar], alice: Alice, clock: Clock, settings: Settings
) -> None:
    response = await login(client)
    assert response.status_code == 202
    body = response.json()
    assert set(body) == {"second_factor", "ticket", "expires_at"}
    assert body["second_factor"] == "totp"
    assert body["expires_at"] == clock.now + 300
    assert "set-cookie" not in response.headers  # a password alone starts no session
    assert (await client.get("/api/me")).status_code == 401
    assert session_methods(settings) == []

    signed_in = await with_code(client, body["ticket"], alice.code(clock))
    assert signed_in.status_code == 200, signed_in.text
    assert set(signed_in.json()) == {"token", "expires_at"}
    assert "hope_session=" in signed_in.headers["set-cookie"]
    assert (await client.get("/api/me")).json()["name"] == "alice"  # by the cookie
    assert session_methods(settings) == ["totp"]


async def test_wrong_and_reused_codes_are_refused(
    client: AsyncTestClient[Litestar], alice: Alice, clock: Clock
) -> None:
    ticket = await ticket_of(client)
    refused = await with_code(client, ticket, wrong(alice.code(clock)))
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "unauthorized"
    assert (await with_code(client, ticket, alice.code(clock))).status_code == 200  # the ticket outlives a typo

    # The same code again, within its window, and the previous step's: used up.
    assert (await with_code(client, await ticket_of(client), alice.code(clock))).status_code == 401
    assert (await with_code(client, await ticket_of(client), alice.code(clock, -1))).status_code == 401
    clock.now += STEP
    assert (await with_code(client, await ticket_of(client), alice.code(clock))).status_code == 200


async def test_the_eleventh_attempt_is_refused_even_with_the_right_code(
    client: AsyncTestClient[Litestar], alice: Alice, clock: Clock
) -> None:
    ticket = await ticket_of(client)
    for _ in range(10):
        assert (await with_code(client, ticket, wrong(alice.code(clock)))).status_code == 401
    eleventh = await with_code(client, ticket, alice.code(clock))
    assert eleventh.status_code == 429
    assert eleventh.json()["error"]["code"] == "rate_limited"
    assert int(eleventh.headers["retry-after"]) > 0
    # A new ticket is no way round it: the account is locked, not the ticket.
    assert (await with_code(client, await ticket_of(client), alice.code(clock))).status_code == 429


async def test_concurrent_guesses_get_no_more_than_the_limit(
    client: AsyncTestClient[Litestar], alice: Alice, clock: Clock
) -> None:
    ticket = await ticket_of(client)
    guesses = [f"{n:06d}" for n in range(20) if f"{n:06d}" != alice.code(clock)][:20]
    statuses = sorted(r.status_code for r in await asyncio.gather(*(with_code(client, ticket, g) for g in guesses)))
    assert statuses.count(401) == 10
    assert statuses.count(429) == len(guesses) - 10


async def test_a_recovery_code_works_once(client: AsyncTestClient[Litestar], alice: Alice, settings: Settings) -> None:
    assert len(alice.recovery_codes) == 10
    assert len(set(alice.recovery_codes)) == 10
    code = alice.recovery_codes[3]
    typed = f" {code.upper()} "  # as someone types it: case and spaces don't matter
    assert (await with_code(client, await ticket_of(client), typed)).status_code == 200
    assert session_methods(settings) == ["recovery_code"]
    assert (await with_code(client, await ticket_of(client), code)).status_code == 401
    status = await client.get("/api/auth/totp", headers=alice.headers)
    assert status.json() == {"enabled": True, "pending": False, "recovery_codes_left": 9, "required": False}


async def test_a_ticket_is_single_use_and_short_lived(
    client: AsyncTestClient[Litestar], alice: Alice, clock: Clock
) -> None:
    ticket = await ticket_of(client)
    assert (await with_code(client, ticket, alice.code(clock))).status_code == 200
    clock.now += STEP
    assert (await with_code(client, ticket, alice.code(clock))).status_code == 401  # spent
    late = await ticket_of(client)
    clock.now += 301
    assert (await with_code(client, late, alice.code(clock))).status_code == 401  # expired
    assert (await with_code(client, "made-up", alice.code(clock))).status_code == 401


async def test_the_database_holds_no_ticket_or_recovery_code_in_clear(
    client: AsyncTestClient[Litestar], alice: Alice, settings: Settings
) -> None:
    ticket = await ticket_of(client)
    dump = database_dump(settings)
    assert ticket not in dump
    for code in alice.recovery_codes:
        assert code not in dump
        assert code.replace("-", "") not in dump


async def test_a_required_second_factor_refuses_a_password_alone(
    make_settings: Callable[..., Settings], clock: Clock, alice: Alice
) -> None:
    settings = make_settings(require_second_factor=True, session_ttl_seconds=3600)
    await add_account(settings, "bob")
    async with AsyncTestClient(create_app(settings), base_url=BASE) as required:
        services: Services = required.app.state.services
        services.second_factors.clock = clock
        bob = await login(required, username="bob")
        assert bob.status_code == 403
        assert bob.json()["error"]["code"] == "forbidden"
        assert "second factor" in bob.json()["error"]["message"]
        assert "set-cookie" not in bob.headers
        assert (await login(required, username="bob", password="wrong")).status_code == 401
        # Other ways in are unaffected, and an account with TOTP goes on to its code step.
        assert (await required.get("/api/me", headers={"Authorization": f"Bearer {TEST_SECRET}"})).status_code == 200
        assert (await with_code(required, await ticket_of(required), alice.code(clock))).status_code == 200
        status = await required.get("/api/auth/totp", headers=alice.headers)
        assert status.json()["required"] is True


async def test_enabling_needs_a_code_of_the_new_key(
    client: AsyncTestClient[Litestar], clock: Clock, token: str
) -> None:
    alice = Alice(token)
    first = (await client.post("/api/auth/totp/setup", headers=alice.headers)).json()["key"]
    second = (await client.post("/api/auth/totp/setup", headers=alice.headers)).json()["key"]
    assert first != second  # an unconfirmed key is replaced
    status = await client.get("/api/auth/totp", headers=alice.headers)
    assert status.json() == {"enabled": False, "pending": True, "recovery_codes_left": 0, "required": False}

    for code in (pyotp.TOTP(first).at(clock.now), wrong(pyotp.TOTP(second).at(clock.now)), "abc", ""):
        refused = await client.post("/api/auth/totp/enable", json={"code": code}, headers=alice.headers)
        assert refused.status_code == 422, code
    assert (await login(client)).status_code == 200  # a pending key asks for nothing yet

    alice.key = second
    enabled = await client.post("/api/auth/totp/enable", json={"code": alice.code(clock)}, headers=alice.headers)
    assert enabled.status_code == 200
    assert (await client.post("/api/auth/totp/setup", headers=alice.headers)).status_code == 409
    again = await client.post("/api/auth/totp/enable", json={"code": alice.code(clock)}, headers=alice.headers)
    assert again.status_code == 409
    assert (await login(client)).status_code == 202
    # The code that turned it on is used up.
    assert (await with_code(client, await ticket_of(client), alice.code(clock))).status_code == 401


async def test_disabling_needs_a_code(client: AsyncTestClient[Litestar], alice: Alice, clock: Clock) -> None:
    async def disable(body: dict[str, str]) -> httpx.Response:
        return await client.post("/api/auth/totp/disable", json=body, headers=alice.headers)

    assert (await disable({})).status_code == 400
    assert (await disable({"code": wrong(alice.code(clock))})).status_code == 422
    assert (await disable({"code": "0" * 65})).status_code == 400  # codes are bounded
    assert (await client.get("/api/auth/totp", headers=alice.headers)).json()["enabled"] is True

    off = await disable({"code": alice.code(clock)})
    assert off.status_code == 200
    assert off.json() == {"enabled": False, "pending": False, "recovery_codes_left": 0, "required": False}
    assert (await login(client)).status_code == 200
    assert (await disable({"code": alice.code(clock)})).status_code == 409


async def test_a_recovery_code_can_disable(client: AsyncTestClient[Litestar], alice: Alice) -> None:
    off = await client.post("/api/auth/totp/disable", json={"code": alice.recovery_codes[0]}, headers=alice.headers)
    assert off.status_code == 200
    assert (await login(client)).status_code == 200


async def test_the_login_document_states_both_answers(client: AsyncTestClient[Litestar]) -> None:
    document = (await client.get("/schema/openapi.json")).json()
    responses = document["paths"]["/api/auth/login"]["post"]["responses"]
    schemas = document["components"]["schemas"]

    def properties(status: str) -> set[str]:
        ref = responses[status]["content"]["application/json"]["schema"]["$ref"]
        return set(schemas[ref.rsplit("/", 1)[1]]["properties"])

    assert properties("200") == {"token", "expires_at"}
    assert properties("202") == {"second_factor", "ticket", "expires_at"}
    assert "403" in responses
    code_step = document["paths"]["/api/auth/login/totp"]["post"]
    assert "security" not in code_step or code_step["security"] == []
    assert {"/api/auth/totp", "/api/auth/totp/setup", "/api/auth/totp/enable", "/api/auth/totp/disable"} <= set(
        document["paths"]
    )
