"""Accounts' files stay theirs: MEDIA: copies only from the roots an account was given, agent copies per account.

A real uvicorn server, the demo Hermes (`/demo image` writes its PNG under the demo's media dir, which
`live_settings` makes the server's PHEBY_MEDIA_ROOTS) and the `pheby` command run while the server runs.
"""

import asyncio
import sqlite3
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from demo_hermes import DemoHermesServer, parse_echo_reply
from pheby.cli import main
from pheby.settings import Settings
from pheby.store.accounts import Account, Accounts, HermesAccountSettings, media_roots_for
from tests.files import PNG_1PX
from tests.live_server import LiveServer, hermes_settings
from tests.ws_client import PhebyClient

pytestmark = [pytest.mark.anyio, pytest.mark.live]


async def add_account(settings: Settings, name: str) -> tuple[str, str]:
    """A new account's (id, bearer token)."""
    db = settings.open_database()
    await db.open()
    try:
        account = await Accounts(db).create(name)
        return account.id, (await Accounts(db).issue_token(account.id, "api", None)).token
    finally:
        await db.close()


def attachment_rows(settings: Settings, account_id: str) -> list[tuple[str, str]]:
    conn = sqlite3.connect(settings.database_path)
    try:
        rows = conn.execute(
            "SELECT direction, filename FROM attachments WHERE account_id = ?", (account_id,)
        ).fetchall()
    finally:
        conn.close()
    return [(r[0], r[1]) for r in rows]


async def image_run(client: PhebyClient) -> list[dict[str, object]]:
    """`/demo image` in a new conversation; the attachment.added frames it brought."""
    conversation_id = (await client.request("conversation.create", "conversation.created"))["conversation_id"]
    accepted = await client.request("chat.send", "run.accepted", conversation_id=conversation_id, text="/demo image")
    finished = await client.expect("run.finished", run_id=accepted["run_id"])
    assert finished["status"] == "completed"
    await asyncio.sleep(0.1)  # an attachment.added would come before run.finished; a moment more to be sure
    return client.seen("attachment.added", conversation_id=conversation_id)


async def test_only_the_owner_and_accounts_given_roots_get_files_from_the_servers_disk(
    live_server: LiveServer, demo_hermes: DemoHermesServer
) -> None:
    settings = live_server.settings
    bob_id, bob_token = await add_account(settings, "bob")
    async with (
        await PhebyClient.connect(live_server.ws_url, bob_token) as bob,
        await PhebyClient.connect(live_server.ws_url, live_server.secret) as owner,
    ):
        assert await image_run(bob) == []  # the file is under the server's roots, but not bob's
        assert attachment_rows(settings, bob_id) == []
        assert len(await image_run(owner)) == 1  # the owner's own run still delivers

        code = await asyncio.to_thread(
            main,
            [
                "--data-dir",
                str(settings.data_dir),
                "account",
                "hermes",
                "bob",
                "--media-root",
                str(demo_hermes.media_dir),
            ],
        )
        assert code == 0
        added = await image_run(bob)
        assert len(added) == 1
        assert attachment_rows(settings, bob_id) == [("outbound", added[0]["attachment"]["filename"])]  # type: ignore[index]


def test_an_account_with_its_own_gateway_never_reads_the_servers_disk(tmp_path: Path) -> None:
    def account(**hermes: object) -> Account:
        return Account(
            id="a" * 32,
            name="x",
            is_owner=bool(hermes.pop("owner", False)),
            disabled=False,
            created_at=0,
            hermes=HermesAccountSettings(**hermes),  # type: ignore[arg-type]
        )

    server_roots = (tmp_path / "server",)
    assert media_roots_for(account(owner=True), server_roots) == server_roots
    assert media_roots_for(account(), server_roots) == ()
    assert media_roots_for(account(media_roots=("/srv/bob",)), server_roots) == (Path("/srv/bob"),)
    # Roots stored before a gateway was set (or by hand) are ignored once the account has its own gateway.
    assert media_roots_for(account(url="http://127.0.0.1:1", media_roots=("/srv/bob",)), server_roots) == ()
    assert media_roots_for(account(owner=True, url="http://127.0.0.1:1"), server_roots) == ()


async def test_agent_copies_are_per_account_and_go_with_their_conversation(live_server: LiveServer) -> None:
    settings = live_server.settings
    bob_id, bob_token = await add_account(settings, "bob")
    agent_media = settings.data_dir / "agent-media"
    async with await PhebyClient.connect(live_server.ws_url, bob_token) as bob:
        conversation_id = (await bob.request("conversation.create", "conversation.created"))["conversation_id"]
        async with httpx.AsyncClient(base_url=live_server.base_url, timeout=30) as http:
            response = await http.post(
                "/attachments",
                params={"conversation_id": conversation_id, "filename": "photo.png"},
                content=PNG_1PX,
                headers={"Authorization": f"Bearer {bob_token}", "Content-Type": "image/png"},
            )
        assert response.status_code == 201, response.text
        photo = response.json()["attachment"]
        accepted = await bob.request(
            "chat.send",
            "run.accepted",
            conversation_id=conversation_id,
            text="/demo echo",
            attachment_ids=[photo["attachment_id"]],
        )
        assert accepted["type"] == "run.accepted", accepted
        echo = parse_echo_reply((await bob.expect("message.complete", conversation_id=conversation_id))["text"])
        line = next(line for line in echo.input.splitlines() if "photo.png" in line)
        copy = Path(line.split(" at ", 1)[1].rstrip("]"))
        assert copy.read_bytes() == PNG_1PX
        assert copy.is_relative_to((agent_media / bob_id).resolve())
        await bob.expect("run.finished", run_id=accepted["run_id"])

        await bob.request("conversation.delete", "conversation.deleted", conversation_id=conversation_id)
        assert not copy.exists()
        assert not copy.parent.exists()


async def test_cron_output_of_an_account_without_roots_brings_no_files(
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    make_demo_hermes: Callable[..., DemoHermesServer],
) -> None:
    """Job polling delivers a cron run's MEDIA: files through the same decision as a run's."""
    hermes = make_demo_hermes()
    server = start_live_server(
        live_settings(**hermes_settings(hermes), media_roots=(hermes.media_dir,), job_poll_seconds=0.3)
    )
    bob_id, bob_token = await add_account(server.settings, "bob")
    async with (
        await PhebyClient.connect(server.ws_url, bob_token) as bob,
        await PhebyClient.connect(server.ws_url, server.secret) as owner,
        httpx.AsyncClient(base_url=server.base_url, timeout=30) as http,
    ):
        await asyncio.sleep(0.8)  # the first poll sets the baseline: older cron sessions are history
        for client, token in ((bob, bob_token), (owner, server.secret)):
            body = {"name": "Chart", "schedule": "every 2h", "prompt": "/demo image"}
            task = (await http.post("/api/tasks", json=body, headers={"Authorization": f"Bearer {token}"})).json()
            ran = await http.post(f"/api/tasks/{task['task']['id']}/run", headers={"Authorization": f"Bearer {token}"})
            assert ran.status_code < 300, ran.text
            accepted = await client.expect("run.accepted", timeout=15)
            await client.expect("run.finished", run_id=accepted["run_id"])
        assert bob.seen("attachment.added") == []
        assert attachment_rows(server.settings, bob_id) == []
        assert len(owner.seen("attachment.added")) == 1
