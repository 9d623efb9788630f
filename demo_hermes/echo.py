"""The ``/demo echo`` reply: what the agent received, one ``key=value`` line each, easy to parse.

::

    input=<the run's "input" field as JSON>
    history=<number of history messages the agent got>
    model=<global model the run used>
    provider=<its provider>
    reasoning_effort=<global reasoning effort>
"""

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["EchoReply", "format_echo_reply", "parse_echo_reply"]


@dataclass(frozen=True)
class EchoReply:
    input: Any
    history: int
    model: str
    provider: str
    reasoning_effort: str


def format_echo_reply(reply: EchoReply) -> str:
    return "\n".join(
        [
            f"input={json.dumps(reply.input, ensure_ascii=False)}",
            f"history={reply.history}",
            f"model={reply.model}",
            f"provider={reply.provider}",
            f"reasoning_effort={reply.reasoning_effort}",
        ]
    )


def parse_echo_reply(text: str) -> EchoReply:
    """Read back a ``/demo echo`` reply (``ValueError`` if it is not one)."""
    fields = dict(line.split("=", 1) for line in text.strip().splitlines() if "=" in line)
    try:
        return EchoReply(
            input=json.loads(fields["input"]),
            history=int(fields["history"]),
            model=fields["model"],
            provider=fields["provider"],
            reasoning_effort=fields["reasoning_effort"],
        )
    except (KeyError, json.JSONDecodeError) as exc:
        raise ValueError(f"not a /demo echo reply: {text!r}") from exc
