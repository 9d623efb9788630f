"""The passkey routes' rules that need no browser: who may register, recent authentication and
`/api/auth/reauthenticate`, where passkeys are offered (the relying party), limits and bad input.

The ceremonies themselves, in a real browser, are in tests/test_passkeys.py.
"""

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pyotp
import pytest

from handlers.support.app import create_app
from pheby.cli import main
from pheby.db import SqliteDatabase
from pheby.services import Services
from pheby.settings import Settings
from pheby.store.accounts import Accounts
from pheby.store.passkeys import MAX_OPEN_REGISTER_CHALLENGES, MAX_OPEN_SIGN_IN_CHALLENGES, PasskeyStore
from tests.app_client import BASE, Api
from tests.conftest import TEST_SECRET
from tests.live_server import LiveServer
from tests.passwords import PASSWORD
from tests.test_auth import add_account

pytestmark = [pytest.mark.anyio, pytest.mark.both_engines]
OWNER = {"Authorization": f"Bearer {TEST_SECRET}"}
# A well-formed registration that answers no challenge: the rules before verification are what is tested.
FAKE_REGISTRATION: dict[str, Any] = {
    "name": "k",
    "credential": {
        "id": "AAAA",
        "rawId": "AAAA",
        "type": "public-key",
        "response": {"clientDataJSON": "e30", "attestationObject": "oA"},
    },
}
FAKE_ASSERTION: dict[str, Any] = {
    "credential": {
        "id": "AAAA",
        "rawId": "AAAA",
        "type": "public-key",
        "response": {"clientDataJSON": "e30", "authenticatorData": "AA", "signature": "AA"},
    }
}


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings()


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[Api]:
    await add_account(settings, "alice")
    async with Api(create_app(settings), base_url=BASE) as client:
        yield client


def services_of(api: Api) -> Services:
    services: Services = api.app.state.services
    return services


async def sign_in(api: Api, password: str = PASSWORD) -> dict[str, str]:
    signed_in = await api.post("/api/auth/login", json={"username": "alice", "password": password})
    assert signed_in.status_code == 200
    api.cookies.clear()  # the bearer alone
    return {"Authorization": f"Bearer {signed_in.json()['token']}"}


async def age_sign_ins(api: Api, seconds: float) -> None:
    then = time.time() - seconds
    await services_of(api).db.run(lambda c: c.execute("UPDATE auth_tokens SET authenticated_at = ?", (then,)))


def error_code(response: httpx.Response) -> str:
    return str(response.json()["error"]["code"])


async def test_no_passkey_can_be_registered_without_a_signed_in_session(api: Api) -> None:
    """An account's first credential is never a passkey: registering needs a session of that account."""
    assert (await api.post("/api/auth/passkeys/options")).status_code == 401
    assert (await api.post("/api/auth/passkeys", json=FAKE_REGISTRATION)).status_code == 401
    assert (await api.get("/api/auth/passkeys")).status_code == 401
    assert (await api.delete("/api/auth/passkeys/x")).status_code == 401
    assert (await api.post("/api/auth/reauthenticate", json={"password": PASSWORD})).status_code == 401


async def test_adding_a_passkey_needs_a_sign_in_of_the_last_five_minutes(api: Api, settings: Settings) -> None:
    alice = await sign_in(api)
    assert (await api.post("/api/auth/passkeys/options", headers=alice)).status_code == 200  # just signed in
    await age_sign_ins(api, 301)
    for path, body in (("/api/auth/passkeys/options", None), ("/api/auth/passkeys", FAKE_REGISTRATION)):
        refused = await api.post(path, headers=alice, json=body)
        assert refused.status_code == 403
        assert error_code(refused) == "reauthentication_required"

    wrong = await api.post("/api/auth/reauthenticate", headers=alice, json={"password": "not it"})
    assert wrong.status_code == 403
    assert error_code(wrong) == "reauthentication_refused"
    not_the_owner = await api.post("/api/auth/reauthenticate", headers=alice, json={"secret": TEST_SECRET})
    assert error_code(not_the_owner) == "reauthentication_refused"
    both = await api.post("/api/auth/reauthenticate", headers=alice, json={"password": "a", "secret": "b"})
    assert both.status_code == 400
    confirmed = await api.post("/api/auth/reauthenticate", headers=alice, json={"password": PASSWORD})
    assert confirmed.status_code == 200
    assert confirmed.json()["authenticated_at"] >= time.time() - 60
    assert (await api.post("/api/auth/passkeys/options", headers=alice)).status_code == 200

    # A long-lived API token never signed in: it must confirm too; the owner secret proves itself each call.
    _, token = await add_account(settings, "bob")
    api_token = await api.post("/api/auth/passkeys/options", headers={"Authorization": f"Bearer {token}"})
    assert error_code(api_token) == "reauthentication_required"
    assert (await api.post("/api/auth/passkeys/options", headers=OWNER)).status_code == 200
    assert (await api.post("/api/auth/reauthenticate", headers=OWNER, json={"secret": TEST_SECRET})).status_code == 200


async def test_reauthentication_is_limited_like_a_login(api: Api) -> None:
    alice = await sign_in(api)
    for _ in range(5):
        wrong = await api.post("/api/auth/reauthenticate", headers=alice, json={"password": "guess"})
        assert wrong.status_code == 403
    limited = await api.post("/api/auth/reauthenticate", headers=alice, json={"password": PASSWORD})
    assert limited.status_code == 429
    assert int(limited.headers["retry-after"]) > 0


async def test_failed_passkey_sign_ins_are_limited_per_address(api: Api) -> None:
    for _ in range(10):
        refused = await api.post("/api/auth/passkey", json=FAKE_ASSERTION)
        assert refused.status_code == 401
        assert error_code(refused) == "passkey_refused"
    limited = await api.post("/api/auth/passkey", json=FAKE_ASSERTION)
    assert limited.status_code == 429
    assert int(limited.headers["retry-after"]) > 0


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"credential": {}},
        {"credential": {**FAKE_ASSERTION["credential"], "rawId": "not base64url!"}},
        {"credential": FAKE_ASSERTION["credential"], "extra": 1},
    ],
)
async def test_malformed_sign_ins_are_400(api: Api, body: dict[str, Any]) -> None:
    response = await api.post("/api/auth/passkey", json=body)
    assert response.status_code == 400


async def test_garbage_inside_a_well_formed_response_is_refused_not_a_crash(api: Api) -> None:
    options = (await api.post("/api/auth/passkey/options")).json()
    client_data = "eyJ0eXBlIjoid2ViYXV0aG4uZ2V0IiwiY2hhbGxlbmdlIjoiIn0"  # {"type":"webauthn.get","challenge":""}
    for response in (
        {"clientDataJSON": "bm90IGpzb24", "authenticatorData": "AA", "signature": "AA"},
        {"clientDataJSON": client_data, "authenticatorData": "AA", "signature": "AA", "userHandle": "AA"},
        {"clientDataJSON": client_data, "authenticatorData": "AA", "signature": "AA", "userHandle": "A"},
    ):
        credential = {**FAKE_ASSERTION["credential"], "response": response}
        refused = await api.post("/api/auth/passkey", json={"credential": credential})
        assert refused.status_code == 401, refused.text
    assert options["userVerification"] == "required"
    assert options["allowCredentials"] == []  # discoverable credentials: no username needed


@pytest.mark.parametrize("attestation_object", ["", "AA", "oA", "o2NmbXRkbm9uZWdhdHRTdG10oGhhdXRoRGF0YUEA", "_-_-_-_-"])
async def test_garbage_inside_a_registration_is_refused_not_a_crash(api: Api, attestation_object: str) -> None:
    options = (await api.post("/api/auth/passkeys/options", headers=OWNER)).json()
    origin = (await api.get("/api/auth/passkeys", headers=OWNER)).json()["origin"]
    client_data = {"type": "webauthn.create", "challenge": options["challenge"], "origin": origin}
    encoded = base64.urlsafe_b64encode(json.dumps(client_data).encode()).rstrip(b"=").decode()
    response = {"clientDataJSON": encoded, "attestationObject": attestation_object, "transports": ["nfc", "warp"]}
    body = {"name": "k", "credential": {**FAKE_REGISTRATION["credential"], "response": response}}
    refused = await api.post("/api/auth/passkeys", headers=OWNER, json=body)
    assert refused.status_code == 400, refused.text
    assert error_code(refused) == "passkey_registration_refused"


async def test_open_challenges_are_bounded(api: Api) -> None:
    """Challenges wait on the server until used or expired: a flood of options requests can't grow them unbounded."""
    for _ in range(MAX_OPEN_REGISTER_CHALLENGES):
        assert (await api.post("/api/auth/passkeys/options", headers=OWNER)).status_code == 200
    flood = await api.post("/api/auth/passkeys/options", headers=OWNER)
    assert flood.status_code == 429
    challenges = services_of(api).passkeys.challenges
    for n in range(MAX_OPEN_SIGN_IN_CHALLENGES):
        assert await challenges.put(n.to_bytes(4, "big"), "sign_in")
    flood = await api.post("/api/auth/passkey/options")
    assert flood.status_code == 429
    assert int(flood.headers["retry-after"]) > 0


async def test_registration_options_want_a_verified_discoverable_credential(api: Api) -> None:
    options = (await api.post("/api/auth/passkeys/options", headers=OWNER)).json()
    assert options["authenticatorSelection"]["residentKey"] == "required"
    assert options["authenticatorSelection"]["userVerification"] == "required"
    assert {p["alg"] for p in options["pubKeyCredParams"]} == {-7, -8, -257}
    assert options["rp"] == {"id": "localhost", "name": "Pheby"}
    assert options["user"]["name"] == "owner"


async def test_without_a_public_url_passkeys_are_for_localhost_only(api: Api) -> None:
    listed = (await api.get("/api/auth/passkeys", headers=OWNER)).json()
    origin = listed["origin"]
    assert origin.startswith("http://localhost:")
    assert listed["unavailable"] is None
    for elsewhere in ("http://127.0.0.1:8620", "http://pheby.lan:8620", "https://localhost:8620"):
        refused = await api.post("/api/auth/passkey/options", headers={"Origin": elsewhere})
        assert refused.status_code == 403
        assert error_code(refused) == "passkeys_unavailable"
        assert origin in refused.json()["error"]["message"]
    assert (await api.post("/api/auth/passkey/options", headers={"Origin": origin})).status_code == 200


async def test_the_relying_party_is_the_public_url_whatever_the_request_says(
    make_settings: Callable[..., Settings],
) -> None:
    settings = make_settings(public_url="https://pheby.example.org")
    async with Api(create_app(settings), base_url=BASE) as api:
        forged = {"Host": "evil.example", "X-Forwarded-Host": "evil.example", "X-Forwarded-Proto": "http"}
        options = (await api.post("/api/auth/passkey/options", headers=forged)).json()
        assert options["rpId"] == "pheby.example.org"
        listed = (await api.get("/api/auth/passkeys", headers={**OWNER, **forged})).json()
        assert listed["origin"] == "https://pheby.example.org"
    plain_http = make_settings(public_url="http://pheby.lan:8620")
    async with Api(create_app(plain_http), base_url=BASE) as api:
        refused = await api.post("/api/auth/passkey/options")
        assert refused.status_code == 403
        assert error_code(refused) == "passkeys_unavailable"
        listed = (await api.get("/api/auth/passkeys", headers=OWNER)).json()
        assert listed["origin"] is None
        assert "https" in listed["unavailable"]


async def test_a_passkey_is_listed_and_removed_by_its_own_account_only(api: Api) -> None:
    owner = await services_of(api).accounts.get_by_name("owner")
    alice = await services_of(api).accounts.get_by_name("alice")
    store = services_of(api).passkeys.store
    key = await store.add(
        alice.id, credential_id=b"c1", public_key=b"k", sign_count=0, transports=("internal",), name="phone"
    )
    assert key is not None
    assert (
        await store.add(owner.id, credential_id=b"c1", public_key=b"k", sign_count=0, transports=(), name="x") is None
    )
    assert (await api.get("/api/auth/passkeys", headers=OWNER)).json()["passkeys"] == []
    assert (await api.delete(f"/api/auth/passkeys/{key.id}", headers=OWNER)).status_code == 404
    headers = await sign_in(api)
    assert [p["name"] for p in (await api.get("/api/auth/passkeys", headers=headers)).json()["passkeys"]] == ["phone"]
    assert (await api.delete(f"/api/auth/passkeys/{key.id}", headers=headers)).status_code == 204
    assert await store.of_account(alice.id) == []


def test_the_origin_is_the_port_the_server_really_listens_on(
    start_live_server: Callable[[Settings], LiveServer], make_settings: Callable[..., Settings]
) -> None:
    """Started on port 0, the server knows its port from the socket it accepted on, not from settings or Host."""
    live = start_live_server(make_settings(port=0))
    port = live.server.servers[0].sockets[0].getsockname()[1]
    assert port != 0
    listed = httpx.get(f"http://127.0.0.1:{port}/api/auth/passkeys", headers={**OWNER, "Host": "localhost:1"}).json()
    assert listed["origin"] == f"http://localhost:{port}"


def test_the_operator_removes_every_passkey_of_an_account(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`pheby account passkeys-off NAME`: after a compromise, revoking sessions leaves no planted passkey behind."""
    assert main(["--data-dir", str(tmp_path), "account", "create", "alice"]) == 0
    capsys.readouterr()

    async def add_two() -> None:
        db = SqliteDatabase(tmp_path / "pheby.sqlite3")
        await db.open()
        try:
            alice = await Accounts(db).get_by_name("alice")
            for n in range(2):
                await PasskeyStore(db).add(
                    alice.id, credential_id=bytes([n]), public_key=b"k", sign_count=0, transports=(), name=f"k{n}"
                )
        finally:
            await db.close()

    asyncio.run(add_two())
    assert main(["--data-dir", str(tmp_path), "account", "passkeys-off", "alice"]) == 0
    assert json.loads(capsys.readouterr().out)["removed"] == 2
    assert main(["--data-dir", str(tmp_path), "account", "passkeys-off", "alice"]) == 0
    assert json.loads(capsys.readouterr().out)["removed"] == 0


async def test_with_two_step_sign_in_on_reauthentication_asks_for_a_code_too(api: Api) -> None:
    """Else a stolen session and a phished password would plant a passkey, which signs in without the code."""
    alice = await sign_in(api)
    setup = (await api.post("/api/auth/totp/setup", headers=alice)).json()
    totp = pyotp.TOTP(setup["key"])
    now = time.time()
    enabled = await api.post("/api/auth/totp/enable", headers=alice, json={"code": totp.at(now)})
    assert enabled.status_code == 200, enabled.text
    await age_sign_ins(api, 301)

    password_alone = await api.post("/api/auth/reauthenticate", headers=alice, json={"password": PASSWORD})
    assert (password_alone.status_code, error_code(password_alone)) == (403, "reauthentication_refused")
    assert "code" in password_alone.json()["error"]["message"]
    wrong_code = {"password": PASSWORD, "code": "000000" if totp.at(now + 30) != "000000" else "111111"}
    assert error_code(await api.post("/api/auth/reauthenticate", headers=alice, json=wrong_code)) == (
        "reauthentication_refused"
    )
    assert error_code(await api.post("/api/auth/passkeys/options", headers=alice)) == "reauthentication_required"
    with_code = {"password": PASSWORD, "code": totp.at(now + 30)}  # the next step: the enabling code is used up
    assert (await api.post("/api/auth/reauthenticate", headers=alice, json=with_code)).status_code == 200
    assert (await api.post("/api/auth/passkeys/options", headers=alice)).status_code == 200
    again = await api.post("/api/auth/reauthenticate", headers=alice, json=with_code)  # a code works once
    assert error_code(again) == "reauthentication_refused"
