"""No secret, token, one-time code or recovery code in a log line.

A real `pheby serve` (its production logging: uvicorn's access lines included) goes through every way in
that works without a browser: the owner secret traded for a session, the secret, a token and the cookie
on `hello`, a password sign-in and change, TOTP set up and a code step with a code and with a recovery
code, OpenID Connect against a real provider on loopback, wrong credentials of each kind, sign-out. Then
its whole log is read for every credential the scenario made or used. (A passkey's exchange carries no
secret: a challenge, a public key, a signature.)
"""

import json
import re
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx
import pyotp
import pytest
from websockets.asyncio.client import connect

from pheby.cli import main
from pheby.db import SqliteDatabase
from tests.crash_safety import SECRET, ServerProcess
from tests.live_server import free_port
from tests.oidc_provider import authorize, running_provider
from tests.passwords import OTHER_PASSWORD, PASSWORD, fast_accounts

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.live,
    # The test provider (in this process) calls an Authlib API Authlib has deprecated: its business.
    pytest.mark.filterwarnings("ignore:get_jwt_config:DeprecationWarning"),
]

CLIENT_SECRET = "leak-scan-oidc-client-secret-4f0c"
SUBJECT = "alice-at-the-provider"


async def make_alice(data_dir: Path) -> str:
    """Alice, with a password and an API token; returns the token."""
    db = SqliteDatabase(data_dir / "pheby.sqlite3")
    await db.open()
    try:
        accounts = fast_accounts(db)
        alice = await accounts.create("alice", PASSWORD)
        return (await accounts.issue_token(alice.id, "api", None)).token
    finally:
        await db.close()


class Scenario:
    """What a scan must not find: every credential the scenario made or used."""

    def __init__(self) -> None:
        self.secrets: set[str] = {SECRET, PASSWORD, OTHER_PASSWORD, CLIENT_SECRET}
        self.codes: set[str] = set()  # six digits: looked for only where a value stands

    def keep(self, *values: str) -> None:
        self.secrets.update(v for v in values if v)


async def hello(server: ServerProcess, secret: str | None, headers: dict[str, str] | None = None) -> str:
    """One hello (with `secret`, or none for the cookie's); the first answer's type."""
    async with connect(server.ws_url, additional_headers=headers or {}) as ws:
        fields = {"secret": secret} if secret is not None else {}
        await ws.send(json.dumps({"type": "hello", "protocol_version": 1, **fields}))
        answer: str = json.loads(await ws.recv())["type"]
        return answer


def session_cookie(response: httpx.Response) -> str:
    found = re.search(r"(?:^|,\s*)hope_session=([^;]+)", response.headers.get("set-cookie", ""))
    assert found, response.headers
    return found.group(1)


async def every_way_in(server: ServerProcess, issuer: str, api_token: str, found: Scenario) -> None:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as http:
        # The owner secret, traded for a session; the cookie on the API and on hello.
        assert (await http.post("/api/auth/session", json={"secret": "not-the-owner-secret-at-all"})).status_code == 401
        traded = await http.post("/api/auth/session", json={"secret": SECRET})
        assert traded.status_code == 200, traded.text
        owner_session = traded.json()["token"]
        found.keep(owner_session)
        assert (await http.get("/api/me")).status_code == 200  # by the cookie
        assert (await http.get("/api/auth/sessions")).status_code == 200
        cookie = {"Cookie": f"hope_session={owner_session}", "Origin": server.base_url}
        assert await hello(server, None, cookie) == "ready"
        assert await hello(server, SECRET) == "ready"
        assert await hello(server, api_token) == "ready"
        assert await hello(server, "phb_" + "w" * 43) == "error"
        http.cookies.clear()

        # Wrong bearers of both shapes, on the API and an attachment.
        for wrong in ("a-guess-at-the-owner-secret", "phb_" + "g" * 43):
            assert (await http.get("/api/me", headers={"Authorization": f"Bearer {wrong}"})).status_code == 401
            attachment = "/attachments/0123456789abcdef0123456789abcdef"
            assert (await http.get(attachment, headers={"X-Pheby-Secret": wrong})).status_code == 401

        # A password sign-in and a password change.
        assert (
            await http.post("/api/auth/login", json={"username": "alice", "password": "Wr0ng-" + PASSWORD})
        ).status_code == 401
        signed_in = await http.post("/api/auth/login", json={"username": "alice", "password": PASSWORD})
        assert signed_in.status_code == 200, signed_in.text
        alice = {"Authorization": f"Bearer {signed_in.json()['token']}"}
        found.keep(signed_in.json()["token"])
        http.cookies.clear()
        body = {"current_password": PASSWORD, "new_password": OTHER_PASSWORD}
        assert (await http.post("/api/auth/password", json=body, headers=alice)).status_code == 200

        # TOTP on: the key, a code, the recovery codes.
        setup = (await http.post("/api/auth/totp/setup", headers=alice)).json()
        key = setup["key"]
        found.keep(key, setup["uri"])
        totp, now = pyotp.TOTP(key), time.time()
        found.codes.update(totp.at(now + step * 30) for step in (-1, 0, 1, 2))
        enabled = await http.post("/api/auth/totp/enable", json={"code": totp.at(now)}, headers=alice)
        assert enabled.status_code == 200, enabled.text
        recovery_codes = enabled.json()["recovery_codes"]
        found.keep(*recovery_codes, *(code.replace("-", "") for code in recovery_codes))

        # The code step: a wrong code, a code of the next step (one step either side passes), a recovery code.
        for code in ("999999", totp.at(now + 30), recovery_codes[0]):
            step = await http.post("/api/auth/login", json={"username": "alice", "password": OTHER_PASSWORD})
            assert step.status_code == 202, step.text
            ticket = step.json()["ticket"]
            found.keep(ticket)
            answered = await http.post("/api/auth/login/totp", json={"ticket": ticket, "code": code})
            if code == "999999":
                assert answered.status_code == 401
                answered = await http.post("/api/auth/login/totp", json={"ticket": ticket, "code": recovery_codes[1]})
            assert answered.status_code == 200, answered.text
            found.keep(answered.json()["token"])
            http.cookies.clear()

        # OpenID Connect: start, the provider's form, the callback with its code and state.
        start = await http.get("/api/auth/oidc/start")
        assert start.status_code == 302, start.text
        back = await anyio.to_thread.run_sync(lambda: authorize(start.headers["location"], SUBJECT))
        query = parse_qs(urlsplit(back).query)
        found.keep(query["code"][0], query["state"][0])
        callback = await http.get(back)
        assert callback.status_code == 302
        assert "signin_error" not in callback.headers["location"], callback.headers["location"]
        found.keep(session_cookie(callback))
        assert (await http.get("/api/me")).status_code == 200
        assert (await http.post("/api/auth/logout", headers={"Origin": server.base_url})).status_code == 200
        assert (await http.post("/api/auth/logout", headers=alice)).status_code == 200


async def test_no_credential_reaches_the_log(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    api_token = await make_alice(data_dir)
    found = Scenario()
    found.keep(api_token)
    with running_provider() as issuer:
        link = ["--data-dir", str(data_dir), "account", "link-oidc", "alice", SUBJECT, "--issuer", issuer]
        assert await anyio.to_thread.run_sync(main, link) == 0  # as an operator runs it (its own event loop)
        environment = {
            "PHEBY_OIDC_ISSUER": issuer,
            "PHEBY_OIDC_CLIENT_ID": "pheby-leak-scan",
            "PHEBY_OIDC_CLIENT_SECRET": CLIENT_SECRET,
        }
        server = ServerProcess(data_dir, free_port(), tmp_path / "server.log", env_extra=environment)
        try:
            await server.wait_up()
            await every_way_in(server, issuer, api_token, found)
        finally:
            server.stop()
    log = server.log()
    # The scan read what it had to: the access lines of the ways in, the callback's among them.
    for line in ("POST /api/auth/session", "POST /api/auth/login/totp", "GET /api/auth/oidc/callback"):
        assert line in log, line
    leaked = sorted(secret[:6] + "…" for secret in found.secrets if secret in log)
    assert leaked == []
    codes = sorted(code for code in found.codes if re.search(rf"[\"'=:/]\s*{code}\b", log))
    assert codes == []
