"""A real vcloud server process on a loopback port, for end-to-end and browser tests."""

from __future__ import annotations

import contextlib
import os
import signal
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
        """A clean stop (the writer drains); then make sure the whole process
        group, the writer child included, is gone before the caller cleans up."""
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)

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
        start_new_session=True,
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


def start_worker(server: Server) -> subprocess.Popen[bytes]:
    """A real Celery worker for ``server`` (scaled mode: REDIS_URL is set), on a
    queue of its own so tasks of other runs sharing the Redis never reach it."""
    log_path = server.log_path.with_name("worker.log")
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "vcloud",
            "worker",
            "--pool",
            "threads",
            "--concurrency",
            "2",
            "--loglevel",
            "info",
            "--queues",
            server.env["VC_CELERY_QUEUE"],
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ],
        cwd=ROOT,
        env=server.env,
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
    )
