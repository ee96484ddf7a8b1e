"""A real vcloud server process on a loopback port, for end-to-end and browser tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    env: dict[str, str]
    log_path: Path

    def manage(self, *args: str) -> str:
        result = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
        )
        return result.stdout

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def start_server(data_dir: Path, **env: str) -> Server:
    """Migrate a fresh database in ``data_dir`` and serve vcloud.asgi with uvicorn."""
    port = free_port()
    full_env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PYTEST")},
        "DJANGO_SETTINGS_MODULE": "vcloud.settings.base",
        "VC_DATA_DIR": str(data_dir),
        **env,
    }
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v0"],
        cwd=ROOT,
        env=full_env,
        check=True,
    )
    log_path = data_dir / "server.log"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "vcloud.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--lifespan",
            "on",
            "--no-access-log",
        ],
        cwd=ROOT,
        env=full_env,
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
    )
    server = Server(f"http://127.0.0.1:{port}", process, full_env, log_path)
    _wait_ready(server)
    return server


def _wait_ready(server: Server, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"server exited:\n{server.log()}")
        try:
            httpx.get(server.url + "/", timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"server not ready:\n{server.log()}")
