"""One Hermes client per distinct Hermes: an account's own settings, else the server's."""

from pathlib import Path

import hermes_client as hc
from pheby.accounts import Account
from pheby.settings import Settings


class HermesClients:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._clients: dict[tuple[str, str, str, str], hc.HermesClient] = {}

    def url_for(self, account: Account) -> str:
        """The gateway URL the account's runs and jobs go to."""
        return account.hermes.url or self._settings.hermes_url

    def for_account(self, account: Account) -> hc.HermesClient:
        s, own = self._settings, account.hermes
        key = (
            own.url or s.hermes_url,
            own.api_key or s.hermes_api_key,
            own.dashboard_url or s.hermes_dashboard_url,
            own.dashboard_token or s.hermes_dashboard_token,
        )
        client = self._clients.get(key)
        if client is None:
            url, api_key, dashboard_url, dashboard_token = key
            client = hc.HermesClient(
                url, api_key, dashboard_url=dashboard_url or None, dashboard_token=dashboard_token or None
            )
            self._clients[key] = client
        return client

    def home_for(self, account: Account) -> Path | None:
        """The account's Hermes home (memory files), if one is configured."""
        home = account.hermes.home or self._settings.hermes_home
        return Path(home) if home else None

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()
