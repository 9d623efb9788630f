"""Passwords: ASVS hashes (old ones upgraded at sign-in), the policy, changing one's own password.

The accounts here are made at the server's real hashing cost where the test is about hashing; the
others use `tests.passwords.FAST_COST` for the hash they start with (a sign-in on the server still
checks it and upgrades it at the real cost).
"""

import asyncio
import io
import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from handlers.support.app import create_app
from pheby.cli import main
from pheby.errors import Unprocessable
from pheby.settings import Settings
from pheby.store.accounts import Accounts
from pheby.store.password_hashing import MAX_MEMORY_BYTES, SCRYPT_COST, ScryptCost, check_password, hash_password
from pheby.store.password_policy import MIN_CHARS, refusal
from tests.app_client import BASE
from tests.conftest import TEST_SECRET
from tests.database import query
from tests.live_server import LiveServer
from tests.passwords import OTHER_PASSWORD, PASSWORD, fast_accounts
from tests.test_auth import add_account, login
from tests.test_revocation import assert_open, assert_revoked
from tests.ws_client import PhebyClient

pytestmark = pytest.mark.anyio
COMMON_PASSWORDS = ("password123456", "qwertyuiop123")
OLD_COST = ScryptCost(n=2**14, r=8, p=1)  # what the server hashed with before ASVS 5.0


def stored_hash(settings: Settings, name: str) -> str | None:
    [row] = query(settings, "SELECT password_hash FROM accounts WHERE name = ?", (name,))
    value: str | None = row[0]
    return value


def cost_of(encoded: str) -> ScryptCost:
    scheme, n, r, p, _salt, _digest = encoded.split("$")
    assert scheme == "scrypt"
    return ScryptCost(n=int(n), r=int(r), p=int(p))


async def change(
    client: AsyncTestClient[Litestar], current: str, new: str, headers: dict[str, str] | None = None
) -> httpx.Response:
    body = {"current_password": current, "new_password": new}
    return await client.post("/api/auth/password", json=body, headers={"Origin": BASE, **(headers or {})})


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings(session_ttl_seconds=3600)


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[AsyncTestClient[Litestar]]:
    await add_account(settings, "alice")
    async with AsyncTestClient(create_app(settings), base_url=BASE) as c:
        yield c


# --- hashing ---------------------------------------------------------------------------------------------


def test_new_hashes_meet_asvs_5() -> None:
    encoded = hash_password(PASSWORD)
    assert cost_of(encoded) == ScryptCost(n=2**17, r=8, p=1) == SCRYPT_COST
    assert check_password(PASSWORD, encoded)
    assert not check_password(OTHER_PASSWORD, encoded)
    assert SCRYPT_COST.memory_bytes > 128 * SCRYPT_COST.r * SCRYPT_COST.n * SCRYPT_COST.p  # maxmem lets it run


def test_a_hash_asking_for_more_memory_than_the_bound_is_refused_before_it_runs() -> None:
    forged = "scrypt$1048576$8$1$" + hash_password("x", OLD_COST).split("$", 4)[4]  # 1 GiB
    assert ScryptCost(n=2**20, r=8, p=1).memory_bytes > MAX_MEMORY_BYTES
    with pytest.raises(ValueError, match="memory bound"):
        check_password("x", forged)


@pytest.mark.real_password_cost
async def test_an_old_hash_is_upgraded_at_the_next_sign_in(
    client: AsyncTestClient[Litestar], settings: Settings
) -> None:
    db = settings.open_database()
    await db.open()
    try:
        await Accounts(db, password_cost=OLD_COST).create("olga", PASSWORD)  # as the server made it before
    finally:
        await db.close()
    old = stored_hash(settings, "olga")
    assert old is not None
    assert cost_of(old) == OLD_COST

    assert (await login(client, "olga", "a wrong password")).status_code == 401
    assert stored_hash(settings, "olga") == old  # a failed sign-in upgrades nothing
    assert (await login(client, "olga", PASSWORD)).status_code == 200
    upgraded = stored_hash(settings, "olga")
    assert upgraded is not None
    assert upgraded != old
    assert cost_of(upgraded) == SCRYPT_COST
    assert (await login(client, "olga", PASSWORD)).status_code == 200  # the new hash is the same password
    assert stored_hash(settings, "olga") == upgraded  # and is not made again


# --- the policy ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("password", [*COMMON_PASSWORDS, "short-Xk9#", "alicealice2024", "phebyhermes1"])
def test_short_or_guessable_passwords_are_refused(password: str) -> None:
    reason = refusal(password, "alice")
    assert reason is not None
    assert len(reason) > 20  # says what to do


def test_a_short_password_is_told_the_minimum() -> None:
    reason = refusal("Xk9#pQ2!", "alice")
    assert reason is not None
    assert str(MIN_CHARS) in reason


@pytest.mark.parametrize("password", [PASSWORD, OTHER_PASSWORD, "correct horse battery", "Xk9#pQ2!vL7@mN4$"])
def test_strong_passwords_pass(password: str) -> None:
    assert refusal(password, "alice") is None


def test_a_long_password_is_scored_on_a_bounded_start() -> None:
    assert refusal(PASSWORD + "a" * 4096, "alice") is None
    assert refusal("a" * 4096, "alice") is not None  # its start alone is guessable


async def test_a_common_password_is_refused_at_creation(settings: Settings) -> None:
    db = settings.open_database()
    await db.open()
    try:
        for password in COMMON_PASSWORDS:
            with pytest.raises(Unprocessable):
                await fast_accounts(db).create("weakling", password)
        assert [a.name for a in await Accounts(db).list_all()] == []
    finally:
        await db.close()


# --- changing one's own password (REST) -----------------------------------------------------------------


async def login_elsewhere(client: AsyncTestClient[Litestar], name: str = "alice") -> str:
    """A session of `name` on another device: its token; this client keeps no cookie of it (a sign-in here
    would end the session of the cookie it came with)."""
    response = await login(client, name)
    assert response.status_code == 200, response.text
    client.cookies.clear()
    token: str = response.json()["token"]
    return token


async def test_a_change_ends_the_other_sessions_and_keeps_the_callers(
    client: AsyncTestClient[Litestar], settings: Settings
) -> None:
    _, api_token = await add_account(settings, "alice2")  # another account's sessions are not touched
    other_account = await login_elsewhere(client, "alice2")
    other = await login_elsewhere(client)
    mine = (await login(client)).json()["token"]  # the cookie is this one's
    _, alice_api_token = await _issue_api_token(settings, "alice")

    changed = await change(client, PASSWORD, OTHER_PASSWORD)
    assert changed.status_code == 200, changed.text
    assert changed.json() == {"ok": True}

    assert (await client.get("/api/me")).status_code == 200  # the cookie's session goes on
    client.cookies.clear()
    for token, status in ((mine, 200), (other, 401), (alice_api_token, 200), (other_account, 200), (api_token, 200)):
        assert (await client.get("/api/me", headers={"Authorization": f"Bearer {token}"})).status_code == status
    assert (await login(client, password=PASSWORD)).status_code == 401
    assert (await login(client, password=OTHER_PASSWORD)).status_code == 200


async def _issue_api_token(settings: Settings, name: str) -> tuple[str, str]:
    db = settings.open_database()
    await db.open()
    try:
        accounts = Accounts(db)
        account = await accounts.get_by_name(name)
        return account.id, (await accounts.issue_token(account.id, "api", None)).token
    finally:
        await db.close()


async def test_a_bearer_session_can_change_and_keeps_working(client: AsyncTestClient[Litestar]) -> None:
    token = (await login(client)).json()["token"]
    client.cookies.clear()
    bearer = {"Authorization": f"Bearer {token}"}
    assert (await change(client, PASSWORD, OTHER_PASSWORD, bearer)).status_code == 200
    assert (await client.get("/api/me", headers=bearer)).status_code == 200


async def test_a_wrong_current_password_is_403_and_changes_nothing(
    client: AsyncTestClient[Litestar], settings: Settings
) -> None:
    other = await login_elsewhere(client)
    assert (await login(client)).status_code == 200
    before = stored_hash(settings, "alice")
    wrong = await change(client, "not-the-password-at-all", OTHER_PASSWORD)
    assert wrong.status_code == 403
    assert wrong.json()["error"]["code"] == "forbidden"
    assert "current password" in wrong.json()["error"]["message"]
    assert stored_hash(settings, "alice") == before
    assert (await client.get("/api/me", headers={"Authorization": f"Bearer {other}"})).status_code == 200
    assert (await login(client, password=PASSWORD)).status_code == 200


@pytest.mark.parametrize("new", [*COMMON_PASSWORDS, "Xk9#pQ2!"])
async def test_a_refused_new_password_is_422_with_what_to_do_and_changes_nothing(
    client: AsyncTestClient[Litestar], settings: Settings, new: str
) -> None:
    other = await login_elsewhere(client)
    assert (await login(client)).status_code == 200
    before = stored_hash(settings, "alice")
    refused = await change(client, PASSWORD, new)
    assert refused.status_code == 422
    assert refused.json()["error"]["message"] == refusal(new, "alice")
    assert stored_hash(settings, "alice") == before
    assert (await client.get("/api/me", headers={"Authorization": f"Bearer {other}"})).status_code == 200


async def test_wrong_current_passwords_lock_out_like_failed_logins(client: AsyncTestClient[Litestar]) -> None:
    assert (await login(client)).status_code == 200
    for n in range(5):
        assert (await change(client, f"wrong-guess-{n}", OTHER_PASSWORD)).status_code == 403
    locked = await change(client, PASSWORD, OTHER_PASSWORD)
    assert locked.status_code == 429
    assert int(locked.headers["retry-after"]) > 0
    assert (await login(client)).status_code == 429  # the login's counters: no extra guesses by this route


async def test_a_change_by_cookie_needs_an_allowed_origin(client: AsyncTestClient[Litestar]) -> None:
    assert (await login(client)).status_code == 200
    body = {"current_password": PASSWORD, "new_password": OTHER_PASSWORD}
    assert (await client.post("/api/auth/password", json=body)).status_code == 403
    assert (
        await client.post("/api/auth/password", json=body, headers={"Origin": "https://evil.example"})
    ).status_code == 403


async def test_unknown_fields_and_oversized_passwords_are_400(client: AsyncTestClient[Litestar]) -> None:
    assert (await login(client)).status_code == 200
    extra = {"current_password": PASSWORD, "new_password": OTHER_PASSWORD, "username": "bob"}
    assert (await client.post("/api/auth/password", json=extra, headers={"Origin": BASE})).status_code == 400
    assert (await change(client, PASSWORD, "x" * 5000)).status_code == 400


async def test_the_owner_signed_in_with_the_secret_may_set_a_first_password(client: AsyncTestClient[Litestar]) -> None:
    secret = {"Authorization": f"Bearer {TEST_SECRET}"}
    assert (await login(client, "owner", OTHER_PASSWORD)).status_code == 401
    assert (await change(client, "", OTHER_PASSWORD, secret)).status_code == 200
    assert (await login(client, "owner", OTHER_PASSWORD)).status_code == 200
    client.cookies.clear()
    again = await change(client, "", PASSWORD, secret)  # now it has one: the current one is asked
    assert again.status_code == 403


async def test_an_account_without_a_password_is_told_who_sets_one(
    client: AsyncTestClient[Litestar], settings: Settings
) -> None:
    _, token = await add_account(settings, "bob", None)
    refused = await change(client, "", OTHER_PASSWORD, {"Authorization": f"Bearer {token}"})
    assert refused.status_code == 403
    assert "pheby account password" in refused.json()["error"]["message"]
    assert stored_hash(settings, "bob") is None


# --- acceptance on a real server: sockets, and the CLI from another process ------------------------------


async def sign_in(server: LiveServer, password: str = PASSWORD) -> str:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as http:
        response = await http.post("/api/auth/login", json={"username": "alice", "password": password})
    assert response.status_code == 200, response.text
    token: str = response.json()["token"]
    return token


async def connected(server: LiveServer, secret: str, opened: list[PhebyClient]) -> PhebyClient:
    client = await PhebyClient.connect(server.ws_url, secret)
    opened.append(client)
    return client


@pytest.mark.live
async def test_a_change_closes_the_other_sessions_sockets_within_a_second(
    live_server: LiveServer, opened: list[PhebyClient]
) -> None:
    _, api_token = await add_account(live_server.settings, "alice")
    mine, other, third = await sign_in(live_server), await sign_in(live_server), await sign_in(live_server)
    by_mine, by_other = await connected(live_server, mine, opened), await connected(live_server, other, opened)
    by_third, by_api_token = (
        await connected(live_server, third, opened),
        await connected(live_server, api_token, opened),
    )

    async with httpx.AsyncClient(base_url=live_server.base_url, timeout=30) as http:
        http.cookies.set("hope_session", mine)
        body = {"current_password": PASSWORD, "new_password": OTHER_PASSWORD}
        response = await http.post("/api/auth/password", json=body, headers={"Origin": live_server.base_url})
        assert response.status_code == 200, response.text
        await assert_revoked(by_other, timeout=1.0)
        await assert_revoked(by_third, timeout=1.0)
        await assert_open(by_mine)
        await assert_open(by_api_token)
        assert (await http.get("/api/me")).status_code == 200  # the changing session goes on


async def pheby_account_password(server: LiveServer, name: str, password: str) -> tuple[int, Any, str]:
    """`pheby --data-dir <the live server's> account password NAME --password-stdin`, as another process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PHEBY_", "HERMES_"))}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "pheby_main",
        "--data-dir",
        str(server.settings.data_dir),
        "account",
        "password",
        name,
        "--password-stdin",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await asyncio.wait_for(process.communicate(f"{password}\n".encode()), 60)
    assert process.returncode is not None
    return process.returncode, json.loads(out) if process.returncode == 0 else None, err.decode()


@pytest.mark.live
async def test_the_cli_sets_a_password_and_ends_every_session_of_the_account(
    live_server: LiveServer, opened: list[PhebyClient]
) -> None:
    _, api_token = await add_account(live_server.settings, "alice")
    first, second = await sign_in(live_server), await sign_in(live_server)
    by_first, by_second = await connected(live_server, first, opened), await connected(live_server, second, opened)
    by_api_token = await connected(live_server, api_token, opened)

    code, _, err = await pheby_account_password(live_server, "alice", COMMON_PASSWORDS[0])
    assert code == 1
    assert "too easy to guess" in err
    await assert_open(by_first)

    code, shown, err = await pheby_account_password(live_server, "alice", OTHER_PASSWORD)
    assert code == 0, err
    assert shown == {"id": shown["id"], "name": "alice", "ended_sessions": 2}
    for client in (by_first, by_second):  # the server's sweep notices the other process's commit
        await assert_revoked(client, timeout=5.0)
    await assert_open(by_api_token)
    await sign_in(live_server, OTHER_PASSWORD)
    async with httpx.AsyncClient(base_url=live_server.base_url, timeout=30) as http:
        old = await http.post("/api/auth/login", json={"username": "alice", "password": PASSWORD})
        assert old.status_code == 401


def test_the_cli_refuses_a_common_password_at_creation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for password in COMMON_PASSWORDS:
        monkeypatch.setattr(sys, "stdin", io.StringIO(f"{password}\n"))
        assert main(["--data-dir", str(tmp_path), "account", "create", "alice", "--password-stdin"]) == 1
        assert "too easy to guess" in capsys.readouterr().err
    assert main(["--data-dir", str(tmp_path), "account", "list"]) == 0
    assert [a["name"] for a in json.loads(capsys.readouterr().out)] == ["owner"]
