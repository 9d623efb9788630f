"""`pheby migrate-db --to URL`: a data dir's SQLite database, made by the stores, moves into an empty PostgreSQL
database whose stores then read it all back (accounts sign in, artifacts and history read the same, new rows take
new ids); a second run, a missing or out-of-step source and a failure mid-copy are refused or rolled back with one
line on stderr that never shows the URL's password, host or port."""

import base64
import json
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import msgspec
import psycopg
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from pheby import migrate_db as migrate_db_module
from pheby.cli import main
from pheby.db import Database, SqliteDatabase, apply_migrations, newest_version
from pheby.db.postgres import PostgresDatabase
from pheby.protocol.frames import HistoryMessage
from pheby.push.subscriptions import BrowserSubscription, PushSubscriptions, SubscriptionKeys
from pheby.search.index import SearchIndex
from pheby.settings import Settings
from pheby.store.artifacts import Artifacts
from pheby.store.attachments import Attachments
from pheby.store.changes import ChangeFeed
from pheby.store.conversations import Conversations, TranscriptTurn
from pheby.store.oidc import OidcStore
from pheby.store.passkeys import PasskeyStore
from pheby.store.second_factor import SecondFactors
from pheby.store.sessions import Sessions
from pheby.store.task_owners import TaskOwners
from storage import LocalDiskStore
from tests.passwords import PASSWORD, fast_accounts

pytestmark = pytest.mark.anyio

CREDENTIAL_ID = bytes(range(256))[::-1]  # every byte value, NUL included: bytea must keep them all
PUBLIC_KEY = b"\x00\xa5\x01\x02\x03\x26\x20\x01\x21\x58\x20" + bytes(32)
TOTP_SECRET = "JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP"
ISSUER = "https://id.example"


class Built(msgspec.Struct, kw_only=True):
    """What the SQLite data dir was given, to find again on PostgreSQL."""

    alice_id: str
    owner_id: str
    api_token: str
    session_token: str
    session_id: str
    conversation_id: str
    artifact_id: str
    attachment_id: str
    subscription_id: str
    passkey_id: str
    history_ids: list[int]
    change_sequences: list[int]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


async def chunks(body: bytes) -> AsyncIterator[bytes]:
    yield body


def push_keys() -> SubscriptionKeys:
    point = (
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    )
    encode: Callable[[bytes], str] = lambda raw: base64.urlsafe_b64encode(raw).rstrip(b"=").decode()  # noqa: E731
    return SubscriptionKeys(p256dh=encode(point), auth=encode(bytes(range(16))))


async def build(settings: Settings) -> Built:
    """A data dir as a server that ran a while leaves it, made with the stores' own writes."""
    db = SqliteDatabase(settings.database_path)
    await db.open()
    try:
        accounts = fast_accounts(db)
        owner = await accounts.ensure_owner()
        alice = await accounts.create("alice", PASSWORD)
        bob = await accounts.create("bob")
        api = await accounts.issue_token(alice.id, "api", None)
        session = await accounts.issue_token(alice.id, "session", 86400, device="Firefox on Linux", method="password")
        conversations = Conversations(db)
        conversation = await conversations.create(alice.id, "Trip to Lisbon")
        await conversations.create(bob.id, "Bob's")
        await conversations.add_session(conversation.id, "hermes-session-1")
        await conversations.approve_pattern(conversation.id, "rm -rf")
        await conversations.remember_input(conversation.id, "sent text", "typed text")
        shown = [
            HistoryMessage(message_id="m1", role="user", text="Where to eat?", ts="2025-06-01T10:00:00Z"),
            HistoryMessage(message_id="m2", role="assistant", text="Try the bacalhau 🐟", ts=None),
        ]
        turns = [TranscriptTurn(1, "user", "Where to eat?"), TranscriptTurn(2, "assistant", "Try the bacalhau 🐟")]
        await conversations.log_transcript(conversation.id, shown, turns)
        artifacts = Artifacts(db)
        artifact = await artifacts.create(alice.id, "Packing list", "markdown", "- socks\n")
        await artifacts.update(alice.id, artifact.id, artifact.revision, content="- socks\n- hat\n")
        attachments = Attachments(db, LocalDiskStore(settings.data_dir / "blobs"), settings)
        attachment = await attachments.upload_pheby(
            alice.id, conversation.id, "notes.txt", "text/plain", chunks(b"ferry at nine")
        )
        subscription = await PushSubscriptions(db).save(
            alice.id,
            BrowserSubscription(endpoint="https://push.example/send/abc", keys=push_keys()),
            None,
            session.token_id,
        )
        passkey = await PasskeyStore(db).add(
            alice.id,
            credential_id=CREDENTIAL_ID,
            public_key=PUBLIC_KEY,
            sign_count=7,
            transports=("usb", "nfc"),
            name="YubiKey",
        )
        assert passkey is not None
        factors = SecondFactors(db)
        assert await factors.set_pending(alice.id, TOTP_SECRET)
        assert await factors.enable(alice.id, TOTP_SECRET, 55_000_000, ["recovery-one", "recovery-two"])
        assert await factors.use_recovery_code(alice.id, "recovery-one")
        await OidcStore(db).link(ISSUER, "subject-248289761001", alice.id)
        await TaskOwners(db).record("http://hermes.example", "job-1", alice.id)
        await accounts.revoke_token((await accounts.issue_token(bob.id, "api", None)).token_id)
        history_ids = await db.run(lambda c: [r[0] for r in c.execute("SELECT id FROM history_log ORDER BY id")])
        sequences = await db.run(lambda c: [r[0] for r in c.execute("SELECT sequence FROM changes ORDER BY 1")])
    finally:
        await db.close()
    return Built(
        alice_id=alice.id,
        owner_id=owner.id,
        api_token=api.token,
        session_token=session.token,
        session_id=session.token_id,
        conversation_id=conversation.id,
        artifact_id=artifact.id,
        attachment_id=attachment.id,
        subscription_id=subscription.id,
        passkey_id=passkey.id,
        history_ids=history_ids,
        change_sequences=sequences,
    )


def sqlite_counts(path: Path) -> dict[str, int]:
    conn = sqlite3.connect(path)
    try:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {name: conn.execute(f'SELECT COUNT(*) FROM "{name}"').fetchone()[0] for name in names}
    finally:
        conn.close()


def postgres_counts(url: str) -> dict[str, int]:
    """Every table's rows on PostgreSQL but the migrations' own (their record, the search index's one row of
    totals, the credential changes' counter)."""
    with psycopg.connect(url) as conn:
        names = [
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' "
                "AND table_type = 'BASE TABLE' "
                "AND table_name NOT IN ('schema_migrations', 'search_totals', 'credential_changes')"
            )
        ]
        counts = {}
        for name in names:
            row = conn.execute(psycopg.sql.SQL("SELECT COUNT(*) FROM {}").format(psycopg.sql.Identifier(name)))
            counts[name] = int(row.fetchone()[0])  # type: ignore[index]
        return counts


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings(database_url="")


async def opened(url: str) -> PostgresDatabase:
    db = PostgresDatabase(url, pool_size=2)
    await db.open()
    return db


async def test_everything_moves_and_reads_back_the_same(
    settings: Settings, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    built = await build(settings)
    before = sqlite_counts(settings.database_path)

    code, out, err = run_cli(capsys, "--data-dir", str(settings.data_dir), "migrate-db", "--to", postgres_url)
    assert (code, err) == (0, "")
    result = json.loads(out)
    assert result["schema_version"] == newest_version()
    copied = result["tables"]
    assert "schema_migrations" not in copied
    assert not {name for name in copied if name.startswith(("search_", "sqlite_"))}
    assert copied == {name: before[name] for name in copied}
    assert result["rows"] == sum(copied.values())
    for table in ("accounts", "auth_tokens", "conversations", "history_log", "transcript_turns", "artifacts"):
        assert copied[table] > 0, table
    for table in ("artifact_versions", "attachments", "changes", "push_subscriptions", "passkeys"):
        assert copied[table] > 0, table
    for table in ("totp_secrets", "totp_recovery_codes", "oidc_identities", "task_owners", "turn_inputs"):
        assert copied[table] > 0, table
    order = list(copied)
    assert order.index("accounts") < order.index("auth_tokens") < order.index("push_subscriptions")
    assert {name: n for name, n in postgres_counts(postgres_url).items() if name in copied} == copied

    db = await opened(postgres_url)
    try:
        await reads_back(db, settings, built)
        # The copy indexed what it copied (no index row is left without its terms), and search finds it.
        unindexed = "SELECT COUNT(*) FROM search_index WHERE terms IS NULL"
        assert await db.run(lambda c: c.execute(unindexed).fetchone()[0]) == 0
        [hit] = (await SearchIndex(db).search(built.alice_id, "bacalhau")).results
        assert hit.conversation_id == built.conversation_id
    finally:
        await db.close()


async def reads_back(db: Database, settings: Settings, built: Built) -> None:
    accounts = fast_accounts(db)
    signed_in = await accounts.verify_password("alice", PASSWORD)
    assert signed_in is not None
    assert signed_in.id == built.alice_id
    assert await accounts.verify_password("alice", "not-the-password-at-all") is None
    resolved = await accounts.resolve_token(built.api_token)
    assert resolved is not None
    assert resolved.account.id == built.alice_id
    assert resolved.kind == "api"
    session = await accounts.resolve_token(built.session_token)
    assert session is not None
    assert session.token_id == built.session_id
    assert (await accounts.ensure_owner()).id == built.owner_id  # the owner stays the one, not a second one
    assert [s.device for s in await Sessions(db).of_account(built.alice_id)] == ["Firefox on Linux"]

    conversations = Conversations(db)
    conversation = await conversations.get(built.alice_id, built.conversation_id)
    assert conversation.name == "Trip to Lisbon"
    assert [(m.message_id, m.text, m.ts) for m in await conversations.logged_history(built.conversation_id)] == [
        ("m1", "Where to eat?", "2025-06-01T10:00:00Z"),
        ("m2", "Try the bacalhau 🐟", None),
    ]
    assert await conversations.approved_patterns(built.conversation_id) == {"rm -rf"}
    assert await conversations.original_inputs(built.conversation_id) != {}

    artifacts = Artifacts(db)
    artifact = await artifacts.get(built.alice_id, built.artifact_id)
    assert (artifact.revision, artifact.content, artifact.title) == (2, "- socks\n- hat\n", "Packing list")
    assert (await artifacts.get(built.alice_id, built.artifact_id, 1)).content == "- socks\n"

    attachments = Attachments(db, LocalDiskStore(settings.data_dir / "blobs"), settings)
    attachment = await attachments.get(built.alice_id, built.attachment_id)
    assert (attachment.filename, attachment.size) == ("notes.txt", len(b"ferry at nine"))

    passkey = await PasskeyStore(db).by_credential_id(CREDENTIAL_ID)
    assert passkey is not None
    assert passkey.id == built.passkey_id
    assert (bytes(passkey.public_key), passkey.sign_count, passkey.name) == (PUBLIC_KEY, 7, "YubiKey")

    factors = SecondFactors(db)
    assert await factors.is_enabled(built.alice_id)
    assert await factors.recovery_codes_left(built.alice_id) == 1
    assert not await factors.accept_step(built.alice_id, 55_000_000)  # its last code stays used
    assert await OidcStore(db).account_id_for(ISSUER, "subject-248289761001") == built.alice_id
    assert await TaskOwners(db).owner("http://hermes.example", "job-1") == built.alice_id
    subscriptions = await PushSubscriptions(db).of_account(built.alice_id)
    assert [s.id for s in subscriptions] == [built.subscription_id]
    feed = await ChangeFeed(db).after(built.alice_id, 0)
    assert [c.sequence for c in feed] == built.change_sequences


async def test_new_rows_on_postgresql_take_ids_past_the_copied_ones(
    settings: Settings, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    built = await build(settings)
    # SQLite's AUTOINCREMENT never hands out a deleted row's number again; nor may PostgreSQL's sequence.
    handed_out = max(built.change_sequences)
    conn = sqlite3.connect(settings.database_path, isolation_level=None)
    conn.execute("DELETE FROM changes WHERE sequence = ?", (handed_out,))
    conn.close()
    assert run_cli(capsys, "--data-dir", str(settings.data_dir), "migrate-db", "--to", postgres_url)[0] == 0
    db = await opened(postgres_url)
    try:
        conversations = Conversations(db)
        more = [HistoryMessage(message_id="m3", role="user", text="And dessert?", ts=None)]
        await conversations.log_transcript(built.conversation_id, more, [])
        ids = await db.run(lambda c: [r[0] for r in c.execute("SELECT id FROM history_log ORDER BY id")])
        assert ids[:-1] == built.history_ids
        assert ids[-1] > max(built.history_ids)  # SQLite's ids are partition-numbered: far above 1

        artifact = await Artifacts(db).create(built.alice_id, "After the move", "text", "new")
        feed = await ChangeFeed(db).after(built.alice_id, 0)
        assert [c.sequence for c in feed[:-1]] == built.change_sequences[:-1]
        assert (feed[-1].id, feed[-1].sequence) == (artifact.id, handed_out + 1)
    finally:
        await db.close()


async def test_a_second_run_is_refused_and_changes_nothing(
    settings: Settings, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    await build(settings)
    assert run_cli(capsys, "--data-dir", str(settings.data_dir), "migrate-db", "--to", postgres_url)[0] == 0
    after_first = postgres_counts(postgres_url)

    code, out, err = run_cli(capsys, "--data-dir", str(settings.data_dir), "migrate-db", "--to", postgres_url)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1
    assert err.startswith("pheby migrate-db: ")
    assert "already holds data" in err
    assert postgres_counts(postgres_url) == after_first


async def test_a_target_a_server_already_started_on_is_refused(
    settings: Settings, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    await build(settings)
    db = await opened(postgres_url)
    try:
        await fast_accounts(db).ensure_owner()  # what a server's start-up does
    finally:
        await db.close()
    code, _, err = run_cli(capsys, "--data-dir", str(settings.data_dir), "migrate-db", "--to", postgres_url)
    assert code == 2
    assert "table accounts has rows" in err
    assert postgres_counts(postgres_url)["accounts"] == 1


async def test_a_missing_source_is_refused(
    tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(capsys, "--data-dir", str(tmp_path / "none"), "migrate-db", "--to", postgres_url)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1
    assert err.startswith("pheby migrate-db: no SQLite database at ")
    assert not (tmp_path / "none" / "pheby.sqlite3").exists()
    assert postgres_counts(postgres_url) == {}  # the target was not even migrated


async def test_an_older_source_schema_is_refused(
    tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    conn = sqlite3.connect(data / "pheby.sqlite3", isolation_level=None)
    apply_migrations(conn, up_to=newest_version() - 1)
    conn.close()
    code, _, err = run_cli(capsys, "--data-dir", str(data), "migrate-db", "--to", postgres_url)
    assert code == 2
    assert err.count("\n") == 1
    assert f"version {newest_version() - 1}, older than this code's {newest_version()}" in err
    assert "start the server once on SQLite" in err
    assert postgres_counts(postgres_url) == {}


async def test_a_newer_source_schema_is_refused(
    settings: Settings, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    await build(settings)
    conn = sqlite3.connect(settings.database_path, isolation_level=None)
    conn.execute("INSERT INTO schema_migrations (version, applied_at) VALUES (?, 0)", (newest_version() + 1,))
    conn.close()
    code, _, err = run_cli(capsys, "--data-dir", str(settings.data_dir), "migrate-db", "--to", postgres_url)
    assert code == 2
    assert f"version {newest_version() + 1}" in err
    assert "upgrade the server" in err
    assert postgres_counts(postgres_url) == {}


async def test_a_newer_target_schema_is_refused(
    settings: Settings, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    await build(settings)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION)")
        conn.execute("INSERT INTO schema_migrations VALUES (%s, 0)", (newest_version() + 1,))
    code, _, err = run_cli(capsys, "--data-dir", str(settings.data_dir), "migrate-db", "--to", postgres_url)
    assert code == 2
    assert err.count("\n") == 1
    assert f"the target database's schema is version {newest_version() + 1}" in err
    assert postgres_counts(postgres_url) == {}


def with_password(url: str, password: str) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc.replace("@", f":{password}@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


async def test_the_urls_password_host_and_port_appear_nowhere(
    settings: Settings, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    await build(settings)
    url = with_password(postgres_url, "secretpw")
    parts = urlsplit(postgres_url)
    assert run_cli(capsys, "--data-dir", str(settings.data_dir), "migrate-db", "--to", url)[0] == 0
    code, _, refused = run_cli(capsys, "--data-dir", str(settings.data_dir), "migrate-db", "--to", url)
    assert code == 2
    # A server that isn't there: libpq's message names the host and port; ours doesn't.
    gone = url.replace(f":{parts.port}/", ":1/")
    code, out, unreachable = run_cli(capsys, "--data-dir", str(settings.data_dir), "migrate-db", "--to", gone)
    assert (code, out) == (2, "")
    assert unreachable.startswith("pheby migrate-db: cannot connect to the --to database")
    malformed = url.replace(f":{parts.port}/", ":notaport/")
    code, _, bad = run_cli(capsys, "--data-dir", str(settings.data_dir), "migrate-db", "--to", malformed)
    assert code == 2
    for err in (refused, unreachable, bad):
        assert err.count("\n") == 1
        for secret in ("secretpw", parts.hostname or "", str(parts.port), "notaport"):
            assert secret not in err


async def test_a_failure_mid_copy_rolls_everything_back(
    settings: Settings, postgres_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A value PostgreSQL refuses (a NUL in text) in a table copied late: the tables copied before it are empty
    again, and a later run (the value fixed) moves everything."""
    built = await build(settings)
    conn = sqlite3.connect(settings.database_path, isolation_level=None)
    conn.execute("UPDATE artifact_versions SET content = ? WHERE revision = 1", ("a\x00b",))
    conn.close()
    code, out, err = run_cli(capsys, "--data-dir", str(settings.data_dir), "migrate-db", "--to", postgres_url)
    assert (code, out) == (1, "")
    assert err.count("\n") == 1
    assert err.startswith("pheby migrate-db: copying table artifact_versions failed and the copy was rolled back")
    counts = postgres_counts(postgres_url)
    assert "accounts" in counts  # migrated, and empty
    assert set(counts.values()) == {0}

    conn = sqlite3.connect(settings.database_path, isolation_level=None)
    conn.execute("UPDATE artifact_versions SET content = '- socks\n' WHERE revision = 1")
    conn.close()
    assert run_cli(capsys, "--data-dir", str(settings.data_dir), "migrate-db", "--to", postgres_url)[0] == 0
    db = await opened(postgres_url)
    try:
        await reads_back(db, settings, built)
    finally:
        await db.close()


async def test_a_count_that_differs_rolls_everything_back(
    settings: Settings, postgres_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    await build(settings)
    real_copy = migrate_db_module._copy_table

    def copies_one_less(lite: sqlite3.Connection, pg: psycopg.Connection[Any], table: str) -> int:
        rows = real_copy(lite, pg, table)
        if table == "history_log":
            pg.execute("DELETE FROM history_log WHERE id = (SELECT MAX(id) FROM history_log)")
        return rows

    monkeypatch.setattr(migrate_db_module, "_copy_table", copies_one_less)
    code, out, err = run_cli(capsys, "--data-dir", str(settings.data_dir), "migrate-db", "--to", postgres_url)
    assert (code, out) == (1, "")
    assert err.count("\n") == 1
    assert "table history_log: SQLite holds 2 rows, 2 were copied and PostgreSQL counts 1" in err
    assert set(postgres_counts(postgres_url).values()) == {0}


async def test_tables_are_copied_after_the_tables_they_reference(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "order.sqlite3")
    conn.executescript(
        """
        CREATE TABLE c (id TEXT PRIMARY KEY, b_id TEXT REFERENCES b (id), a_id TEXT REFERENCES a (id));
        CREATE TABLE b (id TEXT PRIMARY KEY, a_id TEXT REFERENCES a (id), parent TEXT REFERENCES b (id));
        CREATE TABLE a (id TEXT PRIMARY KEY);
        CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY);
        CREATE VIRTUAL TABLE search_index USING fts5(body);
        CREATE TABLE d (id INTEGER PRIMARY KEY AUTOINCREMENT);
        """
    )
    assert migrate_db_module.copy_order(conn) == ["a", "d", "b", "c"]
    conn.close()
