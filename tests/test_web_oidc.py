"""Pheby Web's "Sign in with …" (OpenID Connect) in a real Chromium, against a live server and a real
provider on loopback (`tests/oidc_provider.py`): the button, the provider's form, and the way back to `/`
with the session cookie; a refused sign-in is explained."""

from collections.abc import Callable, Iterator

import pytest
from playwright.sync_api import Browser, expect

from pheby.settings import Settings
from tests.browser import open_page
from tests.live_server import LiveServer
from tests.oidc_provider import running_provider, set_user

pytestmark = [
    pytest.mark.live,
    pytest.mark.xdist_group("browser"),
    pytest.mark.filterwarnings("ignore:get_jwt_config:DeprecationWarning"),  # the test provider's Authlib use
]


@pytest.fixture
def oidc_provider() -> Iterator[str]:
    with running_provider() as issuer:
        yield issuer


def test_sign_in_with_the_identity_provider(
    browser: Browser,
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    oidc_provider: str,
) -> None:
    server = start_live_server(
        live_settings(
            oidc_issuer=oidc_provider,
            oidc_client_id="pheby-web",
            oidc_client_secret="pheby-web-secret",
            oidc_name="Example IdP",
            oidc_create_accounts=True,
        )
    )
    set_user(oidc_provider, "web.person", {"preferred_username": "Web Person"})
    web = open_page(browser, server)
    try:
        web.open()
        button = web.page.get_by_role("button", name="Sign in with Example IdP")
        expect(button).to_be_visible()
        button.click()
        web.page.wait_for_url(f"{oidc_provider}/oauth2/authorize?*")
        web.page.get_by_placeholder("sub").fill("web.person")
        web.page.get_by_role("button", name="Authorize").click()
        web.page.wait_for_url(server.base_url + "/")
        cookies = {cookie["name"] for cookie in web.page.context.cookies(server.base_url)}
        assert "hope_session" in cookies
        assert "pheby_oidc_state" not in cookies
        me = web.page.evaluate("fetch('/api/me').then((r) => r.json())")
        assert me["name"] == "webperson"  # the account made at first sign-in
    finally:
        web.page.context.close()


def test_a_refused_sign_in_is_explained_and_no_button_without_a_provider(
    browser: Browser, live_server: LiveServer
) -> None:
    web = open_page(browser, live_server)
    try:
        with web.page.expect_response(lambda response: response.url.endswith("/api/auth/oidc")) as offer:
            web.page.goto(live_server.base_url + "/?signin_error=unlinked")
        assert offer.value.json() == {"enabled": False, "name": "single sign-on"}
        expect(web.page.locator("[data-signin-error]")).to_contain_text("No Pheby account is linked to your identity")
        assert web.page.url == live_server.base_url + "/"  # a reload won't say it again
        expect(web.page.get_by_role("button", name="Sign in with single sign-on")).to_have_count(0)
        web.assert_no_console_errors()
    finally:
        web.page.context.close()
