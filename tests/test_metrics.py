"""`/metrics`: behind its own token, well-formed, moving as the server works, never naming what it counts."""

import re
from collections.abc import Callable

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from pheby.settings import Settings
from tests.live_server import LiveServer
from tests.test_media_isolation import add_account
from tests.ws_client import PhebyClient

pytestmark = [pytest.mark.anyio, pytest.mark.live]
TOKEN = "metrics-token-0123456789"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture
def metrics_server(
    start_live_server: Callable[[Settings], LiveServer], live_settings: Callable[..., Settings]
) -> LiveServer:
    return start_live_server(live_settings(metrics_token=TOKEN))


async def scrape(server: LiveServer) -> tuple[str, Samples]:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as http:
        answer = await http.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples: Samples = {}
    for family in text_string_to_metric_families(answer.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return answer.text, samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of the samples of `name` whose labels include these (0 when there are none)."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= set(ls))


async def test_the_route_wants_its_token_and_is_not_served_without_one(
    metrics_server: LiveServer, live_server: LiveServer
) -> None:
    async with httpx.AsyncClient(base_url=metrics_server.base_url, timeout=10) as http:
        assert (await http.get("/metrics")).status_code == 401
        assert (
            await http.get("/metrics", headers={"Authorization": "Bearer wrong-token-0123456789"})
        ).status_code == 401
        owner = {"Authorization": f"Bearer {metrics_server.secret}"}
        assert (await http.get("/metrics", headers=owner)).status_code == 401  # the owner secret is no metrics token
        schema = (await http.get("/schema/openapi.json")).json()
        assert not any("metrics" in path for path in schema["paths"])
    async with httpx.AsyncClient(base_url=live_server.base_url, timeout=10) as http:  # no token set
        assert (await http.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})).status_code == 404


async def test_a_scripted_scenario_moves_the_counters_and_no_label_names_what_it_counts(
    metrics_server: LiveServer,
) -> None:
    _, before = await scrape(metrics_server)
    _, alice_token = await add_account(metrics_server.settings, "alice")
    async with httpx.AsyncClient(base_url=metrics_server.base_url, timeout=10) as http:
        failed = await http.post("/api/auth/login", json={"username": "alice", "password": "not her password"})
        assert failed.status_code == 401
    with pytest.raises(AssertionError):
        await PhebyClient.connect(metrics_server.ws_url, "not-a-secret-at-all")  # a refused hello

    async with await PhebyClient.connect(metrics_server.ws_url, alice_token) as alice:
        created = await alice.request("conversation.create", "conversation.created", name="Trip to Lisbon")
        conversation_id = created["conversation_id"]
        tool_run = await alice.request("chat.send", "run.accepted", conversation_id=conversation_id, text="/demo tool")
        await alice.expect("run.finished", run_id=tool_run["run_id"])
        approve_run = await alice.request(
            "chat.send", "run.accepted", conversation_id=conversation_id, text="/demo approve"
        )
        request = await alice.expect("approval.request", run_id=approve_run["run_id"])
        await alice.request("approval.respond", "approval.resolved", approval_id=request["approval_id"], choice="once")
        await alice.expect("run.finished", run_id=approve_run["run_id"])
        async with httpx.AsyncClient(base_url=metrics_server.base_url, timeout=10) as http:
            uploaded = await http.post(
                "/attachments",
                params={"conversation_id": conversation_id, "filename": "notes-for-alice.txt"},
                content=b"twelve bytes",
                headers={"Authorization": f"Bearer {alice_token}", "Content-Type": "text/plain"},
            )
            assert uploaded.status_code == 201
            attachment_id = uploaded.json()["attachment"]["attachment_id"]
            downloaded = await http.get(
                f"/attachments/{attachment_id}", headers={"Authorization": f"Bearer {alice_token}"}
            )
            assert downloaded.content == b"twelve bytes"
        text, after = await scrape(metrics_server)
        assert value(after, "pheby_ws_connections") >= 1

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("pheby_login_failures_total") == 1
    assert moved("pheby_ws_hellos_refused_total", code="unauthorized") == 1
    assert moved("pheby_runs_finished_total", status="completed") == 2
    assert moved("pheby_run_duration_seconds_count") == 2
    assert moved("pheby_ws_frames_sent_total", type="tool.event") == 4  # each run's tool running, then done
    assert moved("pheby_ws_frames_sent_total", type="approval.request") == 1
    assert moved("pheby_ws_frames_sent_total", type="run.finished") == 2
    assert moved("pheby_ws_event_to_frame_seconds_count") >= moved("pheby_ws_frames_sent_total", type="message.delta")
    assert moved("pheby_uploads_total", surface="pheby", outcome="stored") == 1
    assert moved("pheby_upload_bytes_total", surface="pheby") == len(b"twelve bytes")
    assert moved("pheby_hermes_requests_total", outcome="ok") >= 4  # runs made, an approval answered, ...
    assert value(after, "pheby_hermes_reachable") == 1
    assert moved("pheby_http_requests_total", path="/attachments", method="POST", status_code="201") == 1
    assert moved("pheby_http_requests_total", path="/api/auth/login", method="POST", status_code="401") == 1
    # A request naming an id is counted under its route's template.
    assert moved("pheby_http_requests_total", path="/attachments/{attachment_id}", method="GET", status_code="200") == 1

    # No label value names what was counted: ids, names, the file, the data dir, a token.
    secrets = [
        conversation_id, tool_run["run_id"], approve_run["run_id"], request["approval_id"],
        uploaded.json()["attachment"]["attachment_id"],
        "alice", "Trip to Lisbon", "notes-for-alice", str(metrics_server.settings.data_dir), alice_token,
        metrics_server.secret, TOKEN,
    ]  # fmt: skip
    for (_, labels), _ in after.items():
        for label, label_value in labels:
            for secret in secrets:
                assert secret not in label_value, (label, label_value)
            if label == "path":  # a route template (`{conversation_id}`), never a request's own path
                assert not re.search(r"/[0-9a-f]{8,}", label_value), label_value
            assert not re.search(r"[0-9a-f]{12,}", label_value), (label, label_value)
    assert "Lisbon" not in text


async def test_login_lockouts_are_counted(metrics_server: LiveServer) -> None:
    await add_account(metrics_server.settings, "bob")
    _, before = await scrape(metrics_server)
    async with httpx.AsyncClient(base_url=metrics_server.base_url, timeout=10) as http:
        statuses = [
            (await http.post("/api/auth/login", json={"username": "bob", "password": "wrong"})).status_code
            for _ in range(6)
        ]
    assert statuses == [401] * 5 + [429]
    _, after = await scrape(metrics_server)
    assert value(after, "pheby_login_failures_total") - value(before, "pheby_login_failures_total") == 5
    assert (
        value(after, "pheby_lockouts_total", scope="login") - value(before, "pheby_lockouts_total", scope="login") == 1
    )
