"""Benchmark `conversation.open` for a page of 50 in conversations of 10, 1,000 and 10,000 messages.

Run: `.venv/bin/python bench/history.py [--rounds N] [--sizes 10,1000,10000]`

The demo Hermes and the server (uvicorn from `build_uvicorn_config`, as `pheby serve` builds it) run in
threads of this process. Each conversation gets one real turn through the server (so it has its Hermes
session), then the demo's session store is filled directly up to the size, alternating user and
assistant messages. One `conversation.open` first (the server reads the whole transcript once and logs
it), then the median of `--rounds` opens of a page of 50, with the sizes interleaved round by round.
Printed: each size's median and the first open's time, and the ratio of the largest to the smallest
median (target: at most 2).
"""

import argparse
import asyncio
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from bench.support import ServerChild, free_port
from bench.ws_stream import SECRET, Client
from demo_hermes.server import DemoHermesServer

PAGE: Final = 50
TARGET_RATIO: Final = 2.0


async def conversation_of(client: Client, demo: DemoHermesServer, size: int) -> str:
    """A conversation with `size` messages in its Hermes session (one real turn, the rest filled in)."""
    created = await client.request("conversation.create", name=f"{size} messages")
    conversation_id = str(created.conversation_id)
    client.run_finished.clear()
    await client.request("chat.send", conversation_id=conversation_id, text="hello")
    await asyncio.wait_for(client.run_finished.wait(), 30)
    await asyncio.sleep(0.3)  # the server logs the turn after run.finished
    sessions = demo.state.sessions
    session = sessions.get(f"pheby_{conversation_id}")
    if session is None:
        raise RuntimeError("the turn made no Hermes session")
    for index in range(size - len(session.messages)):
        role = "user" if index % 2 == 0 else "assistant"
        sessions.add_message(session, role, f"{role} message {index} " + "lorem ipsum dolor sit amet " * 4)
    return conversation_id


async def open_once(client: Client, conversation_id: str) -> float:
    started = time.perf_counter()
    await client.request("conversation.open", conversation_id=conversation_id, limit=PAGE)
    return time.perf_counter() - started


async def measure(url: str, demo: DemoHermesServer, sizes: list[int], rounds: int) -> dict[int, tuple[float, float]]:
    client = await Client.open(url, "deflate")
    try:
        conversations = {size: await conversation_of(client, demo, size) for size in sizes}
        first = {size: await open_once(client, conversations[size]) for size in sizes}
        times: dict[int, list[float]] = {size: [] for size in sizes}
        for _ in range(rounds):
            for size in sizes:
                times[size].append(await open_once(client, conversations[size]))
        return {size: (statistics.median(times[size]), first[size]) for size in sizes}
    finally:
        await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=41, help="opens of each conversation")
    parser.add_argument("--sizes", default="10,1000,10000", help="conversation lengths, in messages")
    args = parser.parse_args()
    sizes = sorted(int(size) for size in args.sizes.split(","))
    logging.disable(logging.INFO)
    with tempfile.TemporaryDirectory(prefix="pheby-bench-") as tmp, DemoHermesServer() as demo:
        port = free_port()
        flags = {"data_dir": tmp, "port": port, "secret": SECRET, "hermes_url": demo.base_url}
        server = ServerChild(flags | {"hermes_api_key": demo.api_key}, Path(tmp) / "server.log")
        try:
            results = asyncio.run(measure(f"ws://127.0.0.1:{port}/ws", demo, sizes, args.rounds))
        finally:
            server.stop()
    print(f"conversation.open, a page of {PAGE}, median of {args.rounds} opens (the server in its own process)")
    for size, (median, first) in results.items():
        print(f"  {size:>6} messages: {median * 1000:7.2f} ms   (first open, whole transcript: {first * 1000:.1f} ms)")
    ratio = results[sizes[-1]][0] / results[sizes[0]][0]
    verdict = "ok" if ratio <= TARGET_RATIO else "over target"
    print(f"  ratio {sizes[-1]} / {sizes[0]}: {ratio:.2f} (target <= {TARGET_RATIO:g}: {verdict})")


if __name__ == "__main__":
    main()
