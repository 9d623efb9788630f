"""A real OpenID Connect provider on loopback for tests: `oidc-provider-mock` (Flask, Authlib) in a thread.

Its issuer is its own origin (`http://127.0.0.1:<port>`); any client id and secret are accepted. A person
signs in by posting its authorization form with their subject (`sub`); `set_user` gives a subject the
claims its ID tokens carry. It is told to require a nonce, so a client that sends none is refused.
"""

import json
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import werkzeug.serving

with warnings.catch_warnings():  # it imports Authlib's deprecated `authlib.jose`: its business, not ours
    warnings.simplefilter("ignore", DeprecationWarning)
    import oidc_provider_mock


@contextmanager
def running_provider() -> Iterator[str]:
    """The provider on a free loopback port; yields its issuer URL."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        app = oidc_provider_mock.app(require_nonce=True)
    server = werkzeug.serving.make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(timeout=10)
        server.server_close()


def set_user(issuer: str, subject: str, claims: dict[str, Any]) -> None:
    """The claims the provider puts in `subject`'s ID tokens (`sub` is added by the provider)."""
    response = httpx.put(f"{issuer}/users/{subject}", json=claims, timeout=10)
    assert response.status_code == 204, response.text


def authorize(authorization_url: str, subject: str | None, *, deny: bool = False) -> str:
    """Submit the provider's authorization form as `subject` (or deny); return where it sends the browser."""
    form = {"action": "deny"} if deny else {"sub": subject or ""}
    response = httpx.post(authorization_url, data=form, timeout=10)
    assert response.status_code == 302, response.text[:500]
    location: str = response.headers["location"]
    return location


@contextmanager
def serving_json(document: bytes) -> Iterator[str]:
    """A loopback HTTP server answering every GET with `document` (JSON); yields its origin. For a provider
    that misbehaves: another issuer in its discovery document, or a document too large."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(document)))
            self.end_headers()
            self.wfile.write(document)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        thread.join(timeout=10)
        server.server_close()


def discovery_document(issuer: str) -> bytes:
    return json.dumps(
        {
            "issuer": issuer,
            "authorization_endpoint": f"{issuer}/oauth2/authorize",
            "token_endpoint": f"{issuer}/oauth2/token",
            "jwks_uri": f"{issuer}/jwks",
        }
    ).encode()
