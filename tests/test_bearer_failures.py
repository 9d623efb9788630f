"""Wrong bearer credentials on `/api/*` and `/attachments` are counted per source address.

A live server behind a "proxy" (`PHEBY_TRUSTED_PROXIES` is loopback), so each request comes from the
address its `X-Forwarded-For` names; the counting itself is tested without sockets too.
"""

import asyncio
from collections.abc import Callable

import httpx
import pytest

from pheby.settings import Settings
from pheby.store.lockout import BearerFailures
from tests.live_server import LiveServer
from tests.passwords import PASSWORD
from tests.test_auth import add_account

pytestmark = pytest.mark.anyio

GUESSER = "203.0.113.7"
NEIGHBOUR = "198.51.100.9"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_address_is_locked_after_the_limit_until_its_failures_leave_the_window() -> None:
    clock = Clock()
    failures = BearerFailures(limit=3, window=60.0, clock=clock)
    for _ in range(3):
        assert failures.retry_after(GUESSER, "guess") is None
        failures.record_failure(GUESSER)
        clock.now += 1
    assert failures.retry_after(GUESSER, "guess") == 57  # the oldest of the three leaves the window then
    assert failures.retry_after(NEIGHBOUR, "guess") is None
    clock.now += 57
    assert failures.retry_after(GUESSER, "guess") is None


def test_a_credential_that_worked_from_the_address_is_not_refused_by_its_lockout() -> None:
    failures = BearerFailures(limit=2, clock=Clock())
    failures.vouch(GUESSER, "the-good-one")
    failures.record_failure(GUESSER)
    failures.record_failure(GUESSER)
    assert failures.retry_after(GUESSER, "the-good-one") is None
    assert failures.retry_after(GUESSER, "a-lucky-guess") is not None
    failures.vouch(NEIGHBOUR, "a-lucky-guess")  # vouched elsewhere: no help here
    assert failures.retry_after(GUESSER, "a-lucky-guess") is not None


def test_the_tables_are_bounded() -> None:
    failures = BearerFailures(limit=2, max_sources=100, clock=Clock())
    for n in range(1000):
        failures.record_failure(f"10.0.{n // 256}.{n % 256}")
        failures.vouch(f"10.0.{n // 256}.{n % 256}", "x")
    for n in range(20):
        failures.vouch(GUESSER, f"credential {n}")
    assert len(failures._failures) <= 100
    assert len(failures._vouched) <= 100
    assert len(failures._vouched[GUESSER]) == BearerFailures.VOUCHED_PER_SOURCE


@pytest.fixture
async def server(
    start_live_server: Callable[[Settings], LiveServer], live_settings: Callable[..., Settings]
) -> LiveServer:
    settings = live_settings(trusted_proxies=("127.0.0.1",))
    await add_account(settings, "alice")
    return start_live_server(settings)


def bearer(secret: str, address: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}", "X-Forwarded-For": address}


@pytest.mark.live
async def test_twenty_wrong_bearers_from_one_address_get_429_and_others_are_not_limited(server: LiveServer) -> None:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as http:
        # A client already working from the guesser's address (behind the same NAT, say).
        vouched = bearer(server.secret, GUESSER)
        assert (await http.get("/api/me", headers=vouched)).status_code == 200
        statuses = []
        for n in range(20):
            guess = bearer(f"guess-{n}-of-the-owner-secret", GUESSER)
            path = "/api/me" if n % 2 else "/attachments/0123456789abcdef0123456789abcdef"
            response = await http.get(path, headers=guess)
            statuses.append(response.status_code)
            if response.status_code == 429:
                assert response.json()["error"]["code"] == "rate_limited"
                assert 0 < int(response.headers["Retry-After"]) <= 60
        assert statuses == [401] * 10 + [429] * 10
        # A right credential never seen from there is refused like a guess: else a hit would get in.
        token = await login_token(http, NEIGHBOUR)
        assert (await http.get("/api/me", headers=bearer(token, GUESSER))).status_code == 429
        # A valid bearer from another address is not limited, nor is the client that was working already.
        assert (await http.get("/api/me", headers=bearer(server.secret, NEIGHBOUR))).status_code == 200
        assert (await http.get("/api/me", headers=bearer(token, NEIGHBOUR))).status_code == 200
        assert (await http.get("/api/me", headers=vouched)).status_code == 200


async def login_token(http: httpx.AsyncClient, address: str) -> str:
    response = await http.post(
        "/api/auth/login", json={"username": "alice", "password": PASSWORD}, headers={"X-Forwarded-For": address}
    )
    assert response.status_code == 200, response.text
    token: str = response.json()["token"]
    return token


@pytest.mark.live
async def test_concurrent_guesses_get_no_more_than_the_limit(server: LiveServer) -> None:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as http:
        guesses = [http.get("/api/me", headers=bearer(f"guess-{n}", GUESSER)) for n in range(50)]
        statuses = [response.status_code for response in await asyncio.gather(*guesses)]
    assert sorted(statuses) == [401] * 10 + [429] * 40
