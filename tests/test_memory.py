"""Memory controls over /api/memory: the two fixed Hermes memory files, revisioned, no-follow, atomic."""

import asyncio
import hashlib
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
from litestar.testing import AsyncTestClient

from handlers.support.app import create_app
from pheby.settings import Settings
from pheby.store.accounts import HermesAccountSettings
from tests.app_client import BASE, Api
from tests.live_server import LiveServer, free_port
from tests.test_tasks import OWNER, add_account

pytestmark = pytest.mark.anyio

EMPTY: Final = hashlib.sha256(b"").hexdigest()
ENTRY: Final = "User prefers short answers.\n§\nUser's timezone is Europe/Berlin."


def rev(content: str) -> str:
    return hashlib.sha256(content.encode()).hexdigest()


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "hermes-home"
    path.mkdir()
    return path


@pytest.fixture
def settings(make_settings: Callable[..., Settings], home: Path) -> Settings:
    return make_settings(hermes_home=home)


async def test_empty_home_has_two_empty_sections(api: Api, home: Path) -> None:
    response = await api.get("/api/memory", headers=OWNER)
    assert response.status_code == 200
    assert response.json() == {
        "sections": [
            {"section": "memory", "content": "", "revision": EMPTY},
            {"section": "user", "content": "", "revision": EMPTY},
        ]
    }
    assert not (home / "memories").exists()  # reading creates nothing


async def test_get_reads_both_files(api: Api, home: Path) -> None:
    (home / "memories").mkdir()
    (home / "memories" / "MEMORY.md").write_text("Fake LLM wrote this memory entry.", encoding="utf-8")
    (home / "memories" / "USER.md").write_text(ENTRY, encoding="utf-8")
    sections = (await api.get("/api/memory", headers=OWNER)).json()["sections"]
    assert sections == [
        {
            "section": "memory",
            "content": "Fake LLM wrote this memory entry.",
            "revision": rev("Fake LLM wrote this memory entry."),
        },
        {"section": "user", "content": ENTRY, "revision": rev(ENTRY)},
    ]


@pytest.mark.parametrize(("section", "filename"), [("memory", "MEMORY.md"), ("user", "USER.md")])
async def test_put_writes_the_file_atomically_with_private_modes(
    api: Api, home: Path, section: str, filename: str
) -> None:
    response = await api.put(f"/api/memory/{section}", json={"content": ENTRY, "revision": EMPTY}, headers=OWNER)
    assert response.status_code == 200, response.text
    assert response.json() == {"section": section, "content": ENTRY, "revision": rev(ENTRY)}
    directory = home / "memories"
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert stat.S_IMODE((directory / filename).stat().st_mode) == 0o600
    assert (directory / filename).read_text(encoding="utf-8") == ENTRY
    assert sorted(p.name for p in directory.iterdir()) == [filename]  # no temp file left behind
    listed = {s["section"]: s for s in (await api.get("/api/memory", headers=OWNER)).json()["sections"]}
    assert listed[section] == {"section": section, "content": ENTRY, "revision": rev(ENTRY)}

    second = await api.put(
        f"/api/memory/{section}", json={"content": "Replaced.", "revision": rev(ENTRY)}, headers=OWNER
    )
    assert second.json()["revision"] == rev("Replaced.")
    assert (directory / filename).read_text(encoding="utf-8") == "Replaced."


async def test_the_file_is_replaced_not_rewritten_in_place(api: Api, home: Path) -> None:
    (home / "memories").mkdir(mode=0o700)
    target = home / "memories" / "MEMORY.md"
    target.write_text("old", encoding="utf-8")
    before = target.stat().st_ino
    await api.put("/api/memory/memory", json={"content": "new", "revision": rev("old")}, headers=OWNER)
    assert target.stat().st_ino != before  # a rename over the file, never a truncate-and-write
    assert target.read_text(encoding="utf-8") == "new"


async def test_stale_revision_is_409(api: Api, home: Path) -> None:
    await api.put("/api/memory/memory", json={"content": "first", "revision": EMPTY}, headers=OWNER)
    for stale in (EMPTY, rev("something else"), "not-a-revision"):
        response = await api.put("/api/memory/memory", json={"content": "second", "revision": stale}, headers=OWNER)
        assert response.status_code == 409, response.text
        assert response.json()["error"]["code"] == "conflict"
    assert (home / "memories" / "MEMORY.md").read_text(encoding="utf-8") == "first"


async def test_over_64_kib_is_413(api: Api, home: Path) -> None:
    limit = 64 * 1024
    exact = await api.put("/api/memory/user", json={"content": "a" * limit, "revision": EMPTY}, headers=OWNER)
    assert exact.status_code == 200
    for too_big in ("a" * (limit + 1), "é" * (limit // 2 + 1)):  # counted in UTF-8 bytes, not characters
        response = await api.put(
            "/api/memory/user", json={"content": too_big, "revision": rev("a" * limit)}, headers=OWNER
        )
        assert response.status_code == 413, response.text
    assert (home / "memories" / "USER.md").read_text(encoding="utf-8") == "a" * limit


@pytest.mark.parametrize("section", ["MEMORY", "memory.md", "notes", "..%2FMEMORY.md", "USER.md", "soul"])
async def test_unknown_section_is_404(api: Api, home: Path, section: str) -> None:
    response = await api.put(f"/api/memory/{section}", json={"content": "x", "revision": EMPTY}, headers=OWNER)
    assert response.status_code == 404
    assert list(home.rglob("*")) == []


async def test_empty_content_clears_the_section(api: Api, home: Path) -> None:
    await api.put("/api/memory/memory", json={"content": ENTRY, "revision": EMPTY}, headers=OWNER)
    response = await api.put("/api/memory/memory", json={"content": "", "revision": rev(ENTRY)}, headers=OWNER)
    assert response.json() == {"section": "memory", "content": "", "revision": EMPTY}
    path = home / "memories" / "MEMORY.md"
    assert not path.exists() or path.read_bytes() == b""
    sections = (await api.get("/api/memory", headers=OWNER)).json()["sections"]
    assert sections[0] == {"section": "memory", "content": "", "revision": EMPTY}
    again = await api.put("/api/memory/memory", json={"content": "", "revision": EMPTY}, headers=OWNER)
    assert again.status_code == 200


async def test_a_symlinked_memory_file_is_refused_not_followed(api: Api, home: Path, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.txt"
    target.write_text("precious", encoding="utf-8")
    (home / "memories").mkdir(mode=0o700)
    (home / "memories" / "MEMORY.md").symlink_to(target)
    for revision in (rev("precious"), EMPTY):
        response = await api.put("/api/memory/memory", json={"content": "owned", "revision": revision}, headers=OWNER)
        assert response.status_code in (409, 503), response.text
        message = response.json()["error"]["message"]
        assert "symbolic link" in message
        assert str(tmp_path) not in message
    response = await api.get("/api/memory", headers=OWNER)
    assert response.status_code in (409, 503)
    assert "symbolic link" in response.json()["error"]["message"]
    assert target.read_text(encoding="utf-8") == "precious"
    assert (home / "memories" / "MEMORY.md").is_symlink()


async def test_a_symlinked_memories_directory_is_refused(api: Api, home: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (home / "memories").symlink_to(outside)
    response = await api.put("/api/memory/user", json={"content": "x", "revision": EMPTY}, headers=OWNER)
    assert response.status_code in (409, 503)
    assert (await api.get("/api/memory", headers=OWNER)).status_code in (409, 503)
    assert list(outside.iterdir()) == []


async def test_a_fifo_in_place_of_the_file_is_refused(api: Api, home: Path) -> None:
    (home / "memories").mkdir(mode=0o700)
    os.mkfifo(home / "memories" / "USER.md")
    response = await asyncio.wait_for(api.get("/api/memory", headers=OWNER), timeout=10)
    assert response.status_code == 503


@pytest.mark.live
async def test_concurrent_puts_with_one_revision_have_one_winner(
    start_live_server: Callable[[Settings], LiveServer], make_settings: Callable[..., Settings], home: Path
) -> None:
    """Over a real server (the in-process test client handles one request at a time)."""
    server = start_live_server(make_settings(port=free_port(), hermes_home=home))
    async with httpx.AsyncClient(base_url=server.base_url, headers=OWNER, timeout=30) as http:
        await http.put("/api/memory/memory", json={"content": "base", "revision": EMPTY})
        for round_ in range(3):
            base = (await http.get("/api/memory")).json()["sections"][0]
            contents = [f"round {round_} writer {i} " * 300 for i in range(24)]
            responses = await asyncio.gather(
                *(
                    http.put("/api/memory/memory", json={"content": content, "revision": base["revision"]})
                    for content in contents
                )
            )
            statuses = sorted(r.status_code for r in responses)
            assert statuses == [200] + [409] * (len(contents) - 1)
            winner = next(r for r in responses if r.status_code == 200).json()["content"]
            assert (home / "memories" / "MEMORY.md").read_text(encoding="utf-8") == winner
            assert sorted(p.name for p in (home / "memories").iterdir()) == ["MEMORY.md"]


async def test_missing_or_unreadable_home_is_503(make_settings: Callable[..., Settings], tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file-not-dir"
    not_a_dir.write_text("", encoding="utf-8")
    for home in (tmp_path / "missing", not_a_dir):
        async with AsyncTestClient(create_app(make_settings(hermes_home=home)), base_url=BASE) as api:
            response = await api.get("/api/memory", headers=OWNER)
            assert response.status_code == 503, response.text
            assert str(tmp_path) not in response.text
            put = await api.put("/api/memory/memory", json={"content": "x", "revision": EMPTY}, headers=OWNER)
            assert put.status_code == 503
    assert not (tmp_path / "missing").exists()


async def test_unreadable_home_is_503(
    make_settings: Callable[..., Settings], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The tests run as root, which reads any directory, so the kernel's refusal is simulated.
    home = tmp_path / "locked"
    home.mkdir()
    real_open = os.open

    def refusing_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if str(path).startswith(str(home)):
            raise PermissionError(13, "Permission denied")
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing_open)
    async with AsyncTestClient(create_app(make_settings(hermes_home=home)), base_url=BASE) as api:
        response = await api.get("/api/memory", headers=OWNER)
        assert response.status_code == 503
        assert str(home) not in response.text


async def test_no_hermes_home_is_501(make_settings: Callable[..., Settings]) -> None:
    async with AsyncTestClient(create_app(make_settings()), base_url=BASE) as api:
        response = await api.get("/api/memory", headers=OWNER)
        assert response.status_code == 501
        assert response.json()["error"]["code"] == "not_implemented"
        put = await api.put("/api/memory/memory", json={"content": "x", "revision": EMPTY}, headers=OWNER)
        assert put.status_code == 501


async def test_memory_is_per_account_hermes_home(api: Api, settings: Settings, home: Path, tmp_path: Path) -> None:
    alice_home = tmp_path / "alice-home"
    alice_home.mkdir()
    alice = await add_account(settings, "alice", HermesAccountSettings(home=str(alice_home)))
    bob = await add_account(settings, "bob")  # no home of his own: the server's is the owner's, not his
    await api.put("/api/memory/memory", json={"content": "Alice's note", "revision": EMPTY}, headers=alice)
    assert (alice_home / "memories" / "MEMORY.md").read_text(encoding="utf-8") == "Alice's note"
    assert not (home / "memories").exists()
    owner_view = (await api.get("/api/memory", headers=OWNER)).json()["sections"]
    assert owner_view[0]["content"] == ""
    assert (await api.get("/api/memory", headers=alice)).json()["sections"][0]["content"] == "Alice's note"
    await api.put("/api/memory/memory", json={"content": "Owner note", "revision": EMPTY}, headers=OWNER)
    assert (home / "memories" / "MEMORY.md").read_text(encoding="utf-8") == "Owner note"
    assert (alice_home / "memories" / "MEMORY.md").read_text(encoding="utf-8") == "Alice's note"
    bob_reads = await api.get("/api/memory", headers=bob)
    assert bob_reads.status_code == 501
    assert "Owner note" not in bob_reads.text
    bob_writes = await api.put("/api/memory/memory", json={"content": "Bob", "revision": EMPTY}, headers=bob)
    assert bob_writes.status_code == 501
    assert (home / "memories" / "MEMORY.md").read_text(encoding="utf-8") == "Owner note"
    assert (await api.get("/api/capabilities", headers=bob)).json()["capabilities"]["memory"] is False


async def test_memory_needs_authentication(api: Api) -> None:
    assert (await api.get("/api/memory")).status_code == 401
    assert (await api.put("/api/memory/memory", json={"content": "x", "revision": EMPTY})).status_code == 401
