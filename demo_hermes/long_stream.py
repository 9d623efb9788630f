"""The ``/demo long-stream`` directive: a long answer with a tool call, an approval and a file in it.

2,000 one-word deltas, 10 ms apart on a fixed schedule (the run streams for 20 s however late each
sleep wakes): a third of the words, a ``web_search`` tool call, the next third, a ``terminal``
call that asks for approval, then the rest with a ``MEDIA:`` line (a PNG) in its middle. Each part
ends with a marker word (``end-of-part-1`` ...) so a client can check what text preceded each event.
"""

import json
from typing import Final

from demo_hermes.media import write_demo_png
from demo_hermes.turn import Turn

__all__ = ["LONG_STREAM_DELAY", "LONG_STREAM_DELTAS", "long_stream", "long_stream_parts", "part_marker"]

LONG_STREAM_DELTAS: Final = 2000
LONG_STREAM_DELAY: Final = 0.01
_APPROVAL_COMMAND: Final = "rm -rf /tmp/long-stream-output"


def part_marker(part: int) -> str:
    return f"end-of-part-{part}"


def _words(first: int, count: int, part: int) -> list[str]:
    """``count`` one-word deltas numbered from ``first``, the last one the part's marker."""
    return [f"w{i} " for i in range(first, first + count - 1)] + [f"{part_marker(part)} "]


def long_stream_parts(media_path: str) -> tuple[list[str], list[str], list[str]]:
    """The deltas of the three parts (the web search follows the first, the approval the second)."""
    third = LONG_STREAM_DELTAS // 3
    rest = LONG_STREAM_DELTAS - 2 * third - 1  # one delta is the MEDIA: line
    half = rest // 2
    part3 = [f"w{i} " for i in range(2 * third, 2 * third + half)]
    part3 += [f"\nMEDIA:{media_path}\n", *_words(2 * third + half, rest - half, 3)]
    return _words(0, third, 1), _words(third, third, 2), part3


async def long_stream(turn: Turn) -> None:
    part1, part2, part3 = long_stream_parts(str(write_demo_png(turn.settings.media_dir)))
    await turn.say("".join(part1), chunks=part1, delay=LONG_STREAM_DELAY, paced=True)
    async with turn.tool("web_search", {"query": "long stream"}, preview="long stream") as call:
        call.result = json.dumps({"results": ["found"]})
    await turn.say("".join(part2), chunks=part2, delay=LONG_STREAM_DELAY, paced=True)
    async with turn.tool("terminal", {"command": _APPROVAL_COMMAND}, preview=_APPROVAL_COMMAND) as call:
        choice = await turn.ask_approval(
            command=_APPROVAL_COMMAND, pattern_key="recursive delete", description="Destructive shell command"
        )
        call.result = json.dumps({"output": "", "exit_code": 0, "error": None, "choice": choice})
    await turn.say("".join(part3), chunks=part3, delay=LONG_STREAM_DELAY, paced=True)
