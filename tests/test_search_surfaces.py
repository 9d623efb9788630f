"""Search on both surfaces, end to end: `conversation.search` on the WebSocket and `GET /api/search` give the
same results, only the caller's, and `conversation.open` with `around_message_id` lands on the hit.

A real uvicorn server on the demo Hermes (which answers `You said: <text>`); a turn is searchable once
the server has logged it after the run (the after-turn read), so each test waits for its first hit.
"""

import asyncio
import re
import time
from typing import Any

import httpx
import pytest

from tests.live_server import LiveServer
from tests.test_media_isolation import add_account
from tests.ws_client import Frame, PhebyClient

pytestmark = [pytest.mark.anyio, pytest.mark.live]


async def chat(client: PhebyClient, conversation_id: str, text: str) -> None:
    accepted = await client.request("chat.send", "run.accepted", conversation_id=conversation_id, text=text)
    await client.expect("run.finished", run_id=accepted["run_id"])


async def search(client: PhebyClient, query: str, **fields: Any) -> Frame:
    return await client.request("conversation.search", "conversation.search.results", query=query, **fields)


async def found(client: PhebyClient, query: str, kind: str = "message", timeout: float = 10.0) -> list[Frame]:
    """The results of `query` once it has results of this kind (after the turn was logged)."""
    deadline = time.monotonic() + timeout
    while True:
        results: list[Frame] = (await search(client, query))["results"]
        if any(r["kind"] == kind for r in results) or time.monotonic() > deadline:
            return results
        await asyncio.sleep(0.05)


def rest_search(server: LiveServer, token: str, query: str, **params: str) -> httpx.Response:
    return httpx.get(
        f"{server.base_url}/api/search",
        params={"q": query, **params},
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )


async def test_a_word_of_an_answer_is_found_on_both_surfaces_in_its_account_only(
    live_server: LiveServer, opened: list[PhebyClient]
) -> None:
    owner = await PhebyClient.connect(live_server.ws_url, live_server.secret)
    opened.append(owner)
    zoo = (await owner.request("conversation.create", "conversation.created", name="Zoo"))["conversation_id"]
    for animal in ("okapi", "tapir", "capybara", "wombat"):
        await chat(owner, zoo, f"tell me about the {animal}")

    results = await found(owner, "okapi")
    answers = [r for r in results if r["role"] == "assistant"]
    assert [(r["conversation_id"], r["conversation_name"], r["kind"]) for r in answers] == [(zoo, "Zoo", "message")]
    hit = answers[0]
    assert [hit["snippet"][start:end] for start, end in hit["highlights"]] == ["okapi"]
    assert "You said" in hit["snippet"]
    rest = rest_search(live_server, live_server.secret, "okapi")
    assert rest.status_code == 200
    assert rest.json() == {"results": results, "next_cursor": None}

    # The page holding the hit: the okapi answer is the 2nd of 8 messages; with cursors both ways.
    page = await owner.request(
        "conversation.open", "conversation.history", conversation_id=zoo, around_message_id=hit["message_id"], limit=3
    )
    ids = [m["message_id"] for m in page["messages"]]
    assert hit["message_id"] in ids
    assert len(ids) == 3
    assert (page["has_more"], page["has_newer"]) == (False, True)
    newer = await owner.request(
        "conversation.open", "conversation.history", conversation_id=zoo, after_message_id=ids[-1], limit=3
    )
    assert next(m["text"] for m in newer["messages"]) != page["messages"][-1]["text"]
    assert newer["has_newer"] is True

    # Another account's okapi is its own.
    _bob_id, bob_token = await add_account(live_server.settings, "bob")
    bob = await PhebyClient.connect(live_server.ws_url, bob_token)
    opened.append(bob)
    bobs = (await bob.request("conversation.create", "conversation.created", name="Bob's zoo"))["conversation_id"]
    await chat(bob, bobs, "an okapi for bob")
    bob_results = await found(bob, "okapi")
    assert {r["conversation_id"] for r in bob_results} == {bobs}
    assert {r["conversation_id"] for r in (await search(owner, "okapi"))["results"]} == {zoo}
    assert {r["conversation_id"] for r in rest_search(live_server, bob_token, "okapi").json()["results"]} == {bobs}
    assert {r["conversation_id"] for r in rest_search(live_server, live_server.secret, "okapi").json()["results"]} == {
        zoo
    }


async def test_a_renamed_conversation_is_found_by_its_new_name_and_a_deleted_one_not_at_all(
    live_server: LiveServer, opened: list[PhebyClient]
) -> None:
    owner = await PhebyClient.connect(live_server.ws_url, live_server.secret)
    opened.append(owner)
    created = await owner.request("conversation.create", "conversation.created", name="Aardvark plans")
    conversation_id = created["conversation_id"]
    await chat(owner, conversation_id, "the numbat question")
    assert await found(owner, "numbat")
    assert [r["kind"] for r in (await search(owner, "aardvark"))["results"]] == ["name"]

    await owner.request("conversation.rename", "conversation.renamed", conversation_id=conversation_id, name="Pangolin")
    assert (await search(owner, "aardvark"))["results"] == []
    assert rest_search(live_server, live_server.secret, "aardvark").json()["results"] == []
    [by_name] = rest_search(live_server, live_server.secret, "pangolin").json()["results"]
    assert (by_name["kind"], by_name["conversation_name"], by_name["highlights"]) == ("name", "Pangolin", [[0, 8]])

    await owner.request("conversation.delete", "conversation.deleted", conversation_id=conversation_id)
    for query in ("numbat", "pangolin"):
        assert (await search(owner, query))["results"] == []
        assert rest_search(live_server, live_server.secret, query).json()["results"] == []


BAD_QUERIES = ['"unclosed', "AND OR NOT", "*", "x" * 10_000, "nul\x00byte"]


async def test_bad_queries_are_bad_requests_on_both_surfaces(
    live_server: LiveServer, opened: list[PhebyClient]
) -> None:
    owner = await PhebyClient.connect(live_server.ws_url, live_server.secret)
    opened.append(owner)
    for query in BAD_QUERIES:
        error = await owner.request("conversation.search", "error", query=query)
        assert error["error"]["code"] == "bad_request", query[:20]
        response = rest_search(live_server, live_server.secret, query)
        assert response.status_code == 400, query[:20]
        assert response.json()["error"]["code"] == "bad_request"
        assert "Traceback" not in response.text
    bad_cursor = await owner.request("conversation.search", "error", query="okapi", cursor="x")
    assert bad_cursor["error"]["code"] == "bad_request"
    assert rest_search(live_server, live_server.secret, "okapi", cursor="x").status_code == 400
    # Any cursor the document's pattern allows is answered: one pointing nowhere ends the list.
    document = httpx.get(f"{live_server.base_url}/schema/openapi.json", timeout=10).json()
    (cursor_parameter,) = [p for p in document["paths"]["/api/search"]["get"]["parameters"] if p["name"] == "cursor"]
    pattern = cursor_parameter["schema"].get("pattern") or cursor_parameter["schema"]["oneOf"][0]["pattern"]
    assert re.fullmatch(pattern.strip("^$"), "0.0")
    nowhere = rest_search(live_server, live_server.secret, "okapi", cursor="0.0")
    assert (nowhere.status_code, nowhere.json()) == (200, {"results": [], "next_cursor": None})
    too_many = await owner.request("conversation.search", "error", query="okapi", limit=51)
    assert too_many["error"]["code"] == "bad_request"
