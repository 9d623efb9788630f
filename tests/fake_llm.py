"""A scripted OpenAI-compatible LLM server used to drive a real Hermes gateway in tests.

Standard library only, so any Python >= 3.11 can run it (the dev ``.venv`` or ``.venv-hermes``)::

    python tests/fake_llm.py --port 0 --log FILE --scratch DIR

The first line on stdout is the bound port number (``--port 0`` picks a free one); the harness
reads it. Every request is appended to the ``--log`` file as one JSON line
``{"ts": float, "method": str, "path": str, "body": <json or null>}``.

Endpoints: ``GET /v1/models``, ``GET /v1/models/<id>``, ``POST /v1/chat/completions`` (SSE
streaming with ``tool_calls`` deltas and a usage chunk, or a plain JSON completion).
Anything else is a 404.

The reply is chosen from case-sensitive keywords in the LAST user message:

``FAIL``      HTTP 400 error body (a non-retryable client error; Hermes reports ``run.failed``)
``SLOWTOOL``  tool call ``terminal {"command": "sleep 20 && echo slept"}``
``SLOW``      40 text chunks, ``--slow-interval`` (0.25 s) apart (``SLOW <n>``: n chunks, at most 400)
``DANGER``    tool call ``terminal {"command": "rm -rf <scratch>/danger_target"}``; an absolute
              path trips Hermes' "delete in root path" approval pattern (not a hardline block)
``HARDLINE``  tool call ``terminal {"command": "mkfs.phebytest <scratch>/hardline.img"}``: matches Hermes'
              unconditional "format filesystem (mkfs)" block (even under YOLO); were it ever run, there is
              no such program
``SECRETARG`` tool call ``terminal {"command": "echo secret-arg-ok", "api_key": "sk-fake-secret-arg-0001"}``
              (the terminal tool ignores the extra key; it is there to be redacted before clients see it)
``HARMLESS``  tool call ``terminal {"command": "echo harmless-ok"}``
``READFILE``  tool call ``read_file {"path": "<scratch>/note.txt"}``
``MEMORY``    tool call ``memory {"action": "add", "target": "memory", "content": ...}``
``CLARIFY``   tool call ``clarify {"question": ..., "choices": [...]}``
``MEDIA``     text ``Here is a picture. MEDIA:<scratch>/pixel.png``
otherwise     ``Hello from fake LLM. You said: <text>``

``LATE`` (a word of its own, with or without a keyword above) holds the reply back ``LATE_SECONDS`` (4 s)
before its first byte: ``LATE DANGER`` asks for the approval only then, ``LATE`` alone answers only then
(time for a test to stop the server before the agent asks or finishes). Only the agent's answer to the user
message is late, not its answer to a tool result.

When tool results follow the last user message the reply is ``Tool finished. Result was: <the
last tool result, first 300 chars>``.

Auxiliary calls (requests without ``tools``) never follow the script: a "security reviewer"
system prompt (smart approvals) gets the verdict from ``<scratch>/smart_verdict`` if that file
exists, else ``$FAKE_LLM_SMART_VERDICT`` (default ``ESCALATE``); a title request gets
``Fake Session Title`` (after ``<scratch>/title_delay`` seconds, at most 30, if that file exists);
anything else gets ``Fake auxiliary reply.``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import re
import shlex
import signal
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any, Final, Literal

MODEL_ID: Final = "fake-model"
CONTEXT_LENGTH: Final = 131072
SLOW_CHUNKS: Final = 40
TOOL_RESULT_PREVIEW: Final = 300
TITLE_DELAY_MAX_SECONDS: Final = 30.0
DANGER_DIR_NAME: Final = "danger_target"
MEMORY_ENTRY: Final = "Fake LLM wrote this memory entry."
SECRET_ARG: Final = "sk-fake-secret-arg-0001"  # a fake value that must never reach a client
PIXEL_PNG: Final = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)

JsonDict = dict[str, Any]

# A word of its own: newer Hermes cron prompts say "FAILURE" / "[CRON_FAILURE]", which must not fail the run.
FAIL_WORD: Final = re.compile(r"\bFAIL\b")
LATE_WORD: Final = re.compile(r"\bLATE\b")
LATE_SECONDS: Final = 4.0


@dataclass(frozen=True)
class TextReply:
    text: str
    kind: Literal["text"] = "text"


@dataclass(frozen=True)
class SlowReply:
    chunks: tuple[str, ...]
    kind: Literal["slow"] = "slow"


@dataclass(frozen=True)
class ToolReply:
    name: str
    arguments: JsonDict
    kind: Literal["tool"] = "tool"


@dataclass(frozen=True)
class ErrorReply:
    status: int
    message: str
    kind: Literal["error"] = "error"


Reply = TextReply | SlowReply | ToolReply | ErrorReply


@dataclass(frozen=True)
class Settings:
    log_path: Path
    scratch_dir: Path
    model_id: str = MODEL_ID
    slow_interval: float = 0.25
    smart_verdict: str = "ESCALATE"
    log_lock: threading.Lock = field(default_factory=threading.Lock, compare=False)

    @property
    def danger_dir(self) -> Path:
        return self.scratch_dir / DANGER_DIR_NAME

    @property
    def pixel_png(self) -> Path:
        return self.scratch_dir / "pixel.png"

    @property
    def note_txt(self) -> Path:
        return self.scratch_dir / "note.txt"


def prepare_scratch(settings: Settings) -> None:
    """Create the files the scripted replies refer to (idempotent)."""
    (settings.danger_dir / "sub").mkdir(parents=True, exist_ok=True)
    (settings.danger_dir / "sub" / "keep.txt").write_text("delete me only if approved\n", encoding="utf-8")
    settings.pixel_png.write_bytes(PIXEL_PNG)
    settings.note_txt.write_text("note file contents: 42\n", encoding="utf-8")
    settings.log_path.parent.mkdir(parents=True, exist_ok=True)
    settings.log_path.touch()


def log_request(settings: Settings, method: str, path: str, body: Any) -> None:
    record = {"ts": time.time(), "method": method, "path": path, "body": body}
    line = json.dumps(record, ensure_ascii=False) + "\n"
    with settings.log_lock, settings.log_path.open("a", encoding="utf-8") as fh:
        fh.write(line)


def text_of(content: Any) -> str:
    """Flatten OpenAI message content (a string or a list of parts) to text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def _messages(body: JsonDict) -> list[JsonDict]:
    raw = body.get("messages")
    if not isinstance(raw, list):
        return []
    return [m for m in raw if isinstance(m, dict)]


def auxiliary_reply(settings: Settings, messages: list[JsonDict]) -> TextReply:
    system = " ".join(text_of(m.get("content")) for m in messages if m.get("role") == "system")
    if "security reviewer" in system:
        verdict = settings.smart_verdict
        with contextlib.suppress(OSError):
            verdict = (settings.scratch_dir / "smart_verdict").read_text(encoding="utf-8").strip() or verdict
        return TextReply(verdict)
    if "title" in system.lower():
        with contextlib.suppress(OSError, ValueError):  # a test makes titles late: seconds in <scratch>/title_delay
            time.sleep(min(TITLE_DELAY_MAX_SECONDS, float((settings.scratch_dir / "title_delay").read_text())))
        return TextReply("Fake Session Title")
    return TextReply("Fake auxiliary reply.")


def _last_user_turn(messages: list[JsonDict]) -> tuple[str, list[JsonDict]]:
    """The last user message's text and the tool results after it."""
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=None)
    user_text = "" if last_user is None else text_of(messages[last_user].get("content"))
    after = [] if last_user is None else messages[last_user + 1 :]
    return user_text, [m for m in after if m.get("role") == "tool"]


def held_back(body: JsonDict) -> float:
    """Seconds before the reply's first byte: ``LATE_SECONDS`` for the agent's answer to a LATE message."""
    if not body.get("tools"):
        return 0.0
    user_text, tool_results = _last_user_turn(_messages(body))
    return LATE_SECONDS if LATE_WORD.search(user_text) and not tool_results else 0.0


def decide(settings: Settings, body: JsonDict) -> Reply:
    """Pick the scripted reply for one chat-completions request body."""
    messages = _messages(body)
    if not body.get("tools"):
        return auxiliary_reply(settings, messages)

    user_text, tool_results = _last_user_turn(messages)
    if tool_results:
        result = text_of(tool_results[-1].get("content"))
        return TextReply("Tool finished. Result was: " + result[:TOOL_RESULT_PREVIEW])

    if FAIL_WORD.search(user_text):
        return ErrorReply(400, "fake client error requested by FAIL keyword")
    if "SLOWTOOL" in user_text:
        return ToolReply("terminal", {"command": "sleep 20 && echo slept"})
    if "SLOW" in user_text:
        count = re.search(r"SLOW (\d{1,3})\b", user_text)
        chunks = min(int(count[1]), 400) if count else SLOW_CHUNKS
        return SlowReply(tuple(f"tick {i} " for i in range(chunks)))
    if "DANGER" in user_text:
        return ToolReply("terminal", {"command": f"rm -rf {shlex.quote(str(settings.danger_dir))}"})
    if "HARDLINE" in user_text:
        return ToolReply(
            "terminal", {"command": f"mkfs.phebytest {shlex.quote(str(settings.scratch_dir / 'hardline.img'))}"}
        )
    if "SECRETARG" in user_text:
        return ToolReply("terminal", {"command": "echo secret-arg-ok", "api_key": SECRET_ARG})
    if "HARMLESS" in user_text:
        return ToolReply("terminal", {"command": "echo harmless-ok"})
    if "READFILE" in user_text:
        return ToolReply("read_file", {"path": str(settings.note_txt)})
    if "MEMORY" in user_text:
        return ToolReply("memory", {"action": "add", "target": "memory", "content": MEMORY_ENTRY})
    if "CLARIFY" in user_text:
        return ToolReply("clarify", {"question": "Which colour?", "choices": ["red", "blue"]})
    if "MEDIA" in user_text:
        return TextReply(f"Here is a picture. MEDIA:{settings.pixel_png}")
    return TextReply("Hello from fake LLM. You said: " + user_text[:200])


def reply_text(reply: Reply) -> str:
    if isinstance(reply, SlowReply):
        return "".join(reply.chunks)
    return reply.text if isinstance(reply, TextReply) else ""


def usage_for(text: str) -> JsonDict:
    completion = max(1, len(text.split()))
    return {"prompt_tokens": 11, "completion_tokens": completion, "total_tokens": 11 + completion}


def completion_body(settings: Settings, reply: Reply, completion_id: str, created: int) -> JsonDict:
    """Non-streaming ``chat.completion`` object for a text/slow/tool reply."""
    message: JsonDict
    if isinstance(reply, ToolReply):
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_" + uuid.uuid4().hex[:12],
                    "type": "function",
                    "function": {"name": reply.name, "arguments": json.dumps(reply.arguments)},
                }
            ],
        }
        finish, text = "tool_calls", ""
    else:
        text = reply_text(reply)
        message = {"role": "assistant", "content": text}
        finish = "stop"
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": settings.model_id,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage_for(text),
    }


def stream_deltas(reply: Reply) -> list[tuple[JsonDict, float]]:
    """The ``delta`` objects (with the pause before each) of a streamed reply, without the finish chunk."""
    if isinstance(reply, ToolReply):
        args = json.dumps(reply.arguments)
        half = len(args) // 2
        head = {"index": 0, "id": "call_" + uuid.uuid4().hex[:12], "type": "function"}
        return [
            ({"tool_calls": [{**head, "function": {"name": reply.name, "arguments": ""}}]}, 0.0),
            ({"tool_calls": [{"index": 0, "function": {"arguments": args[:half]}}]}, 0.0),
            ({"tool_calls": [{"index": 0, "function": {"arguments": args[half:]}}]}, 0.0),
        ]
    if isinstance(reply, SlowReply):
        return [({"content": chunk}, -1.0) for chunk in reply.chunks]
    words = reply_text(reply).split(" ")
    return [({"content": w + (" " if i < len(words) - 1 else "")}, 0.01) for i, w in enumerate(words)]


class FakeLLMServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], settings: Settings) -> None:
        super().__init__(address, FakeLLMHandler)
        self.settings = settings


class FakeLLMHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FakeLLMServer

    def log_message(self, format: str, *args: Any) -> None:
        sys.stderr.write("[fake_llm] " + (format % args) + "\n")

    def _send_json(self, status: int, obj: JsonDict) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _not_found(self) -> None:
        self._send_json(404, {"error": {"message": f"not found: {self.path}", "type": "not_found", "code": None}})

    def _model_obj(self) -> JsonDict:
        model_id = self.server.settings.model_id
        return {"id": model_id, "object": "model", "created": 0, "owned_by": "fake", "context_length": CONTEXT_LENGTH}

    def do_GET(self) -> None:
        settings = self.server.settings
        path = self.path.split("?", 1)[0].rstrip("/")
        log_request(settings, "GET", self.path, None)
        if path == "/v1/models":
            self._send_json(200, {"object": "list", "data": [self._model_obj()]})
        elif path == f"/v1/models/{settings.model_id}":
            self._send_json(200, self._model_obj())
        else:
            self._not_found()

    def do_POST(self) -> None:
        settings = self.server.settings
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body: Any
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {"_raw": raw.decode("utf-8", "replace")}
        log_request(settings, "POST", self.path, body)
        if self.path.split("?", 1)[0].rstrip("/") != "/v1/chat/completions":
            self._not_found()
            return
        if not isinstance(body, dict):
            self._send_json(400, {"error": {"message": "body must be a JSON object", "type": "invalid_request_error"}})
            return

        reply = decide(settings, body)
        time.sleep(held_back(body))
        if isinstance(reply, ErrorReply):
            error = {"message": reply.message, "type": "invalid_request_error", "code": "fake_error"}
            self._send_json(reply.status, {"error": error})
            return
        completion_id = "chatcmpl-" + uuid.uuid4().hex[:20]
        created = int(time.time())
        if not body.get("stream"):
            self._send_json(200, completion_body(settings, reply, completion_id, created))
            return
        options = body.get("stream_options")
        include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
        # A client that goes away (e.g. a stopped run) leaves nothing to clean up.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self._stream(reply, completion_id, created, include_usage=include_usage)

    def _stream(self, reply: Reply, completion_id: str, created: int, *, include_usage: bool) -> None:
        settings = self.server.settings
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

        def send(choices: list[JsonDict], usage: JsonDict | None = None) -> None:
            chunk: JsonDict = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": settings.model_id,
                "choices": choices,
            }
            if usage is not None:
                chunk["usage"] = usage
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            self.wfile.flush()

        send([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
        text = ""
        for delta, pause in stream_deltas(reply):
            time.sleep(settings.slow_interval if pause < 0 else pause)
            text += str(delta.get("content", ""))
            send([{"index": 0, "delta": delta, "finish_reason": None}])
        finish = "tool_calls" if isinstance(reply, ToolReply) else "stop"
        send([{"index": 0, "delta": {}, "finish_reason": finish}])
        if include_usage:
            send([], usage_for(text))
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    env = os.environ
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default=env.get("FAKE_LLM_HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(env.get("FAKE_LLM_PORT", "0")), help="0 = any free port")
    parser.add_argument("--log", type=Path, default=env.get("FAKE_LLM_LOG"), help="JSON-lines request log")
    parser.add_argument("--scratch", type=Path, default=env.get("FAKE_LLM_SCRATCH"), help="dir for DANGER/MEDIA")
    parser.add_argument("--model", default=env.get("FAKE_LLM_MODEL", MODEL_ID))
    parser.add_argument("--slow-interval", type=float, default=float(env.get("FAKE_LLM_SLOW_INTERVAL", "0.25")))
    args = parser.parse_args(argv)
    if args.log is None or args.scratch is None:
        parser.error("--log/FAKE_LLM_LOG and --scratch/FAKE_LLM_SCRATCH are required")
    return args


def _stop(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    settings = Settings(
        log_path=Path(args.log).resolve(),
        scratch_dir=Path(args.scratch).resolve(),
        model_id=args.model,
        slow_interval=args.slow_interval,
        smart_verdict=os.environ.get("FAKE_LLM_SMART_VERDICT", "ESCALATE"),
    )
    prepare_scratch(settings)
    server = FakeLLMServer((args.host, args.port), settings)
    port = server.server_address[1]
    print(port, flush=True)  # first stdout line: the port, read by the harness
    print(f"fake_llm listening on http://{args.host}:{port}/v1 log={settings.log_path}", flush=True)
    signal.signal(signal.SIGTERM, _stop)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
