"""The proxy benchmark: vcloud in front of a fixed upstream, against that
upstream directly, in one run (issue 13).

1. Throughput: ``wrk`` with 32 connections for 10 s, directly, then through the
   proxy on the ordinary path (a vckey in the URL, one conversation by
   ``X-VC-Session``, a short message, request log written).
2. Latency: 300 interleaved direct/proxied pairs on one keep-alive connection
   each; added = proxied − direct at each percentile.
3. Streaming: time to first body byte, 100 interleaved pairs.
4. After a clean stop: request-log rows == requests the upstream served via the
   proxy; peak RSS of the proxy process.

Both servers are uvicorn processes (uvloop, httptools) on loopback ports; the
proxy gets a fresh SQLite database in a temporary VC_DATA_DIR.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from statistics import quantiles
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BODY = json.dumps(
    {
        "model": "claude-sonnet-4-5",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "Say hello in five words."}],
    }
)
HEADERS = {
    "content-type": "application/json",
    "x-api-key": "sk-bench",
    "anthropic-version": "2023-06-01",
}


@dataclass
class Result:
    figures: dict[str, Any] = field(default_factory=dict)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _uvicorn(app: str, port: int, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable,
        "-m",
        "uvicorn",
        app,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--loop",
        "uvloop",
        "--http",
        "httptools",
        "--no-access-log",
        "--log-level",
        "warning",
        "--lifespan",
        "on" if app.startswith("vcloud") else "off",
    ]
    process = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return process
        except OSError:
            if process.poll() is not None:
                raise RuntimeError(log.read_text()) from None
            time.sleep(0.1)
    raise RuntimeError(f"{app} did not start")


def _wrk(
    url: str, headers: dict[str, str], seconds: int, connections: int, tmp: Path
) -> dict[str, Any]:
    script = tmp / "post.lua"
    lines = ['wrk.method = "POST"', f"wrk.body = {json.dumps(BODY)}"]
    lines += [f'wrk.headers["{k}"] = "{v}"' for k, v in headers.items()]
    script.write_text("\n".join(lines) + "\n")
    out = subprocess.run(
        ["wrk", "-t", "2", "-c", str(connections), "-d", f"{seconds}s", "-s", str(script), url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    requests = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    socket_errors = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out
    )
    errors = int(non2xx.group(1)) if non2xx else 0
    if socket_errors:
        errors += sum(int(x) for x in socket_errors.groups())
    return {"requests": requests, "rps": rps, "errors": errors}


def _timed(
    conn: http.client.HTTPConnection, path: str, headers: dict[str, str], body: str
) -> tuple[float, float]:
    """(time to first body byte, total) in ms for one request."""
    start = time.perf_counter()
    conn.request("POST", path, body=body, headers=headers)
    response = conn.getresponse()
    response.read(1)
    first = time.perf_counter()
    response.read()
    end = time.perf_counter()
    if response.status != 200:
        raise RuntimeError(f"{path} answered {response.status}")
    return (first - start) * 1000, (end - start) * 1000


def _pairs(
    direct_port: int, proxy_port: int, proxy_path: str, n: int, stream: bool
) -> dict[str, list[float]]:
    body = BODY if not stream else BODY[:-1] + ', "stream": true}'
    direct = http.client.HTTPConnection("127.0.0.1", direct_port)
    proxied = http.client.HTTPConnection("127.0.0.1", proxy_port)
    headers = {**HEADERS, "x-vc-session": "bench-latency"}
    out: dict[str, list[float]] = {"direct": [], "proxied": []}
    index = 0 if stream else 1  # TTFB for streams, whole request otherwise
    for _ in range(n):
        out["direct"].append(_timed(direct, "/v1/messages", HEADERS, body)[index])
        out["proxied"].append(_timed(proxied, proxy_path, headers, body)[index])
    return out


def _percentiles(values: list[float]) -> dict[str, float]:
    cuts = quantiles(values, n=100, method="inclusive")
    return {"p50": cuts[49], "p95": cuts[94], "p99": cuts[98]}


def _added(pairs: dict[str, list[float]]) -> dict[str, float]:
    direct, proxied = _percentiles(pairs["direct"]), _percentiles(pairs["proxied"])
    return {k: round(proxied[k] - direct[k], 3) for k in direct} | {
        "direct_p50": round(direct["p50"], 3),
        "proxied_p50": round(proxied["p50"], 3),
    }


def _manage(env: dict[str, str], *args: str) -> str:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _upstream_count(port: int) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port)
    conn.request("GET", "/count")
    return int(json.loads(conn.getresponse().read())["served"])


def run(
    *, seconds: int = 10, connections: int = 32, pairs: int = 300, stream_pairs: int = 100
) -> dict[str, Any]:
    if shutil.which("wrk") is None:
        raise RuntimeError("wrk is not installed (make wrk, or apt-get install wrk)")
    tmp = Path(tempfile.mkdtemp(prefix="vc-bench-"))
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env |= {"VC_DATA_DIR": str(tmp), "DJANGO_SETTINGS_MODULE": "vcloud.settings.base"}
    upstream_port, proxy_port = _free_port(), _free_port()
    env["VC_UPSTREAM_ANTHROPIC"] = f"http://127.0.0.1:{upstream_port}"
    _manage(env, "migrate", "--noinput", "-v0")
    key = _manage(env, "vc_key", "create", "--user", "bench", "--create-user")
    upstream = _uvicorn("proxy_app.bench.upstream:app", upstream_port, env, tmp / "upstream.log")
    proxy = _uvicorn("vcloud.asgi:application", proxy_port, env, tmp / "proxy.log")
    figures: dict[str, Any] = {"connections": connections, "seconds": seconds}
    try:
        proxy_path = f"/v/{key}/v1/messages"
        session = {**HEADERS, "x-vc-session": "bench"}
        _pairs(upstream_port, proxy_port, proxy_path, 50, stream=False)  # warm up
        figures["direct"] = _wrk(
            f"http://127.0.0.1:{upstream_port}/v1/messages", HEADERS, seconds, connections, tmp
        )
        before = _upstream_count(upstream_port)
        figures["proxied"] = _wrk(
            f"http://127.0.0.1:{proxy_port}{proxy_path}", session, seconds, connections, tmp
        )
        figures["latency_ms"] = _added(
            _pairs(upstream_port, proxy_port, proxy_path, pairs, stream=False)
        )
        figures["stream_ttfb_ms"] = _added(
            _pairs(upstream_port, proxy_port, proxy_path, stream_pairs, stream=True)
        )
        figures["peak_rss_mb"] = round(_peak_rss_mb(proxy.pid), 1)
    finally:
        proxy.send_signal(signal.SIGTERM)
        proxy.wait(timeout=30)
    try:
        # After `before`, the upstream served the proxied wrk run (including
        # requests still in flight when wrk stopped) and both sides of the pair
        # runs, whose direct halves are not the proxy's; the proxy also
        # forwarded the 50 warm-up requests before it.
        served = _upstream_count(upstream_port) - before - pairs - stream_pairs + 50
    finally:
        upstream.send_signal(signal.SIGTERM)
        upstream.wait(timeout=10)
    logged = int(
        _manage(
            env,
            "shell",
            "-c",
            "from telemetry_app.models import RequestLog; print(RequestLog.objects.count())",
        ).splitlines()[-1]
    )
    figures["proxied_requests_served"] = served
    figures["request_log_rows"] = logged
    figures["request_log_matches"] = logged == served
    shutil.rmtree(tmp, ignore_errors=True)
    return figures
