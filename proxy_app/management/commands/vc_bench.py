"""vc_bench proxy [--seconds S] [--connections C] [--pairs N] [--json]"""

from __future__ import annotations

import argparse
import json
from typing import Any

from django.core.management.base import BaseCommand

from proxy_app.bench import proxy as proxy_bench


class Command(BaseCommand):
    help = "Benchmarks that print figures (CONTRACT.md)."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="bench", required=True)
        proxy = sub.add_parser("proxy", help="proxy throughput and added latency vs direct")
        proxy.add_argument("--seconds", type=int, default=10)
        proxy.add_argument("--connections", "--concurrency", type=int, default=32)
        proxy.add_argument("--pairs", "--requests", type=int, default=300)
        proxy.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        figures = proxy_bench.run(
            seconds=options["seconds"], connections=options["connections"], pairs=options["pairs"]
        )
        if options["json"]:
            self.stdout.write(json.dumps(figures, indent=2))
            return
        self.stdout.write(_report(figures))


def _report(f: dict[str, Any]) -> str:
    lat, ttfb = f["latency_ms"], f["stream_ttfb_ms"]
    ratio = f["proxied"]["rps"] / f["direct"]["rps"] if f["direct"]["rps"] else 0
    return "\n".join(
        [
            f"throughput, {f['connections']} connections, {f['seconds']} s (wrk):",
            f"  direct   {f['direct']['rps']:>9,.0f} req/s   errors {f['direct']['errors']}",
            f"  proxied  {f['proxied']['rps']:>9,.0f} req/s   errors {f['proxied']['errors']}"
            f"   ({ratio:.0%} of direct)",
            "added latency, one connection, interleaved pairs (ms):",
            f"  p50 {lat['p50']:.3f}   p95 {lat['p95']:.3f}   p99 {lat['p99']:.3f}"
            f"   (direct p50 {lat['direct_p50']:.3f}, proxied p50 {lat['proxied_p50']:.3f})",
            "added time to first byte, streamed reply (ms):",
            f"  p50 {ttfb['p50']:.3f}   p95 {ttfb['p95']:.3f}   p99 {ttfb['p99']:.3f}",
            f"peak RSS of the proxy: {f['peak_rss_mb']} MB",
            f"request-log rows {f['request_log_rows']} / requests served via the proxy"
            f" {f['proxied_requests_served']}: {'match' if f['request_log_matches'] else 'MISMATCH'}",
        ]
    )
