"""One corpus, the same results on both engines: the same hits in the same order, with the same snippets.

Two accounts write through the stores (messages, conversations created, renamed and deleted, attachments
claimed and tombstoned); each query's page is compared with what is written here, on SQLite (FTS5) and on
PostgreSQL (tsvector). The grammar has no operators: AND, OR, NOT and NEAR are left out of a query, so
`cats OR dogs` finds what `cats dogs` finds. On PostgreSQL, any query the grammar accepts is searched
without an error of the database (a property test over random text).
"""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pheby.db import Connection, Database
from pheby.errors import BadRequest
from pheby.protocol.frames import HistoryMessage, SearchResult
from pheby.search.index import SearchIndex
from pheby.store.accounts import Accounts
from pheby.store.conversations import Conversations, TranscriptTurn

pytestmark = [pytest.mark.anyio, pytest.mark.both_engines]

ALICE_MESSAGES = [
    "Where is the best café in Lisbon?",
    "Try Café Nicola near Rossio; the pastéis de nata are famous.",
    "Can't we go to the e-mail address they gave? It's on the flyer.",
    "The ÉCOLE NORMALE lecture starts at 18:30, room 2B.",
    "東京の天気は晴れ 😀 and Tokyo weather is fine",
    "Naïve coöperation beats résumé padding, said Zoë.",
    "Take the 28 tram; tram 28 is the old yellow one. Tram tram tram!",
    "Cats and dogs: dogs bark, cats purr. NOT a zoo.",
    "Straße in München — Strasse in Zurich",
    "version 3.14 of the app; build 2024-06-01",
]
BOB_MESSAGES = ["Bob's café is in Porto, not Lisbon", "tram 28 is Bob's favourite too"]


async def log(conversations: Conversations, conversation_id: str, texts: list[str]) -> None:
    shown = [
        HistoryMessage(message_id=f"m{i + 1}", role="user" if i % 2 == 0 else "assistant", text=text, ts=None)
        for i, text in enumerate(texts)
    ]
    await conversations.log_transcript(
        conversation_id, shown, [TranscriptTurn(i + 1, m.role, m.text) for i, m in enumerate(shown)]
    )


def attachment(conn: Connection, account_id: str, conversation_id: str, file_id: str, name: str, text: str) -> None:
    conn.execute(
        "INSERT INTO attachments (id, account_id, surface, direction, conversation_id, filename, mime, size, "
        "blob_key, extraction_status, extracted_text, created_at) "
        "VALUES (?, ?, 'pheby', 'inbound', ?, ?, 'text/plain', 9, 'k', 'ready', ?, 0)",
        (file_id, account_id, conversation_id, name, text),
    )


class Corpus:
    def __init__(self, db: Database, alice: str, bob: str) -> None:
        self.search = SearchIndex(db)
        self.alice, self.bob = alice, bob


@pytest.fixture
async def corpus(db: Database) -> Corpus:
    return await build_corpus(db)


async def build_corpus(db: Database) -> Corpus:
    accounts, conversations = Accounts(db), Conversations(db)
    alice, bob = (await accounts.create("alice")).id, (await accounts.create("bob")).id
    travel = await conversations.create(alice, "Lisbon trip")
    await log(conversations, travel.id, ALICE_MESSAGES)
    gone = await conversations.create(alice, "Old café notes")
    await log(conversations, gone.id, ["café crème at the old place", "tram 28 timetable"])
    renamed = await conversations.create(alice, "Untitled")
    await conversations.rename(alice, renamed.id, "Résumé drafts")
    await conversations.delete(alice, gone.id)
    bobs = await conversations.create(bob, "Bob's café")
    await log(conversations, bobs.id, BOB_MESSAGES)

    def files(conn: Connection) -> None:
        attachment(conn, alice, travel.id, "f1", "menu.txt", "Pastéis de nata\nbica (espresso)\ncafé com leite")
        attachment(conn, alice, travel.id, "f2", "unclaimed.txt", "café never sent")
        attachment(conn, alice, travel.id, "f3", "tickets.txt", "tram 28 tickets, gone")
        conn.execute("UPDATE attachments SET claimed_at = 1, message_id = 'm2' WHERE id IN ('f1', 'f3')")
        conn.execute("UPDATE attachments SET deleted_at = 2, extracted_text = NULL WHERE id = 'f3'")
        attachment(conn, bob, bobs.id, "f4", "bob-menu.txt", "café and nata")
        conn.execute("UPDATE attachments SET claimed_at = 1, message_id = 'm1' WHERE id = 'f4'")

    await db.transaction(files)
    return Corpus(db, alice, bob)


def shown(result: SearchResult) -> str:
    """A hit as one line: its kind, where it is, and its snippet with the highlights in brackets."""
    text, at = result.snippet, 0
    marked = ""
    for start, end in result.highlights:
        marked += text[at:start] + "[" + text[start:end] + "]"
        at = end
    where = result.message_id or (result.attachment.filename if result.attachment else result.conversation_name)
    return f"{result.kind} {where}: {marked + text[at:]}"


EXPECTED: dict[str, list[str]] = {
    "cafe": [
        "message m1: Where is the best [café] in Lisbon?",
        "attachment m2: Pastéis de nata bica (espresso) [café] com leite",
        "message m2: Try [Café] Nicola near Rossio; the pastéis de nata are famous.",
    ],
    "café": [
        "message m1: Where is the best [café] in Lisbon?",
        "attachment m2: Pastéis de nata bica (espresso) [café] com leite",
        "message m2: Try [Café] Nicola near Rossio; the pastéis de nata are famous.",
    ],
    '"cafe nicola"': [
        "message m2: Try [Café Nicola] near Rossio; the pastéis de nata are famous.",
    ],
    "pas*": [
        "attachment m2: [Pastéis] de nata bica (espresso) café com leite",
        "message m2: Try Café Nicola near Rossio; the [pastéis] de nata are famous.",
    ],
    "tram 28": [
        "message m7: Take the [28] [tram]; [tram] [28] is the old yellow one. [Tram] [tram] [tram]!",
    ],
    '"tram 28"': [
        "message m7: Take the 28 tram; [tram 28] is the old yellow one. Tram tram tram!",
    ],
    "cats OR dogs": [
        "message m8: [Cats] and [dogs]: [dogs] bark, [cats] purr. NOT a zoo.",
    ],
    "NOT cats": [
        "message m8: [Cats] and dogs: dogs bark, [cats] purr. NOT a zoo.",
    ],
    "can't": [
        "message m3: [Can't] we go to the e-mail address they gave? It's on the flyer.",
    ],
    "e-mail": [
        "message m3: Can't we go to the [e-mail] address they gave? It's on the flyer.",
    ],
    "東京の天気は晴れ": [
        "message m5: [東京の天気は晴れ] 😀 and Tokyo weather is fine",
    ],
    "tokyo": [
        "message m5: 東京の天気は晴れ 😀 and [Tokyo] weather is fine",
    ],
    "ecole": [
        "message m4: The [ÉCOLE] NORMALE lecture starts at 18:30, room 2B.",
    ],
    "naive cooperation": [
        "message m6: [Naïve] [coöperation] beats résumé padding, said Zoë.",
    ],
    "resume": [
        "name Résumé drafts: [Résumé] drafts",
        "message m6: Naïve coöperation beats [résumé] padding, said Zoë.",
    ],
    "zoe": [
        "message m6: …coöperation beats résumé padding, said [Zoë].",
    ],
    "strasse": [
        "message m9: Straße in München — [Strasse] in Zurich",
    ],
    "straße": [
        "message m9: [Straße] in München — Strasse in Zurich",
    ],
    "munchen": [
        "message m9: Straße in [München] — Strasse in Zurich",
    ],
    "3.14": [
        "message m10: version [3.14] of the app; build 2024-06-01",
    ],
    "2024": [
        "message m10: version 3.14 of the app; build [2024]-06-01",
    ],
    "nata": [
        "attachment m2: Pastéis de [nata] bica (espresso) café com leite",
        "message m2: …Nicola near Rossio; the pastéis de [nata] are famous.",
    ],
    "espresso": [
        "attachment m2: Pastéis de nata bica ([espresso]) café com leite",
    ],
    "menu": [
        "attachment m2: [menu].txt",
    ],
    "lisbon": [
        "name Lisbon trip: [Lisbon] trip",
        "message m1: Where is the best café in [Lisbon]?",
    ],
    "ticket*": [],
    "tram*": [
        "message m7: Take the 28 [tram]; [tram] 28 is the old yellow one. [Tram] [tram] [tram]!",
    ],
    "old": [
        "message m7: Take the 28 tram; tram 28 is the [old] yellow one. Tram tram tram!",
    ],
    "bob": [],
    "cr*": [],
}


@pytest.mark.parametrize("query", list(EXPECTED))
async def test_the_corpus_gives_the_same_hits_on_both_engines(corpus: Corpus, query: str) -> None:
    page = await corpus.search.search(corpus.alice, query, limit=50)
    assert [shown(r) for r in page.results] == EXPECTED[query]


async def test_another_accounts_hits_are_its_own_on_both_engines(corpus: Corpus) -> None:
    found = {
        q: [shown(r) for r in (await corpus.search.search(corpus.bob, q)).results] for q in ("cafe", "28", "lisbon")
    }
    assert found == {
        "cafe": [
            "name Bob's café: Bob's [café]",
            "attachment m1: [café] and nata",
            "message m1: Bob's [café] is in Porto, not Lisbon",
        ],
        "28": ["message m2: tram [28] is Bob's favourite too"],
        "lisbon": ["message m1: Bob's café is in Porto, not [Lisbon]"],
    }


QUERY_TEXT = st.lists(
    st.one_of(
        st.sampled_from(['"', "*", "'", "\\", ":", "&", "|", "!", "(", ")", "<->", " ", "AND", "OR", "NOT", "-", "ab"]),
        st.characters(codec="utf-8", exclude_characters="\x00"),
    ),
    max_size=40,
).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=QUERY_TEXT)
async def test_any_query_is_a_page_or_a_bad_request_never_a_database_error(corpus: Corpus, text: str) -> None:
    try:
        page = await corpus.search.search(corpus.alice, text)
    except BadRequest:
        return
    assert isinstance(page.results, list)
