"""Revocation reaches live sockets: logout, `pheby account disable|revoke` from another process, expiry.

A real uvicorn server, real WebSocket clients and the demo Hermes; the account commands run as a
separate process on the live server's data dir, as an operator would run them.
"""

import asyncio
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from demo_hermes import DemoHermesServer
from pheby.revocation import ACCOUNT_DISABLED, ACCOUNT_REVOKED, CHECK_SECONDS, newly_ended
from pheby.runs.active import ActiveRun
from pheby.settings import Settings
from pheby.store.accounts import Accounts, CredentialState
from tests.live_server import LiveServer, hermes_settings
from tests.passwords import PASSWORD, fast_accounts
from tests.polling import until
from tests.ws_client import PhebyClient

pytestmark = [pytest.mark.anyio, pytest.mark.both_engines]
CLOSE_POLICY_VIOLATION = 1008


async def add_account(settings: Settings, name: str) -> str:
    """Create an account with a password and an API token straight in the (live) database; return the token."""
    db = settings.open_database()
    await db.open()
    try:
        accounts = fast_accounts(db)
        account = await accounts.create(name, PASSWORD)
        return (await accounts.issue_token(account.id, "api", None)).token
    finally:
        await db.close()


async def login(server: LiveServer, name: str) -> str:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as http:
        response = await http.post("/api/auth/login", json={"username": name, "password": PASSWORD})
    assert response.status_code == 200, response.text
    token: str = response.json()["token"]
    return token


async def pheby_cli(server: LiveServer, *args: str) -> Any:
    """Run `pheby --data-dir <the live server's> account ...` as another process; its JSON output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PHEBY_", "HERMES_"))}
    if server.settings.database_url:
        env["PHEBY_DATABASE_URL"] = server.settings.database_url
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "pheby_main",
        "--data-dir",
        str(server.settings.data_dir),
        "account",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    return json.loads(out)


@pytest.fixture
def connect(live_server: LiveServer, opened: list[PhebyClient]) -> Callable[..., Any]:
    async def open_client(secret: str) -> PhebyClient:
        client = await PhebyClient.connect(live_server.ws_url, secret)
        opened.append(client)
        return client

    return open_client


async def assert_revoked(client: PhebyClient, timeout: float) -> None:
    """The socket got an `unauthorized` error, then a policy-violation close, within `timeout` seconds."""
    error = await client.wait_for(lambda f: f.get("type") == "error", timeout)
    assert error["error"]["code"] == "unauthorized", error
    assert await client.closed(timeout) == CLOSE_POLICY_VIOLATION


async def assert_open(client: PhebyClient) -> None:
    assert (await client.request("ping", "pong"))["type"] == "pong"


async def start_slow_run(client: PhebyClient, server: LiveServer) -> tuple[str, str]:
    """A `/demo slow` run under way: (conversation_id, Hermes's run id)."""
    created = await client.request("conversation.create", "conversation.created", name="slow")
    conversation_id: str = created["conversation_id"]
    await client.request("chat.send", "run.accepted", conversation_id=conversation_id, text="/demo slow")
    await client.expect("message.delta", conversation_id=conversation_id)
    run = server.services.runs.active(conversation_id)
    assert run is not None
    assert run.hermes_run_id
    return conversation_id, run.hermes_run_id


async def assert_run_cancelled(server: LiveServer, hermes: DemoHermesServer, conversation_id: str, run_id: str) -> None:
    """From the server's side: no active run any more, and Hermes's run was stopped (not completed)."""
    await until(lambda: server.services.runs.active(conversation_id) is None, "the run is still active", interval=0.05)
    async with httpx.AsyncClient(base_url=hermes.base_url, timeout=10) as http:
        response = await http.get(f"/v1/runs/{run_id}", headers={"Authorization": f"Bearer {hermes.api_key}"})
    assert response.json()["status"] == "cancelled", response.json()


@pytest.mark.parametrize(
    ("before", "now", "why"),
    [
        (CredentialState(False, None), CredentialState(False, None), None),
        (CredentialState(False, None), CredentialState(True, None), ACCOUNT_DISABLED),
        (CredentialState(True, None), CredentialState(True, None), None),  # ended before: nothing new
        (CredentialState(True, None), CredentialState(False, None), None),  # enabled again
        (CredentialState(False, None), CredentialState(False, 10.0), ACCOUNT_REVOKED),
        (CredentialState(False, 10.0), CredentialState(False, 10.0), None),
        (CredentialState(False, 10.0), CredentialState(False, 20.0), ACCOUNT_REVOKED),  # revoked again
        (None, CredentialState(False, None), None),  # a new account
        (None, CredentialState(True, None), ACCOUNT_DISABLED),
    ],
)
def test_what_ends_an_account(before: CredentialState | None, now: CredentialState, why: str | None) -> None:
    assert newly_ended(before, now) == why


@pytest.mark.live
async def test_logout_closes_that_sessions_socket_and_no_other(
    live_server: LiveServer, connect: Callable[..., Any]
) -> None:
    api_token = await add_account(live_server.settings, "alice")
    session, other_session = await login(live_server, "alice"), await login(live_server, "alice")
    by_session = await connect(session)
    by_other_session = await connect(other_session)
    by_token = await connect(api_token)
    owner = await connect(live_server.secret)
    async with httpx.AsyncClient(base_url=live_server.base_url, timeout=30) as http:
        http.cookies.set("hope_session", session)
        response = await http.post("/api/auth/logout", headers={"Origin": live_server.base_url})
        assert response.status_code == 200
    await assert_revoked(by_session, timeout=1.0)
    for client in (by_other_session, by_token, owner):
        await assert_open(client)


@pytest.mark.live
async def test_disable_from_another_process_closes_the_accounts_sockets_and_cancels_its_run(
    live_server: LiveServer, demo_hermes: DemoHermesServer, connect: Callable[..., Any]
) -> None:
    alice_token = await add_account(live_server.settings, "alice")
    bob_token = await add_account(live_server.settings, "bob")
    alice, alice_by_session = await connect(alice_token), await connect(await login(live_server, "alice"))
    bob, owner = await connect(bob_token), await connect(live_server.secret)
    conversation_id, run_id = await start_slow_run(alice, live_server)

    shown = await pheby_cli(live_server, "disable", "alice")
    assert shown["disabled"] is True
    for client in (alice, alice_by_session):
        await assert_revoked(client, timeout=5.0)
    await assert_run_cancelled(live_server, demo_hermes, conversation_id, run_id)
    for client in (bob, owner):
        await assert_open(client)
    with pytest.raises(AssertionError):  # refused while disabled
        await PhebyClient.connect(live_server.ws_url, alice_token)

    assert (await pheby_cli(live_server, "enable", "alice"))["disabled"] is False
    again = await connect(alice_token)
    await assert_open(again)


@pytest.mark.live
async def test_revoke_from_another_process_ends_every_credential_of_the_account(
    live_server: LiveServer, demo_hermes: DemoHermesServer, connect: Callable[..., Any]
) -> None:
    alice_token = await add_account(live_server.settings, "alice")
    bob_token = await add_account(live_server.settings, "bob")
    session = await login(live_server, "alice")
    alice, alice_by_session, bob = await connect(alice_token), await connect(session), await connect(bob_token)
    conversation_id, run_id = await start_slow_run(alice_by_session, live_server)

    shown = await pheby_cli(live_server, "revoke", "alice")
    assert shown["name"] == "alice"
    assert shown["revoked"] == 2
    for client in (alice, alice_by_session):
        await assert_revoked(client, timeout=5.0)
    await assert_run_cancelled(live_server, demo_hermes, conversation_id, run_id)
    await assert_open(bob)
    for stale in (alice_token, session):
        with pytest.raises(AssertionError):
            await PhebyClient.connect(live_server.ws_url, stale)
    async with httpx.AsyncClient(base_url=live_server.base_url, timeout=30) as http:
        me = await http.get("/api/me", headers={"Authorization": f"Bearer {session}"})
        assert me.status_code == 401
    fresh = (await pheby_cli(live_server, "token", "alice"))["token"]
    await assert_open(await connect(fresh))


async def revoke_then_issue(settings: Settings, name: str) -> str:
    """`pheby account revoke NAME` then `pheby account token NAME`, back to back (one connection, as fast as a
    script runs them): the new token."""
    db = settings.open_database()
    await db.open()
    try:
        accounts = Accounts(db)
        account, _ = await accounts.revoke_all(name)
        return (await accounts.issue_token(account.id, "api", None)).token
    finally:
        await db.close()


@pytest.mark.live
async def test_a_credential_issued_right_after_a_revoke_keeps_working_through_its_sweeps(
    live_server: LiveServer, demo_hermes: DemoHermesServer, connect: Callable[..., Any]
) -> None:
    """The revoke ends what was authenticated before it, on every sweep that follows; a token issued after it,
    its socket and its run are not touched, though the server learns of both changes in the same tick."""
    alice = await connect(await add_account(live_server.settings, "alice"))
    conversation_id, run_id = await start_slow_run(alice, live_server)
    fresh = await connect(await revoke_then_issue(live_server.settings, "alice"))
    created = await fresh.request("conversation.create", "conversation.created")
    accepted = await fresh.request(
        "chat.send", "run.accepted", conversation_id=created["conversation_id"], text="/demo approve"
    )
    await assert_revoked(alice, timeout=5.0)
    await assert_run_cancelled(live_server, demo_hermes, conversation_id, run_id)
    await asyncio.sleep(3 * CHECK_SECONDS)  # the sweep, and the one the next tick repeats, are over
    await assert_open(fresh)
    assert fresh.seen("run.finished", run_id=accepted["run_id"]) == []
    assert live_server.services.runs.active(created["conversation_id"]) is not None
    assert fresh.seen("error") == []


@pytest.mark.live
async def test_account_list_prints_no_secrets(live_server: LiveServer) -> None:
    token = await add_account(live_server.settings, "alice")
    await pheby_cli(live_server, "disable", "alice")
    listed = await pheby_cli(live_server, "list")
    by_name = {entry["name"]: entry for entry in listed}
    assert set(by_name) == {"owner", "alice"}
    assert by_name["alice"]["disabled"] is True
    assert by_name["owner"]["is_owner"] is True
    text = json.dumps(listed)
    for secret in (token, live_server.secret, "scrypt$", PASSWORD):
        assert secret not in text


@pytest.mark.live
async def test_an_expired_sessions_socket_is_closed(
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    opened: list[PhebyClient],
) -> None:
    server = start_live_server(live_settings(session_ttl_seconds=2))
    await add_account(server.settings, "alice")
    session = await login(server, "alice")
    client = await PhebyClient.connect(server.ws_url, session)
    opened.append(client)
    owner = await PhebyClient.connect(server.ws_url, server.secret)
    opened.append(owner)
    await assert_open(client)
    await assert_revoked(client, timeout=6.0)
    await assert_open(owner)


@pytest.mark.live
async def test_a_run_still_being_made_when_its_account_is_disabled_is_cancelled_once_hermes_makes_it(
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    make_demo_hermes: Callable[..., DemoHermesServer],
    opened: list[PhebyClient],
) -> None:
    """Hermes has made the run but answers `POST /v1/runs` only after every sweep of the disable: the run
    of the disabled account must not go on once the server learns its id."""
    hermes = make_demo_hermes(create_delay=3 * CHECK_SECONDS + 1)
    server = start_live_server(live_settings(**hermes_settings(hermes), media_roots=(hermes.media_dir,)))
    alice = await PhebyClient.connect(server.ws_url, await add_account(server.settings, "alice"))
    opened.append(alice)
    created = await alice.request("conversation.create", "conversation.created", name="slow")
    conversation_id = created["conversation_id"]
    await alice.send("chat.send", conversation_id=conversation_id, text="/demo slow")
    deadline = time.monotonic() + 10
    while (run := server.services.runs.active(conversation_id)) is None:  # reserved, being made
        assert time.monotonic() < deadline, "the send never reached the run engine"
        await asyncio.sleep(0.02)

    await pheby_cli(server, "disable", "alice")
    await assert_revoked(alice, timeout=10.0)
    await wait_until_made(run)
    await assert_run_cancelled(server, hermes, conversation_id, run.hermes_run_id)


async def wait_until_made(run: ActiveRun) -> None:
    deadline = time.monotonic() + 20
    while not run.made:
        assert time.monotonic() < deadline, ("Hermes never made the run", run.phase.current)
        await asyncio.sleep(0.02)
