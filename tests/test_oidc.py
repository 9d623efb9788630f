"""OpenID Connect sign-in against a real provider on loopback (`tests/oidc_provider.py`).

The full code flow goes through a live server: `/api/auth/oidc/start` → the provider's authorization
form → `/api/auth/oidc/callback` → the session cookie works on `/api/me`. ID tokens that must be refused
(wrong issuer, audience or nonce, expired, signed by another key) are forged here with joserfc and
given to `validate_id_token`, the function the callback uses.
"""

import json
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx
import pytest
from joserfc import jwt
from joserfc.jwk import KeySet, OctKey, RSAKey

from pheby.cli import main
from pheby.db import SqliteDatabase
from pheby.settings import Settings, SettingsError
from pheby.signin.oidc import (
    STARTS_PER_SOURCE,
    AllowRule,
    OidcFailure,
    OidcSignIn,
    SignatureFailure,
    account_name_candidates,
    is_allowed,
    parse_allowed_claims,
    validate_id_token,
)
from pheby.store.accounts import Accounts
from pheby.store.oidc import OidcStore
from tests.app_client import Api
from tests.database import query
from tests.live_server import LiveServer
from tests.oidc_provider import authorize, discovery_document, running_provider, serving_json, set_user
from tests.test_auth import add_account

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.live,
    pytest.mark.xdist_group("oidc"),
    # The test provider (in this process) calls an Authlib API Authlib has deprecated: its business, not ours.
    pytest.mark.filterwarnings("ignore:get_jwt_config:DeprecationWarning"),
]

CLIENT_ID = "pheby-test-client"
SOURCE = "198.51.100.1"  # the address a sign-in starts from
CLIENT_SECRET = "pheby-test-client-secret"  # the test provider accepts any secret


@pytest.fixture
def oidc_provider() -> Iterator[str]:
    """The provider's issuer URL."""
    with running_provider() as issuer:
        yield issuer


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    """For the in-process `api` fixture: OIDC not configured."""
    return make_settings()


@pytest.fixture
def oidc_server(
    start_live_server: Callable[[Settings], LiveServer], live_settings: Callable[..., Settings], oidc_provider: str
) -> Callable[..., LiveServer]:
    """A live server whose OIDC provider is the test's; keyword overrides win."""

    def start(**overrides: Any) -> LiveServer:
        values: dict[str, Any] = {
            "oidc_issuer": oidc_provider,
            "oidc_client_id": CLIENT_ID,
            "oidc_client_secret": CLIENT_SECRET,
            "oidc_name": "Test IdP",
            **overrides,
        }
        return start_live_server(live_settings(**values))

    return start


def link(settings: Settings, account: str, subject: str, issuer: str) -> None:
    """`pheby account link-oidc`, as an operator runs it."""
    code = main(["--data-dir", str(settings.data_dir), "account", "link-oidc", account, subject, "--issuer", issuer])
    assert code == 0


async def sign_in(web: httpx.AsyncClient, subject: str | None, *, deny: bool = False) -> httpx.Response:
    """start → the provider's form (as `subject`) → callback; returns the callback's answer."""
    start = await web.get("/api/auth/oidc/start")
    assert start.status_code == 302, start.text
    back = await anyio.to_thread.run_sync(lambda: authorize(start.headers["location"], subject, deny=deny))
    assert back.startswith(str(web.base_url).rstrip("/") + "/api/auth/oidc/callback?"), back
    return await web.get(back)


def signin_error(response: httpx.Response) -> str | None:
    assert response.status_code == 302, response.text
    query = parse_qs(urlsplit(response.headers["location"]).query)
    return query.get("signin_error", [None])[0]


def web_client(server: LiveServer) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=server.base_url, timeout=15)


async def me(web: httpx.AsyncClient) -> httpx.Response:
    return await web.get("/api/me")


# The full code flow, on a live server


async def test_the_code_flow_signs_in_a_linked_account(
    oidc_server: Callable[..., LiveServer], oidc_provider: str, capsys: pytest.CaptureFixture[str]
) -> None:
    server = oidc_server()
    await add_account(server.settings, "alice")
    code = await anyio.to_thread.run_sync(
        lambda: main(
            [
                "--data-dir",
                str(server.settings.data_dir),
                "account",
                "link-oidc",
                "alice",
                "alice-sub",
                "--issuer",
                oidc_provider,
            ]
        )
    )
    assert code == 0
    linked = json.loads(capsys.readouterr().out)
    assert linked["name"] == "alice"
    assert linked["subject"] == "alice-sub"
    assert linked["issuer"] == oidc_provider

    async with web_client(server) as web:
        offer = (await web.get("/api/auth/oidc")).json()
        assert offer == {"enabled": True, "name": "Test IdP"}
        start = await web.get("/api/auth/oidc/start")
        assert start.status_code == 302
        asked = parse_qs(urlsplit(start.headers["location"]).query)
        assert asked["response_type"] == ["code"]
        assert asked["client_id"] == [CLIENT_ID]
        assert asked["code_challenge_method"] == ["S256"]
        assert asked["code_challenge"][0]
        assert asked["nonce"][0]
        assert asked["state"][0]
        assert asked["redirect_uri"] == [f"{server.base_url}/api/auth/oidc/callback"]
        assert "openid" in asked["scope"][0].split()

        set_user(oidc_provider, "alice-sub", {"email": "someone@example.com", "preferred_username": "al"})
        done = await sign_in(web, "alice-sub")
        assert done.status_code == 302
        assert done.headers["location"] == "/"
        assert "hope_session" in done.cookies
        answer = await me(web)
        assert answer.status_code == 200, answer.text
        assert answer.json()["name"] == "alice"

    assert query(server.settings, "SELECT method FROM auth_tokens WHERE kind = 'session'") == [("oidc",)]


async def test_an_unlinked_subject_or_a_disabled_account_is_refused(
    oidc_server: Callable[..., LiveServer], oidc_provider: str
) -> None:
    server = oidc_server()
    await add_account(server.settings, "alice")
    # The same e-mail address as an account's name would suggest: no account is ever found by it.
    set_user(oidc_provider, "stranger", {"email": "alice@example.com", "email_verified": True})
    async with web_client(server) as web:
        refused = await sign_in(web, "stranger")
        assert signin_error(refused) == "unlinked"
        assert "hope_session" not in refused.cookies
        assert (await me(web)).status_code == 401
    await add_account(server.settings, "mallory")
    await anyio.to_thread.run_sync(link, server.settings, "mallory", "mallory-sub", oidc_provider)
    disable = ["--data-dir", str(server.settings.data_dir), "account", "disable", "mallory"]
    assert await anyio.to_thread.run_sync(main, disable) == 0
    async with web_client(server) as web:
        assert signin_error(await sign_in(web, "mallory-sub")) == "account_disabled"
        assert (await me(web)).status_code == 401


async def test_a_claim_outside_the_allow_list_is_refused(
    oidc_server: Callable[..., LiveServer], oidc_provider: str
) -> None:
    server = oidc_server(oidc_allowed_claims=("groups=pheby", "email_domain=example.com"))
    await add_account(server.settings, "alice")
    await add_account(server.settings, "bob")
    await add_account(server.settings, "carol")
    for name in ("alice", "bob", "carol"):
        await anyio.to_thread.run_sync(link, server.settings, name, f"{name}-sub", oidc_provider)
    set_user(oidc_provider, "alice-sub", {"groups": ["staff", "pheby"]})
    set_user(oidc_provider, "bob-sub", {"groups": ["staff"], "email": "bob@example.com", "email_verified": False})
    set_user(oidc_provider, "carol-sub", {"email": "carol@Example.com", "email_verified": True})
    async with web_client(server) as web:
        assert signin_error(await sign_in(web, "bob-sub")) == "not_allowed"
        assert (await me(web)).status_code == 401
        assert (await sign_in(web, "alice-sub")).headers["location"] == "/"
        assert (await me(web)).json()["name"] == "alice"
    async with web_client(server) as web:
        assert (await sign_in(web, "carol-sub")).headers["location"] == "/"
        assert (await me(web)).json()["name"] == "carol"


async def test_create_accounts_makes_one_and_a_second_sign_in_reuses_it(
    oidc_server: Callable[..., LiveServer], oidc_provider: str
) -> None:
    server = oidc_server(oidc_create_accounts=True)
    set_user(oidc_provider, "dana-sub", {"preferred_username": "Dana Smith!"})
    set_user(oidc_provider, "impostor", {"preferred_username": "owner", "email": "owner@example.com"})
    ids = []
    for _ in range(2):
        async with web_client(server) as web:
            assert (await sign_in(web, "dana-sub")).headers["location"] == "/"
            mine = (await me(web)).json()
            assert mine["name"] == "danasmith"
            ids.append(mine["id"])
    assert ids[0] == ids[1]
    # A name already taken gets a number: the new identity never becomes the existing account.
    async with web_client(server) as web:
        assert (await sign_in(web, "impostor")).headers["location"] == "/"
        assert (await me(web)).json()["name"] == "owner-2"
    names = [row[0] for row in query(server.settings, "SELECT name FROM accounts")]
    assert sorted(names) == ["danasmith", "owner", "owner-2"]


async def test_a_replayed_state_is_refused(
    oidc_server: Callable[..., LiveServer], caplog: pytest.LogCaptureFixture
) -> None:
    server = oidc_server(oidc_create_accounts=True)
    caplog.set_level(logging.INFO)
    async with web_client(server) as web:
        start = await web.get("/api/auth/oidc/start")
        state = parse_qs(urlsplit(start.headers["location"]).query)["state"][0]
        back = await anyio.to_thread.run_sync(lambda: authorize(start.headers["location"], "erin"))
        signed_in = await web.get(back)
        assert signed_in.headers["location"] == "/"
        session = signed_in.cookies["hope_session"]
    async with web_client(server) as replay:  # the same state, its cookie and all, once more
        replay.cookies.set("pheby_oidc_state", state)
        assert signin_error(await replay.get(back)) == "state"
        assert (await me(replay)).status_code == 401
    code = parse_qs(urlsplit(back).query)["code"][0]
    server_lines = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("pheby"))
    assert "OIDC sign-in refused: state" in server_lines
    for secret in (code, state, session):
        assert secret not in server_lines


async def test_a_callback_from_another_browser_or_with_an_unknown_state_is_refused(
    oidc_server: Callable[..., LiveServer],
) -> None:
    server = oidc_server(oidc_create_accounts=True)
    async with web_client(server) as web:
        start = await web.get("/api/auth/oidc/start")
        back = await anyio.to_thread.run_sync(lambda: authorize(start.headers["location"], "frank"))
    async with web_client(server) as victim:  # a link carrying someone else's code and state
        assert signin_error(await victim.get(back)) == "state"
        assert (await me(victim)).status_code == 401
        victim.cookies.set("pheby_oidc_state", "made-up")
        assert signin_error(await victim.get("/api/auth/oidc/callback?code=x&state=made-up")) == "state"
        assert signin_error(await victim.get("/api/auth/oidc/callback")) == "state"


async def test_a_denied_authorization_is_refused(oidc_server: Callable[..., LiveServer]) -> None:
    server = oidc_server(oidc_create_accounts=True)
    async with web_client(server) as web:
        assert signin_error(await sign_in(web, None, deny=True)) == "denied"
        assert (await me(web)).status_code == 401


async def test_without_configuration_it_is_not_offered(api: Api) -> None:
    assert (await api.get("/api/auth/oidc")).json() == {"enabled": False, "name": "single sign-on"}
    start = await api.get("/api/auth/oidc/start", follow_redirects=False)
    assert start.status_code == 302
    assert start.headers["location"] == "/?signin_error=disabled"
    api.cookies.set("pheby_oidc_state", "s")
    back = await api.get("/api/auth/oidc/callback?code=c&state=s", follow_redirects=False)
    assert back.status_code == 302
    assert back.headers["location"] == "/?signin_error=disabled"


# The ID token's validation, with tokens forged here

ISSUER = "https://idp.example"


def signing_key(kid: str = "k1") -> RSAKey:
    return RSAKey.generate_key(2048, parameters={"kid": kid, "alg": "RS256", "use": "sig"})


def public_set(*keys: RSAKey) -> KeySet:
    return KeySet([RSAKey.import_key(key.as_dict(private=False)) for key in keys])


def forge(key: RSAKey | OctKey, alg: str = "RS256", **changes: Any) -> str:
    now = int(time.time())
    claims: dict[str, Any] = {
        "iss": ISSUER,
        "sub": "someone",
        "aud": CLIENT_ID,
        "iat": now,
        "exp": now + 300,
        "nonce": "the-nonce",
    }
    claims.update(changes)
    claims = {k: v for k, v in claims.items() if v is not None}
    header = {"alg": alg, "kid": key.kid} if key.kid else {"alg": alg}
    return jwt.encode(header, claims, key, algorithms=[alg])


def check(token: str, keys: KeySet) -> dict[str, Any]:
    return validate_id_token(token, keys, issuer=ISSUER, client_id=CLIENT_ID, nonce="the-nonce")


def test_a_token_signed_by_the_providers_key_with_the_right_claims_is_accepted() -> None:
    key = signing_key()
    assert check(forge(key), public_set(key))["sub"] == "someone"
    # Several audiences: accepted when `azp` names this client, refused without it.
    assert check(forge(key, aud=[CLIENT_ID, "other"], azp=CLIENT_ID), public_set(key))["sub"] == "someone"
    with pytest.raises(OidcFailure) as refused:
        check(forge(key, aud=[CLIENT_ID, "other"]), public_set(key))
    assert refused.value.code == "token"


@pytest.mark.parametrize(
    "changes",
    [
        {"iss": "https://evil.example"},
        {"aud": "another-client"},
        {"aud": None},
        {"nonce": "another-nonce"},
        {"nonce": None},
        {"exp": int(time.time()) - 3600, "iat": int(time.time()) - 7200},
        {"exp": None},
        {"iat": None},
        {"sub": None},
        {"aud": [CLIENT_ID, "other"], "azp": "other"},
    ],
    ids=["issuer", "audience", "no-audience", "nonce", "no-nonce", "expired", "no-exp", "no-iat", "no-sub", "azp"],
)
def test_a_token_with_a_wrong_claim_is_refused(changes: dict[str, Any]) -> None:
    key = signing_key()
    with pytest.raises(OidcFailure) as refused:
        check(forge(key, **changes), public_set(key))
    assert refused.value.code == "token"


def test_a_token_signed_by_another_key_is_refused() -> None:
    providers, attackers = signing_key("k1"), signing_key("k1")  # the same kid, another key
    # The same kid, or one the provider has not published (then the callback fetches the JWKS again, once).
    for forged in (forge(attackers), forge(signing_key("k2"))):
        with pytest.raises(SignatureFailure) as unsigned:
            check(forged, public_set(providers))
        assert unsigned.value.code == "token"
    # Neither `none` nor an HMAC signed with something the client knows.
    secret = OctKey.import_key(CLIENT_SECRET.encode().ljust(32, b"-"))
    for forged in (forge(secret, "HS256"), forge(providers).rsplit(".", 1)[0] + "."):
        with pytest.raises(OidcFailure) as refused:
            check(forged, public_set(providers))
        assert refused.value.code == "token"


async def test_a_forged_token_is_refused_against_the_providers_real_jwks(tmp_path: Path, oidc_provider: str) -> None:
    async with open_oidc(tmp_path, oidc_provider) as oidc:
        keys = await oidc.keys()
        real_kid = next(iter(keys)).kid
        forged = forge(signing_key(real_kid or "k1"), iss=oidc_provider)
        with pytest.raises(OidcFailure) as refused:
            validate_id_token(forged, keys, issuer=oidc_provider, client_id=CLIENT_ID, nonce="the-nonce")
        assert refused.value.code == "token"


async def test_stale_keys_are_fetched_again_once(tmp_path: Path, oidc_provider: str) -> None:
    """The cached keys are stale (the provider rotated): the callback's validation fetches them again."""
    async with open_oidc(tmp_path, oidc_provider) as oidc:
        redirect_uri = "http://127.0.0.1:9/api/auth/oidc/callback"
        url, state = await oidc.begin(redirect_uri, SOURCE)
        oidc._keys = public_set(signing_key("rotated-away"))  # a stale cache, on purpose
        back = await anyio.to_thread.run_sync(lambda: authorize(url, "gina"))
        code = parse_qs(urlsplit(back).query)["code"][0]
        claims = await oidc.finish(state=state, code=code, redirect_uri=redirect_uri)
        assert claims["sub"] == "gina"
        with pytest.raises(OidcFailure) as used:  # and its state is used up
            await oidc.finish(state=state, code=code, redirect_uri=redirect_uri)
        assert used.value.code == "state"


async def test_one_address_starts_a_bounded_number_of_sign_ins(tmp_path: Path, oidc_provider: str) -> None:
    """Anyone may start one, and each holds a row for ten minutes: one address can't fill the table."""
    async with open_oidc(tmp_path, oidc_provider) as oidc:
        for _ in range(STARTS_PER_SOURCE):
            await oidc.begin("http://127.0.0.1:9/cb", SOURCE)
        with pytest.raises(OidcFailure) as busy:
            await oidc.begin("http://127.0.0.1:9/cb", SOURCE)
        assert busy.value.code == "busy"
        await oidc.begin("http://127.0.0.1:9/cb", "198.51.100.2")  # another address is not held back


async def test_sign_ins_under_way_are_bounded(tmp_path: Path, oidc_provider: str) -> None:
    async with open_oidc(tmp_path, oidc_provider) as oidc:
        oidc._max_pending = 1  # instead of ten thousand
        await oidc.begin("http://127.0.0.1:9/cb", SOURCE)
        with pytest.raises(OidcFailure) as busy:
            await oidc.begin("http://127.0.0.1:9/cb", SOURCE)
        assert busy.value.code == "busy"


async def test_discovery_must_name_the_configured_issuer_and_stay_small(tmp_path: Path) -> None:
    with serving_json(discovery_document("https://elsewhere.example")) as origin:
        async with open_oidc(tmp_path / "a", origin) as oidc:
            with pytest.raises(OidcFailure) as refused:
                await oidc.begin("http://127.0.0.1:9/cb", SOURCE)
            assert refused.value.code == "provider"
            assert "another issuer" in refused.value.detail
    with serving_json(b"[" + b"0," * 200_000 + b"0]") as origin:
        async with open_oidc(tmp_path / "b", origin) as oidc:
            with pytest.raises(OidcFailure) as refused:
                await oidc.begin("http://127.0.0.1:9/cb", SOURCE)
            assert refused.value.code == "provider"
            assert "more than" in refused.value.detail
    async with open_oidc(tmp_path / "c", "http://127.0.0.1:9") as oidc:  # nothing listens on port 9
        with pytest.raises(OidcFailure) as refused:
            await oidc.begin("http://127.0.0.1:9/cb", SOURCE)
        assert refused.value.code == "provider"


# The pieces


class open_oidc:  # named as the context manager it is
    """An `OidcSignIn` on a fresh database in `directory`, for `issuer`."""

    def __init__(self, directory: Path, issuer: str, **settings: Any) -> None:
        self._db = SqliteDatabase(directory / "pheby.db")
        self._values = {"oidc_issuer": issuer, "oidc_client_id": CLIENT_ID, "oidc_client_secret": CLIENT_SECRET}
        self._values.update(settings)
        self._directory = directory

    async def __aenter__(self) -> OidcSignIn:
        from pheby.settings import load_settings

        await self._db.open()
        accounts = Accounts(self._db)
        await accounts.ensure_owner()
        settings = load_settings({}, data_dir=self._directory, secret="x" * 32, **self._values)
        return OidcSignIn(settings, OidcStore(self._db), accounts)

    async def __aexit__(self, *exc: object) -> None:
        await self._db.close()


async def test_pending_sign_ins_are_single_use_short_lived_and_stored_hashed(tmp_path: Path) -> None:
    db = SqliteDatabase(tmp_path / "pheby.db")
    await db.open()
    try:
        now = [1000.0]
        store = OidcStore(db, clock=lambda: now[0])
        assert await store.begin("state-one", "nonce-one", "verifier-one", ttl_seconds=600, limit=2)
        assert await store.begin("state-two", "nonce-two", "verifier-two", ttl_seconds=600, limit=2)
        assert not await store.begin("state-three", "nonce", "verifier", ttl_seconds=600, limit=2)  # bounded
        stored = await db.run(lambda c: [tuple(r) for r in c.execute("SELECT state_sha256 FROM oidc_pending_logins")])
        assert all("state-" not in row[0] for row in stored)
        assert len(stored) == 2
        taken = await store.take("state-one")
        assert taken is not None
        assert taken.nonce == "nonce-one"
        assert taken.code_verifier == "verifier-one"
        assert await store.take("state-one") is None  # used
        assert await store.take("unknown") is None
        now[0] += 601
        assert await store.take("state-two") is None  # expired
        assert await store.begin("state-four", "nonce", "verifier", ttl_seconds=600, limit=1)  # the expired swept
    finally:
        await db.close()


def test_allowed_claims_match_strings_lists_and_a_verified_email_domain() -> None:
    rules = parse_allowed_claims(["groups=pheby", "email_domain=example.com", "hd=corp.example"])
    assert is_allowed({"groups": ["a", "pheby"]}, rules)
    assert not is_allowed({"groups": ["a", "pheby-admins"]}, rules)
    assert is_allowed({"email": "x@EXAMPLE.com", "email_verified": True}, rules)
    assert not is_allowed({"email": "x@example.com", "email_verified": False}, rules)
    assert not is_allowed({"email": "x@example.com"}, rules)
    assert not is_allowed({"email": "x@evil.example", "email_verified": True, "email_domain": "example.com"}, rules)
    assert is_allowed({"hd": "corp.example"}, rules)
    assert is_allowed({}, ())  # no rules: whoever the provider vouches for
    assert rules[0] == AllowRule("groups", "pheby")
    with pytest.raises(ValueError, match="claim=value"):
        parse_allowed_claims(["groups"])


def test_a_made_accounts_name_is_safe() -> None:
    assert account_name_candidates({"sub": "s", "preferred_username": "Zoë O'Neil"})[0] == "zooneil"
    assert account_name_candidates({"sub": "s", "preferred_username": "../.."})[0].startswith("sso-")
    assert account_name_candidates({"sub": "s"})[0].startswith("sso-")
    assert len(account_name_candidates({"sub": "s", "preferred_username": "a" * 300})[0]) == 32


def test_settings_refuse_a_bad_allow_list_or_a_plain_http_issuer(make_settings: Callable[..., Settings]) -> None:
    with pytest.raises(SettingsError, match="PHEBY_OIDC_ALLOWED_CLAIMS"):
        make_settings(oidc_allowed_claims=("groups",))
    with pytest.raises(SettingsError, match="PHEBY_OIDC_ISSUER"):
        make_settings(oidc_issuer="http://idp.example")
    assert make_settings(oidc_issuer="http://127.0.0.1:5000").oidc_issuer == "http://127.0.0.1:5000"


def test_link_oidc_needs_an_account_and_a_provider(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--data-dir", str(tmp_path), "account", "link-oidc", "nobody", "sub", "--issuer", ISSUER]) == 1
    assert "not found" in capsys.readouterr().err.lower()
    assert main(["--data-dir", str(tmp_path), "account", "link-oidc", "owner", "sub"]) == 1
    assert "PHEBY_OIDC_ISSUER" in capsys.readouterr().err
    assert main(["--data-dir", str(tmp_path), "account", "link-oidc", "owner", "the-sub", "--issuer", ISSUER]) == 0
    assert json.loads(capsys.readouterr().out)["subject"] == "the-sub"
