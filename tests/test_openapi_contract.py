"""The OpenAPI document tells the truth: schemathesis `--checks all` on every operation finds nothing.

Schemathesis runs as a subprocess against a live server on the demo Hermes, authenticated with the
owner secret as bearer, deterministic (`--generation-deterministic`) and with few examples per
operation, so the run is the same every time and takes seconds. Every operation the document holds
is tested; what the document leaves out is said below with the reason:

- `WS /ws` is not an HTTP operation (it is the Pheby protocol, specified in its own document).
- `/internal/hermes-plugin/*` are the companion plugin's routes, `include_in_schema=False`: they take
  only the plugin secret from loopback and are not part of the client API.
"""

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import httpx
import pytest

from pheby.settings import Settings
from pheby.store.lockout import BearerFailures
from tests.live_server import LiveServer
from tests.ws_client import PhebyClient

pytestmark = [pytest.mark.live, pytest.mark.xdist_group("openapi_contract")]

MAX_EXAMPLES = 10
RUN_TIMEOUT = 240  # seconds; the run takes a few on an idle machine

# What schemathesis counts as an answer to a request it generated, where its defaults differ from this
# server's documented behaviour. Each line says why; none silences a failure of the document.
CONFIG = """
[checks.negative_data_rejection]
# A body over a documented size (maxLength of artifact content) is refused with 413 Too Large: a
# rejection as honest as 400, documented on the operation.
expected-statuses = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429"]

# Rules no JSON Schema can state, each answered with its documented status; the rest of every check
# still runs on these operations.
[[operations]]
# A task's schedule is Hermes's grammar (durations, intervals, cron lines, timestamps), refused with 422;
# so is a number written 1.0 where an integer is due (JSON Schema calls 1.0 an integer; the server keeps
# JSON types, as it does for an artifact's revision).
include-path-regex = '^/api/tasks(/\\{task_id\\})?$'
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "409", "422", "429"]

[[operations]]
# A Hope upload's bytes must match its type (a PNG signature, UTF-8 text, a PDF header): 422 otherwise.
# An empty file is 400, and schemathesis sends empty bodies though the schema says minLength 1.
include-path-regex = "^/api/attachments$"
include-method = "POST"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "404", "409", "422", "429"]

[[operations]]
# A push subscription's keys must be a point on P-256 and a 16-byte secret, and its endpoint an https URL
# on a public host (tests resolve no names but localhost: `tests/conftest.py`): 400 otherwise.
include-path-regex = "^/api/push/subscriptions$"
include-method = "POST"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "409", "429"]

[[operations]]
# A second-factor code is an authenticator's current code or an unused recovery code: another is 422 (the
# guesses are limited: 429); enabling needs a pending key and disabling an enabled one (409 otherwise).
include-path-regex = "^/api/auth/totp/(enable|disable)$"
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "409", "422", "429"]

[[operations]]
# A search query is the grammar of pheby/search/query.py (words, "phrases", prefix*; no bare operators,
# no lone *, at most 500 characters): 400 otherwise. (Any cursor of the documented pattern is answered.)
include-path-regex = "^/api/search$"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "404", "429"]

"""
# The conversation of a Pheby upload must exist (the spec answers an unknown one with 400): the run
# uploads into one the test made, and generates the filename and the bytes.
UPLOAD_CONVERSATION = """
[[operations]]
include-path-regex = "^/attachments$"
include-method = "POST"
parameters = {{ "query.conversation_id" = "{conversation_id}" }}
"""


def schemathesis_command(server: LiveServer, config: Path) -> list[str]:
    executable = Path(sys.executable).with_name("schemathesis")
    return [
        str(executable),
        "--config-file",
        str(config),
        "--no-color",
        "run",
        f"{server.base_url}/schema/openapi.json",
        "--checks",
        "all",
        "--header",
        f"Authorization: Bearer {server.secret}",
        "--max-examples",
        str(MAX_EXAMPLES),
        "--generation-deterministic",
        "--workers",
        "1",
        "--request-timeout",
        "20",
    ]


@pytest.fixture
def contract_server(
    start_live_server: Callable[[Settings], LiveServer], live_settings: Callable[..., Settings], tmp_path: Path
) -> LiveServer:
    home = tmp_path / "hermes-home"  # memory needs a Hermes home, else its routes are 501 by design
    home.mkdir()
    # Room for everything the run creates, so a schema-valid request is not refused by a quota.
    server = start_live_server(
        live_settings(hermes_home=home, artifacts_per_account=10_000, artifact_versions_max=10_000)
    )
    # schemathesis probes every operation with invalid credentials, all from one address: counted, they
    # would lock it out (429) after ten, where the check wants each operation's own 401. The lockout is
    # tests/test_bearer_failures.py's.
    server.services.authenticator.bearer_failures = BearerFailures(limit=1_000_000)
    return server


async def new_conversation(server: LiveServer) -> str:
    async with await PhebyClient.connect(server.ws_url, server.secret) as client:
        created = await client.request("conversation.create", "conversation.created")
    conversation_id: str = created["conversation_id"]
    return conversation_id


def test_schemathesis_finds_nothing(contract_server: LiveServer, tmp_path: Path) -> None:
    conversation_id = anyio.run(new_conversation, contract_server)
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG + UPLOAD_CONVERSATION.format(conversation_id=conversation_id), encoding="utf-8")
    document = httpx.get(f"{contract_server.base_url}/schema/openapi.json", timeout=10).json()
    operations = sum(len(item) for item in document["paths"].values())
    assert operations >= 30  # the run below covers a real document, not an empty one
    started = time.monotonic()
    run = subprocess.run(
        schemathesis_command(contract_server, config),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        cwd=tmp_path,  # its report and cache files stay out of the tree
        check=False,
    )
    elapsed = time.monotonic() - started
    summary = run.stdout[-6000:]
    print(f"schemathesis ran {elapsed:.1f}s:\n{summary}")  # shown with `pytest -rP`
    assert run.returncode == 0, f"schemathesis found failures ({elapsed:.0f}s):\n{run.stdout[-30000:]}{run.stderr}"
    assert f"Selected: {operations}/{operations}" in summary, summary  # every operation, none filtered out
    assert f"Tested: {operations}" in summary, summary
