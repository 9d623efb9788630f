"""``HermesClient``: the HTTP client for a Hermes gateway (and, when configured, its dashboard).

One ``httpx.AsyncClient`` per Hermes endpoint. Every failure surfaces as one of the four
``HermesError`` kinds; every response body is decoded into a frozen msgspec struct.
"""

import contextlib
import logging
import urllib.request
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Final, Self, TypeVar

import httpx
import msgspec

from hermes_client.errors import HermesNotFound, HermesUnavailable, HermesUpstreamError, error_from_response
from hermes_client.events import RUN_EVENT_DECODER, TERMINAL_EVENTS, ReplayTruncated, RunEvent, decode_run_event
from hermes_client.models import (
    ApprovalResult,
    CapabilitiesDocument,
    ClarifyResult,
    Health,
    HermesCapabilities,
    Job,
    ModelInfo,
    ModelOptions,
    RunHandle,
    RunStatus,
    Session,
    SessionMessage,
    SessionPage,
    SteerResult,
)
from hermes_client.run_stream import ReadPause, StreamRefused, body_reads
from hermes_client.sse import MAX_EVENT_ID_BYTES, SSEDataParser
from hermes_client.tls import shared_tls_context

__all__ = ["HermesClient"]

T = TypeVar("T")
log = logging.getLogger(__name__)

DASHBOARD_TOKEN_HEADER: Final = "X-Hermes-Session-Token"  # noqa: S105 - a header name, not a secret
JOB_UPDATE_FIELDS: Final = frozenset({"name", "schedule", "prompt", "deliver", "skills", "skill", "repeat", "enabled"})


class _SessionEnvelope(msgspec.Struct, frozen=True):
    session: Session


class _MessageList(msgspec.Struct, frozen=True):
    data: list[SessionMessage]


class _JobEnvelope(msgspec.Struct, frozen=True):
    job: Job


class _JobList(msgspec.Struct, frozen=True):
    jobs: list[msgspec.Raw]  # decoded one by one: a job of an unexpected shape must not hide the others


_TERMINAL_TYPES: Final = frozenset(TERMINAL_EVENTS)  # a set lookup: isinstance() on Structs is ~10x slower


def _reset_while_connecting(exc: AttributeError) -> bool:
    """A connection the peer reset right after it was made (a proxy in front of a dead Hermes): anyio's
    socket stream then asks the closed socket for its peer name and raises this AttributeError, not an
    OSError httpx would map. Any other AttributeError is a bug and goes on up."""
    return "getpeername" in str(exc)


def _decode(response: httpx.Response, type_: type[T]) -> T:
    try:
        return msgspec.json.decode(response.content, type=type_)
    except msgspec.DecodeError as exc:
        raise HermesUpstreamError(
            f"unexpected body from Hermes for {response.request.method} {response.request.url.path}: {exc}",
            status=response.status_code,
        ) from exc


def _decode_events(payloads: list[bytes]) -> list[RunEvent]:
    """Decode a chunk's event payloads: one comprehension over the prebuilt decoder (the hot path of a run
    stream), and only if some payload fails it, one by one so unknown events become ``UnknownEvent``."""
    decode = RUN_EVENT_DECODER.decode
    try:
        return [decode(data) for data in payloads]
    except msgspec.DecodeError:
        return list(map(decode_run_event, payloads))


def _decode_frames(payloads: list[bytes], ids: list[str | None] | None) -> list[RunEvent]:
    """Decode a chunk's events; one without a ``seq`` in its payload takes a numeric SSE ``id:`` as its seq."""
    events = _decode_events(payloads)
    if ids is not None:
        for index, frame_id in enumerate(ids):
            if frame_id is not None and frame_id.isdigit() and events[index].seq is msgspec.UNSET:
                events[index] = msgspec.structs.replace(events[index], seq=int(frame_id))
    return events


def _last_event_id_header(last_event_id: int | str | None) -> dict[str, str] | None:
    if last_event_id is None:
        return None
    value = str(last_event_id)
    if not value or len(value) > MAX_EVENT_ID_BYTES or not value.isascii() or not value.isprintable():
        raise ValueError("last_event_id must be a short printable ASCII value, e.g. an event's seq")
    return {"Last-Event-ID": value}


def _proxied(url: httpx.URL) -> bool:
    """Whether the environment puts a proxy between us and `url` (httpx honours it; a direct stream can't)."""
    proxies = urllib.request.getproxies()
    if not (proxies.get(url.scheme) or proxies.get("all")):
        return False
    return not urllib.request.proxy_bypass(url.host)  # NO_PROXY


def _offered(flag: Any) -> bool:
    """A capabilities feature that is on: ``true``, or an object saying ``"supported": true``."""
    return flag is True or (isinstance(flag, dict) and flag.get("supported") is True)


def _without_none(body: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in body.items() if value is not None}


def _repeat_object(repeat: Any) -> Any:
    """0.19.0 stores a bare-int ``repeat`` from PATCH verbatim and the job then crashes the scheduler."""
    if repeat is None:
        return {"times": None, "completed": 0}
    if isinstance(repeat, bool) or not isinstance(repeat, int):
        return repeat
    return {"times": repeat, "completed": 0}


class HermesClient:
    """Client for one Hermes gateway API server, plus optionally its dashboard backend.

    ``transport`` (and ``dashboard_transport``, which defaults to it) replace the network, e.g. with an
    ``httpx.MockTransport`` in tests. Use as an async context manager, or call ``aclose()``.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        dashboard_url: str | None = None,
        dashboard_token: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        dashboard_transport: httpx.AsyncBaseTransport | None = None,
        connect_timeout: float = 5.0,
        request_timeout: float = 30.0,
        stream_read_timeout: float | None = 120.0,
        on_outcome: Callable[[str], None] | None = None,
    ) -> None:
        """Create the client.

        Args:
            base_url: the gateway API server, e.g. ``http://127.0.0.1:8642``.
            api_key: the gateway's ``API_SERVER_KEY``.
            dashboard_url: the ``hermes serve`` backend, if model/config management is wanted.
            dashboard_token: the dashboard session token.
            transport: replaces the network for the gateway (and the dashboard, unless given its own).
            dashboard_transport: replaces the network for the dashboard.
            connect_timeout: seconds to establish a connection.
            request_timeout: seconds for any other phase of an ordinary request.
            stream_read_timeout: seconds of silence after which a run stream counts as dead. Hermes
                sends a keepalive comment after 30 s of silence, so this must stay well above 30.
            on_outcome: told how each request (not a run stream) ended: ``ok``, ``rejected`` (4xx),
                ``failed`` (5xx) or ``unavailable`` (no answer); for metrics.
        """
        self._on_outcome = on_outcome or _ignore
        timeout = httpx.Timeout(request_timeout, connect=connect_timeout)
        self._stream_timeout = httpx.Timeout(request_timeout, connect=connect_timeout, read=stream_read_timeout)
        self._gateway = httpx.AsyncClient(
            base_url=base_url,
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=timeout,
            transport=transport,
            verify=shared_tls_context(),
        )
        # Run streams go over a connection of their own (`run_stream`), unless the network is replaced
        # or the environment names a proxy: then through httpx, each HTTP chunk on its own, unpaused.
        self._direct_streams = transport is None and not _proxied(self._gateway.base_url)
        self._stream_numbered: bool | None = None
        self._dashboard: httpx.AsyncClient | None = None
        if dashboard_url:
            self._dashboard = httpx.AsyncClient(
                base_url=dashboard_url,
                headers={DASHBOARD_TOKEN_HEADER: dashboard_token} if dashboard_token else {},
                timeout=timeout,
                transport=dashboard_transport or transport,
                verify=shared_tls_context(),
            )

    @property
    def stream_numbered(self) -> bool | None:
        """Whether the last run stream read from this gateway numbered its events (``seq``), so that a broken
        stream can be resumed with ``last_event_id``; None before any stream was read. Not advertised."""
        return self._stream_numbered

    @property
    def has_dashboard(self) -> bool:
        """Whether model and config management (the dashboard API) is configured."""
        return self._dashboard is not None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._gateway.aclose()
        if self._dashboard is not None:
            await self._dashboard.aclose()

    # --- plumbing ---------------------------------------------------------------------------------

    async def _send(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, str | int] | None = None,
        headers: Mapping[str, str] | None = None,
        dashboard: bool = False,
    ) -> httpx.Response:
        http = self._gateway
        if dashboard:
            if self._dashboard is None:
                raise HermesUnavailable("the Hermes dashboard API is not configured")
            http = self._dashboard
        try:
            response = await http.request(method, path, json=json, params=params, headers=headers)
        except httpx.TimeoutException as exc:
            self._on_outcome("unavailable")
            raise HermesUnavailable(f"Hermes did not answer in time ({type(exc).__name__})") from exc
        except httpx.TransportError as exc:
            self._on_outcome("unavailable")
            raise HermesUnavailable(f"cannot reach Hermes ({type(exc).__name__})") from exc
        except AttributeError as exc:
            if not _reset_while_connecting(exc):
                raise
            self._on_outcome("unavailable")
            raise HermesUnavailable("cannot reach Hermes (the connection was reset)") from exc
        if not response.is_success:
            self._on_outcome("failed" if response.status_code >= 500 else "rejected")
            raise error_from_response(response.status_code, response.content)
        self._on_outcome("ok")
        return response

    # --- health -----------------------------------------------------------------------------------

    async def health(self) -> Health:
        """``GET /health`` (no auth needed)."""
        return _decode(await self._send("GET", "/health"), Health)

    async def get_capabilities(self) -> HermesCapabilities:
        """What this gateway offers: ``GET /health`` for its version, ``GET /v1/capabilities`` for its features.

        A gateway without the capabilities route (404) has no native features: the result then has
        ``advertised`` False and empty ``features``; that is not an error. 0.19.0 answers the route, without
        any of ``NATIVE_FEATURES``.
        """
        health = await self.health()
        try:
            response = await self._send("GET", "/v1/capabilities")
        except HermesNotFound:
            return HermesCapabilities(version=health.version)
        document = _decode(response, CapabilitiesDocument)
        return HermesCapabilities(
            version=health.version,
            advertised=True,
            features=frozenset(name for name, value in document.features.items() if _offered(value)),
            endpoints=frozenset(document.endpoints),
            model=document.model,
        )

    # --- runs -------------------------------------------------------------------------------------

    async def create_run(
        self,
        input: str | Sequence[Mapping[str, str]],
        *,
        session_id: str | None = None,
        conversation_history: Sequence[Mapping[str, str]] | None = None,
        instructions: str | None = None,
        model: str | None = None,
        provider: str | None = None,
        model_options: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> RunHandle:
        """Start a run. 0.19.0 loads no history for ``session_id``: pass ``conversation_history``.

        ``model``, ``provider`` and ``model_options`` (e.g. ``{"reasoning_effort": "low"}``) choose the model
        for this run alone on a gateway that advertises ``model_options``; 0.19.0 ignores all three.
        ``idempotency_key`` (1-255 visible ASCII characters) goes as ``Idempotency-Key``: on a gateway that
        advertises ``runs_idempotency``, the same request with the same key answers the run already made.
        """
        body = _without_none(
            {
                "input": input if isinstance(input, str) else [dict(message) for message in input],
                "session_id": session_id,
                "conversation_history": (
                    None if conversation_history is None else [dict(message) for message in conversation_history]
                ),
                "instructions": instructions,
                "model": model,
                "provider": provider,
                "model_options": None if model_options is None else dict(model_options),
            }
        )
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        return _decode(await self._send("POST", "/v1/runs", json=body, headers=headers), RunHandle)

    async def run_event_batches(
        self, run_id: str, last_event_id: int | str | None = None, *, read_pause: ReadPause | None = None
    ) -> AsyncGenerator[list[RunEvent], None]:
        """Stream the events of a run until its terminal event (completed, failed, cancelled or interrupted),
        in lists: the events of one read from the socket each (never empty), the terminal event last.

        0.19.0 allows one consumer per run and no resume: once this stream ends, for any reason, a new
        subscription gets ``HermesNotFound``. A 0.22-era gateway numbers its events (``event.seq``) and
        keeps the last 1000 of a run: pass the ``seq`` of the last event handled as ``last_event_id``
        (sent as ``Last-Event-ID``) to get exactly the events after it; a ``ReplayTruncated`` event first
        says some are gone. A stream that ends before a terminal event raises ``HermesUnavailable``.
        Event names this client does not know arrive as ``UnknownEvent`` (logged once per name). Wrap the
        iterator in ``contextlib.aclosing`` when leaving it early, so the connection closes at once.

        ``read_pause``, if given, is awaited before each read from the socket: the events that arrive
        meanwhile are then taken in one read. Not where a transport or a proxy is in the way.
        """
        path = f"/v1/runs/{run_id}/events"
        headers = _last_event_id_header(last_event_id)
        try:
            async with contextlib.aclosing(self._stream_body(path, headers, read_pause)) as reads:
                parser = SSEDataParser()
                noted = False
                async for chunk in reads:
                    events = _decode_frames(*parser.feed_frames(chunk))
                    if not events:
                        continue
                    if not noted:
                        # replay.truncated (no seq of its own) comes only from a numbering gateway.
                        first = events[0]
                        self._stream_numbered = first.seq is not msgspec.UNSET or type(first) is ReplayTruncated
                        noted = True
                    for index, event in enumerate(events):
                        if type(event) in _TERMINAL_TYPES:
                            yield events[: index + 1]
                            return
                    yield events
        except StreamRefused as refused:
            raise error_from_response(refused.status, refused.body) from None
        except httpx.TimeoutException as exc:
            raise HermesUnavailable(f"the run event stream stalled ({type(exc).__name__})") from exc
        except httpx.TransportError as exc:
            raise HermesUnavailable(f"the run event stream broke ({type(exc).__name__})") from exc
        except AttributeError as exc:
            if not _reset_while_connecting(exc):
                raise
            raise HermesUnavailable("the run event stream broke (the connection was reset)") from exc
        raise HermesUnavailable("the run event stream ended before the run finished")

    async def run_events(
        self, run_id: str, last_event_id: int | str | None = None, *, read_pause: ReadPause | None = None
    ) -> AsyncGenerator[RunEvent, None]:
        """The events of ``run_event_batches``, one by one."""
        async with contextlib.aclosing(self.run_event_batches(run_id, last_event_id, read_pause=read_pause)) as batches:
            async for batch in batches:
                for event in batch:
                    yield event

    async def _stream_body(
        self, path: str, headers: dict[str, str] | None, read_pause: ReadPause | None
    ) -> AsyncGenerator[bytes, None]:
        """The body of a GET, as it is read; `StreamRefused` for a status other than 200."""
        if self._direct_streams:
            base = self._gateway.base_url
            url = base.copy_with(raw_path=base.raw_path + path.lstrip("/").encode())
            fields = [("Authorization", self._gateway.headers["Authorization"]), *(headers or {}).items()]
            timeout = self._stream_timeout
            reads = body_reads(
                url,
                fields,
                tls=shared_tls_context() if url.scheme == "https" else None,
                connect_timeout=timeout.connect,
                read_timeout=timeout.read,
                read_pause=read_pause,
            )
            async with contextlib.aclosing(reads) as chunks:
                async for chunk in chunks:
                    yield chunk
            return
        async with self._gateway.stream("GET", path, headers=headers, timeout=self._stream_timeout) as response:
            if response.status_code != 200:
                await response.aread()
                raise StreamRefused(response.status_code, response.content)
            async for chunk in response.aiter_bytes():
                yield chunk

    async def get_run(self, run_id: str) -> RunStatus:
        return _decode(await self._send("GET", f"/v1/runs/{run_id}"), RunStatus)

    async def respond_approval(self, run_id: str, choice: str, *, all: bool = False) -> ApprovalResult:
        """Answer the oldest pending approval (or every one, with ``all``): once, session, always or deny."""
        body: dict[str, Any] = {"choice": choice}
        if all:
            body["all"] = True
        return _decode(await self._send("POST", f"/v1/runs/{run_id}/approval", json=body), ApprovalResult)

    async def steer_run(self, run_id: str, text: str) -> SteerResult:
        """Hand a running agent more guidance (a gateway advertising ``run_steer``); it reads it at its next step.

        A run that is not running is ``HermesRejected`` 409 ``run_not_accepting_steer``; a gateway without
        the route (0.19.0) answers ``HermesNotFound``.
        """
        return _decode(await self._send("POST", f"/v1/runs/{run_id}/steer", json={"text": text}), SteerResult)

    async def stop_run(self, run_id: str) -> RunHandle:
        """Ask a run to stop; ``run.cancelled`` follows on its stream. A finished run is ``HermesNotFound``."""
        return _decode(await self._send("POST", f"/v1/runs/{run_id}/stop"), RunHandle)

    async def respond_clarify(self, run_id: str, clarify_id: str, response: str | None) -> ClarifyResult:
        """Answer a ``clarify.request`` (newer Hermes). ``None`` asks Hermes to wait for free text."""
        body = {"clarify_id": clarify_id, "response": response}
        return _decode(await self._send("POST", f"/v1/runs/{run_id}/clarify", json=body), ClarifyResult)

    # --- sessions ---------------------------------------------------------------------------------

    async def list_sessions(self, *, source: str | None = None, limit: int = 50, offset: int = 0) -> SessionPage:
        """Sessions by last activity, newest first. ``source="cron"`` lists job executions."""
        params: dict[str, str | int] = {"limit": limit, "offset": offset}
        if source is not None:
            params["source"] = source
        return _decode(await self._send("GET", "/api/sessions", params=params), SessionPage)

    async def get_session(self, session_id: str) -> Session:
        return _decode(await self._send("GET", f"/api/sessions/{session_id}"), _SessionEnvelope).session

    async def create_session(self, *, session_id: str | None = None, title: str | None = None) -> Session:
        body = _without_none({"id": session_id, "title": title})
        return _decode(await self._send("POST", "/api/sessions", json=body), _SessionEnvelope).session

    async def rename_session(self, session_id: str, title: str | None) -> Session:
        """Set (or, with None, clear) a session's title. Titles are unique in Hermes."""
        response = await self._send("PATCH", f"/api/sessions/{session_id}", json={"title": title})
        return _decode(response, _SessionEnvelope).session

    async def delete_session(self, session_id: str) -> None:
        await self._send("DELETE", f"/api/sessions/{session_id}")

    async def session_messages(self, session_id: str) -> list[SessionMessage]:
        """The whole active transcript (0.19.0 has no pagination here), tool messages included."""
        return _decode(await self._send("GET", f"/api/sessions/{session_id}/messages"), _MessageList).data

    # --- jobs -------------------------------------------------------------------------------------

    async def list_jobs(self, include_disabled: bool = True) -> list[Job]:
        params = {"include_disabled": "true"} if include_disabled else None
        jobs: list[Job] = []
        for raw in _decode(await self._send("GET", "/api/jobs", params=params), _JobList).jobs:
            try:
                jobs.append(msgspec.json.decode(raw, type=Job))
            except msgspec.ValidationError as exc:
                log.warning("skipping a Hermes job of an unexpected shape: %s", exc)
        return jobs

    async def create_job(
        self,
        name: str,
        schedule: str,
        prompt: str,
        *,
        repeat: int | None = None,
        deliver: str = "local",
        skills: Sequence[str] | None = None,
    ) -> Job:
        """Create a job. ``schedule``: "30m" (once), "every 2h", a 5-field cron line, or an ISO time."""
        body = _without_none(
            {
                "name": name,
                "schedule": schedule,
                "prompt": prompt,
                "deliver": deliver,
                "repeat": repeat,
                "skills": None if skills is None else list(skills),
            }
        )
        return _decode(await self._send("POST", "/api/jobs", json=body), _JobEnvelope).job

    async def get_job(self, job_id: str) -> Job:
        return _decode(await self._send("GET", f"/api/jobs/{job_id}"), _JobEnvelope).job

    async def update_job(self, job_id: str, **fields: Any) -> Job:
        """Patch a job: name, schedule, prompt, deliver, skills, skill, repeat, enabled.

        ``repeat`` is always sent as ``{"times": N, "completed": 0}`` (None means forever): 0.19.0
        corrupts a job patched with a bare int. Pause with ``pause_job``, not ``enabled=False``.
        """
        unknown = set(fields) - JOB_UPDATE_FIELDS
        if unknown:
            raise ValueError(f"Hermes cannot update job fields: {', '.join(sorted(unknown))}")
        body = dict(fields)
        if "repeat" in body:
            body["repeat"] = _repeat_object(body["repeat"])
        return _decode(await self._send("PATCH", f"/api/jobs/{job_id}", json=body), _JobEnvelope).job

    async def delete_job(self, job_id: str) -> None:
        await self._send("DELETE", f"/api/jobs/{job_id}")

    async def pause_job(self, job_id: str) -> Job:
        return _decode(await self._send("POST", f"/api/jobs/{job_id}/pause"), _JobEnvelope).job

    async def resume_job(self, job_id: str) -> Job:
        return _decode(await self._send("POST", f"/api/jobs/{job_id}/resume"), _JobEnvelope).job

    async def run_job(self, job_id: str) -> Job:
        """Run a job now. Its output appears later as session ``cron_<job id>_<YYYYMMDD_HHMMSS>``."""
        return _decode(await self._send("POST", f"/api/jobs/{job_id}/run"), _JobEnvelope).job

    async def api_model_options(self) -> ModelOptions:
        """The API server's own ``GET /api/model/options`` (a gateway advertising ``model_options``): the
        same provider and model inventory as the dashboard's, with the gateway's key, no dashboard needed."""
        return _decode(await self._send("GET", "/api/model/options"), ModelOptions)

    # --- dashboard --------------------------------------------------------------------------------

    async def model_options(self) -> ModelOptions:
        """Providers with their models, and the current global model and provider."""
        return _decode(await self._send("GET", "/api/model/options", dashboard=True), ModelOptions)

    async def model_info(self) -> ModelInfo:
        return _decode(await self._send("GET", "/api/model/info", dashboard=True), ModelInfo)

    async def set_model(self, provider: str, model: str, base_url: str | None = None) -> None:
        """Change the global model; the gateway uses it from its next run on."""
        body = _without_none({"scope": "main", "provider": provider, "model": model, "base_url": base_url})
        await self._send("POST", "/api/model/set", json=body, dashboard=True)

    async def get_config(self) -> dict[str, Any]:
        """The dashboard's view of ``config.yaml`` (``model`` flattened to the model name)."""
        return _decode(await self._send("GET", "/api/config", dashboard=True), dict[str, Any])

    async def put_config(self, config: Mapping[str, Any]) -> None:
        """Deep-merge ``config`` into ``config.yaml``, e.g. ``{"agent": {"reasoning_effort": "low"}}``."""
        await self._send("PUT", "/api/config", json={"config": dict(config)}, dashboard=True)

    async def reasoning_effort(self) -> str | None:
        """The global reasoning effort (``agent.reasoning_effort``), or None when unset."""
        agent = (await self.get_config()).get("agent")
        effort = agent.get("reasoning_effort") if isinstance(agent, dict) else None
        return effort if isinstance(effort, str) and effort else None


def _ignore(outcome: str) -> None:
    """No one asked how requests end."""
