"""``python -m demo_hermes``: the demo Hermes in a process of its own serves runs, replays a stream where it is a
0.22-era gateway, and ends with exit status 0 on SIGTERM (``tests/demo_hermes_process.py`` starts it)."""

import os
import signal
import time
from collections.abc import Callable
from contextlib import aclosing
from pathlib import Path

import anyio
import pytest

from demo_hermes.cli import server_from_args
from demo_hermes.newer import NEWER_FEATURES, NEWER_VERSION
from demo_hermes.routes.health import HERMES_VERSION
from demo_hermes.state import DemoOptions
from hermes_client import MessageDelta, RunCompleted, RunEvent
from tests.demo_hermes_process import DemoHermesProcess
from tests.demo_hermes_server import client_for
from tests.live_server import free_port

pytestmark = [pytest.mark.timeout(60)]

MakeProcess = Callable[..., DemoHermesProcess]
CHUNKS = "abcdefgh"
ADVERTISED_NEWER = NEWER_FEATURES - {"run_replay"}  # real Hermes does not advertise replay, nor does the demo


def texts(events: list[RunEvent]) -> str:
    return "".join(event.delta for event in events if isinstance(event, MessageDelta))


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.live
@pytest.mark.anyio
async def test_the_0_19_process_serves_a_run_and_its_health(make_demo_hermes_process: MakeProcess) -> None:
    process = make_demo_hermes_process("--delta-delay", "0")
    assert process.features == frozenset()
    async with client_for(process) as client:
        with anyio.fail_after(10):
            health = await client.health()
            handle = await client.create_run("hello from another process")
            async with aclosing(client.run_events(handle.run_id)) as stream:
                events = [event async for event in stream]
    assert (health.status, health.version) == ("ok", HERMES_VERSION)
    completed = events[-1]
    assert isinstance(completed, RunCompleted), events
    assert completed.output == "You said: hello from another process"
    assert texts(events) == completed.output
    assert client.stream_numbered is False


@pytest.mark.live
@pytest.mark.anyio
async def test_the_replay_process_resumes_a_stream_after_its_last_event_id(
    make_demo_hermes_process: MakeProcess,
) -> None:
    process = make_demo_hermes_process("--replay")
    assert process.features == NEWER_FEATURES
    async with client_for(process) as client:
        with anyio.fail_after(10):
            capabilities = await client.get_capabilities()
            handle = await client.create_run("/demo chunks " + "|".join(CHUNKS))
            first: list[RunEvent] = []
            async with aclosing(client.run_events(handle.run_id)) as stream:
                async for event in stream:
                    first.append(event)
                    if len(texts(first)) == 3:
                        break
            await anyio.sleep(0.2)  # the run goes on meanwhile (a chunk every 50 ms)
            last_seq = first[-1].seq
            assert isinstance(last_seq, int)
            async with aclosing(client.run_events(handle.run_id, last_event_id=last_seq)) as stream:
                rest = [event async for event in stream]
    assert capabilities.version == NEWER_VERSION
    assert capabilities.advertised
    assert capabilities.features >= ADVERTISED_NEWER
    assert "run_replay" not in capabilities.features  # replay is found by its numbered events instead
    assert client.stream_numbered is True
    assert rest[0].seq == last_seq + 1
    seqs = [event.seq for event in first + rest]
    assert seqs == list(range(len(seqs))), "no event lost or repeated across the reconnect"
    completed = rest[-1]
    assert isinstance(completed, RunCompleted), rest
    assert texts(first) + texts(rest) == completed.output == CHUNKS


@pytest.mark.live
@pytest.mark.anyio
async def test_sigterm_ends_it_with_status_0_even_during_a_stream(make_demo_hermes_process: MakeProcess) -> None:
    process = make_demo_hermes_process("--replay")
    media_dir = process.media_dir
    assert media_dir.is_dir()
    async with client_for(process) as client:
        with anyio.fail_after(10):
            handle = await client.create_run("/demo slow")
            async with aclosing(client.run_events(handle.run_id)) as stream:
                async for event in stream:
                    if isinstance(event, MessageDelta):
                        break
                started = time.monotonic()
                process.signal(signal.SIGTERM)
                status = await anyio.to_thread.run_sync(process.wait, 5.0)
    assert status == 0, process.log()[-2000:]
    assert time.monotonic() - started < 5.0
    assert gone(process.pid)
    assert process.stdout_after_ready == b"", "stdout holds the ready line only"
    assert not media_dir.exists(), "the temp media dir is removed at exit"


@pytest.mark.live
def test_a_fixed_port_and_a_media_dir_of_its_own(make_demo_hermes_process: MakeProcess, tmp_path: Path) -> None:
    port = free_port()
    media_dir = tmp_path / "media"
    media_dir.mkdir()
    (media_dir / "kept.txt").write_text("a given media dir is left as it is")
    process = make_demo_hermes_process("--port", str(port), media_dir=media_dir)
    assert (process.port, process.base_url) == (port, f"http://127.0.0.1:{port}")
    assert process.media_dir == media_dir
    assert process.stop() == 0
    assert (media_dir / "kept.txt").exists()


def test_every_option_of_the_demo_is_a_flag(tmp_path: Path) -> None:
    server = server_from_args(
        [
            *("--features", "run_steer, model_options", "--approval-timeout", "0.3", "--delta-delay", "0.02"),
            *("--keepalive-seconds", "5", "--max-concurrent-runs", "2", "--cron-tick-seconds", "0.5"),
            *("--answer-delay", "0.1", "--create-delay", "0.2", "--replay-backlog", "10"),
            *("--media-dir", str(tmp_path)),
        ],
        {"DEMO_HERMES_API_KEY": "demo-key-from-the-environment"},
    )
    assert server.options == DemoOptions(
        delta_delay=0.02,
        keepalive_seconds=5,
        max_concurrent_runs=2,
        cron_tick_seconds=0.5,
        answer_delay=0.1,
        create_delay=0.2,
        features=frozenset({"run_steer", "model_options"}),
        replay_backlog=10,
    )
    assert server.state.config.approval_timeout == 0.3
    assert server.api_key == "demo-key-from-the-environment"
    assert server.dashboard_token.startswith("demo-")
    assert server.media_dir == tmp_path


def test_replay_is_every_newer_feature_and_no_flag_is_0_19(tmp_path: Path) -> None:
    media = ["--media-dir", str(tmp_path)]
    assert server_from_args(["--replay", *media], {}).options.features == NEWER_FEATURES
    assert server_from_args(media, {}).options == DemoOptions()
    for bad in (["--features", "time_travel"], ["--replay", "--features", "run_steer"], ["--delta-delay", "-1"]):
        with pytest.raises(SystemExit):
            server_from_args([*bad, *media], {})
