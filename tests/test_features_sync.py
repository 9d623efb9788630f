"""GET /api/features/sync: the caller's attachment and artifact changes, in pages of 200, owner-filtered."""

import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from handlers.support.app import create_app
from pheby.db import Connection
from pheby.services import Services
from pheby.settings import Settings
from pheby.store.changes import ChangeKind, record
from tests.app_client import BASE
from tests.test_auth import add_account

pytestmark = pytest.mark.anyio
Client = AsyncTestClient[Litestar]
CHANGE_KEYS = {"sequence", "kind", "id", "deleted", "created_at"}


@pytest.fixture
async def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings()


@pytest.fixture
async def accounts(settings: Settings) -> dict[str, tuple[str, dict[str, str]]]:
    """name -> (account id, bearer headers)."""
    made = {}
    for name in ("alice", "bob"):
        account_id, token = await add_account(settings, name)
        made[name] = (account_id, {"Authorization": f"Bearer {token}"})
    return made


@pytest.fixture
async def client(settings: Settings, accounts: dict[str, Any]) -> AsyncIterator[Client]:
    async with AsyncTestClient(create_app(settings), base_url=BASE) as c:
        yield c


async def insert_changes(client: Client, changes: list[tuple[str, ChangeKind, str, bool]]) -> None:
    """Record (account id, kind, object id, deleted) changes the way the stores do, in one transaction."""
    services: Services = client.app.state.services

    def q(conn: Connection) -> None:
        for account_id, kind, object_id, deleted in changes:
            record(conn, account_id, kind, object_id, deleted=deleted)

    await services.db.transaction(q)


async def test_450_changes_page_as_200_200_50_then_empty(client: Client, accounts: dict[str, Any]) -> None:
    alice_id, alice = accounts["alice"]
    bob_id, bob = accounts["bob"]
    mine: list[tuple[str, ChangeKind, str, bool]] = []
    batch: list[tuple[str, ChangeKind, str, bool]] = []
    for n in range(450):
        kind: ChangeKind = "attachment" if n % 3 else "artifact"
        change = (alice_id, kind, uuid.uuid4().hex, n % 5 == 0)
        mine.append(change)
        batch.append(change)
        if n % 4 == 0:  # another account's changes interleave with the caller's
            batch.append((bob_id, "artifact", uuid.uuid4().hex, False))
    await insert_changes(client, batch)

    seen: list[dict[str, Any]] = []
    cursor = 0
    sizes = []
    for _ in range(3):
        response = await client.get(f"/api/features/sync?after={cursor}", headers=alice)
        assert response.status_code == 200
        body = response.json()
        assert set(body) == {"changes", "cursor"}
        sizes.append(len(body["changes"]))
        assert body["cursor"] == body["changes"][-1]["sequence"]
        seen.extend(body["changes"])
        cursor = body["cursor"]
    assert sizes == [200, 200, 50]
    empty = (await client.get(f"/api/features/sync?after={cursor}", headers=alice)).json()
    assert empty == {"changes": [], "cursor": cursor}

    sequences = [c["sequence"] for c in seen]
    assert sequences == sorted(sequences)
    assert len(set(sequences)) == 450
    assert all(set(c) == CHANGE_KEYS and isinstance(c["created_at"], int) for c in seen)
    assert [(c["kind"], c["id"], c["deleted"]) for c in seen] == [(k, i, d) for _, k, i, d in mine]

    bob_feed = (await client.get("/api/features/sync?after=0", headers=bob)).json()
    assert len(bob_feed["changes"]) == 113
    assert not {c["id"] for c in bob_feed["changes"]} & {c["id"] for c in seen}


async def test_artifact_creates_edits_and_deletes_appear_for_their_owner_only(
    client: Client, accounts: dict[str, Any]
) -> None:
    _, alice = accounts["alice"]
    _, bob = accounts["bob"]
    start = (await client.get("/api/features/sync", headers=alice)).json()
    assert start == {"changes": [], "cursor": 0}
    created = await client.post("/api/artifacts", json={"title": "doc"}, headers=alice)
    artifact_id = created.json()["artifact"]["id"]
    await client.patch(f"/api/artifacts/{artifact_id}", json={"revision": 1, "content": "x"}, headers=alice)
    await client.delete(f"/api/artifacts/{artifact_id}", headers=alice)
    feed = (await client.get("/api/features/sync?after=0", headers=alice)).json()
    assert [(c["kind"], c["id"], c["deleted"]) for c in feed["changes"]] == [
        ("artifact", artifact_id, False),
        ("artifact", artifact_id, False),  # the edit: other clients learn to reload it
        ("artifact", artifact_id, True),
    ]
    assert feed["cursor"] == feed["changes"][-1]["sequence"]
    assert (await client.get("/api/features/sync?after=0", headers=bob)).json() == {"changes": [], "cursor": 0}
    # A cursor past the caller's last change is kept as it is.
    assert (await client.get("/api/features/sync?after=999", headers=alice)).json() == {"changes": [], "cursor": 999}


@pytest.mark.parametrize("after", ["-1", "abc", "1.5", "", str(2**63), "0x10"])
async def test_a_bad_cursor_is_400(client: Client, accounts: dict[str, Any], after: str) -> None:
    _, alice = accounts["alice"]
    response = await client.get(f"/api/features/sync?after={after}", headers=alice)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "bad_request"


async def test_sync_needs_a_caller(client: Client) -> None:
    assert (await client.get("/api/features/sync?after=0")).status_code == 401


async def chunks(data: bytes) -> AsyncIterator[bytes]:
    yield data


async def test_only_hope_attachments_are_in_the_feed(client: Client, accounts: dict[str, Any]) -> None:
    """The feed lists what `/api/attachments` can fetch: Pheby uploads and agent files stay out of it."""
    alice_id, alice = accounts["alice"]
    services: Services = client.app.state.services
    conversation = await services.conversations.create(alice_id, "chat")
    upload = await services.attachments.upload_pheby(alice_id, conversation.id, "a.md", "text/markdown", chunks(b"a"))
    await services.attachments.claim([upload], "m1")
    pushed = await services.attachments.store_pushed_deliverable(
        alice_id, conversation.id, "m2", "out.txt", "text/plain", chunks(b"out")
    )
    await services.attachments.delete(alice_id, pushed.id)
    assert (await client.get("/api/features/sync?after=0", headers=alice)).json() == {"changes": [], "cursor": 0}

    hope = await client.post(
        "/api/attachments", content=b"hi", headers={**alice, "Content-Type": "text/plain", "X-Filename": "hi.txt"}
    )
    hope_id = hope.json()["attachment"]["id"]
    await client.delete(f"/api/attachments/{hope_id}", headers=alice)
    feed = (await client.get("/api/features/sync?after=0", headers=alice)).json()["changes"]
    assert [(c["kind"], c["id"], c["deleted"]) for c in feed] == [
        ("attachment", hope_id, False),
        ("attachment", hope_id, True),
    ]
