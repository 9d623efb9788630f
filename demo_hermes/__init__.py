"""The demo Hermes: an in-process double of the hermes-agent 0.19.0 HTTP API, driven by a scripted agent.

It is the embedded default of ``local_dev.py`` (no Hermes, no LLM) and the test double. It serves the
gateway routes the server uses (``/v1/runs``, ``/api/sessions``, ``/api/jobs``, ``/health``) with
0.19.0's paths, shapes, statuses and error envelopes, plus the newer ``clarify.request`` events and
tool call ids and args, and the dashboard's model and config routes on the same port.
``python -m demo_hermes`` serves it in a process of its own (``__main__.py``; its flags are in ``cli.py``).
"""

from demo_hermes.agent import APPROVAL_COMMAND, APPROVAL_DESCRIPTION, CLARIFY_CHOICES, CLARIFY_QUESTION, SEARCH_ARGS
from demo_hermes.app import create_demo_app
from demo_hermes.echo import EchoReply, parse_echo_reply
from demo_hermes.execution import CRON_PREAMBLE
from demo_hermes.server import DemoHermesServer
from demo_hermes.state import DemoOptions

__all__ = [
    "APPROVAL_COMMAND",
    "APPROVAL_DESCRIPTION",
    "CLARIFY_CHOICES",
    "CLARIFY_QUESTION",
    "CRON_PREAMBLE",
    "SEARCH_ARGS",
    "DemoHermesServer",
    "DemoOptions",
    "EchoReply",
    "create_demo_app",
    "parse_echo_reply",
]
