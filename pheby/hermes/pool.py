"""One Hermes client per distinct Hermes: an account's own gateway, else the server's.

An account with its own gateway URL uses only its own credentials and home: the server's API key,
dashboard and memory files belong to the server's gateway and are never sent to, or used for,
another one. On the server's gateway an account may still have a private API key of its own. The
server's Hermes home (its memory files) is the owner's: another account sharing the gateway gets
memory controls only with a home configured for it.
"""

from pathlib import Path

import hermes_client as hc
from pheby import metrics
from pheby.settings import Settings
from pheby.store.accounts import Account

# (url, api_key, dashboard_url, dashboard_token): what one client is built from.
Connection = tuple[str, str, str | None, str | None]


def connection_for(settings: Settings, account: Account) -> Connection:
    """The gateway an account's runs, jobs and models go to, with the credentials for it."""
    own = account.hermes
    if own.url:
        return own.url, own.api_key or "", own.dashboard_url or None, own.dashboard_token or None
    if own.dashboard_url:  # a dashboard of its own: never the server's token
        return settings.hermes_url, own.api_key or settings.hermes_api_key, own.dashboard_url, own.dashboard_token
    dashboard_url = settings.hermes_dashboard_url or None
    dashboard_token = own.dashboard_token or settings.hermes_dashboard_token or None
    return settings.hermes_url, own.api_key or settings.hermes_api_key, dashboard_url, dashboard_token


class HermesClients:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._clients: dict[Connection, hc.HermesClient] = {}

    def url_for(self, account: Account) -> str:
        """The gateway URL the account's runs and jobs go to."""
        return account.hermes.url or self._settings.hermes_url

    def for_account(self, account: Account) -> hc.HermesClient:
        key = connection_for(self._settings, account)
        client = self._clients.get(key)
        if client is None:
            url, api_key, dashboard_url, dashboard_token = key
            client = hc.HermesClient(
                url,
                api_key,
                dashboard_url=dashboard_url,
                dashboard_token=dashboard_token,
                on_outcome=metrics.hermes_request,
            )
            self._clients[key] = client
        return client

    def home_for(self, account: Account) -> Path | None:
        """The account's Hermes home (memory files), if it has one: its own, or the server's for the owner."""
        if account.hermes.home:
            return Path(account.hermes.home)
        if account.is_owner and not account.hermes.url and self._settings.hermes_home:
            return Path(self._settings.hermes_home)
        return None

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()
