"""vc_bench proxy [--seconds S] [--connections C] [--pairs N] [--json]
vc_bench longmemeval [--split dev|PATH] [--ceiling N[,N…]]… [--limit N] [--types T,…]
                     [--embedder minilm|hashing] [--layout stable|rewrite] [--json]
vc_bench plan [--turns 500] [--ceiling 16000] [--runs 30] [--json]
vc_bench dashboard [--requests N] [--calls N] [--sessions N] [--runs N] [--json]
vc_bench cache [--turns 150] [--ceiling 8000] [--layout stable|rewrite|both] [--wait 10]
               [--embedder hashing|minilm] [--max-turns N] [--cache-dir DIR] [--json]"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

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
        plan = sub.add_parser("plan", help="planning one request on a 500-turn conversation")
        plan.add_argument("--turns", type=int, default=500)
        plan.add_argument("--ceiling", type=int, default=16_000)
        plan.add_argument("--runs", type=int, default=30)
        plan.add_argument("--json", action="store_true")
        ingest = sub.add_parser("ingest", help="a 500-turn history through the memory job")
        ingest.add_argument("--turns", type=int, default=500)
        ingest.add_argument("--ceiling", type=int, default=16_000)
        ingest.add_argument("--json", action="store_true")
        inbound = sub.add_parser("inbound", help="inbound tagger latency on short messages")
        inbound.add_argument("--n", type=int, default=200)
        inbound.add_argument("--json", action="store_true")
        lme = sub.add_parser("longmemeval", help="LongMemEval evidence recall through the proxy")
        lme.add_argument("--split", default="dev", help="dev, or the path of a .jsonl(.gz)/.json")
        lme.add_argument(
            "--ceiling", action="append", default=[], help="tokens; repeatable or 4000,8000"
        )
        lme.add_argument("--limit", type=int, default=None, help="questions, round-robin by type")
        lme.add_argument("--types", default="", help="question types, comma-separated")
        lme.add_argument("--embedder", choices=["minilm", "hashing"], default="minilm")
        lme.add_argument("--timeout", type=float, default=600, help="seconds per question")
        lme.add_argument(
            "--layout",
            choices=["stable", "rewrite"],
            default="stable",
            help="rewrite: the cache-aware layout off (issue 12's comparison)",
        )
        lme.add_argument("--cache-dir", default=None, help="embedding cache ('' turns it off)")
        lme.add_argument("--json", action="store_true")
        cache = sub.add_parser("cache", help="prompt-cache billing of a long replay vs direct")
        cache.add_argument("--turns", type=int, default=150, help="first summary after N turns")
        cache.add_argument("--ceiling", type=int, default=8_000)
        cache.add_argument("--layout", choices=["stable", "rewrite", "both"], default="stable")
        cache.add_argument("--wait", type=float, default=10.0, help="seconds for background work")
        cache.add_argument("--embedder", choices=["minilm", "hashing"], default="hashing")
        cache.add_argument("--max-turns", type=int, default=None, help="replay only N user turns")
        cache.add_argument("--cache-dir", default=None, help="embedding cache ('' turns it off)")
        cache.add_argument("--json", action="store_true")
        dash = sub.add_parser("dashboard", help="render time of the dashboard pages at scale")
        dash.add_argument("--requests", type=int, default=1_000_000)
        dash.add_argument("--calls", type=int, default=100_000)
        dash.add_argument("--sessions", type=int, default=10_000)
        dash.add_argument("--runs", type=int, default=7)
        dash.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["bench"] == "longmemeval":
            self._longmemeval(options)
            return
        if options["bench"] == "cache":
            self._cache(options)
            return
        if options["bench"] == "dashboard":
            from telemetry_app import bench as dashboard_bench

            keys = ("requests", "calls", "sessions", "runs")
            figures = dashboard_bench.run(**{k: options[k] for k in keys})
            json_out = json.dumps(figures, indent=2)
            self.stdout.write(json_out if options["json"] else dashboard_bench.report(figures))
            return
        if options["bench"] in ("ingest", "inbound", "plan"):
            figures = _memory_bench(options)
            self.stdout.write(json.dumps(figures, indent=None if not options["json"] else 2))
            return
        figures = proxy_bench.run(
            seconds=options["seconds"], connections=options["connections"], pairs=options["pairs"]
        )
        if options["json"]:
            self.stdout.write(json.dumps(figures, indent=2))
            return
        self.stdout.write(_report(figures))

    def _longmemeval(self, options: dict[str, Any]) -> None:
        from memory_app.bench import longmemeval

        logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per poll otherwise
        try:
            ceilings = [int(c) for arg in options["ceiling"] for c in arg.split(",") if c.strip()]
        except ValueError as exc:
            raise CommandError(f"--ceiling takes token counts: {exc}") from exc
        cache: Path | None = longmemeval.DEFAULT_CACHE_DIR
        if options["cache_dir"] is not None:
            cache = Path(options["cache_dir"]) if options["cache_dir"] else None
        try:
            result = longmemeval.run(
                split=options["split"],
                ceilings=ceilings or longmemeval.DEFAULT_CEILINGS,
                limit=options["limit"],
                types=[t.strip() for t in options["types"].split(",") if t.strip()],
                embedder=options["embedder"],
                cache_dir=cache,
                timeout=options["timeout"],
                layout=options["layout"],
                progress=lambda line: self.stderr.write(line),
            )
        except longmemeval.NothingSelected as exc:
            raise CommandError(str(exc)) from exc
        if options["json"]:
            self.stdout.write(json.dumps(result, indent=2))
            return
        self.stdout.write(longmemeval.report(result))

    def _cache(self, options: dict[str, Any]) -> None:
        from memory_app.bench import cache

        logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per poll otherwise
        if options["turns"] < 1 or (options["max_turns"] is not None and options["max_turns"] < 1):
            raise CommandError("--turns and --max-turns take a positive number of user turns")
        cache_dir: Path | None = cache.DEFAULT_CACHE_DIR
        if options["cache_dir"] is not None:
            cache_dir = Path(options["cache_dir"]) if options["cache_dir"] else None
        result = cache.run(
            turns=options["turns"],
            ceiling=options["ceiling"],
            layouts=cache.LAYOUTS if options["layout"] == "both" else (options["layout"],),
            wait=options["wait"],
            embedder=options["embedder"],
            max_turns=options["max_turns"],
            cache_dir=cache_dir,
            progress=lambda line: self.stderr.write(line),
        )
        self.stdout.write(json.dumps(result, indent=2) if options["json"] else cache.report(result))


def _memory_bench(options: dict[str, Any]) -> dict[str, Any]:
    if options["bench"] == "plan":
        from memory_app.bench import plan

        return plan.run(turns=options["turns"], ceiling=options["ceiling"], runs=options["runs"])
    if options["bench"] == "ingest":
        from memory_app.bench import ingest

        return ingest.run(turns=options["turns"], ceiling=options["ceiling"])
    from memory_app.bench import inbound

    return inbound.run(n=options["n"])


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
