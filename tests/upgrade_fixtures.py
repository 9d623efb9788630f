"""Data dirs at each earlier schema level, built from SQL, for the upgrade tests (`tests/test_upgrades.py`).

`build_data_dir(data_dir, level)` makes the data dir a server whose newest migration was `level` would
have left: a `pheby.sqlite3` with migrations 1..level applied (`apply_migrations(up_to=level)`) and the
rows below inserted into every table and column that level has, the attachments' bytes where the local
blob store keeps them (`blobs/attachments/<account id>/<attachment id>`), and the generated `secret`.
A row for a table the level doesn't have yet is left out, and so is a column it doesn't have yet
(`media_roots` before 8, `credentials_revoked_at` before 9); a column no level has is an error, so a
typo can't silently drop data.

Nothing is random, so a level gives the same rows every time: ids are digests of names, times are fixed
(live tokens and attachments expire in 2100), the passwords are scrypt-hashed with the server's
parameters and a fixed salt, the push keys come from a fixed P-256 scalar. No binary database is
kept in the repository; to try an upgrade by hand:

    python -m tests.upgrade_fixtures LEVEL DIR    # then: pheby serve --data-dir DIR (HERMES_URL set)

What the rows stand for (ids below): accounts owner, bob (password, API token, a live and an expired
login session, a revoked token; his own Hermes home, media root, and every credential revoked once
before his live tokens were issued), carol (disabled, password and token) and dave (his own gateway);
failed logins; bob's conversations "Trip plans" (YOLO on, its own model and effort) and "Groceries"
(a pattern approved for the session, its history log and transcript turns, what the user typed for an
inlined input, an upload and a deliverable); the owner's "Owner notes" (an upload) and the scheduled
task "Daily digest" (two cron sessions, both seen); who owns which Hermes job, the job poller's
baseline; bob's Hope file and a deleted one, his "Packing list" artifact in three versions and a deleted
draft, the owner's document, the change feed of all that; bob's push subscription.
"""

import base64
import functools
import hashlib
import json
import sqlite3
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from pheby.db import apply_migrations, migration_scripts, newest_version
from tests.files import PNG_1PX

CURRENT = newest_version()
# The schema levels, in order. A number reserved for a migration not yet merged leaves a gap.
VERSIONS = tuple(version for version, _ in migration_scripts())
DATABASE = "pheby.sqlite3"
SECRET = "fixture-owner-secret-0123456789abcdef"
DEFAULT_HERMES_URL = "http://127.0.0.1:8642"
DEFAULT_BOB_JOB = "b0b0b0b0b0b0"
DEFAULT_OWNER_JOB = "0000aaaa0000"

BASE = 1_767_225_600  # 2026-01-01T00:00:00Z: every time below is an offset from it
FAR = 4_102_444_800  # 2100-01-01: what is live never expires during a test


def ident(name: str) -> str:
    """A fixed 32-hex id for a name."""
    return hashlib.sha256(f"pheby-fixture:{name}".encode()).hexdigest()[:32]


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


# --- accounts and credentials -------------------------------------------------------------------

OWNER_ID, BOB_ID, CAROL_ID, DAVE_ID = (ident(f"account:{n}") for n in ("owner", "bob", "carol", "dave"))
BOB_PASSWORD = "bob-fixture-password"
CAROL_PASSWORD = "carol-fixture-password"
BOB_HOME = "/srv/hermes/bob"
BOB_MEDIA_ROOT = "/srv/pheby-media/bob"
DAVE_URL = "http://127.0.0.1:9"  # nothing listens on the discard port: dave's gateway is never reached

# Shaped as `Accounts.issue_token` makes them ("phb_" and 43 URL-safe characters).
BOB_TOKEN = "phb_fixture-bob-api-token0000000000000000000000"
BOB_SESSION = "phb_fixture-bob-login-session000000000000000000"
BOB_EXPIRED = "phb_fixture-bob-expired-session0000000000000000"
BOB_REVOKED = "phb_fixture-bob-revoked-token000000000000000000"
CAROL_TOKEN = "phb_fixture-carol-api-token00000000000000000000"
DAVE_TOKEN = "phb_fixture-dave-api-token000000000000000000000"
BOB_TOKEN_ID = ident("token:bob-api")
BOB_REVOKED_AT = BASE + 100  # `pheby account revoke bob`, before his live tokens were issued


@functools.cache
def password_hash(password: str) -> str:
    """The server's scrypt encoding (`pheby.store.password_hashing.hash_password`) at the cost it had then
    (N=2^14; a sign-in upgrades it), with a salt fixed per password."""
    salt = hashlib.sha256(f"pheby-fixture-salt:{password}".encode()).digest()[:16]
    digest = hashlib.scrypt(password.encode(), salt=salt, n=2**14, r=8, p=1, dklen=32)
    return f"scrypt${2**14}$8$1${base64.b64encode(salt).decode()}${base64.b64encode(digest).decode()}"


# --- conversations ------------------------------------------------------------------------------

TRIP_ID, GROCERIES_ID, NOTES_ID, DIGEST_ID = (
    ident(f"conversation:{n}") for n in ("trip", "groceries", "notes", "digest")
)
SESSIONS = (  # (conversation, Hermes session, position)
    (TRIP_ID, "sess_fixture_trip", 1),
    (GROCERIES_ID, "sess_fixture_groceries", 1),
    (NOTES_ID, "sess_fixture_notes", 1),
    (DIGEST_ID, "cron_fixture_digest_1", 1),
    (DIGEST_ID, "cron_fixture_digest_2", 2),
)
APPROVED_PATTERN = "recursive delete"  # the demo Hermes's `/demo approve` asks for this one
TRIP_MODEL, TRIP_EFFORT = "demo-model-2", "low"
GROCERIES_TYPED = "what do we need?"
GROCERIES_SENT = "what do we need?\n\n[Attachment: list.txt]\nmilk\neggs\n"
GROCERIES_ANSWER = "Milk and eggs."
HISTORY_TS = ("2026-01-01T01:06:41+00:00", "2026-01-01T01:06:45+00:00")

# --- files, artifacts, push ---------------------------------------------------------------------

LIST_ID, CHART_ID, HOPE_NOTES_ID, GONE_ID, OWNER_FILE_ID = (
    ident(f"attachment:{n}") for n in ("list", "chart", "hope-notes", "gone", "owner-file")
)
LIST_BYTES = b"milk\neggs\n"
HOPE_NOTES_BYTES = b"# Notes\n\nBring the passport.\n"
OWNER_FILE_BYTES = b"the owner's own file\n"
PACKING_ID, OLD_DRAFT_ID, OWNER_DOC_ID = (ident(f"artifact:{n}") for n in ("packing", "old-draft", "owner-doc"))
PACKING_VERSIONS = ("- passport", "- passport\n- charger", "- passport\n- charger\n- socks")
PACKING_TIMES = (BASE + 6000, BASE + 6100, BASE + 6200)
OLD_DRAFT_TEXT = "an old draft"
OWNER_DOC_TEXT = "print('owner')"
PUSH_ID = ident("push:bob-phone")
PUSH_ENDPOINT = "https://push.example.test/send/bob-phone"
PUSH_EVENTS = ("approval", "run_finished")


def blob_key(account_id: str, attachment_id: str) -> str:
    return f"attachments/{account_id}/{attachment_id}"


def _push_keys() -> tuple[str, str]:
    point = ec.derive_private_key(0x5EED, ec.SECP256R1()).public_key()
    raw = point.public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)
    encode = base64.urlsafe_b64encode
    return encode(raw).rstrip(b"=").decode(), encode(b"fixture-auth-16b").rstrip(b"=").decode()


Row = tuple[str, dict[str, Any]]


def _attachment(
    attachment_id: str,
    account_id: str,
    *,
    surface: str,
    direction: str,
    filename: str,
    mime: str,
    size: int,
    status: str,
    text: str | None,
    at: int,
    conversation_id: str | None = None,
    message_id: str | None = None,
    deleted_at: int | None = None,
) -> Row:
    return (
        "attachments",
        {
            "id": attachment_id,
            "account_id": account_id,
            "surface": surface,
            "direction": direction,
            "conversation_id": conversation_id,
            "message_id": message_id,
            "filename": filename,
            "mime": mime,
            "size": size,
            "blob_key": blob_key(account_id, attachment_id),
            "extraction_status": status,
            "extracted_text": text,
            "created_at": at,
            "expires_at": FAR if surface == "pheby" else None,
            "claimed_at": at if surface == "pheby" else None,
            "deleted_at": deleted_at,
        },
    )


def _change(account_id: str, kind: str, object_id: str, deleted: bool, at: int) -> Row:
    return (
        "changes",
        {"account_id": account_id, "kind": kind, "object_id": object_id, "deleted": int(deleted), "created_at": at},
    )


FIXTURE_RUN_ID = ident("run:owner-notes")
FIXTURE_RUN: dict[str, Any] = {
    "run_id": FIXTURE_RUN_ID,
    "account_id": OWNER_ID,
    "conversation_id": NOTES_ID,
    "hermes_run_id": "run_" + ident("hermes-run:owner-notes"),
    "gateway": "",
    "user_text": "",  # nothing of it joins the transcript the upgrade tests read back
    "sent_text": "",
    "stored_before": 0,
    "extras": "{}",
    "judged_at": BASE + 7100,
    "phase": "awaiting_decision",
    "cancel_requested": 0,
    "position": None,
    "streamed": "",
    "tools": "[]",
    "revision": 3,
    "admitted_at": BASE + 7100,
}
FIXTURE_DECISION: dict[str, Any] = {
    "decision_id": "a1b2c3d4e5f6",
    "run_id": FIXTURE_RUN_ID,
    "request": json.dumps(
        {"type": "approval.request", "ts": "2026-01-01T01:58:20+00:00", "approval_id": "a1b2c3d4e5f6"}
        | {"session_key": f"agent:main:pheby:dm:{NOTES_ID}", "conversation_id": NOTES_ID, "run_id": FIXTURE_RUN_ID}
        | {"command": "rm -rf /tmp/build-output", "description": "Destructive", "choices": ["once", "deny"]}
    ),
    "held_id": "",
    "pattern_keys": "[]",
    "by_plugin": 0,
    "unseen": 0,
    "asked_at": BASE + 7101,
}


def rows(hermes_url: str, bob_job: str, owner_job: str) -> list[Row]:
    """Every row of the newest schema, in the order a server would have written them."""
    p256dh, auth = _push_keys()
    accounts: list[Row] = [
        ("accounts", {"id": OWNER_ID, "name": "owner", "is_owner": 1, "created_at": BASE}),
        (
            "accounts",
            {
                "id": BOB_ID,
                "name": "bob",
                "password_hash": password_hash(BOB_PASSWORD),
                "created_at": BASE + 10,
                "hermes_home": BOB_HOME,
                "media_roots": json.dumps([BOB_MEDIA_ROOT]),
                "credentials_revoked_at": BOB_REVOKED_AT,
            },
        ),
        (
            "accounts",
            {
                "id": CAROL_ID,
                "name": "carol",
                "password_hash": password_hash(CAROL_PASSWORD),
                "disabled": 1,
                "created_at": BASE + 20,
            },
        ),
        (
            "accounts",
            {
                "id": DAVE_ID,
                "name": "dave",
                "created_at": BASE + 30,
                "hermes_url": DAVE_URL,
                "hermes_api_key": "dave-fixture-gateway-key",
                "hermes_dashboard_url": DAVE_URL,
                "hermes_dashboard_token": "dave-fixture-dashboard-token",
            },
        ),
    ]
    tokens = [
        (ident("token:bob-revoked"), BOB_ID, BOB_REVOKED, "api", BASE + 50, None, BOB_REVOKED_AT),
        (BOB_TOKEN_ID, BOB_ID, BOB_TOKEN, "api", BASE + 200, None, None),
        (ident("token:bob-session"), BOB_ID, BOB_SESSION, "session", BASE + 210, FAR, None),
        (ident("token:bob-expired"), BOB_ID, BOB_EXPIRED, "session", BASE + 220, BASE + 220 + 3600, None),
        (ident("token:carol-api"), CAROL_ID, CAROL_TOKEN, "api", BASE + 230, None, None),
        (ident("token:dave-api"), DAVE_ID, DAVE_TOKEN, "api", BASE + 240, None, None),
    ]
    credentials: list[Row] = [
        (
            "auth_tokens",
            {
                "id": token_id,
                "account_id": account_id,
                "token_sha256": token_digest(token),
                "kind": kind,
                "created_at": created,
                "expires_at": expires,
                "revoked_at": revoked,
            },
        )
        for token_id, account_id, token, kind, created, expires, revoked in tokens
    ]
    credentials += [
        ("auth_failures", {"scope": "login", "subject": "203.0.113.7", "at": BASE + 300}),
        ("auth_failures", {"scope": "hello", "subject": "203.0.113.7", "at": BASE + 301}),
    ]
    conversations: list[Row] = [
        (
            "conversations",
            {"id": TRIP_ID, "account_id": BOB_ID, "name": "Trip plans", "yolo": 1, "created_at": BASE + 1000}
            | {"last_active": BASE + 5000},
        ),
        (
            "conversations",
            {"id": GROCERIES_ID, "account_id": BOB_ID, "name": "Groceries", "created_at": BASE + 1100}
            | {"last_active": BASE + 4000},
        ),
        (
            "conversations",
            {"id": NOTES_ID, "account_id": OWNER_ID, "name": "Owner notes", "created_at": BASE + 1200}
            | {"last_active": BASE + 3000},
        ),
        (
            "conversations",
            {"id": DIGEST_ID, "account_id": OWNER_ID, "name": "Daily digest", "source": "task"}
            | {"job_id": owner_job, "created_at": BASE + 1300, "last_active": BASE + 3500},
        ),
    ]
    conversations += [
        ("conversation_sessions", {"conversation_id": c, "session_id": s, "position": p}) for c, s, p in SESSIONS
    ]
    conversations += [
        ("session_approvals", {"conversation_id": GROCERIES_ID, "pattern_key": APPROVED_PATTERN}),
        ("cron_sessions_seen", {"account_id": OWNER_ID, "session_id": "cron_fixture_digest_1", "seen_at": BASE + 1301}),
        ("cron_sessions_seen", {"account_id": OWNER_ID, "session_id": "cron_fixture_digest_2", "seen_at": BASE + 3500}),
        (
            "turn_inputs",
            {
                "conversation_id": GROCERIES_ID,
                "input_sha256": hashlib.sha256(GROCERIES_SENT.encode()).hexdigest(),
                "original_text": GROCERIES_TYPED,
            },
        ),
        ("task_owners", {"hermes_url": hermes_url, "job_id": bob_job, "account_id": BOB_ID, "created_at": BASE + 1400}),
        ("task_owners", {"hermes_url": hermes_url, "job_id": owner_job, "account_id": OWNER_ID} | {"created_at": BASE}),
        ("cron_baselines", {"hermes_url": hermes_url, "since": BASE + 1}),
    ]
    files: list[Row] = [
        _attachment(
            LIST_ID,
            BOB_ID,
            surface="pheby",
            direction="inbound",
            filename="list.txt",
            mime="text/plain",
            size=len(LIST_BYTES),
            status="ready",
            text=LIST_BYTES.decode(),
            at=BASE + 4001,
            conversation_id=GROCERIES_ID,
            message_id="m1",
        ),
        _attachment(
            CHART_ID,
            BOB_ID,
            surface="pheby",
            direction="outbound",
            filename="chart.png",
            mime="image/png",
            size=len(PNG_1PX),
            status="image",
            text=None,
            at=BASE + 4002,
            conversation_id=GROCERIES_ID,
            message_id="m2",
        ),
        _attachment(
            HOPE_NOTES_ID,
            BOB_ID,
            surface="hope",
            direction="inbound",
            filename="notes.md",
            mime="text/markdown",
            size=len(HOPE_NOTES_BYTES),
            status="ready",
            text=HOPE_NOTES_BYTES.decode(),
            at=BASE + 4100,
        ),
        _change(BOB_ID, "attachment", HOPE_NOTES_ID, False, BASE + 4100),
        _attachment(
            GONE_ID,
            BOB_ID,
            surface="hope",
            direction="inbound",
            filename="gone.txt",
            mime="text/plain",
            size=5,
            status="ready",
            text=None,
            at=BASE + 4200,
            deleted_at=BASE + 4300,
        ),
        _change(BOB_ID, "attachment", GONE_ID, False, BASE + 4200),
        _change(BOB_ID, "attachment", GONE_ID, True, BASE + 4300),
        _attachment(
            OWNER_FILE_ID,
            OWNER_ID,
            surface="pheby",
            direction="inbound",
            filename="owner.txt",
            mime="text/plain",
            size=len(OWNER_FILE_BYTES),
            status="ready",
            text=OWNER_FILE_BYTES.decode(),
            at=BASE + 3001,
            conversation_id=NOTES_ID,
            message_id="m1",
        ),
    ]
    artifacts: list[Row] = [
        (
            "artifacts",
            {"id": PACKING_ID, "account_id": BOB_ID, "title": "Packing list", "kind": "markdown", "revision": 3}
            | {"created_at": PACKING_TIMES[0], "updated_at": PACKING_TIMES[2]},
        ),
        *(
            (
                "artifact_versions",
                {"artifact_id": PACKING_ID, "revision": n, "content": text, "size": len(text.encode())}
                | {"created_at": at},
            )
            for n, (text, at) in enumerate(zip(PACKING_VERSIONS, PACKING_TIMES, strict=True), start=1)
        ),
        *(_change(BOB_ID, "artifact", PACKING_ID, False, at) for at in PACKING_TIMES),
        (
            "artifacts",
            {"id": OLD_DRAFT_ID, "account_id": BOB_ID, "title": "Old draft", "kind": "text", "revision": 1}
            | {"created_at": BASE + 6300, "updated_at": BASE + 6300, "deleted_at": BASE + 6400},
        ),
        (
            "artifact_versions",
            {"artifact_id": OLD_DRAFT_ID, "revision": 1, "content": OLD_DRAFT_TEXT, "size": len(OLD_DRAFT_TEXT)}
            | {"created_at": BASE + 6300},
        ),
        _change(BOB_ID, "artifact", OLD_DRAFT_ID, False, BASE + 6300),
        _change(BOB_ID, "artifact", OLD_DRAFT_ID, True, BASE + 6400),
        (
            "artifacts",
            {"id": OWNER_DOC_ID, "account_id": OWNER_ID, "title": "Owner doc", "kind": "code", "revision": 1}
            | {"created_at": BASE + 6500, "updated_at": BASE + 6500},
        ),
        (
            "artifact_versions",
            {"artifact_id": OWNER_DOC_ID, "revision": 1, "content": OWNER_DOC_TEXT, "size": len(OWNER_DOC_TEXT)}
            | {"created_at": BASE + 6500},
        ),
        _change(OWNER_ID, "artifact", OWNER_DOC_ID, False, BASE + 6500),
        (
            "artifact_usage",
            {"account_id": BOB_ID, "bytes": sum(len(t.encode()) for t in PACKING_VERSIONS) + len(OLD_DRAFT_TEXT)},
        ),
        ("artifact_usage", {"account_id": OWNER_ID, "bytes": len(OWNER_DOC_TEXT)}),
    ]
    later: list[Row] = [
        (
            "conversation_overrides",
            {"conversation_id": TRIP_ID, "model": TRIP_MODEL, "effort": TRIP_EFFORT, "updated_at": BASE + 5001},
        ),
        (
            "history_log",
            {"conversation_id": GROCERIES_ID, "hermes_id": 1, "role": "user", "text": GROCERIES_TYPED}
            | {"ts": HISTORY_TS[0]},
        ),
        (
            "history_log",
            {"conversation_id": GROCERIES_ID, "hermes_id": 2, "role": "assistant", "text": GROCERIES_ANSWER}
            | {"ts": HISTORY_TS[1]},
        ),
        (
            "transcript_turns",
            {"conversation_id": GROCERIES_ID, "hermes_id": 1, "role": "user", "content": GROCERIES_SENT},
        ),
        (
            "transcript_turns",
            {"conversation_id": GROCERIES_ID, "hermes_id": 2, "role": "assistant"}
            | {"content": f"{GROCERIES_ANSWER}\nMEDIA: /srv/pheby-media/bob/chart.png"},
        ),
        (
            "push_subscriptions",
            {"id": PUSH_ID, "account_id": BOB_ID, "endpoint": PUSH_ENDPOINT, "p256dh": p256dh, "auth": auth}
            | {"token_id": BOB_TOKEN_ID, "events": json.dumps(PUSH_EVENTS), "created_at": BASE + 7000},
        ),
        # A run the stopped server was reading in the owner's notes, waiting on an approval. The fixture's Hermes
        # never made it, so the upgraded server ends it (failed) once Hermes says it knows no such run.
        ("active_runs", FIXTURE_RUN),
        ("run_decisions", FIXTURE_DECISION),
        # The state of Groceries' session at which its log matched Hermes. The fixture's Hermes holds other
        # sessions, so the upgraded server finds the state changed and reads the transcript, as it must.
        (
            "history_sync",
            {"conversation_id": GROCERIES_ID, "state": json.dumps([["sess_fixture_groceries", 2, 10, 20, None, None]])}
            | {"resolved": "[]"},
        ),
    ]
    oidc: list[Row] = [
        # Bob's identity at an OpenID Connect provider, and a sign-in begun there before the server stopped.
        (
            "oidc_identities",
            {"issuer": "https://idp.fixture.example", "subject": "bob-at-the-idp", "account_id": BOB_ID}
            | {"created_at": BASE + 7200},
        ),
        (
            "oidc_pending_logins",
            {"state_sha256": hashlib.sha256(b"fixture-state").hexdigest(), "nonce": "fixture-nonce"}
            | {"code_verifier": "fixture-code-verifier", "created_at": BASE + 7300, "expires_at": BASE + 7900},
        ),
    ]
    used, unused, ticket = (hashlib.sha256(v).hexdigest() for v in (b"fixture-1", b"fixture-2", b"fixture-ticket"))
    second_factor: list[Row] = [
        # The owner's authenticator (bob's password sign-in stays one step), a recovery code used, and a
        # password sign-in waiting for its code.
        (
            "totp_secrets",
            {"account_id": OWNER_ID, "secret": "JBSWY3DPEHPK3PXP", "created_at": BASE + 7400}
            | {"enabled_at": BASE + 7410, "last_step": 56_000_000},
        ),
        ("totp_recovery_codes", {"account_id": OWNER_ID, "code_sha256": unused, "used_at": None}),
        ("totp_recovery_codes", {"account_id": OWNER_ID, "code_sha256": used, "used_at": BASE + 7420}),
        ("totp_tickets", {"ticket_sha256": ticket, "account_id": OWNER_ID, "expires_at": BASE + 7700}),
    ]
    passkeys: list[Row] = [
        (
            "passkeys",
            {"id": ident("passkey:bob-phone"), "account_id": BOB_ID, "credential_id": b"bob-phone-credential"}
            | {"public_key": b"a COSE key", "sign_count": 7, "transports": '["internal", "hybrid"]'}
            | {"name": "Bob's phone", "created_at": BASE + 7100, "last_used_at": BASE + 7200},
        ),
        (
            "webauthn_challenges",
            {"challenge": b"an open sign-in challenge", "purpose": "sign_in", "account_id": None, "token_id": None}
            | {"expires_at": BASE + 7300},
        ),
    ]
    processes: list[Row] = [
        # A server's lease left by a process that stopped (only a PostgreSQL database is held by one), and an
        # event of bob's logged for other processes.
        ("process_leases", {"name": "server", "holder": "fixture-host:4242:0f0f0f0f", "expires_at": BASE + 8000}),
        ("account_event_heads", {"account_id": BOB_ID, "seq": 1}),
        (
            "account_events",
            {"account_id": BOB_ID, "seq": 1, "kind": "conversation.renamed", "at": BASE + 8100}
            | {"payload": json.dumps({"conversation_id": GROCERIES_ID, "name": "Groceries"})},
        ),
    ]
    return (
        accounts + credentials + conversations + files + artifacts + later + second_factor + passkeys + oidc + processes
    )


BLOBS: Mapping[str, tuple[str, bytes]] = {  # attachment id → (account id, bytes); the deleted one has none
    LIST_ID: (BOB_ID, LIST_BYTES),
    CHART_ID: (BOB_ID, PNG_1PX),
    HOPE_NOTES_ID: (BOB_ID, HOPE_NOTES_BYTES),
    OWNER_FILE_ID: (OWNER_ID, OWNER_FILE_BYTES),
}


# --- building -----------------------------------------------------------------------------------


# Tables the database writes itself, from triggers: the full-text index and its bookkeeping
# (pheby/migrations/0013_search_index.sql). A fixture never inserts into them; an upgrade builds them.
DERIVED_PREFIX = "search_"


def table_columns(conn: sqlite3.Connection) -> dict[str, tuple[str, ...]]:
    """Each table of the database (schema_migrations, SQLite's own and the derived ones aside) with its columns."""
    names = [
        r[0]
        for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
            "AND name != 'schema_migrations' AND name NOT LIKE ? ORDER BY name",
            (f"{DERIVED_PREFIX}%",),
        )
    ]
    return {name: tuple(r[1] for r in conn.execute(f"PRAGMA table_info({name})")) for name in names}


@functools.cache
def current_columns() -> dict[str, tuple[str, ...]]:
    """The tables and columns of the newest schema (what a row may name)."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        apply_migrations(conn)
        return table_columns(conn)
    finally:
        conn.close()


def _written_at(table: str, row: Mapping[str, Any], columns: Mapping[str, tuple[str, ...]]) -> bool:
    """Whether a server with these tables would have written the row: it has the table and what the row is about
    (the change feed names artifacts from level 4, the artifacts themselves came with level 5)."""
    if table == "changes" and row["kind"] == "artifact":
        return "artifacts" in columns
    return table in columns


@dataclass(frozen=True)
class Fixture:
    """A data dir at `level` and what was put in it."""

    level: int
    data_dir: Path
    columns: dict[str, tuple[str, ...]]  # the level's tables and their columns
    inserted: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # table → rows, as inserted

    @property
    def database(self) -> Path:
        return self.data_dir / DATABASE

    def has(self, table: str, column: str | None = None) -> bool:
        """Whether the level has the table (and the column)."""
        return table in self.columns and (column is None or column in self.columns[table])


def build_data_dir(
    data_dir: Path,
    level: int,
    *,
    hermes_url: str = DEFAULT_HERMES_URL,
    bob_job: str = DEFAULT_BOB_JOB,
    owner_job: str = DEFAULT_OWNER_JOB,
) -> Fixture:
    """A new data dir at schema `level` (1..CURRENT) with the fixture's rows and blobs.

    `hermes_url` and the job ids are the Hermes the task owners and the job poller's baseline name."""
    if not 1 <= level <= CURRENT:
        raise ValueError(f"level must be 1..{CURRENT}")
    data_dir.mkdir(parents=True, exist_ok=False)
    known = current_columns()
    conn = sqlite3.connect(data_dir / DATABASE, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")  # as the server leaves it
        conn.execute("PRAGMA foreign_keys=ON")
        applied = apply_migrations(conn, up_to=level)
        assert applied == [version for version in VERSIONS if version <= level], applied
        columns = table_columns(conn)
        inserted: dict[str, list[dict[str, Any]]] = {}
        conn.execute("BEGIN IMMEDIATE")
        for table, row in rows(hermes_url, bob_job, owner_job):
            unknown = set(row) - set(known.get(table, ()))
            if unknown:
                raise KeyError(f"no level has {table}.{sorted(unknown)}")
            if not _written_at(table, row, columns):
                continue
            kept = {name: value for name, value in row.items() if name in columns[table]}
            conn.execute(
                f"INSERT INTO {table} ({', '.join(kept)}) VALUES ({', '.join('?' * len(kept))})",
                tuple(kept.values()),
            )
            inserted.setdefault(table, []).append(kept)
        conn.execute("COMMIT")
    finally:
        conn.close()
    if "attachments" in columns:
        for attachment_id, (account_id, content) in BLOBS.items():
            path = data_dir / "blobs" / blob_key(account_id, attachment_id)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
    secret = data_dir / "secret"
    secret.write_text(SECRET + "\n", encoding="utf-8")
    secret.chmod(0o600)
    return Fixture(level=level, data_dir=data_dir, columns=columns, inserted=inserted)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[0].isdigit():
        print(f"usage: python -m tests.upgrade_fixtures LEVEL(1..{CURRENT}) DIR", file=sys.stderr)
        return 2
    fixture = build_data_dir(Path(argv[1]), int(argv[0]))
    counts = ", ".join(f"{table} {len(found)}" for table, found in fixture.inserted.items())
    print(f"{fixture.data_dir}: schema version {fixture.level}; {counts}")
    print(f"owner secret {SECRET} (in {fixture.data_dir / 'secret'}); bob's password {BOB_PASSWORD}, token {BOB_TOKEN}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
