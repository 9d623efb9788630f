"""Accounts, sessions and settings survive a restart of the app on the same data dir."""

from pathlib import Path

import pytest
from litestar.testing import AsyncTestClient

from handlers.support.app import create_app
from pheby.settings import load_settings
from tests.passwords import PASSWORD
from tests.test_auth import add_account

pytestmark = pytest.mark.anyio


async def test_state_survives_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = load_settings({}, data_dir=data_dir)  # generates and keeps the owner secret
    _, api_token = await add_account(first, "alice")
    async with AsyncTestClient(create_app(first)) as client:
        login = await client.post("/api/auth/login", json={"username": "alice", "password": PASSWORD})
        session_token = login.json()["token"]
        owner_id = (await client.get("/api/me", headers={"Authorization": f"Bearer {first.secret}"})).json()["id"]

    second = load_settings({}, data_dir=data_dir)
    assert second.secret == first.secret
    async with AsyncTestClient(create_app(second)) as client:
        for token in (api_token, session_token):
            response = await client.get("/api/me", headers={"Authorization": f"Bearer {token}"})
            assert response.status_code == 200
            assert response.json()["name"] == "alice"
        owner = await client.get("/api/me", headers={"Authorization": f"Bearer {second.secret}"})
        assert owner.json()["id"] == owner_id
