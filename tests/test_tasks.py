"""Scheduled tasks over /api/tasks: the account's Hermes jobs, projected, validated and scoped per account.

`tasks_scenario` is the lifecycle every gateway must pass; it runs here against the demo Hermes and in
`tests/test_tasks_real_hermes.py` against a real hermes-agent 0.19.0. Error mapping is tested with a
scripted gateway (`httpx.MockTransport`) swapped in for the account's Hermes client.
"""

import asyncio
import re
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import httpx
import pytest

from demo_hermes import DemoHermesServer
from handlers.support.app import create_app
from hermes_client import HermesClient, HermesNotFound, JobRepeat
from pheby.services import Services
from pheby.settings import Settings
from pheby.store.accounts import HermesAccountSettings
from tests.app_client import BASE, Api
from tests.conftest import TEST_SECRET
from tests.demo_hermes_server import client_for
from tests.live_server import LiveServer, hermes_settings
from tests.passwords import PASSWORD, fast_accounts
from tests.ws_client import PhebyClient

pytestmark = pytest.mark.anyio
OWNER: Final = {"Authorization": f"Bearer {TEST_SECRET}"}
TASK_FIELDS: Final = frozenset(
    {"id", "name", "schedule", "prompt", "enabled", "repeat", "created_at", "last_run_at", "next_run_at"}
)
TASK_ID: Final = re.compile(r"[0-9a-f]{12}")
PROMPT: Final = "Say hi PLAIN from a scheduled task"
UNKNOWN_ID: Final = "0123456789ab"
MOCK_URL: Final = "http://10.9.8.7:8642"
MOCK_KEY: Final = "mock-hermes-key-0123456789abcdef"

Handler = Callable[[httpx.Request], httpx.Response]

# Every route that takes a task id, with a valid body where it needs one.
ID_ROUTES: Final[list[tuple[str, str, dict[str, Any] | None]]] = [
    ("PATCH", "/api/tasks/{id}", {"name": "Renamed"}),
    ("DELETE", "/api/tasks/{id}", None),
    ("POST", "/api/tasks/{id}/pause", None),
    ("POST", "/api/tasks/{id}/resume", None),
    ("POST", "/api/tasks/{id}/run", None),
]
ALL_ROUTES: Final[list[tuple[str, str, dict[str, Any] | None]]] = [
    ("GET", "/api/tasks", None),
    ("POST", "/api/tasks", {"name": "T", "schedule": "every 2h", "prompt": PROMPT}),
    *ID_ROUTES,
]


def check_task(task: dict[str, Any]) -> None:
    """Exactly the whitelist, with the gateway's own JSON types."""
    assert set(task) <= TASK_FIELDS, set(task) - TASK_FIELDS
    assert TASK_ID.fullmatch(task["id"])
    assert isinstance(task.get("name", ""), str)
    assert isinstance(task.get("prompt", ""), str)
    assert isinstance(task.get("schedule", {}), dict)
    assert isinstance(task.get("enabled", True), bool)
    assert task.get("repeat") is None or isinstance(task["repeat"], dict | int)
    for stamp in ("created_at", "last_run_at", "next_run_at"):
        assert task.get(stamp) is None or isinstance(task[stamp], str)


async def tasks_scenario(api: httpx.AsyncClient, headers: dict[str, str], *, secrets: Sequence[str] = ()) -> None:
    """Create with each schedule form, list with paused tasks, patch, pause, resume, run, refusals, delete.

    `secrets` (the gateway URL, its key) must appear in no response.
    """

    async def call(method: str, path: str, body: dict[str, Any] | None = None, expect: int = 200) -> Any:
        response = await api.request(method, path, json=body, headers=headers)
        assert response.status_code == expect, (method, path, response.status_code, response.text)
        for secret in secrets:
            assert secret not in response.text
        return response.json()

    future = (datetime.now(UTC) + timedelta(days=30)).strftime("%Y-%m-%dT%H:%M")
    created: list[str] = []
    try:
        tasks: dict[str, dict[str, Any]] = {}
        for schedule in ("30m", "every 2h", "0 9 * * 1-5", future):
            body: dict[str, Any] = {"name": f"Scenario {schedule}", "schedule": schedule, "prompt": PROMPT}
            task = (await call("POST", "/api/tasks", body, 201))["task"]
            check_task(task)
            created.append(task["id"])
            tasks[schedule] = task
            assert (task["name"], task["prompt"], task["enabled"]) == (body["name"], PROMPT, True)
            assert isinstance(task["next_run_at"], str)
        assert tasks["30m"]["schedule"]["kind"] == "once"
        assert tasks["30m"]["repeat"] == {"times": 1, "completed": 0}  # a delay is a one-shot
        assert (tasks["every 2h"]["schedule"]["kind"], tasks["every 2h"]["schedule"]["minutes"]) == ("interval", 120)
        assert tasks["every 2h"]["repeat"] == {"times": None, "completed": 0}
        assert tasks["0 9 * * 1-5"]["schedule"]["kind"] == "cron"
        assert tasks["0 9 * * 1-5"]["schedule"]["expr"] == "0 9 * * 1-5"
        assert tasks[future]["schedule"]["kind"] == "once"
        assert tasks[future]["schedule"]["run_at"].startswith(future)

        paused_body = {"name": "Scenario paused", "schedule": "every 1h", "prompt": PROMPT, "repeat": 3, "paused": True}
        paused = (await call("POST", "/api/tasks", paused_body, 201))["task"]
        created.append(paused["id"])
        check_task(paused)
        assert paused["enabled"] is False
        assert paused["repeat"] == {"times": 3, "completed": 0}

        listing = await call("GET", "/api/tasks")
        assert set(listing) == {"tasks", "next_cursor"}
        assert listing["next_cursor"] is None
        by_id = {task["id"]: task for task in listing["tasks"]}
        assert set(created) <= set(by_id)
        for task in listing["tasks"]:
            check_task(task)
        assert by_id[paused["id"]]["enabled"] is False  # paused tasks are listed (include_disabled)

        task_id = tasks["every 2h"]["id"]
        paused_now = (await call("POST", f"/api/tasks/{task_id}/pause"))["task"]
        assert (paused_now["id"], paused_now["enabled"]) == (task_id, False)
        listed = {task["id"]: task for task in (await call("GET", "/api/tasks"))["tasks"]}
        assert listed[task_id]["enabled"] is False
        resumed = (await call("POST", f"/api/tasks/{task_id}/resume"))["task"]
        assert resumed["enabled"] is True
        assert isinstance(resumed["next_run_at"], str)

        patch = {"name": "Scenario renamed", "schedule": "every 3h", "prompt": f"{PROMPT} again", "repeat": 2}
        patched = (await call("PATCH", f"/api/tasks/{task_id}", patch))["task"]
        check_task(patched)
        assert (patched["name"], patched["prompt"]) == (patch["name"], patch["prompt"])
        assert (patched["schedule"]["kind"], patched["schedule"]["minutes"]) == ("interval", 180)
        assert patched["repeat"] == {"times": 2, "completed": 0}
        disabled = (await call("PATCH", f"/api/tasks/{task_id}", {"enabled": False}))["task"]
        assert disabled["enabled"] is False
        enabled = (await call("PATCH", f"/api/tasks/{task_id}", {"enabled": True}))["task"]
        assert enabled["enabled"] is True
        still_paused = (await call("PATCH", f"/api/tasks/{paused['id']}", {"name": "Scenario still paused"}))["task"]
        assert (still_paused["name"], still_paused["enabled"]) == ("Scenario still paused", False)

        ran = (await call("POST", f"/api/tasks/{task_id}/run"))["task"]
        assert ran["id"] == task_id
        check_task(ran)

        bad = {"name": "Scenario bad", "schedule": "whenever", "prompt": PROMPT}
        refused = await call("POST", "/api/tasks", bad, 422)
        assert refused["error"]["code"] == "invalid"
        assert refused["error"]["message"].startswith("Invalid schedule")
        refused = await call("PATCH", f"/api/tasks/{task_id}", {"schedule": "whenever"}, 422)
        assert refused["error"]["message"].startswith("Invalid schedule")
        await call("POST", "/api/tasks", {**bad, "schedule": "61 9 * * *"}, 422)  # not a valid cron line either
        assert len([t for t in (await call("GET", "/api/tasks"))["tasks"] if t["name"] == "Scenario bad"]) == 0

        for task_id in list(created):
            assert await call("DELETE", f"/api/tasks/{task_id}") == {"ok": True}
            created.remove(task_id)
            await call("POST", f"/api/tasks/{task_id}/pause", expect=404)
            await call("DELETE", f"/api/tasks/{task_id}", expect=404)
        remaining = {task["id"] for task in (await call("GET", "/api/tasks"))["tasks"]}
        assert not remaining & {task["id"] for task in tasks.values()}
    finally:
        for task_id in created:
            await api.delete(f"/api/tasks/{task_id}", headers=headers)


# --- fixtures -----------------------------------------------------------------------------------------


async def add_account(settings: Settings, name: str, hermes: HermesAccountSettings | None = None) -> dict[str, str]:
    """Create an account (optionally with its own Hermes) and an API token; return its bearer headers."""
    db = settings.open_database()
    await db.open()
    try:
        accounts = fast_accounts(db)
        account = await accounts.create(name, PASSWORD)
        if hermes is not None:
            await accounts.set_hermes(name, hermes)
        issued = await accounts.issue_token(account.id, "api", None)
        return {"Authorization": f"Bearer {issued.token}"}
    finally:
        await db.close()


@pytest.fixture
def hermes(make_demo_hermes: Callable[..., DemoHermesServer]) -> DemoHermesServer:
    """A private demo Hermes: task runs here reach no other test's job poller."""
    return make_demo_hermes()


@pytest.fixture
def settings(make_settings: Callable[..., Settings], hermes: DemoHermesServer) -> Settings:
    return make_settings(hermes_url=hermes.base_url, hermes_api_key=hermes.api_key)


@pytest.fixture
async def hermes_client(hermes: DemoHermesServer) -> AsyncIterator[HermesClient]:
    async with client_for(hermes) as client:
        yield client


def services_of(api: Api) -> Services:
    services: Services = api.app.state.services
    return services


@pytest.fixture
async def scripted_hermes(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Callable[[Handler], list[httpx.Request]]]:
    """Swap every account's Hermes client for one answered by `handler`; returns the requests it saw.

    The server's reads of what the gateway offers (`pheby.hermes.features`: GET /health and
    /v1/capabilities, in the background or before a first request) are answered as a 0.19.0 gateway
    would and not recorded: the tests count what the task routes ask of Hermes."""
    clients: list[HermesClient] = []

    def install(handler: Handler) -> list[httpx.Request]:
        seen: list[httpx.Request] = []

        def record(request: httpx.Request) -> httpx.Response:
            if request.method == "GET" and request.url.path == "/health":
                return httpx.Response(200, json={"status": "ok", "platform": "hermes-agent", "version": "0.19.0"})
            if request.method == "GET" and request.url.path == "/v1/capabilities":
                return httpx.Response(404, text="Not Found")
            seen.append(request)
            return handler(request)

        client = HermesClient(MOCK_URL, MOCK_KEY, transport=httpx.MockTransport(record))
        clients.append(client)
        monkeypatch.setattr(services_of(api).hermes, "for_account", lambda account: client)
        return seen

    yield install
    for client in clients:
        await client.aclose()


def job_json(job_id: str = UNKNOWN_ID, **fields: Any) -> dict[str, Any]:
    """A 0.19.0 job object, configuration and all."""
    return {
        "id": job_id,
        "name": "Scripted",
        "prompt": PROMPT,
        "skills": [],
        "skill": None,
        "model": "secret-model",
        "provider": "secret-provider",
        "base_url": "http://provider.internal/v1",
        "script": None,
        "schedule": {"kind": "interval", "minutes": 30, "display": "every 30m"},
        "schedule_display": "every 30m",
        "repeat": {"times": None, "completed": 0},
        "enabled": True,
        "state": "scheduled",
        "created_at": "2026-12-01T00:29:12.042143+00:00",
        "next_run_at": "2026-12-01T00:59:12.051398+00:00",
        "last_run_at": None,
        "last_status": None,
        "deliver": "local",
        "origin": {"platform": "api_server", "chat_id": "api", "source_ip": "127.0.0.1"},
        "latest_execution": None,
        **fields,
    }


def route(method: str, path: str, task_id: str = UNKNOWN_ID) -> str:
    return path.format(id=task_id)


# --- the scenario on the demo -------------------------------------------------------------------------


async def test_scenario_on_the_demo_hermes(api: Api, hermes: DemoHermesServer) -> None:
    await tasks_scenario(api, OWNER, secrets=(hermes.base_url, hermes.api_key))


async def test_scenario_for_a_plain_account(api: Api, settings: Settings, hermes: DemoHermesServer) -> None:
    headers = await add_account(settings, "alice")
    await tasks_scenario(api, headers, secrets=(hermes.base_url, hermes.api_key))


# --- create -------------------------------------------------------------------------------------------


async def test_create_forces_local_delivery_and_records_the_owner(
    api: Api, settings: Settings, hermes_client: HermesClient, hermes: DemoHermesServer
) -> None:
    headers = await add_account(settings, "alice")
    response = await api.post(
        "/api/tasks", json={"name": "Digest", "schedule": "every 2h", "prompt": PROMPT, "repeat": 5}, headers=headers
    )
    assert response.status_code == 201
    task = response.json()["task"]
    job = await hermes_client.get_job(task["id"])
    assert job.deliver == "local"
    assert job.repeat == JobRepeat(times=5, completed=0)
    assert task["repeat"] == {"times": 5, "completed": 0}
    alice = await services_of(api).accounts.get_by_name("alice")
    assert await services_of(api).task_owners.owner(hermes.base_url, task["id"]) == alice.id


async def test_create_paused_pauses_the_job(api: Api, hermes_client: HermesClient) -> None:
    body = {"name": "Later", "schedule": "every 2h", "prompt": PROMPT, "paused": True}
    task = (await api.post("/api/tasks", json=body, headers=OWNER)).json()["task"]
    job = await hermes_client.get_job(task["id"])
    assert (job.state, job.enabled) == ("paused", False)
    assert task["enabled"] is False
    body["paused"] = False
    task = (await api.post("/api/tasks", json=body, headers=OWNER)).json()["task"]
    assert (await hermes_client.get_job(task["id"])).state == "scheduled"


MISSING: Final = object()


@pytest.mark.parametrize(
    "change",
    [
        {"name": MISSING},
        {"name": None},
        {"name": ""},
        {"name": "n" * 201},
        {"name": 7},
        {"schedule": MISSING},
        {"schedule": ""},
        {"schedule": "s" * 201},
        {"prompt": MISSING},
        {"prompt": ""},
        {"prompt": "p" * 5001},
        {"repeat": 0},
        {"repeat": -2},
        {"repeat": True},
        {"repeat": 1.5},
        {"repeat": "3"},
        {"repeat": None},
        {"paused": "yes"},
        {"paused": 1},
        {"paused": None},
        {"deliver": "telegram"},
        {"provider": "openrouter"},
        {"model": "gpt-x"},
        {"script": "steal.py"},
        {"base_url": "http://evil.example/v1"},
        {"recipients": ["someone@example.com"]},
        {"tools": ["terminal"]},
        {"enabled_toolsets": ["terminal"]},
        {"skills": ["x"]},
    ],
    ids=lambda change: repr({k: "<missing>" if v is MISSING else v for k, v in change.items()})[:60],
)
async def test_create_rejects_invalid_bodies_with_422(
    api: Api, hermes_client: HermesClient, change: dict[str, Any]
) -> None:
    body = {"name": "Valid", "schedule": "every 2h", "prompt": PROMPT, **change}
    body = {key: value for key, value in body.items() if value is not MISSING}
    response = await api.post("/api/tasks", json=body, headers=OWNER)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "invalid"
    assert await hermes_client.list_jobs() == []  # Hermes never saw it


async def test_limits_are_inclusive(api: Api) -> None:
    body = {"name": "n" * 200, "schedule": "every 2h", "prompt": "p" * 5000, "repeat": 1, "paused": False}
    response = await api.post("/api/tasks", json=body, headers=OWNER)
    assert response.status_code == 201, response.text


async def test_a_non_object_body_is_rejected(api: Api) -> None:
    response = await api.post("/api/tasks", json=["name"], headers=OWNER)
    assert response.status_code in (400, 422)


# --- update -------------------------------------------------------------------------------------------


async def test_patch_enabled_goes_through_pause_and_resume(
    api: Api, hermes_client: HermesClient, scripted_hermes: Callable[[Handler], list[httpx.Request]]
) -> None:
    task = (
        await api.post("/api/tasks", json={"name": "T", "schedule": "every 2h", "prompt": PROMPT}, headers=OWNER)
    ).json()["task"]
    response = await api.patch(f"/api/tasks/{task['id']}", json={"enabled": False}, headers=OWNER)
    assert response.json()["task"]["enabled"] is False
    job = await hermes_client.get_job(task["id"])
    assert (job.state, job.enabled) == ("paused", False)  # a PATCH enabled:false would leave it "scheduled"
    response = await api.patch(f"/api/tasks/{task['id']}", json={"enabled": True, "name": "T2"}, headers=OWNER)
    assert response.json()["task"]["enabled"] is True
    job = await hermes_client.get_job(task["id"])
    assert (job.state, job.enabled, job.name) == ("scheduled", True, "T2")

    # On the wire: enabled is never PATCHed; pause/resume only when the state differs.
    paused_job = job_json(task["id"], enabled=False, state="paused")
    calls = scripted_hermes(
        lambda request: httpx.Response(
            200, json={"job": job_json(task["id"]) if request.url.path.endswith("/resume") else paused_job}
        )
    )
    assert (await api.patch(f"/api/tasks/{task['id']}", json={"enabled": True}, headers=OWNER)).status_code == 200
    assert [(c.method, c.url.path) for c in calls] == [
        ("GET", f"/api/jobs/{task['id']}"),
        ("POST", f"/api/jobs/{task['id']}/resume"),
    ]
    calls.clear()
    assert (await api.patch(f"/api/tasks/{task['id']}", json={"enabled": False}, headers=OWNER)).status_code == 200
    assert [(c.method, c.url.path) for c in calls] == [("GET", f"/api/jobs/{task['id']}")]  # already paused


async def test_patch_sends_repeat_as_an_object(
    api: Api, hermes_client: HermesClient, scripted_hermes: Callable[[Handler], list[httpx.Request]]
) -> None:
    task = (
        await api.post("/api/tasks", json={"name": "T", "schedule": "every 2h", "prompt": PROMPT}, headers=OWNER)
    ).json()["task"]
    response = await api.patch(f"/api/tasks/{task['id']}", json={"repeat": 4}, headers=OWNER)
    assert response.json()["task"]["repeat"] == {"times": 4, "completed": 0}
    assert (await hermes_client.get_job(task["id"])).repeat == JobRepeat(times=4, completed=0)  # not a bare 4

    calls = scripted_hermes(lambda request: httpx.Response(200, json={"job": job_json(task["id"])}))
    await api.patch(f"/api/tasks/{task['id']}", json={"repeat": 7, "prompt": "New"}, headers=OWNER)
    assert [c.method for c in calls] == ["PATCH"]
    assert calls[0].read() == b'{"prompt":"New","repeat":{"times":7,"completed":0}}'


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"name": ""},
        {"name": None},
        {"schedule": ""},
        {"schedule": "s" * 201},
        {"prompt": ""},
        {"prompt": "p" * 5001},
        {"repeat": 0},
        {"repeat": True},
        {"enabled": "no"},
        {"enabled": None},
        {"deliver": "telegram"},
        {"model": "m"},
        {"skills": []},
    ],
    ids=repr,
)
async def test_patch_rejects_invalid_bodies_with_422(
    api: Api, hermes_client: HermesClient, body: dict[str, Any]
) -> None:
    task = (
        await api.post("/api/tasks", json={"name": "T", "schedule": "every 2h", "prompt": PROMPT}, headers=OWNER)
    ).json()["task"]
    response = await api.patch(f"/api/tasks/{task['id']}", json=body, headers=OWNER)
    assert response.status_code == 422, response.text
    job = await hermes_client.get_job(task["id"])
    assert (job.name, job.deliver) == ("T", "local")


# --- ids and scoping ----------------------------------------------------------------------------------


@pytest.mark.parametrize("bad_id", ["0123456789AB", "0123456789a", "0123456789abc", "zzzzzzzzzzzz", "..", "x"])
async def test_malformed_ids_are_404_without_asking_hermes(
    api: Api, scripted_hermes: Callable[[Handler], list[httpx.Request]], bad_id: str
) -> None:
    calls = scripted_hermes(lambda request: httpx.Response(200, json={"job": job_json()}))
    for method, path, body in ID_ROUTES:
        response = await api.request(method, route(method, path, bad_id), json=body, headers=OWNER)
        assert response.status_code == 404, (method, path, response.text)
        assert response.json()["error"]["code"] == "not_found"
    assert calls == []


async def test_unknown_jobs_are_404(api: Api) -> None:
    for method, path, body in ID_ROUTES:
        response = await api.request(method, route(method, path), json=body, headers=OWNER)
        assert response.status_code == 404, (method, path, response.text)


async def test_another_accounts_task_is_404_on_every_route(
    api: Api, settings: Settings, hermes_client: HermesClient
) -> None:
    alice = await add_account(settings, "alice")
    bob = await add_account(settings, "bob")
    body = {"name": "Alice's", "schedule": "every 2h", "prompt": PROMPT}
    task = (await api.post("/api/tasks", json=body, headers=alice)).json()["task"]
    bobs = (await api.post("/api/tasks", json={**body, "name": "Bob's"}, headers=bob)).json()["task"]

    for intruder in (bob, OWNER):  # the owner account sees jobs made outside the server, not other accounts'
        listed = {t["id"] for t in (await api.get("/api/tasks", headers=intruder)).json()["tasks"]}
        assert task["id"] not in listed
        for method, path, payload in ID_ROUTES:
            response = await api.request(method, route(method, path, task["id"]), json=payload, headers=intruder)
            assert response.status_code == 404, (method, path, response.text)
    job = await hermes_client.get_job(task["id"])
    assert (job.name, job.state) == ("Alice's", "scheduled")  # untouched, not deleted

    assert [t["id"] for t in (await api.get("/api/tasks", headers=alice)).json()["tasks"]] == [task["id"]]
    assert [t["id"] for t in (await api.get("/api/tasks", headers=bob)).json()["tasks"]] == [bobs["id"]]


async def test_the_owner_also_sees_jobs_made_outside_the_server(
    api: Api, settings: Settings, hermes_client: HermesClient
) -> None:
    alice = await add_account(settings, "alice")
    outside = await hermes_client.create_job("Made in the Hermes CLI", "every 2h", PROMPT)
    listed = {t["id"]: t for t in (await api.get("/api/tasks", headers=OWNER)).json()["tasks"]}
    assert listed[outside.id]["name"] == "Made in the Hermes CLI"
    assert (await api.post(f"/api/tasks/{outside.id}/pause", headers=OWNER)).json()["task"]["enabled"] is False
    assert (await api.get("/api/tasks", headers=alice)).json()["tasks"] == []
    for method, path, payload in ID_ROUTES:
        response = await api.request(method, route(method, path, outside.id), json=payload, headers=alice)
        assert response.status_code == 404, (method, path)
    assert (await api.delete(f"/api/tasks/{outside.id}", headers=OWNER)).json() == {"ok": True}
    with pytest.raises(HermesNotFound):
        await hermes_client.get_job(outside.id)


async def test_delete_forgets_the_owner(api: Api, hermes: DemoHermesServer) -> None:
    body = {"name": "T", "schedule": "every 2h", "prompt": PROMPT}
    task = (await api.post("/api/tasks", json=body, headers=OWNER)).json()["task"]
    owners = services_of(api).task_owners
    assert await owners.owner(hermes.base_url, task["id"]) is not None
    assert (await api.delete(f"/api/tasks/{task['id']}", headers=OWNER)).json() == {"ok": True}
    assert await owners.owner(hermes.base_url, task["id"]) is None


async def test_an_accounts_own_hermes_is_used(
    api: Api, settings: Settings, make_demo_hermes: Callable[..., DemoHermesServer], hermes_client: HermesClient
) -> None:
    own = make_demo_hermes()
    alice = await add_account(settings, "alice", HermesAccountSettings(url=own.base_url, api_key=own.api_key))
    body = {"name": "On Alice's Hermes", "schedule": "every 2h", "prompt": PROMPT}
    task = (await api.post("/api/tasks", json=body, headers=alice)).json()["task"]
    async with client_for(own) as own_client:
        assert (await own_client.get_job(task["id"])).name == "On Alice's Hermes"
    assert await hermes_client.list_jobs() == []
    assert [t["id"] for t in (await api.get("/api/tasks", headers=alice)).json()["tasks"]] == [task["id"]]


async def test_tasks_need_authentication(api: Api) -> None:
    for method, path, body in ALL_ROUTES:
        response = await api.request(method, route(method, path), json=body)
        assert response.status_code == 401, (method, path)


# --- projection and upstream errors -------------------------------------------------------------------


async def test_projection_is_the_whitelist_and_passes_gateway_values_through(
    api: Api, scripted_hermes: Callable[[Handler], list[httpx.Request]]
) -> None:
    cron = {"kind": "cron", "expr": "0 9 * * 1-5", "display": "0 9 * * 1-5"}
    full = job_json(schedule=cron, last_run_at="2026-12-02T09:00:00+00:00", repeat={"times": 3, "completed": 1})
    sparse = {"id": "abcdefabcdef", "name": "Sparse"}  # an older Hermes omitting most fields
    scripted_hermes(lambda request: httpx.Response(200, json={"jobs": [full, sparse]}))
    response = await api.get("/api/tasks", headers=OWNER)
    assert response.status_code == 200
    assert response.json() == {
        "tasks": [
            {
                "id": UNKNOWN_ID,
                "name": "Scripted",
                "schedule": cron,
                "prompt": PROMPT,
                "enabled": True,
                "repeat": {"times": 3, "completed": 1},
                "created_at": "2026-12-01T00:29:12.042143+00:00",
                "last_run_at": "2026-12-02T09:00:00+00:00",
                "next_run_at": "2026-12-01T00:59:12.051398+00:00",
            },
            {"id": "abcdefabcdef", "name": "Sparse"},
        ],
        "next_cursor": None,
    }
    for leak in ("secret-model", "secret-provider", "provider.internal", "origin", "deliver", MOCK_URL, MOCK_KEY):
        assert leak not in response.text


async def test_jobs_of_other_shapes_pass_through_or_are_skipped_never_failing_the_list(
    api: Api, scripted_hermes: Callable[[Handler], list[httpx.Request]]
) -> None:
    nameless = {"id": "aaaaaaaaaaaa", "schedule": {"kind": "interval", "minutes": 5}, "repeat": {"times": None}}
    broken = {"id": "bbbbbbbbbbbb", "name": "Broken", "enabled": "yes", "schedule": "every 5m"}
    fine = {"id": "cccccccccccc", "name": "Fine"}
    scripted_hermes(lambda request: httpx.Response(200, json={"jobs": [nameless, broken, fine]}))
    response = await api.get("/api/tasks", headers=OWNER)
    assert response.status_code == 200
    assert response.json()["tasks"] == [
        nameless,  # no name, no schedule display, no repeat count: absent, as Hermes sent it
        fine,
    ]


async def test_unreachable_hermes_is_503(make_settings: Callable[..., Settings], hermes_down_base_url: str) -> None:
    settings = make_settings(hermes_url=hermes_down_base_url, hermes_api_key="k" * 20)
    async with Api(create_app(settings), base_url=BASE) as api:
        for method, path, body in ALL_ROUTES:
            response = await api.request(method, route(method, path), json=body, headers=OWNER)
            assert response.status_code == 503, (method, path, response.text)
            assert response.json()["error"]["code"] == "unavailable"
            assert hermes_down_base_url not in response.text


@pytest.mark.parametrize(
    ("answer", "routes"),
    [
        # A Hermes without the jobs routes: /api/jobs itself is a 404.
        (httpx.Response(404, text="404: Not Found"), ALL_ROUTES[:2]),
        # 0.19.0 without its cron module.
        (httpx.Response(501, json={"error": "Cron module not available"}), ALL_ROUTES),
    ],
    ids=["no-jobs-route", "cron-module-missing"],
)
async def test_hermes_without_the_jobs_api_is_501(
    api: Api,
    scripted_hermes: Callable[[Handler], list[httpx.Request]],
    answer: httpx.Response,
    routes: list[tuple[str, str, dict[str, Any] | None]],
) -> None:
    scripted_hermes(lambda request: answer)
    for method, path, body in routes:
        response = await api.request(method, route(method, path), json=body, headers=OWNER)
        assert response.status_code == 501, (method, path, response.text)
        assert response.json()["error"]["code"] == "not_implemented"


@pytest.mark.parametrize(
    "answer",
    [
        httpx.Response(500, json={"error": "database is locked: /srv/hermes/cron/jobs.json"}),
        httpx.Response(502, text="Bad gateway"),
        httpx.Response(200, text="<html>not json</html>"),
        httpx.Response(200, json={"jobs": "nope", "job": {"id": 5}}),
    ],
    ids=["500", "502", "not-json", "wrong-shape"],
)
async def test_hermes_failures_and_malformed_bodies_are_502(
    api: Api, scripted_hermes: Callable[[Handler], list[httpx.Request]], answer: httpx.Response
) -> None:
    scripted_hermes(lambda request: answer)
    for method, path, body in ALL_ROUTES:
        if method == "DELETE" and answer.status_code == 200:
            continue  # a DELETE reads no body
        response = await api.request(method, route(method, path), json=body, headers=OWNER)
        assert response.status_code == 502, (method, path, response.text)
        assert response.json()["error"] == {"code": "upstream_failure", "message": "Hermes answered with an error"}


@pytest.mark.parametrize(
    ("status", "message", "shown"),
    [
        (500, "Invalid schedule 'whenever'. Use:\n  - Duration: '30m', '2h', '1d' (one-shot)", "Invalid schedule"),
        (500, "Invalid cron expression '61 9 * * *': [61] is not acceptable", "Invalid cron expression"),
        (500, "Requested one-shot time 2020-01-01T00:00:00+00:00 is more than 120s in the past", "Requested"),
        (
            400,
            "Blocked: prompt matches threat pattern 'prompt_injection'. Cron prompts must not contain injection "
            "or exfiltration payloads.",
            "Blocked: prompt matches threat pattern",
        ),
        (400, "Name must be ≤ 200 characters; see http://10.0.0.1:9119/docs or /srv/hermes/notes", "Name must be"),
    ],
    ids=["schedule", "cron", "past", "prompt", "sanitised"],
)
async def test_hermes_refusals_are_422_with_a_sanitised_message(
    api: Api, scripted_hermes: Callable[[Handler], list[httpx.Request]], status: int, message: str, shown: str
) -> None:
    scripted_hermes(lambda request: httpx.Response(status, json={"error": message}))
    for method, path, body in (ALL_ROUTES[1], ID_ROUTES[0]):
        response = await api.request(method, route(method, path), json=body, headers=OWNER)
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["code"] == "invalid"
        assert error["message"].startswith(shown)
        for leak in ("10.0.0.1", "/srv/hermes", MOCK_URL):
            assert leak not in error["message"]


async def test_a_failed_pause_after_create_takes_the_job_back(
    api: Api, scripted_hermes: Callable[[Handler], list[httpx.Request]], settings: Settings
) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/pause"):
            return httpx.Response(503, json={"error": {"message": "draining", "code": "gateway_draining"}})
        if request.method == "DELETE":
            return httpx.Response(200, json={"ok": True})
        return httpx.Response(200, json={"job": job_json()})

    calls = scripted_hermes(answer)
    body = {"name": "T", "schedule": "every 2h", "prompt": PROMPT, "paused": True}
    response = await api.post("/api/tasks", json=body, headers=OWNER)
    assert response.status_code == 503
    assert [(c.method, c.url.path) for c in calls] == [
        ("POST", "/api/jobs"),
        ("POST", f"/api/jobs/{UNKNOWN_ID}/pause"),
        ("DELETE", f"/api/jobs/{UNKNOWN_ID}"),
    ]
    assert await services_of(api).task_owners.owner(settings.hermes_url, UNKNOWN_ID) is None


# --- a run reaches the WebSocket ----------------------------------------------------------------------


@pytest.mark.live
async def test_a_task_run_reaches_a_connected_client(
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    hermes: DemoHermesServer,
) -> None:
    server = start_live_server(
        live_settings(
            **hermes_settings(hermes),
            job_poll_seconds=0.3,
        )
    )
    client = await PhebyClient.connect(server.ws_url, server.secret)
    await asyncio.sleep(0.8)  # the first poll sets the baseline: older cron sessions are history
    headers = {"Authorization": f"Bearer {server.secret}"}
    async with httpx.AsyncClient(base_url=server.base_url, headers=headers) as http:
        body = {"name": "Evening digest", "schedule": "every 2h", "prompt": "Summarise my day"}
        created = await http.post("/api/tasks", json=body)
        assert created.status_code == 201, created.text
        task_id = created.json()["task"]["id"]
        ran = await http.post(f"/api/tasks/{task_id}/run")
        assert ran.status_code == 200, ran.text
        assert ran.json()["task"]["id"] == task_id

    updated = await client.expect("conversation.updated", timeout=15)
    assert updated["name"] == "Evening digest"
    conversation_id = updated["conversation_id"]
    accepted = await client.expect("run.accepted", conversation_id=conversation_id)
    complete = await client.expect("message.complete", conversation_id=conversation_id)
    assert "Summarise my day" in complete["text"]
    finished = await client.expect("run.finished", run_id=accepted["run_id"])
    assert finished["status"] == "completed"
    listing = await client.request("conversation.list", "conversation.snapshot")
    entry = next(c for c in listing["conversations"] if c["conversation_id"] == conversation_id)
    assert entry["session_id"].startswith(f"cron_{task_id}_")
    await client.close()
