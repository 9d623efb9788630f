"""A stalled request body is answered 408 and leaves nothing behind; complete bodies are unaffected."""

import asyncio
import json
from collections.abc import Callable

import httpx
import pytest

from pheby.settings import Settings
from tests.conftest import TEST_SECRET
from tests.live_server import LiveServer

pytestmark = [pytest.mark.anyio, pytest.mark.live]


async def stalled_request(server: LiveServer, head: str, first_bytes: bytes) -> tuple[int, dict[str, object]]:
    """Send a request head and part of its body, then nothing; return the status and JSON body."""
    host, port = server.base_url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(head.encode() + b"\r\n" + first_bytes)
        await writer.drain()
        head_bytes = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
        status_line, *header_lines = head_bytes.decode("latin-1").split("\r\n")
        headers = dict(line.lower().split(": ", 1) for line in header_lines if line)
        body = await asyncio.wait_for(reader.readexactly(int(headers["content-length"])), timeout=10)
    finally:
        writer.close()
    return int(status_line.split()[1]), json.loads(body)


async def test_a_stalled_body_is_408(
    start_live_server: Callable[[Settings], LiveServer], live_settings: Callable[..., Settings]
) -> None:
    server = start_live_server(live_settings(body_idle_timeout=0.5))
    auth = f"Authorization: Bearer {TEST_SECRET}\r\n"
    head = f"POST /api/artifacts HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\nContent-Length: 100\r\n"
    status, body = await stalled_request(server, head, b"{")
    assert status == 408
    assert body == {"error": {"code": "request_timeout", "message": "No request body bytes for 0.5 seconds"}}

    upload = f"POST /api/attachments HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: text/plain\r\nX-Filename: a.txt\r\n"
    status, _ = await stalled_request(server, upload + "Content-Length: 1000\r\n", b"half")
    assert status == 408
    async with httpx.AsyncClient(base_url=server.base_url, headers={"Authorization": f"Bearer {TEST_SECRET}"}) as http:
        assert (await http.get("/api/attachments")).json()["attachments"] == []  # nothing half-stored
        created = await http.post("/api/artifacts", json={"title": "whole bodies are fine"})
        assert created.status_code == 201
    blobs = server.settings.data_dir / "blobs"
    assert [p for p in blobs.rglob("*") if p.is_file()] == []
