"""What the benchmarks share: free loopback ports, a server in a child process (started, waited for,
stopped by PID), and a file-descriptor limit raised for many connections."""

import contextlib
import json
import resource
import socket
import subprocess
import time
from collections.abc import Callable

import httpx
import uvicorn

from handlers.support.app import create_app
from pheby.server import build_uvicorn_config
from pheby.settings import load_settings


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def stop_process(process: "subprocess.Popen[bytes]", timeout: float = 20) -> None:
    """Terminate by PID, wait, and kill if it does not exit."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=timeout)


def wait_until_up(
    process: "subprocess.Popen[bytes]", base_url: str, timeout: float, log_tail: Callable[[], str] = lambda: ""
) -> None:
    """Poll `GET /healthz` until it answers 200; raise (with the server's log tail) if it exits or times out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server at {base_url} exited with {process.returncode}:\n{log_tail()}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{base_url}/healthz", timeout=2).status_code == 200:
                return
        time.sleep(0.1)
    raise RuntimeError(f"the server at {base_url} did not come up:\n{log_tail()}")


def raise_nofile_limit() -> None:
    """Raise the soft RLIMIT_NOFILE to the hard limit (thousands of sockets need it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def serve_child(flags_json: str) -> None:
    """A benchmark's `--serve-child` mode: run the server (settings from JSON flags) until SIGTERM."""
    raise_nofile_limit()
    settings = load_settings({}, **json.loads(flags_json))
    uvicorn.Server(build_uvicorn_config(settings, create_app(settings))).run()
