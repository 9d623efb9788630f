"""Things written once: each is one piece of code serving every caller (issue 13, item 6).

The tool call's fields (`ToolState`, and `tool.event` built from it), the `attachment.added` frame,
and the translation of Hermes's failures into the server's errors. (The plugin's extras are held
to one declaration in tests/test_plugin_extras.py.)
"""

import ast
import inspect
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

import hermes_client as hc
from pheby import errors
from pheby.errors import BadRequest, Conflict, NotFound, PhebyError, Unavailable, Unprocessable, UpstreamFailure
from pheby.hermes.failures import hermes_failure
from pheby.protocol import frames as ev

ROOT = Path(__file__).resolve().parent.parent
SERVER_CODE = ("pheby", "handlers", "scheduler")


def modules() -> Iterator[tuple[Path, ast.Module]]:
    for top in SERVER_CODE:
        for path in sorted((ROOT / top).rglob("*.py")):
            yield path.relative_to(ROOT), ast.parse(path.read_text(encoding="utf-8"))


def called_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


# --- the tool call ------------------------------------------------------------------------------


def test_tool_event_has_the_fields_of_tool_state() -> None:
    event_fields = ev.ToolEvent.__struct_fields__
    assert event_fields == (*ev.Event.__struct_fields__, "conversation_id", *ev.ToolState.__struct_fields__)
    state_fields = {f.name: (f.type, f.default) for f in msgspec.structs.fields(ev.ToolState)}
    assert {f.name: (f.type, f.default) for f in msgspec.structs.fields(ev.ToolEvent) if f.name in state_fields} == (
        state_fields
    )


def test_the_tool_fields_are_declared_once() -> None:
    source = inspect.getsource(ev)
    assert source.count("args_redacted:") == 1
    assert source.count("tool_call_id:") == 1


def test_tool_event_is_built_in_one_place() -> None:
    builders = [
        str(path)
        for path, tree in modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and called_name(node) == "ToolEvent"
    ]
    assert builders == ["pheby/runs/translate.py"]  # `tool_event(view, state)`


# --- attachment.added ---------------------------------------------------------------------------


def test_attachment_added_is_built_in_one_place() -> None:
    builders = [
        str(path)
        for path, tree in modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and called_name(node) == "AttachmentAdded"
    ]
    assert builders == ["pheby/store/attachments.py"]


# --- Hermes failures ----------------------------------------------------------------------------


def _catches_hermes(handler: ast.ExceptHandler) -> bool:
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(k, ast.Attribute) and isinstance(k.value, ast.Name) and k.value.id == "hc" for k in kinds)


SERVER_ERRORS = {name for name, obj in vars(errors).items() if isinstance(obj, type) and issubclass(obj, PhebyError)}
# Raised in a Hermes exception handler, but not a translation of the failure.
NOT_TRANSLATIONS = {
    "NotImplementedByUpstream",  # the gateway lacks the API: said by the caller, no Hermes text in it
}
LEFT_AS_THEY_ARE = {
    # Hermes no longer knows the approval: the protocol's own approval_not_found, an outcome, not a failure.
    ("pheby/runs/decision_desk.py", "ApprovalNotFound"),
}


def test_hermes_failures_become_server_errors_in_one_place() -> None:
    """A handler of a `hermes_client` exception re-raises it or lets `hermes_failure` translate it; it
    builds no server error of its own."""
    own_errors = []
    for path, tree in modules():
        if path == Path("pheby/hermes/failures.py"):
            continue
        for handler in ast.walk(tree):
            if not isinstance(handler, ast.ExceptHandler) or not _catches_hermes(handler):
                continue
            for node in ast.walk(handler):
                if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)):
                    continue
                name = called_name(node.exc)
                if name in SERVER_ERRORS - NOT_TRANSLATIONS and (str(path), name) not in LEFT_AS_THEY_ARE:
                    own_errors.append(f"{path}:{node.lineno}: {name}")
    assert own_errors == []


SECRET_TEXT = "bad key sk-abcdefghijklmnopqrstuvwxyz123456 at http://10.0.0.5:8642/v1/runs"


@pytest.mark.parametrize(
    ("exc", "expected", "message"),
    [
        (hc.HermesUnavailable("down"), Unavailable, "gone"),
        (hc.HermesNotFound("nope", status=404), NotFound, "no run"),
        (hc.HermesRejected("busy", status=409), Conflict, "not now"),
        (hc.HermesRejected("slow down", status=429), Unavailable, "busy"),
        (hc.HermesRejected(SECRET_TEXT, status=400), BadRequest, "refused: bad key <redacted> at <url>"),
        (hc.HermesUpstreamError(SECRET_TEXT, status=500), UpstreamFailure, "failed: bad key <redacted> at <url>"),
    ],
)
def test_hermes_failure_maps_each_kind_and_scrubs_the_text(exc: hc.HermesError, expected: type, message: str) -> None:
    error = hermes_failure(
        exc,
        unavailable="gone",
        not_found="no run",
        conflict="not now",
        busy="busy",
        refused="refused: {text}",
        failed="failed: {text}",
    )
    assert type(error) is expected
    assert error.message == message


def test_what_a_caller_names_no_message_for_is_an_upstream_failure() -> None:
    assert type(hermes_failure(hc.HermesUnavailable("down"), failed="x: {text}")) is UpstreamFailure
    assert type(hermes_failure(hc.HermesNotFound("gone", status=404))) is UpstreamFailure
    refusal = hermes_failure(hc.HermesUpstreamError("no", status=500), refused="{text}", refused_as=Unprocessable)
    assert type(refusal) is UpstreamFailure
    forced = hermes_failure(
        hc.HermesUpstreamError("no", status=500), refused="{text}", refused_as=Unprocessable, refusal=True
    )
    assert type(forced) is Unprocessable
    assert forced.message == "no"
