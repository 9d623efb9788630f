"""One TLS context per process for the server's HTTP clients.

Making an `ssl.SSLContext` loads the CA bundle, some 20 ms of CPU; an httpx client makes one of its own unless it
is given one, and the server makes clients for each gateway it reaches, for Web Push, the plugin link and every
OpenID provider request. A context is safe to share: it only configures the connections made with it.
"""

import functools
import ssl

import httpx


@functools.cache
def shared_tls_context(*, trust_env: bool = True) -> ssl.SSLContext:
    """The context httpx would make for `verify=True` (with `trust_env`: `SSL_CERT_FILE` / `SSL_CERT_DIR`
    honoured), made once."""
    return httpx.create_ssl_context(trust_env=trust_env)
