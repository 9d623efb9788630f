"""The scripted demo agent: DESIGN.md contract 7, one function per ``/demo`` directive.

Plain text is answered with ``You said: <text>``. A text starting with ``/demo <directive>`` runs
that directive; an unknown directive gets a short list of the known ones.
"""

import json
from collections.abc import Awaitable, Callable
from typing import Final

from demo_hermes.echo import EchoReply, format_echo_reply
from demo_hermes.long_stream import long_stream
from demo_hermes.media import write_demo_document, write_demo_png, write_empty_file
from demo_hermes.newer import NEWER_DIRECTIVES
from demo_hermes.turn import Turn

__all__ = [
    "APPROVAL_COMMAND",
    "APPROVAL_DESCRIPTION",
    "CLARIFY_CHOICES",
    "CLARIFY_QUESTION",
    "SEARCH_ARGS",
    "AgentFailure",
    "respond",
]

SEARCH_ARGS: Final = {"query": "cats", "api_key": "sk-demo-0000"}
APPROVAL_COMMAND: Final = "rm -rf /tmp/build-output"
APPROVAL_DESCRIPTION: Final = "Destructive shell command (rm -rf)"
APPROVAL_PATTERN: Final = "recursive delete"
CLARIFY_QUESTION: Final = "Deploy to staging or production?"
CLARIFY_CHOICES: Final = ["staging", "production"]
SLOW_DELTAS: Final = 100
SLOW_DELAY: Final = 0.05
CHUNKS_DELAY: Final = 0.05
HOLD_PIECE: Final = "<hold>"
TOOL_SECONDS: Final = 0.05


class AgentFailure(Exception):
    """The agent's LLM call failed; the run ends with ``run.failed``."""


async def _plain(turn: Turn) -> None:
    await turn.say(f"You said: {turn.text}")


async def _tool(turn: Turn) -> None:
    async with turn.tool("web_search", dict(SEARCH_ARGS), preview=SEARCH_ARGS["query"]) as call:
        await turn.pause(TOOL_SECONDS)
        call.result = json.dumps({"results": ["Cats sleep 12-16 hours a day.", "A group of cats is a clowder."]})
    await turn.say('I searched the web for "cats": cats sleep 12-16 hours a day, and a group of cats is a clowder.')


async def _tool_fail(turn: Turn) -> None:
    async with turn.tool("web_search", dict(SEARCH_ARGS), preview=SEARCH_ARGS["query"]) as call:
        await turn.pause(TOOL_SECONDS)
        call.error = True
        call.result = json.dumps({"error": "search backend unavailable"})
    await turn.say("The web search failed: the search backend is unavailable.")


async def _approve(turn: Turn) -> None:
    """`/demo approve [seconds]`: a command that needs approval, asked after that many seconds (default 0)."""
    words = turn.text.split()
    delay = float(words[2]) if len(words) > 2 and words[2].replace(".", "", 1).isdigit() else 0.0
    if delay:
        await turn.pause(min(delay, 60.0))
    async with turn.tool("terminal", {"command": APPROVAL_COMMAND}, preview=APPROVAL_COMMAND) as call:
        choice = await turn.ask_approval(
            command=APPROVAL_COMMAND, pattern_key=APPROVAL_PATTERN, description=APPROVAL_DESCRIPTION
        )
        approved = choice in {"once", "session", "always"}
        call.error = not approved
        call.result = json.dumps(
            {"output": "", "exit_code": 0, "error": None}
            if approved
            else {"output": "", "exit_code": -1, "error": "BLOCKED: Command denied by user."}
        )
    if approved:
        await turn.say(f"Approved ({choice}). I removed /tmp/build-output.")
    elif choice == "timeout":
        await turn.say("Denied: nobody answered the approval request in time, so I did not run the command.")
    else:
        await turn.say("Denied. I did not run the command.")


async def _clarify(turn: Turn) -> None:
    response = await turn.ask_clarify(CLARIFY_QUESTION, list(CLARIFY_CHOICES))
    if response is None:
        await turn.say("No answer came, so I did not deploy anything.")
    else:
        await turn.say(f"You chose: {response}")


async def _image(turn: Turn) -> None:
    path = write_demo_png(turn.settings.media_dir)
    await turn.say(f"Here is the picture you asked for.\nMEDIA:{path}")


async def _document(turn: Turn) -> None:
    path = write_demo_document(turn.settings.media_dir)
    await turn.say(f"Here is the report you asked for.\nMEDIA:{path}")


async def _files(turn: Turn) -> None:
    """Three files in one reply, the first of them empty."""
    paths = [write(turn.settings.media_dir) for write in (write_empty_file, write_demo_png, write_demo_document)]
    await turn.say("Here are your files.\n" + "\n".join(f"MEDIA:{path}" for path in paths))


async def _slow(turn: Turn) -> None:
    """`/demo slow [count]`: that many ticks (default 100, at most 10,000), 50 ms apart."""
    words = turn.text.split()
    count = int(words[2]) if len(words) > 2 and words[2].isdigit() else SLOW_DELTAS
    ticks = [f"tick {i} " for i in range(min(max(count, 1), 10_000))]
    await turn.say("".join(ticks), chunks=ticks, delay=SLOW_DELAY)


async def _busy(turn: Turn) -> None:
    """`/demo busy [count]`: as `/demo slow`, with a web search before every 20th tick (from the 10th on)."""
    words = turn.text.split()
    count = int(words[2]) if len(words) > 2 and words[2].isdigit() else SLOW_DELTAS
    ticks: list[str] = []
    for index in range(min(max(count, 1), 10_000)):
        if index % 20 == 10:
            async with turn.tool("web_search", {"query": f"tick {index}"}, preview=f"tick {index}") as call:
                await turn.pause(TOOL_SECONDS)
                call.result = json.dumps({"results": []})
        ticks.append(f"tick {index} ")
        turn.emit_event("message.delta", {"delta": ticks[-1]})
        await turn.pause(SLOW_DELAY)
    await turn.say("".join(ticks), chunks=[""])


async def _chunks(turn: Turn) -> None:
    """`/demo chunks <a>|<b>|...`: each piece streamed verbatim as one delta (``\\n`` is a newline), 50 ms
    apart; the answer is their text. A ``<hold>`` piece streams nothing: the stream waits there for a
    test's cue (``DemoHermesServer.release``), 10 s at most."""
    rest = turn.text.split(maxsplit=2)
    pieces = [piece.replace("\\n", "\n") for piece in (rest[2] if len(rest) > 2 else "").split("|")]
    chunks: list[str] = []
    holds: set[int] = set()
    for piece in pieces:
        if piece == HOLD_PIECE:
            holds.add(len(chunks))
        elif piece:
            chunks.append(piece)
    chunks = chunks or ["(no chunks)"]
    await turn.say("".join(chunks), chunks=chunks, delay=CHUNKS_DELAY, holds_before=frozenset(holds))


async def _say(turn: Turn) -> None:
    """`/demo say <text>`: the text, verbatim, one word per delta on a fixed schedule (the demo's delta
    pacing): an answer of any length and shape for benchmarks."""
    rest = turn.text.split(maxsplit=2)
    await turn.say(rest[2] if len(rest) > 2 else "(nothing to say)", paced=True)


async def _fail(turn: Turn) -> None:
    """`/demo fail [error text]`: the run fails with that text (as a provider's error would read)."""
    words = turn.text.split(maxsplit=2)
    raise AgentFailure(words[2] if len(words) > 2 else "HTTP 500: the demo LLM failed, as /demo fail asks")


async def _echo(turn: Turn) -> None:
    settings = turn.settings
    reply = EchoReply(
        input=turn.raw_input,
        history=turn.history_count,
        model=settings.model,
        provider=settings.provider,
        reasoning_effort=settings.reasoning_effort,
    )
    await turn.say(format_echo_reply(reply))


_DIRECTIVES: Final[dict[str, Callable[[Turn], Awaitable[None]]]] = {
    "tool": _tool,
    "tool-fail": _tool_fail,
    "approve": _approve,
    "clarify": _clarify,
    "image": _image,
    "document": _document,
    "files": _files,
    "slow": _slow,
    "busy": _busy,
    "chunks": _chunks,
    "say": _say,
    "fail": _fail,
    "echo": _echo,
    **NEWER_DIRECTIVES,
    "long-stream": long_stream,
}


async def _unknown(turn: Turn) -> None:
    await turn.say("Demo directives: " + ", ".join(f"/demo {name}" for name in _DIRECTIVES) + ".")


def _directive(text: str) -> Callable[[Turn], Awaitable[None]]:
    words = text.split(maxsplit=2)
    if not words or words[0] != "/demo":
        return _plain
    if len(words) == 1:
        return _unknown
    return _DIRECTIVES.get(words[1], _unknown)


async def respond(turn: Turn) -> str:
    """Play the turn and return the final assistant text (``AgentFailure`` for ``/demo fail``)."""
    await _directive(turn.text)(turn)
    return turn.output
