"""`local_dev.py` (what `make run` starts): the embedded default answers /healthz and chats."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.live_server import free_port
from tests.ws_client import PhebyClient

pytestmark = [pytest.mark.live]
ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.anyio
async def test_local_dev_starts_the_demo_and_answers_healthz(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PHEBY_", "HERMES_"))}
    process = subprocess.Popen(
        [sys.executable, "local_dev.py", "--port", str(port), "--data-dir", str(tmp_path / "data")],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        status = None
        while time.monotonic() < deadline:
            try:
                status = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code
                break
            except httpx.TransportError:
                time.sleep(0.2)
        assert status == 200
        secret = (tmp_path / "data" / "secret").read_text().strip()
        client = await PhebyClient.connect(f"ws://127.0.0.1:{port}/ws", secret)
        conversation = await client.request("conversation.create", "conversation.created")
        accepted = await client.request(
            "chat.send", "run.accepted", conversation_id=conversation["conversation_id"], text="hi"
        )
        complete = await client.expect("message.complete")
        assert complete["text"] == "You said: hi"
        await client.expect("run.finished", run_id=accepted["run_id"])
        await client.close()
    finally:
        process.send_signal(signal.SIGINT)
        try:
            output, _ = process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            output, _ = process.communicate()
    assert "demo agent, no LLM" in output
    assert f"Pheby Web: open http://localhost:{port}/" in output  # where passkeys work
    assert f"PHEBY_SECRET: {secret}" in output  # generated, kept in the data dir and printed
