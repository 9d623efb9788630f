"""`pheby serve` as an operator runs it, and its start-up checks.

The smoke test (`live`) runs one scenario start to finish in a subprocess on S3 (moto's server)
against the demo Hermes: the start-up checks pass, `/healthz` answers, a WebSocket chat completes,
an attachment makes a byte-identical round trip through the bucket, a frame just over 2 MiB gets
`too_large` while one over the 4 MiB ceiling is cut off with 1009, and SIGTERM during a streaming run hands the
run over (no `run.finished`: it goes on in Hermes for the next process) and closes with 1012, and the process
exits 0; every line it
logged is a JSON object (`--log-format json`).

The start-up check tests call `pheby.startup_checks` directly: what refuses, what only warns.
"""

import json
import logging
import os
import signal
import struct
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx
import pytest

from demo_hermes import DemoHermesServer
from handlers.support.app import create_app
from pheby import server as pheby_server
from pheby.server import WS_MAX_SIZE, JsonFormatter, PhebyServer, build_uvicorn_config, drop_query_string
from pheby.settings import Settings
from pheby.startup_checks import StartupRefused, check_data_dir, run_startup_checks
from storage.s3 import S3Store
from tests.live_server import free_port
from tests.s3_server import CuttableS3Server
from tests.ws_client import PhebyClient

SECRET = "smoke-owner-secret-0123456789abcdef"
BUCKET = "pheby-smoke"
MiB = 1024 * 1024
START_TIMEOUT = 30.0
EXIT_TIMEOUT = 40.0
FAKE_AWS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@dataclass
class Served:
    process: subprocess.Popen[bytes]
    base_url: str
    ws_url: str
    log_path: Path
    bucket: S3Store

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@pytest.fixture
def moto_endpoint(moto_s3: CuttableS3Server, monkeypatch: pytest.MonkeyPatch) -> str:
    """moto's S3 server on a loopback port (tests/s3_server.py, with fake credentials and no real profile
    reachable), and these credentials in the environment."""
    for name, value in FAKE_AWS.items():
        monkeypatch.setenv(name, value)
    return moto_s3.url


@pytest.fixture
async def served(tmp_path: Path, moto_endpoint: str, demo_hermes: DemoHermesServer) -> AsyncIterator[Served]:
    """`pheby serve` in a subprocess; killed at the end if it is still running."""
    bucket = S3Store(BUCKET, endpoint_url=moto_endpoint)
    bucket.client.create_bucket(Bucket=BUCKET)
    port = free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PHEBY_", "HERMES_", "AWS_"))}
    env.update(
        {
            **FAKE_AWS,
            "AWS_CONFIG_FILE": os.environ["AWS_CONFIG_FILE"],
            "AWS_SHARED_CREDENTIALS_FILE": os.environ["AWS_SHARED_CREDENTIALS_FILE"],
            "PHEBY_SECRET": SECRET,
            "PHEBY_STORAGE": "s3",
            "PHEBY_S3_BUCKET": BUCKET,
            "PHEBY_S3_ENDPOINT_URL": moto_endpoint,
            "HERMES_URL": demo_hermes.base_url,
            "HERMES_API_KEY": demo_hermes.api_key,
            "PHEBY_WS_HELLO_TIMEOUT": "5",
        }
    )
    log_path = tmp_path / "serve.log"
    command = [sys.executable, "-m", "pheby_main", "serve", "--host", "127.0.0.1", "--port", str(port)]
    command += ["--data-dir", str(tmp_path / "data"), "--log-format", "json"]
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(command, env=env, stdout=log_file, stderr=subprocess.STDOUT)
    served = Served(process, f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}/ws", log_path, bucket)
    try:
        await wait_healthy(served)
        yield served
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        bucket.client.close()


async def wait_healthy(served: Served) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    async with httpx.AsyncClient(base_url=served.base_url, timeout=2) as http:
        while True:
            assert served.process.poll() is None, f"pheby serve exited early:\n{served.log()}"
            try:
                response = await http.get("/healthz")
                if response.status_code == 200:
                    assert response.json() == {"status": "ok"}
                    return
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"no /healthz within {START_TIMEOUT} s:\n{served.log()}"
            await anyio.sleep(0.1)


@pytest.mark.anyio
@pytest.mark.live
async def test_serve_on_s3_chat_attachment_and_graceful_sigterm(served: Served) -> None:
    log = served.log()
    assert "S3 bucket pheby-smoke is reachable" in log, log
    assert "is up (status" in log, log  # the Hermes health check ran and passed

    client = await PhebyClient.connect(served.ws_url, SECRET)
    conversation_id = (await client.request("conversation.create", "conversation.created"))["conversation_id"]

    accepted = await client.request("chat.send", "run.accepted", conversation_id=conversation_id, text="hi")
    assert accepted["type"] == "run.accepted", accepted
    finished = await client.expect("run.finished", run_id=accepted["run_id"])
    assert finished["status"] == "completed", finished

    body = os.urandom(300_000)
    async with httpx.AsyncClient(base_url=served.base_url, timeout=30) as http:
        uploaded = await http.post(
            "/attachments",
            params={"conversation_id": conversation_id, "filename": "blob.bin"},
            content=body,
            headers={"Authorization": f"Bearer {SECRET}", "Content-Type": "application/octet-stream"},
        )
        assert uploaded.status_code == 201, uploaded.text
        downloaded = await http.get(uploaded.json()["attachment"]["download_path"], headers={"X-Pheby-Secret": SECRET})
    assert downloaded.status_code == 200, downloaded.text
    assert downloaded.content == body
    listed = served.bucket.client.list_objects_v2(Bucket=BUCKET, Prefix="attachments/")
    assert [obj["Size"] for obj in listed.get("Contents", [])] == [len(body)]  # the bytes went to the bucket

    # Just over the protocol's 2 MiB: an error on the open connection. Over the ceiling: uvicorn closes with 1009.
    await client.send_raw(json.dumps({"type": "ping", "request_id": "big", "pad": "x" * (2 * MiB)}))
    too_large = await client.expect("error", request_id="big")
    assert too_large["error"]["code"] == "too_large"
    assert (await client.request("ping", "pong"))["type"] == "pong"
    flooder = await PhebyClient.connect(served.ws_url, SECRET)
    # Only the frame header announcing more than the ceiling is needed: uvicorn refuses on the length,
    # before the payload (and the client need not push megabytes into a socket the server is closing).
    header = bytes([0x81, 0x80 | 127]) + struct.pack("!Q", WS_MAX_SIZE + 1) + os.urandom(4)
    flooder.ws.transport.write(header + b"x" * 1024)
    assert await flooder.closed(timeout=10) == 1009

    slow = await client.request("chat.send", "run.accepted", conversation_id=conversation_id, text="/demo slow")
    assert slow["type"] == "run.accepted", slow
    await client.expect("message.delta", conversation_id=conversation_id)
    served.process.send_signal(signal.SIGTERM)

    assert await client.closed(timeout=20) == 1012  # service restart: the client reconnects
    assert not client.seen("run.finished", run_id=slow["run_id"])  # handed over, not cancelled: it goes on in Hermes

    code = await anyio.to_thread.run_sync(lambda: served.process.wait(timeout=EXIT_TIMEOUT))
    assert code == 0, served.log()
    entries = [json.loads(line) for line in served.log().splitlines()]  # every line is one JSON object
    assert {entry["logger"] for entry in entries} >= {"pheby.startup", "pheby.server", "uvicorn.error"}
    assert not [entry for entry in entries if entry["level"] in ("ERROR", "CRITICAL") or "exc" in entry]


# --- start-up checks ----------------------------------------------------------------------------


def test_unwritable_data_dir_is_refused(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(StartupRefused) as refused:
        check_data_dir(blocker / "data")
    message = str(refused.value)
    assert message.startswith("PHEBY_DATA_DIR: ")
    assert "not writable" in message
    assert "\n" not in message


def test_writable_data_dir_passes_and_leaves_nothing_behind(tmp_path: Path) -> None:
    check_data_dir(tmp_path / "new" / "data")
    assert list((tmp_path / "new" / "data").iterdir()) == []


@pytest.mark.anyio
async def test_unset_hermes_url_is_refused(make_settings: Callable[..., Settings]) -> None:
    with pytest.raises(StartupRefused) as refused:
        await run_startup_checks(make_settings())
    assert "HERMES_URL is not set" in str(refused.value)
    assert "local_dev.py" in str(refused.value)


@pytest.mark.anyio
async def test_hermes_down_is_only_a_warning(
    make_settings: Callable[..., Settings], caplog: pytest.LogCaptureFixture
) -> None:
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with caplog.at_level(logging.INFO, logger="pheby.startup"):
        warnings = await run_startup_checks(make_settings(hermes_url=down, hermes_api_key="k" * 32))
    assert len(warnings) == 1
    assert down in warnings[0]
    assert "not reachable yet" in warnings[0]
    assert [r.levelno for r in caplog.records if r.name == "pheby.startup"] == [logging.INFO, logging.WARNING]


@pytest.mark.anyio
async def test_hermes_up_passes(make_settings: Callable[..., Settings], demo_hermes: DemoHermesServer) -> None:
    settings = make_settings(hermes_url=demo_hermes.base_url, hermes_api_key=demo_hermes.api_key)
    assert await run_startup_checks(settings) == []


@pytest.mark.anyio
@pytest.mark.s3
async def test_missing_bucket_is_refused(
    make_settings: Callable[..., Settings], moto_endpoint: str, demo_hermes: DemoHermesServer
) -> None:
    settings = make_settings(
        storage="s3",
        s3_bucket="no-such-bucket",
        s3_endpoint_url=moto_endpoint,
        hermes_url=demo_hermes.base_url,
        hermes_api_key=demo_hermes.api_key,
    )
    with pytest.raises(StartupRefused) as refused:
        await run_startup_checks(settings)
    assert str(refused.value) == "PHEBY_S3_BUCKET: bucket 'no-such-bucket' is not reachable (no such bucket)"


@pytest.mark.anyio
@pytest.mark.s3
async def test_unreachable_s3_endpoint_is_refused(make_settings: Callable[..., Settings], moto_endpoint: str) -> None:
    settings = make_settings(
        storage="s3",
        s3_bucket="any",
        s3_endpoint_url=f"http://127.0.0.1:{free_port()}",  # nothing listens there
        hermes_url="http://127.0.0.1:1",
    )
    with pytest.raises(StartupRefused, match=r"^PHEBY_S3_BUCKET: bucket 'any' is not reachable \(Could not connect"):
        await run_startup_checks(settings)


def test_serve_without_hermes_url_refuses_with_one_line(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PHEBY_", "HERMES_"))}
    result = subprocess.run(
        [sys.executable, "-m", "pheby_main", "serve", "--data-dir", str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("pheby serve: HERMES_URL is not set")


def test_uvicorn_settings_of_pheby_serve(make_settings: Callable[..., Settings]) -> None:
    settings = make_settings(hermes_url="http://127.0.0.1:1")
    config = build_uvicorn_config(settings, create_app(settings))
    assert config.workers == 1
    assert config.ws_max_size == WS_MAX_SIZE == 4 * MiB  # room above the protocol's 2 MiB for `too_large`
    assert config.ws_ping_interval == 30
    assert config.ws_ping_timeout == 30


@pytest.mark.anyio
async def test_the_main_loop_ticks_once_a_second_renewing_the_date_and_a_signal_ends_it_at_once(
    make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = make_settings(hermes_url="http://127.0.0.1:1")
    server = PhebyServer(build_uvicorn_config(settings, create_app(settings)))
    server.config.load()
    ticks: list[int] = []
    real_on_tick = server.on_tick

    async def on_tick(counter: int) -> bool:
        ticks.append(counter)
        return await real_on_tick(counter)

    monkeypatch.setattr(server, "on_tick", on_tick)
    monkeypatch.setattr(pheby_server, "TICK_SECONDS", 0.01)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(server.main_loop)
            while len(ticks) < 3:
                await anyio.sleep(0.01)
            # uvicorn renews its Date header when the counter is a multiple of 10: here every tick does.
            assert all(counter % 10 == 0 for counter in ticks)
            assert any(name == b"date" for name, _ in server.server_state.default_headers)
            monkeypatch.setattr(pheby_server, "TICK_SECONDS", 3600.0)  # a wait that would outlast the test
            await anyio.sleep(0.05)
            server.handle_exit(signal.SIGTERM, None)  # as uvicorn's signal handler calls it
    assert server.should_exit  # and the hour's wait ended at once: main_loop returned within fail_after


def test_json_log_lines_survive_quotes_and_tracebacks() -> None:
    formatter = JsonFormatter()
    try:
        raise ValueError('bad "value"')
    except ValueError:
        record = logging.LogRecord("pheby.x", logging.ERROR, __file__, 1, 'said "%s"', ("hi",), sys.exc_info())
    line = formatter.format(record)
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["message"] == 'said "hi"'
    assert entry["level"] == "ERROR"
    assert entry["logger"] == "pheby.x"
    assert entry["ts"].endswith("+00:00")
    assert 'ValueError: bad "value"' in entry["exc"]


def test_access_lines_carry_no_query_string() -> None:
    """An OIDC callback's `code` and `state` are one-time credentials: the access line keeps the path only."""
    record = logging.LogRecord(
        "uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5000", "GET", "/api/auth/oidc/callback?code=abc&state=def", "1.1", 302), None,
    )  # fmt: skip
    assert drop_query_string(record)
    assert record.getMessage() == '127.0.0.1:5000 - "GET /api/auth/oidc/callback HTTP/1.1" 302'
    plain = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, "%s", ("x",), None)
    assert drop_query_string(plain)
    assert plain.getMessage() == "x"
