"""Passkeys in a real Chromium with a DevTools virtual authenticator, on `http://localhost:<port>`.

The page registers a passkey and signs in with it (the session cookie is the proof); the browser's
real responses are then replayed or altered against the routes with httpx: another origin, a
challenge the server never gave, a replay, a lowered sign count, no user verification, all refused.
Chromium resolves `localhost` itself (the `no_dns` fixture patches this process's resolver only).
"""

import base64
import dataclasses
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, CDPSession, Page, expect
from webauthn.helpers import decode_credential_public_key
from webauthn.helpers.cose import COSEAlgorithmIdentifier

from pheby.store.accounts import token_digest
from tests.browser import WebPage, on_server_loop, wait_until
from tests.live_server import LiveServer
from tests.test_web_accessibility import serious_violations

pytestmark = [pytest.mark.live, pytest.mark.xdist_group("browser")]

VIRTUAL_AUTHENTICATOR = {
    "protocol": "ctap2",
    "transport": "internal",
    "hasResidentKey": True,
    "hasUserVerification": True,
    "isUserVerified": True,
}
PASSWORD = "correct horse battery"


class Device:
    """A tab on `http://localhost:<port>` with a virtual authenticator, and the page's own WebAuthn module."""

    def __init__(self, page: Page, live: LiveServer) -> None:
        self.page = page
        self.live = live
        self.cdp: CDPSession = page.context.new_cdp_session(page)
        self.cdp.send("WebAuthn.enable")
        added = self.cdp.send("WebAuthn.addVirtualAuthenticator", {"options": VIRTUAL_AUTHENTICATOR})
        self.authenticator_id: str = added["authenticatorId"]
        self.web = WebPage(page, live)
        self.web.open()
        script = page.locator('script[type="module"]').get_attribute("src")
        assert script is not None
        self.assets = script.rsplit("/", 1)[0]

    def create(self, options: dict[str, Any]) -> dict[str, Any]:
        """`navigator.credentials.create()` with these options (JSON form), via the page's web/lib/webauthn.js."""
        credential: dict[str, Any] = self.page.evaluate(
            "async ([assets, options]) => (await import(assets + '/lib/webauthn.js')).createPasskey(options)",
            [self.assets, options],
        )
        return credential

    def get(self, options: dict[str, Any]) -> dict[str, Any]:
        credential: dict[str, Any] = self.page.evaluate(
            "async ([assets, options]) => (await import(assets + '/lib/webauthn.js')).getPasskey(options)",
            [self.assets, options],
        )
        return credential

    def user_verified(self, verified: bool) -> None:
        self.cdp.send(
            "WebAuthn.setUserVerified", {"authenticatorId": self.authenticator_id, "isUserVerified": verified}
        )

    def use_security_key_without_verification(self) -> None:
        """Swap the authenticator for a USB key that can't verify its user (no PIN, no biometrics)."""
        self.cdp.send("WebAuthn.removeVirtualAuthenticator", {"authenticatorId": self.authenticator_id})
        options = {"protocol": "ctap2", "transport": "usb", "hasResidentKey": False, "hasUserVerification": False}
        self.authenticator_id = self.cdp.send("WebAuthn.addVirtualAuthenticator", {"options": options})[
            "authenticatorId"
        ]

    def show_passkeys_section(self) -> None:
        """The Security page's passkeys section, rendered into the signed-in page."""
        self.page.evaluate(
            """async (assets) => {
              const { html, render } = await import(assets + "/lib/html.js");
              const { PasskeysSection } = await import(assets + "/views/security/passkeys.js");
              const host = document.createElement("div");
              document.body.append(host);
              render(html`<${PasskeysSection} />`, host);
            }""",
            self.assets,
        )

    def sign_in_with_password(self, username: str) -> None:
        self.page.get_by_role("tab", name="Password").click()
        self.page.get_by_label("Username").fill(username)
        self.page.get_by_label("Password", exact=True).fill(PASSWORD)
        self.page.get_by_role("button", name="Sign in").click()
        expect(self.page.get_by_role("button", name="New chat").first).to_be_visible()


@pytest.fixture
def live(start_live_server: Any, live_settings: Any) -> LiveServer:
    server: LiveServer = start_live_server(live_settings())
    # The page is on `localhost`, the one name passkeys work on without PHEBY_PUBLIC_URL.
    return dataclasses.replace(server, base_url=f"http://localhost:{server.settings.port}")


@pytest.fixture
def device(browser: Browser, live: LiveServer) -> Iterator[Device]:
    context = browser.new_context()
    yield Device(context.new_page(), live)
    context.close()


def owner(live: LiveServer) -> dict[str, str]:
    return {"Authorization": f"Bearer {live.secret}"}


def add_account(live: LiveServer, name: str) -> None:
    on_server_loop(live, live.services.accounts.create(name, PASSWORD))


def sign_in_token(live: LiveServer, name: str) -> dict[str, str]:
    """A fresh password session of `name`, as bearer headers."""
    signed_in = httpx.post(live.base_url + "/api/auth/login", json={"username": name, "password": PASSWORD})
    assert signed_in.status_code == 200
    return {"Authorization": f"Bearer {signed_in.json()['token']}"}


def register(live: LiveServer, device: Device, headers: dict[str, str], **changes: Any) -> dict[str, Any]:
    """Register a passkey through the routes, the browser making it; `changes` alter the options it gets."""
    options = httpx.post(live.base_url + "/api/auth/passkeys/options", headers=headers)
    assert options.status_code == 200, options.text
    credential = device.create({**options.json(), **changes})
    added = httpx.post(
        live.base_url + "/api/auth/passkeys", headers=headers, json={"name": "test key", "credential": credential}
    )
    assert added.status_code == 201, added.text
    return credential


def assertion(live: LiveServer, device: Device, **changes: Any) -> dict[str, Any]:
    options = httpx.post(live.base_url + "/api/auth/passkey/options")
    assert options.status_code == 200, options.text
    return device.get({**options.json(), **changes})


def sign_in(live: LiveServer, credential: dict[str, Any]) -> httpx.Response:
    return httpx.post(live.base_url + "/api/auth/passkey", json={"credential": credential})


def refusal(response: httpx.Response) -> str:
    assert response.status_code == 401, response.text
    assert response.json()["error"]["code"] == "passkey_refused"
    return str(response.json()["error"]["message"])


def with_client_data(credential: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """The credential with its clientDataJSON changed (what another page, or an attacker, would send)."""
    encoded = credential["response"]["clientDataJSON"]
    client_data = json.loads(base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)))
    altered = base64.urlsafe_b64encode(json.dumps({**client_data, **changes}).encode()).rstrip(b"=").decode()
    return {**credential, "response": {**credential["response"], "clientDataJSON": altered}}


def session_method(live: LiveServer, token: str) -> str:
    row = on_server_loop(
        live,
        live.services.db.run(
            lambda c: c.execute(
                "SELECT method FROM auth_tokens WHERE token_sha256 = ?", (token_digest(token),)
            ).fetchone()
        ),
    )
    return str(row[0])


def test_a_passkey_added_on_the_security_page_signs_in_from_the_sign_in_screen(
    device: Device, live: LiveServer
) -> None:
    add_account(live, "ada")
    device.sign_in_with_password("ada")
    device.show_passkeys_section()
    expect(device.page.get_by_text("No passkeys yet.")).to_be_visible()
    assert serious_violations(device.page) == []
    device.page.get_by_label("Name").fill("Work laptop")
    device.page.get_by_role("button", name="Add a passkey").click()
    passkeys = device.page.get_by_role("list", name="Your passkeys")
    expect(passkeys.get_by_role("listitem")).to_have_count(1)
    expect(passkeys).to_contain_text("Work laptop")
    device.web.screenshot("passkeys-section")

    device.page.get_by_role("button", name="Sign out").click()
    device.page.get_by_role("tab", name="Passkey").click()
    expect(device.page.get_by_role("button", name="Sign in with a passkey")).to_be_visible()
    assert serious_violations(device.page) == []
    device.web.screenshot("sign-in-passkey")

    def session_cookie() -> str | None:
        return next((c["value"] for c in device.page.context.cookies() if c["name"] == "hope_session"), None)

    before = session_cookie()
    device.page.get_by_role("button", name="Sign in with a passkey").click()

    def new_session_cookie() -> str | None:
        cookie = session_cookie()
        return cookie if cookie != before else None

    token = wait_until(device.page, new_session_cookie, "the passkey sign-in set a new session cookie")
    assert token is not None
    me = httpx.get(live.base_url + "/api/me", cookies={"hope_session": token})
    assert me.status_code == 200
    assert me.json()["name"] == "ada"
    assert session_method(live, token) == "passkey"
    listed = httpx.get(live.base_url + "/api/auth/passkeys", cookies={"hope_session": token}).json()
    assert [p["name"] for p in listed["passkeys"]] == ["Work laptop"]
    assert listed["passkeys"][0]["last_used_at"] is not None
    device.web.assert_no_console_errors()


def test_adding_a_passkey_long_after_signing_in_asks_for_the_password_first_and_it_can_be_removed(
    device: Device, live: LiveServer
) -> None:
    add_account(live, "grace")
    device.sign_in_with_password("grace")
    long_ago = time.time() - 600
    on_server_loop(
        live, live.services.db.run(lambda c: c.execute("UPDATE auth_tokens SET authenticated_at = ?", (long_ago,)))
    )
    device.show_passkeys_section()
    device.page.get_by_role("button", name="Add a passkey").click()
    expect(device.page.get_by_text("Adding a passkey needs a recent sign-in")).to_be_visible()
    grace = on_server_loop(live, live.services.accounts.get_by_name("grace"))
    assert on_server_loop(live, live.services.passkeys.store.of_account(grace.id)) == []  # nothing added yet

    device.page.get_by_label("Your password").fill("not the password")
    device.page.get_by_role("button", name="Confirm and add").click()
    expect(device.page.get_by_role("alert")).to_have_text("That password (or secret) was not accepted")
    device.page.get_by_label("Your password").fill(PASSWORD)
    device.page.get_by_role("button", name="Confirm and add").click()
    expect(device.page.get_by_role("list", name="Your passkeys").get_by_role("listitem")).to_have_count(1)
    assert len(on_server_loop(live, live.services.passkeys.store.of_account(grace.id))) == 1

    device.page.get_by_role("button", name="Remove passkey Passkey").click()  # unnamed: "Passkey"
    expect(device.page.get_by_text("No passkeys yet.")).to_be_visible()
    assert on_server_loop(live, live.services.passkeys.store.of_account(grace.id)) == []
    assert device.web.dialogs == ["confirm: Remove the passkey “Passkey”? It can't sign in here any more."]
    device.web.assert_no_console_errors(allow="403")


@pytest.mark.parametrize(
    ("algorithm", "account"),
    [
        (COSEAlgorithmIdentifier.ECDSA_SHA_256, "es256"),
        (COSEAlgorithmIdentifier.EDDSA, "eddsa"),
        (COSEAlgorithmIdentifier.RSASSA_PKCS1_v1_5_SHA_256, "rs256"),
    ],
)
def test_es256_eddsa_and_rs256_passkeys_are_accepted(
    device: Device, live: LiveServer, algorithm: COSEAlgorithmIdentifier, account: str
) -> None:
    add_account(live, account)
    only = [{"type": "public-key", "alg": int(algorithm)}]  # the browser is offered this algorithm alone
    register(live, device, sign_in_token(live, account), pubKeyCredParams=only)
    stored = on_server_loop(live, live.services.passkeys.store.of_account(account_id(live, account)))
    assert decode_credential_public_key(stored[0].public_key).alg == algorithm
    signed_in = sign_in(live, assertion(live, device))
    assert signed_in.status_code == 200, signed_in.text
    me = httpx.get(live.base_url + "/api/me", headers={"Authorization": f"Bearer {signed_in.json()['token']}"})
    assert me.json()["name"] == account


def account_id(live: LiveServer, name: str) -> str:
    account = on_server_loop(live, live.services.accounts.get_by_name(name))
    return account.id


def test_another_origin_a_wrong_challenge_a_replay_and_a_lowered_count_are_refused(
    device: Device, live: LiveServer
) -> None:
    register(live, device, owner(live))

    first = assertion(live, device)  # signed with count n (its challenge still open)
    second = assertion(live, device)  # count n + 1
    elsewhere = with_client_data(assertion(live, device), origin=f"http://127.0.0.1:{live.settings.port}")
    assert "origin" in refusal(sign_in(live, elsewhere))

    never_given = base64.urlsafe_b64encode(b"a challenge the server never gave!").rstrip(b"=").decode()
    assert "no open challenge" in refusal(sign_in(live, assertion(live, device, challenge=never_given)))

    accepted = sign_in(live, second)
    assert accepted.status_code == 200, accepted.text
    assert "no open challenge" in refusal(sign_in(live, second))  # the same assertion again
    assert "sign count" in refusal(sign_in(live, first))  # an older one: its count is lower than the last seen

    device.user_verified(False)
    unverified = assertion(live, device, userVerification="discouraged")
    assert "verification" in refusal(sign_in(live, unverified))


def test_a_registration_from_another_origin_or_without_user_verification_is_refused(
    device: Device, live: LiveServer
) -> None:
    headers = owner(live)
    options = httpx.post(live.base_url + "/api/auth/passkeys/options", headers=headers).json()
    credential = with_client_data(device.create(options), origin="http://evil.localhost:1")
    refused = httpx.post(
        live.base_url + "/api/auth/passkeys", headers=headers, json={"name": "k", "credential": credential}
    )
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "passkey_registration_refused"
    assert "origin" in refused.json()["error"]["message"]

    device.use_security_key_without_verification()
    options = httpx.post(live.base_url + "/api/auth/passkeys/options", headers=headers).json()
    # As a page could ask: no verification (and so no discoverable credential, which would need one).
    selection = {"residentKey": "discouraged", "requireResidentKey": False, "userVerification": "discouraged"}
    credential = device.create({**options, "authenticatorSelection": selection})
    refused = httpx.post(
        live.base_url + "/api/auth/passkeys", headers=headers, json={"name": "k", "credential": credential}
    )
    assert refused.status_code == 400
    assert "verification" in refused.json()["error"]["message"].lower()
    assert httpx.get(live.base_url + "/api/auth/passkeys", headers=headers).json()["passkeys"] == []
