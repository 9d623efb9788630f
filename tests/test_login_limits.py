"""Login under a flood: failures limited per address and per username; password hashing in its own limiter.

A live server behind a "proxy" (`PHEBY_TRUSTED_PROXIES` is loopback), so each request can come from
the address its `X-Forwarded-For` names.
"""

import asyncio
import threading
import time
from collections.abc import Callable

import httpx
import pytest

from pheby.errors import RateLimited
from pheby.settings import Settings
from pheby.store import lockout
from tests.live_server import LiveServer
from tests.passwords import PASSWORD
from tests.test_auth import add_account

pytestmark = pytest.mark.anyio


@pytest.fixture
async def server(
    start_live_server: Callable[[Settings], LiveServer], live_settings: Callable[..., Settings]
) -> LiveServer:
    settings = live_settings(trusted_proxies=("127.0.0.1",))
    await add_account(settings, "alice")
    return start_live_server(settings)


async def login(http: httpx.AsyncClient, address: str, username: str, password: str) -> httpx.Response:
    body = {"username": username, "password": password}
    return await http.post("/api/auth/login", json=body, headers={"X-Forwarded-For": address})


@pytest.mark.live
async def test_failures_for_one_username_are_limited_whichever_address_they_come_from(server: LiveServer) -> None:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as http:
        for n in range(10):
            assert (await login(http, f"203.0.113.{n + 1}", "alice", "wrong")).status_code == 401
        refused = await login(http, "198.51.100.1", "alice", PASSWORD)  # a new address, the right password
        assert refused.status_code == 429
        assert refused.json()["error"]["code"] == "rate_limited"
        retry_after = int(refused.headers["Retry-After"])
        assert 0 < retry_after <= 600
        assert (await login(http, "198.51.100.2", "bob", "x")).status_code == 401  # other usernames are unaffected


@pytest.mark.live
async def test_failures_from_one_address_are_limited_whatever_the_username(server: LiveServer) -> None:
    for n in range(5):  # accounts of their own: a wrong password for an unknown name costs a full-cost hash
        await add_account(server.settings, f"user{n}")
    async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as http:
        for n in range(5):
            assert (await login(http, "203.0.113.50", f"user{n}", "wrong")).status_code == 401
        refused = await login(http, "203.0.113.50", "alice", PASSWORD)
        assert refused.status_code == 429
        assert 0 < int(refused.headers["Retry-After"]) <= 60
        assert (await login(http, "203.0.113.51", "alice", PASSWORD)).status_code == 200


@pytest.mark.live
@pytest.mark.real_password_cost  # the hashes must take their real time for a flood to fill the limiter
async def test_a_login_flood_waits_for_the_hashing_limiter_then_gets_429(server: LiveServer) -> None:
    """More logins at once than the limiter can hash in its wait: some are 429, none 500, the rest 401."""
    async with httpx.AsyncClient(
        base_url=server.base_url, timeout=120, limits=httpx.Limits(max_connections=300)
    ) as http:
        responses = await asyncio.gather(
            *(login(http, f"10.{n // 250}.{n % 250}.1", f"nobody-{n}", "wrong") for n in range(300))
        )
        statuses = [r.status_code for r in responses]
        assert set(statuses) <= {401, 429}, statuses
        assert statuses.count(429) > 0
        assert statuses.count(401) > 0
        assert all(r.json()["error"]["code"] == "rate_limited" for r in responses if r.status_code == 429)
    # The flood is over: a real login goes through. On a connection of its own: the flood's kept-alive ones
    # idled past uvicorn's keep-alive timeout, and a POST on one the server is closing just then is lost.
    async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as http:
        assert (await login(http, "198.51.100.9", "alice", PASSWORD)).status_code == 200


async def test_the_hashing_limiter_runs_two_at_a_time_and_refuses_after_its_wait() -> None:
    hashing = lockout.PasswordHashing(slots=2, wait=0.3)
    running, peak = 0, 0
    lock = threading.Lock()

    def slow_hash() -> bool:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.2)
        with lock:
            running -= 1
        return True

    results = await asyncio.gather(*(hashing.run(slow_hash) for _ in range(8)), return_exceptions=True)
    assert peak == 2
    assert 2 <= sum(r is True for r in results) <= 6
    assert all(isinstance(r, RateLimited) for r in results if r is not True)
