"""Which gateway, credentials and memory home an account gets: its own, or the server's, never a mix."""

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pheby.hermes.pool import HermesClients, connection_for
from pheby.settings import Settings
from pheby.store.accounts import Account, HermesAccountSettings

SERVER_URL = "http://127.0.0.1:8642"


@pytest.fixture
def settings(make_settings: Callable[..., Settings], tmp_path: Path) -> Settings:
    return make_settings(
        hermes_url=SERVER_URL,
        hermes_api_key="server-key",
        hermes_home=tmp_path / "server-home",
        hermes_dashboard_url="http://127.0.0.1:9119",
        hermes_dashboard_token="server-dash",
    )


def account(*, is_owner: bool = False, **hermes: Any) -> Account:
    return Account(
        id="a" * 32,
        name="owner" if is_owner else "alice",
        is_owner=is_owner,
        disabled=False,
        created_at=0.0,
        hermes=HermesAccountSettings(**hermes),
    )


def test_no_settings_of_its_own_is_the_servers_gateway(settings: Settings) -> None:
    expected = (SERVER_URL, "server-key", "http://127.0.0.1:9119", "server-dash")
    assert connection_for(settings, account()) == expected


def test_a_private_key_on_the_servers_gateway(settings: Settings) -> None:
    assert connection_for(settings, account(api_key="alice-key"))[:2] == (SERVER_URL, "alice-key")


def test_own_gateway_never_gets_the_servers_credentials(settings: Settings) -> None:
    own = account(url="http://127.0.0.1:9000")
    assert connection_for(settings, own) == ("http://127.0.0.1:9000", "", None, None)
    with_key = account(url="http://127.0.0.1:9000", api_key="k", dashboard_url="http://127.0.0.1:9001")
    assert connection_for(settings, with_key) == ("http://127.0.0.1:9000", "k", "http://127.0.0.1:9001", None)


def test_own_dashboard_on_the_servers_gateway_gets_only_its_own_token(settings: Settings) -> None:
    own = account(dashboard_url="http://127.0.0.1:9002")
    assert connection_for(settings, own)[2:] == ("http://127.0.0.1:9002", None)


def test_the_servers_memory_home_is_the_owners(settings: Settings, tmp_path: Path) -> None:
    pool = HermesClients(settings)
    assert pool.home_for(account(is_owner=True)) == tmp_path / "server-home"
    assert pool.home_for(account()) is None  # another account on the shared gateway: no memory controls
    assert pool.home_for(account(home=str(tmp_path / "alice"))) == tmp_path / "alice"
    assert pool.home_for(account(is_owner=True, url="http://127.0.0.1:9000")) is None
