"""What the benchmarks share: free loopback ports, waiting for a server they start, and stopping it by PID."""

import contextlib
import socket
import subprocess
import time
from collections.abc import Callable

import httpx


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
