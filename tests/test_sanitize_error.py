"""`pheby.redact.sanitize_error`: Hermes error text made fit for a client, wherever it is shown."""

import pytest

import hermes_client as hc
from pheby.errors import PhebyError
from pheby.hermes.model_choice import _call as models_call
from pheby.hermes.tasks import _hermes_errors
from pheby.redact import ERROR_TEXT_MAX, sanitize_error

HOSTILE = [
    ("Connection to https://api.openai.com/v1/chat/completions failed", ["https", "api.openai.com", "/v1"]),
    ("cannot reach http://127.0.0.1:8642/v1/runs", ["127.0.0.1", "8642", "http"]),
    ("upstream 10.0.0.5:443 reset", ["10.0.0.5", "443"]),
    ("connect to hermes-gateway.internal:8642 refused", ["hermes-gateway", "8642"]),
    ("host api.anthropic.com did not answer", ["api.anthropic.com"]),
    ("tried localhost:11434 (ollama)", ["localhost", "11434"]),
    ("[::1]:8080 refused", ["::1", "8080"]),
    ("FileNotFoundError: /home/alice/.hermes/config.yaml", ["/home/alice", "config.yaml", ".hermes"]),
    ("see ~/.hermes/logs/agent.log", ["~/.hermes", "agent.log"]),
    (r"open C:\\Users\\bob\\hermes\\key.txt failed", ["Users", "bob"]),
    ("Incorrect API key provided: sk-proj-abcdefABCDEF123456", ["sk-proj", "abcdefABCDEF123456"]),
    ("Authorization: Bearer abc.def.ghi123", ["abc.def.ghi123"]),
    ("api_key=AbCdEf0123456789 rejected", ["AbCdEf0123456789"]),
    ('{"api_key": "k-9f8e7d6c5b4a"}', ["9f8e7d6c5b4a"]),
    ("token ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZ012345 expired", ["ghp_ABCDEF"]),
    ("AWS key AKIAIOSFODNN7EXAMPLE denied", ["AKIAIOSFODNN7EXAMPLE"]),
    ("session 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 expired", ["9f86d081884c7d65"]),
    ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N", ["eyJhbGci", "dozjgNry"]),
    ("opaque dGhpcyBpcyBhIHNlY3JldCB0b2tlbiAxMjM0NTY3ODkw== leaked", ["dGhpcyBpcyBh"]),
]


@pytest.mark.parametrize(("text", "forbidden"), HOSTILE)
def test_hostile_fragments_never_survive(text: str, forbidden: list[str]) -> None:
    clean = sanitize_error(text)
    for fragment in forbidden:
        assert fragment not in clean, (fragment, clean)
    assert clean  # something is left to tell the user


def test_plain_errors_stay_readable() -> None:
    for text in (
        "HTTP 500: the demo LLM failed, as /demo fail asks",
        "The model is overloaded; try again later.",
        "Rate limit reached for gpt-4o in organization: 3 requests per minute.",
        "Tool failed",
    ):
        assert sanitize_error(text).split()[:3] == text.split()[:3]
    assert sanitize_error("Context length exceeded (128000 tokens)") == "Context length exceeded (128000 tokens)"


def test_length_and_whitespace_are_bounded() -> None:
    clean = sanitize_error("boom\n\n\t" + "x " * 5000)
    assert len(clean) == ERROR_TEXT_MAX
    assert clean.endswith("…")
    assert "\n" not in clean
    assert sanitize_error("a\n b") == "a b"


@pytest.mark.anyio
async def test_upstream_messages_built_from_hermes_errors_are_scrubbed() -> None:
    """Scheduled-task refusals and dashboard refusals quote Hermes's text: it goes through the sanitiser."""
    hostile = "Invalid schedule: see /home/hermes/.hermes/cron.yaml on 10.1.2.3:9119 (key sk-live-abcdef123456)"
    with pytest.raises(PhebyError) as task_error, _hermes_errors(collection=False):
        raise hc.HermesUpstreamError(hostile, status=500)
    with pytest.raises(PhebyError) as rejected, _hermes_errors(collection=False):
        raise hc.HermesRejected(hostile, status=400)

    async def refused() -> None:
        raise hc.HermesRejected(hostile, status=400)

    with pytest.raises(PhebyError) as model_error:
        await models_call(refused())
    for error in (task_error.value, rejected.value, model_error.value):
        for leaked in ("/home/hermes", "cron.yaml", "10.1.2.3", "9119", "sk-live"):
            assert leaked not in error.message, (leaked, error.message)
