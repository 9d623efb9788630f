"""HSTS on every HTTP response when clients reach the server over https (`PHEBY_PUBLIC_URL`).

A `before_send` hook rather than the app's `response_headers` or a middleware, so every response carries
it: errors, a 404 for a path no route has, downloads and the web assets. A browser that has seen it never
again sends a first request over plain http, where a session cookie or the owner secret could be read or
a page swapped on the way.
"""

from litestar.datastructures import MutableScopeHeaders
from litestar.types import Message, Scope

ONE_YEAR_SECONDS = 365 * 24 * 3600
HSTS_VALUE = f"max-age={ONE_YEAR_SECONDS}"


async def add_strict_transport_security(message: Message, scope: Scope) -> None:
    del scope
    if message["type"] == "http.response.start":
        MutableScopeHeaders.from_message(message)["strict-transport-security"] = HSTS_VALUE
