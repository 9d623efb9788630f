"""Hope artifacts over /api/artifacts: shapes, revisions, versions, export, tombstones, limits, isolation."""

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from handlers.support.app import create_app
from pheby.db import Database, SqliteDatabase
from pheby.errors import Conflict, NotFound
from pheby.services import Services
from pheby.settings import Settings
from pheby.store.accounts import Accounts
from pheby.store.artifacts import ArtifactLimits, Artifacts
from tests.app_client import BASE
from tests.passwords import PASSWORD
from tests.test_auth import add_account

pytestmark = [pytest.mark.anyio, pytest.mark.both_engines]
ARTIFACT_KEYS = {"id", "title", "kind", "revision", "content", "created_at", "updated_at"}
HEX32 = re.compile(r"^[0-9a-f]{32}$")
Client = AsyncTestClient[Litestar]


class Caller:
    """One account's bearer headers, for brevity in requests."""

    def __init__(self, token: str) -> None:
        self.headers = {"Authorization": f"Bearer {token}"}


@pytest.fixture
def limits() -> dict[str, Any]:
    """Settings overrides; tests that exercise a limit replace this fixture's value via parametrize."""
    return {}


@pytest.fixture
async def settings(make_settings: Callable[..., Settings], limits: dict[str, Any]) -> Settings:
    return make_settings(**limits)


@pytest.fixture
async def alice(settings: Settings) -> Caller:
    return Caller((await add_account(settings, "alice"))[1])


@pytest.fixture
async def bob(settings: Settings) -> Caller:
    return Caller((await add_account(settings, "bob"))[1])


@pytest.fixture
async def client(settings: Settings, alice: Caller, bob: Caller) -> AsyncIterator[Client]:
    async with AsyncTestClient(create_app(settings), base_url=BASE) as c:
        yield c


async def create(client: Client, who: Caller, **body: Any) -> dict[str, Any]:
    response = await client.post("/api/artifacts", json={"title": "Notes", **body}, headers=who.headers)
    assert response.status_code == 201, response.text
    artifact: dict[str, Any] = response.json()["artifact"]
    return artifact


async def edit(client: Client, who: Caller, artifact_id: str, **body: Any) -> httpx.Response:
    return await client.patch(f"/api/artifacts/{artifact_id}", json=body, headers=who.headers)


async def state(client: Client, who: Caller) -> tuple[Any, Any]:
    """Everything a refused request must leave alone: the list and the change feed."""
    listed = (await client.get("/api/artifacts", headers=who.headers)).json()
    feed = (await client.get("/api/features/sync", headers=who.headers)).json()
    return listed, feed


# --- create, list, get -------------------------------------------------------------------------


async def test_create_answers_201_with_exactly_the_artifact(client: Client, alice: Caller) -> None:
    response = await client.post("/api/artifacts", json={"title": "  Plan  "}, headers=alice.headers)
    assert response.status_code == 201
    body = response.json()
    assert set(body) == {"artifact"}
    artifact = body["artifact"]
    assert set(artifact) == ARTIFACT_KEYS
    assert HEX32.match(artifact["id"])
    assert artifact["title"] == "Plan"
    assert (artifact["kind"], artifact["content"], artifact["revision"]) == ("markdown", "", 1)
    assert isinstance(artifact["created_at"], int)
    assert artifact["created_at"] == artifact["updated_at"]
    code = await create(client, alice, title="x", kind="code", content="print('hi') # ünïcode ✓")
    assert (code["kind"], code["content"]) == ("code", "print('hi') # ünïcode ✓")
    fetched = await client.get(f"/api/artifacts/{code['id']}", headers=alice.headers)
    assert fetched.status_code == 200
    assert fetched.json() == {"artifact": code}


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"title": ""}, 422),
        ({"title": "   "}, 422),
        ({"title": "x" * 161}, 422),
        ({"title": "two\nlines"}, 422),
        ({"title": "ok", "kind": "html"}, 422),
        ({"title": "ok", "kind": "Markdown"}, 422),
        ({}, 400),
        ({"title": 5}, 400),
        ({"title": "ok", "content": None}, 400),
        ({"title": "ok", "owner": "bob"}, 400),
    ],
)
async def test_create_refuses_bad_values(client: Client, alice: Caller, body: dict[str, Any], status: int) -> None:
    response = await client.post("/api/artifacts", json=body, headers=alice.headers)
    assert response.status_code == status
    assert set(response.json()) == {"error"}
    assert (await client.get("/api/artifacts", headers=alice.headers)).json()["artifacts"] == []


async def test_title_of_160_characters_and_malformed_json(client: Client, alice: Caller) -> None:
    assert (await create(client, alice, title="é" * 160))["title"] == "é" * 160
    response = await client.post(
        "/api/artifacts", content=b'{"title": ', headers={**alice.headers, "Content-Type": "application/json"}
    )
    assert response.status_code == 400


async def test_list_is_metadata_only_newest_edit_first(client: Client, alice: Caller) -> None:
    first = await create(client, alice, title="first", content="a")
    second = await create(client, alice, title="second", content="b")
    assert (await edit(client, alice, first["id"], revision=1, content="a2")).status_code == 200
    response = await client.get("/api/artifacts", headers=alice.headers)
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"artifacts", "next_cursor"}
    assert body["next_cursor"] is None
    assert all(set(entry) == ARTIFACT_KEYS - {"content"} for entry in body["artifacts"])
    ids = [entry["id"] for entry in body["artifacts"]]
    assert set(ids) == {first["id"], second["id"]}
    assert body["artifacts"][ids.index(first["id"])]["revision"] == 2


@pytest.mark.parametrize("limits", [{"artifacts_per_account": 210}])
async def test_list_is_bounded_to_the_first_200(client: Client, alice: Caller) -> None:
    for number in range(205):
        await create(client, alice, title=f"n{number}")
    body = (await client.get("/api/artifacts", headers=alice.headers)).json()
    assert len(body["artifacts"]) == 200
    assert body["next_cursor"] is None


async def test_get_a_revision_gives_its_content_and_time_with_current_title(client: Client, alice: Caller) -> None:
    artifact = await create(client, alice, title="old title", kind="text", content="v1")
    assert (await edit(client, alice, artifact["id"], revision=1, content="v2")).status_code == 200
    assert (await edit(client, alice, artifact["id"], revision=2, title="new title", kind="code")).status_code == 200
    current = (await client.get(f"/api/artifacts/{artifact['id']}", headers=alice.headers)).json()["artifact"]
    assert (current["revision"], current["content"], current["title"], current["kind"]) == (
        3,
        "v2",
        "new title",
        "code",
    )
    first = await client.get(f"/api/artifacts/{artifact['id']}?revision=1", headers=alice.headers)
    assert first.status_code == 200
    old = first.json()["artifact"]
    assert set(old) == ARTIFACT_KEYS
    assert (old["revision"], old["content"], old["title"], old["kind"]) == (1, "v1", "new title", "code")
    assert old["created_at"] == artifact["created_at"]
    assert old["updated_at"] == artifact["updated_at"]  # the time version 1 was written
    for missing in ("0", "4", "-1", str(2**63), str(2**70)):
        response = await client.get(f"/api/artifacts/{artifact['id']}?revision={missing}", headers=alice.headers)
        assert response.status_code == 404, missing
    bad = await client.get(f"/api/artifacts/{artifact['id']}?revision=one", headers=alice.headers)
    assert bad.status_code == 400


async def test_versions_are_newest_first(client: Client, alice: Caller) -> None:
    artifact = await create(client, alice, content="1")
    for revision in (1, 2, 3):
        assert (await edit(client, alice, artifact["id"], revision=revision, content=str(revision + 1))).is_success
    response = await client.get(f"/api/artifacts/{artifact['id']}/versions", headers=alice.headers)
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"versions", "next_cursor"}
    assert body["next_cursor"] is None
    assert [v["revision"] for v in body["versions"]] == [4, 3, 2, 1]
    assert all(set(v) == {"revision", "created_at"} and isinstance(v["created_at"], int) for v in body["versions"])


async def test_version_times_come_from_when_each_was_written(tmp_path: Path) -> None:
    now = [1_000.0]
    db = SqliteDatabase(tmp_path / "db.sqlite3")
    await db.open()
    try:
        account = await add_account_in(db, "carol")
        artifacts = Artifacts(db, ArtifactLimits(), clock=lambda: now[0])
        created = await artifacts.create(account, "t", "markdown", "one")
        now[0] = 2_000.9
        edited = await artifacts.update(account, created.id, 1, content="two")
        assert (edited.created_at, edited.updated_at) == (1_000, 2_000)
        old = await artifacts.get(account, created.id, 1)
        assert (old.content, old.created_at, old.updated_at) == ("one", 1_000, 1_000)
        assert [(v.revision, v.created_at) for v in await artifacts.versions(account, created.id)] == [
            (2, 2_000),
            (1, 1_000),
        ]
        with pytest.raises(Conflict):
            await artifacts.update(account, created.id, 1, content="three")
        with pytest.raises(NotFound):
            await artifacts.get("someone-else", created.id)
    finally:
        await db.close()


async def add_account_in(db: Database, name: str) -> str:
    return (await Accounts(db).create(name)).id


# --- edits -------------------------------------------------------------------------------------


async def test_patch_bumps_the_revision_and_stores_a_version(client: Client, alice: Caller) -> None:
    artifact = await create(client, alice, content="draft")
    response = await edit(client, alice, artifact["id"], revision=1, content="final", title="Done")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"artifact"}
    edited = body["artifact"]
    assert set(edited) == ARTIFACT_KEYS
    assert (edited["revision"], edited["content"], edited["title"], edited["kind"]) == (2, "final", "Done", "markdown")
    assert edited["created_at"] == artifact["created_at"]
    kind_only = (await edit(client, alice, artifact["id"], revision=2, kind="text")).json()["artifact"]
    assert (kind_only["revision"], kind_only["content"], kind_only["kind"]) == (3, "final", "text")
    versions = (await client.get(f"/api/artifacts/{artifact['id']}/versions", headers=alice.headers)).json()
    assert len(versions["versions"]) == 3


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"content": "x"}, 409),  # no revision
        ({}, 409),  # no revision comes before nothing to change
        ({"revision": None, "content": "x"}, 409),
        ({"revision": 2, "content": "x"}, 409),  # from the future
        ({"revision": 0, "content": "x"}, 409),
        ({"revision": 2**70, "content": "x"}, 409),
        ({"revision": 1}, 422),  # nothing to change
        ({"revision": 1, "title": ""}, 422),
        ({"revision": 1, "title": "t" * 161}, 422),
        ({"revision": 1, "kind": "pdf"}, 422),
        ({"revision": [1], "content": "x"}, 400),
        ({"revision": "1", "content": "x"}, 400),  # JSON types are kept: a string is not a revision
        ({"revision": 1.0, "content": "x"}, 400),
        ({"revision": True, "content": "x"}, 400),
        ({"revision": 1, "content": 7}, 400),
        ({"revision": 1, "content": "x", "owner": "bob"}, 400),
    ],
)
async def test_patch_refusals_change_nothing(client: Client, alice: Caller, body: dict[str, Any], status: int) -> None:
    artifact = await create(client, alice, content="kept")
    response = await edit(client, alice, artifact["id"], **body)
    assert response.status_code == status, response.text
    assert set(response.json()) == {"error"}
    after = await client.get(f"/api/artifacts/{artifact['id']}", headers=alice.headers)
    assert after.json()["artifact"] == artifact


async def test_a_stale_revision_is_409_after_someone_else_edited(client: Client, alice: Caller) -> None:
    artifact = await create(client, alice)
    assert (await edit(client, alice, artifact["id"], revision=1, content="mine")).status_code == 200
    stale = await edit(client, alice, artifact["id"], revision=1, content="theirs")
    assert stale.status_code == 409
    assert stale.json()["error"]["code"] == "conflict"
    current = (await client.get(f"/api/artifacts/{artifact['id']}", headers=alice.headers)).json()["artifact"]
    assert (current["revision"], current["content"]) == (2, "mine")


async def test_twenty_racing_patches_on_one_revision_exactly_one_wins(settings: Settings, alice: Caller) -> None:
    # Litestar's test clients hand each request to a blocking portal, so `gather` over them runs the
    # requests one after another. An ASGI transport on this loop lets the twenty really interleave.
    app = create_app(settings)
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]  # Litestar's scope types are narrower
    async with app.lifespan(), httpx.AsyncClient(transport=transport, base_url=BASE, headers=alice.headers) as http:
        created = await http.post("/api/artifacts", json={"title": "race", "content": "start"})
        path = f"/api/artifacts/{created.json()['artifact']['id']}"
        responses = await asyncio.gather(
            *(http.patch(path, json={"revision": 1, "content": f"writer {n}"}) for n in range(20))
        )
        statuses = sorted(r.status_code for r in responses)
        assert statuses == [200] + [409] * 19
        winner = next(r for r in responses if r.status_code == 200).json()["artifact"]
        current = (await http.get(path)).json()["artifact"]
        assert current == winner
        assert current["revision"] == 2
        versions = (await http.get(f"{path}/versions")).json()
        assert [v["revision"] for v in versions["versions"]] == [2, 1]


# --- export ------------------------------------------------------------------------------------


async def test_export_is_a_utf8_text_download(client: Client, alice: Caller) -> None:
    content = "# Héllo\n\n<script>alert(1)</script> ✓\n"
    artifact = await create(client, alice, title='../../etc/passwd "quoted"; x\\y', content=content)
    response = await client.get(f"/api/artifacts/{artifact['id']}/export", headers=alice.headers)
    assert response.status_code == 200
    assert response.content == content.encode("utf-8")
    assert response.headers["content-type"] == "text/plain; charset=utf-8"
    assert response.headers["x-content-type-options"] == "nosniff"
    disposition = response.headers["content-disposition"]
    assert disposition.startswith("attachment;")
    filename = re.search(r'filename="([^"]*)"', disposition)
    assert filename is not None
    assert filename.group(1).endswith(".md")
    assert "/" not in filename.group(1)
    assert "\\" not in filename.group(1)
    assert not filename.group(1).startswith(".")
    assert "filename*=UTF-8''" in disposition


@pytest.mark.parametrize(("kind", "suffix"), [("markdown", ".md"), ("text", ".txt"), ("code", ".txt")])
async def test_export_suffix_follows_the_kind(client: Client, alice: Caller, kind: str, suffix: str) -> None:
    artifact = await create(client, alice, title="Réport 2025", kind=kind, content="x")
    response = await client.get(f"/api/artifacts/{artifact['id']}/export", headers=alice.headers)
    disposition = response.headers["content-disposition"]
    assert f'filename="R_port 2025{suffix}"' in disposition
    assert f"filename*=UTF-8''R%C3%A9port%202025{suffix}" in disposition


async def test_export_of_a_revision_and_of_a_missing_one(client: Client, alice: Caller) -> None:
    artifact = await create(client, alice, title="...", content="v1")
    assert (await edit(client, alice, artifact["id"], revision=1, content="v2")).status_code == 200
    old = await client.get(f"/api/artifacts/{artifact['id']}/export?revision=1", headers=alice.headers)
    assert old.status_code == 200
    assert old.text == "v1"
    assert 'filename="artifact.md"' in old.headers["content-disposition"]  # a title of dots leaves no stem
    assert (await client.get(f"/api/artifacts/{artifact['id']}/export", headers=alice.headers)).text == "v2"
    missing = await client.get(f"/api/artifacts/{artifact['id']}/export?revision=3", headers=alice.headers)
    assert missing.status_code == 404
    bad = await client.get(f"/api/artifacts/{artifact['id']}/export?revision=x", headers=alice.headers)
    assert bad.status_code == 400


# --- delete, missing ids, other accounts --------------------------------------------------------


async def test_delete_tombstones_the_artifact_and_all_its_versions(client: Client, alice: Caller) -> None:
    artifact = await create(client, alice, content="v1")
    keep = await create(client, alice, title="keep")
    assert (await edit(client, alice, artifact["id"], revision=1, content="v2")).status_code == 200
    response = await client.delete(f"/api/artifacts/{artifact['id']}", headers=alice.headers)
    assert response.status_code == 200
    assert response.json() == {"ok": True}
    for status in await every_id_route(client, alice, artifact["id"]):
        assert status == 404
    listed = (await client.get("/api/artifacts", headers=alice.headers)).json()["artifacts"]
    assert [entry["id"] for entry in listed] == [keep["id"]]


async def every_id_route(client: Client, who: Caller, artifact_id: str) -> list[int]:
    """The status of every route that takes an artifact id (DELETE last, as it would change things)."""
    path = f"/api/artifacts/{artifact_id}"
    responses = [
        await client.get(path, headers=who.headers),
        await client.get(f"{path}?revision=1", headers=who.headers),
        await client.get(f"{path}/versions", headers=who.headers),
        await client.get(f"{path}/export", headers=who.headers),
        await client.get(f"{path}/export?revision=1", headers=who.headers),
        await client.patch(path, json={"revision": 1, "content": "x"}, headers=who.headers),
        await client.patch(path, json={"revision": 2, "content": "x"}, headers=who.headers),
        await client.delete(path, headers=who.headers),
    ]
    for response in responses:
        if response.status_code == 404:
            assert response.json()["error"]["code"] == "not_found"
    return [r.status_code for r in responses]


async def test_unknown_ids_are_404_everywhere(client: Client, alice: Caller) -> None:
    for artifact_id in ("0" * 32, "not-an-id", "%2e%2e"):
        assert await every_id_route(client, alice, artifact_id) == [404] * 8


async def test_another_accounts_artifact_is_404_and_untouched(client: Client, alice: Caller, bob: Caller) -> None:
    artifact = await create(client, alice, content="private")
    assert await every_id_route(client, bob, artifact["id"]) == [404] * 8
    assert (await client.get("/api/artifacts", headers=bob.headers)).json()["artifacts"] == []
    still = await client.get(f"/api/artifacts/{artifact['id']}", headers=alice.headers)
    assert still.json()["artifact"] == artifact


async def test_every_route_needs_a_caller(client: Client, alice: Caller) -> None:
    artifact = await create(client, alice)
    path = f"/api/artifacts/{artifact['id']}"
    responses = [
        await client.get("/api/artifacts"),
        await client.post("/api/artifacts", json={"title": "x"}),
        await client.get(path),
        await client.get(f"{path}/versions"),
        await client.get(f"{path}/export"),
        await client.patch(path, json={"revision": 1, "content": "x"}),
        await client.delete(path),
        await client.get("/api/artifacts", headers={"Authorization": "Bearer revoked-or-wrong"}),
    ]
    assert [r.status_code for r in responses] == [401] * 8


async def test_cookie_changes_need_the_origin(client: Client) -> None:
    login = await client.post("/api/auth/login", json={"username": "alice", "password": PASSWORD})
    assert login.status_code == 200
    assert (await client.post("/api/artifacts", json={"title": "x"})).status_code == 403
    created = await client.post("/api/artifacts", json={"title": "x"}, headers={"Origin": BASE})
    assert created.status_code == 201
    assert len((await client.get("/api/artifacts")).json()["artifacts"]) == 1


# --- limits: 413 and nothing changed ------------------------------------------------------------


@pytest.mark.parametrize("limits", [{"artifact_content_max_bytes": 8}])
async def test_content_over_the_limit_is_413(client: Client, alice: Caller) -> None:
    before = await state(client, alice)
    too_big = await client.post("/api/artifacts", json={"title": "x", "content": "é" * 5}, headers=alice.headers)
    assert too_big.status_code == 413  # 5 characters, 10 bytes of UTF-8
    assert too_big.json()["error"]["code"] == "too_large"
    assert await state(client, alice) == before
    artifact = await create(client, alice, content="12345678")
    refused = await edit(client, alice, artifact["id"], revision=1, content="123456789")
    assert refused.status_code == 413
    current = (await client.get(f"/api/artifacts/{artifact['id']}", headers=alice.headers)).json()["artifact"]
    assert current == artifact


@pytest.mark.parametrize("limits", [{"artifacts_per_account": 3}])
async def test_artifact_count_includes_tombstones(client: Client, alice: Caller, bob: Caller) -> None:
    first = await create(client, alice)
    await create(client, alice)
    await create(client, alice)
    assert (await client.delete(f"/api/artifacts/{first['id']}", headers=alice.headers)).status_code == 200
    before = await state(client, alice)
    refused = await client.post("/api/artifacts", json={"title": "fourth"}, headers=alice.headers)
    assert refused.status_code == 413
    assert await state(client, alice) == before
    await create(client, bob)  # the limit is per account


@pytest.mark.parametrize("limits", [{"artifact_versions_max": 3}])
async def test_version_count_is_limited(client: Client, alice: Caller) -> None:
    artifact = await create(client, alice, content="1")
    assert (await edit(client, alice, artifact["id"], revision=1, content="2")).status_code == 200
    assert (await edit(client, alice, artifact["id"], revision=2, title="t")).status_code == 200
    before = (await client.get(f"/api/artifacts/{artifact['id']}", headers=alice.headers)).json()
    refused = await edit(client, alice, artifact["id"], revision=3, content="4")
    assert refused.status_code == 413
    assert (await client.get(f"/api/artifacts/{artifact['id']}", headers=alice.headers)).json() == before
    versions = (await client.get(f"/api/artifacts/{artifact['id']}/versions", headers=alice.headers)).json()
    assert [v["revision"] for v in versions["versions"]] == [3, 2, 1]


@pytest.mark.parametrize("limits", [{"artifact_account_bytes": 100}])
async def test_account_storage_counts_every_retained_version(client: Client, alice: Caller, bob: Caller) -> None:
    artifact = await create(client, alice, content="a" * 40)
    assert (await edit(client, alice, artifact["id"], revision=1, content="b" * 35)).status_code == 200
    before = await state(client, alice)
    refused = await edit(client, alice, artifact["id"], revision=2, content="c" * 26)  # 40 + 35 + 26 > 100
    assert refused.status_code == 413
    title_only = await edit(client, alice, artifact["id"], revision=2, title="renamed")  # repeats the 35 bytes
    assert title_only.status_code == 413
    assert await state(client, alice) == before
    assert (await client.delete(f"/api/artifacts/{artifact['id']}", headers=alice.headers)).status_code == 200
    deleted_still_count = await client.post(
        "/api/artifacts", json={"title": "x", "content": "d" * 26}, headers=alice.headers
    )
    assert deleted_still_count.status_code == 413
    await create(client, alice, content="d" * 25)  # exactly at the limit: the refusals took nothing
    await create(client, bob, content="e" * 100)  # the limit is per account


@pytest.mark.parametrize("limits", [{"artifact_global_bytes": 100}])
async def test_global_storage_counts_all_accounts(client: Client, alice: Caller, bob: Caller) -> None:
    await create(client, alice, content="a" * 70)
    before = await state(client, bob)
    refused = await client.post("/api/artifacts", json={"title": "x", "content": "b" * 31}, headers=bob.headers)
    assert refused.status_code == 413
    assert await state(client, bob) == before
    await create(client, bob, content="b" * 30)


async def test_services_hold_the_configured_limits(make_settings: Callable[..., Settings]) -> None:
    settings = make_settings(
        artifact_content_max_bytes=1,
        artifacts_per_account=2,
        artifact_versions_max=3,
        artifact_account_bytes=4,
        artifact_global_bytes=5,
    )
    async with AsyncTestClient(create_app(settings)) as client:
        services: Services = client.app.state.services
        assert services.artifacts.limits == ArtifactLimits(
            content_max_bytes=1, artifacts_per_account=2, versions_max=3, account_bytes=4, global_bytes=5
        )
    assert ArtifactLimits.from_settings(make_settings()) == ArtifactLimits()  # the defaults are the spec's
