"""GET /api/capabilities — which features this account can use now (booleans only)."""

import msgspec
from litestar import get
from litestar.di import NamedDependency

from pheby.auth import Principal
from pheby.capabilities import Capabilities, account_capabilities
from pheby.services import Services


class CapabilitiesBody(msgspec.Struct, frozen=True):
    capabilities: Capabilities


@get("/capabilities", tags=["features"])
async def capabilities(
    current_user: NamedDependency[Principal], services: NamedDependency[Services]
) -> CapabilitiesBody:
    found = await account_capabilities(services.hermes, current_user.account, services.settings.vision_models)
    if services.plugin_link.configured:
        found = msgspec.structs.replace(found, plugin=services.conversation_settings.extras_for(current_user.account))
    return CapabilitiesBody(capabilities=found)
