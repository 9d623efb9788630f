"""The in-process test client of the app: its type and base URL; the `api` fixture (tests/conftest.py) builds it."""

from typing import Final

from litestar import Litestar
from litestar.testing import AsyncTestClient

BASE: Final = "http://testserver.local"
Api = AsyncTestClient[Litestar]
