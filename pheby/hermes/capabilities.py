"""What a Hope client may offer its user: local features always, Hermes-backed ones only when qualified.

The server's own store always has attachments, artifacts and the change feed. Image input, scheduled
tasks and memory depend on the account's Hermes, so each is probed on request — concurrently, each
within `PROBE_TIMEOUT_SECONDS` — and any doubt (unreachable, refused, not implemented, slow) reads
as false. Only booleans leave this module: no URL, path or upstream message.
"""

import asyncio
import os
from collections.abc import Collection
from pathlib import Path

import anyio.to_thread
import msgspec
from msgspec import UNSET, UnsetType

import hermes_client as hc
from pheby.hermes.features import FeaturePaths
from pheby.hermes.pool import HermesClients
from pheby.plugin.extras import PluginExtras
from pheby.store.accounts import Account

# A capability screen should not wait on a stalled Hermes; a slow answer is as good as none.
PROBE_TIMEOUT_SECONDS = 2.0


class Capabilities(msgspec.Struct, frozen=True, kw_only=True):
    attachments: bool
    artifacts: bool
    sync: bool
    image: bool  # the selected model is configured (PHEBY_VISION_MODELS) to take images
    tasks: bool  # Hermes's jobs API answers
    memory: bool  # the account's Hermes home is there to read memory files from
    # Which companion-plugin extras are live (booleans); left out when no plugin is configured.
    plugin: PluginExtras | UnsetType = UNSET
    # Which path is live for each feature that differs between gateways: native, plugin or declined.
    paths: FeaturePaths | UnsetType = UNSET


def local_capabilities() -> Capabilities:
    """What this server does by itself; the Hermes-backed features are off until qualified."""
    return Capabilities(attachments=True, artifacts=True, sync=True, image=False, tasks=False, memory=False)


async def account_capabilities(hermes: HermesClients, account: Account, vision_models: Collection[str]) -> Capabilities:
    """`local_capabilities` with image, tasks and memory turned on where the account's Hermes qualifies them."""
    client = hermes.for_account(account)
    image, tasks, memory = await asyncio.gather(
        selected_model_takes_images(client, vision_models),
        jobs_api_answers(client),
        anyio.to_thread.run_sync(home_is_readable, hermes.home_for(account)),
    )
    local = local_capabilities()
    return msgspec.structs.replace(
        local, image=local.image or image, tasks=local.tasks or tasks, memory=local.memory or memory
    )


async def jobs_api_answers(client: hc.HermesClient) -> bool:
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_SECONDS):
            await client.list_jobs()
    except (hc.HermesError, TimeoutError):  # unreachable, 401/404/501, a bad body, or too slow
        return False
    return True


async def selected_model_takes_images(client: hc.HermesClient, vision_models: Collection[str]) -> bool:
    """Whether the dashboard's current model is one the operator declared vision-capable.

    Hermes 0.19.0 does not say which models take images, so the operator's list is the only source.
    """
    if not vision_models or not client.has_dashboard:
        return False
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_SECONDS):
            options = await client.model_options()
    except (hc.HermesError, TimeoutError):
        return False
    return options.model is not None and options.model in vision_models


def home_is_readable(home: Path | None) -> bool:
    """The Hermes home is a readable directory, and so is its `memories` dir if it has one yet."""
    if home is None:
        return False
    try:
        if not home.is_dir() or not os.access(home, os.R_OK | os.X_OK):
            return False
        memories = home / "memories"
        if not memories.exists():  # Hermes creates it on the first memory it writes
            return True
        return memories.is_dir() and os.access(memories, os.R_OK | os.X_OK)
    except OSError:
        return False
