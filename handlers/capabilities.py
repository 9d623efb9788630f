"""GET /api/capabilities — which features this account can use now (booleans), and the path each takes.

`plugin` (only when the companion plugin is configured) says which of its extras are live; `paths` says,
for each feature that differs between Hermes gateways, whether Hermes does it (`native`), the plugin
does it (`plugin`), or it is not available (`declined`).
"""

import msgspec
from litestar import get
from litestar.di import NamedDependency

from pheby.auth import Principal
from pheby.hermes.capabilities import Capabilities, account_capabilities
from pheby.services import Services


class CapabilitiesBody(msgspec.Struct, frozen=True):
    capabilities: Capabilities


@get("/capabilities", tags=["features"])
async def capabilities(
    current_user: NamedDependency[Principal], services: NamedDependency[Services]
) -> CapabilitiesBody:
    account = current_user.account
    found = await account_capabilities(services.hermes, account, services.settings.vision_models)
    await services.hermes_features.of(account)  # read now if start-up has not yet (bounded)
    extras = services.conversation_settings.extras_for(account)
    found = msgspec.structs.replace(found, paths=services.hermes_features.paths(account, extras))
    if services.plugin_link.configured:
        found = msgspec.structs.replace(found, plugin=extras)
    return CapabilitiesBody(capabilities=found)
