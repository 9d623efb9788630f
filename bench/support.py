"""What the benchmarks share: free loopback ports and stopping the servers they start, by PID."""

import socket
import subprocess


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
