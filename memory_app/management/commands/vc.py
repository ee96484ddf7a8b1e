"""vc — the memory from the command line.

vc status [--user NAME]                 conversations: turns, segments, tags, pending jobs
vc tags --conversation ID               the tag vocabulary with turn counts and aliases
vc domains --conversation ID            the covering tags (tag summaries) and what they span
vc recall TAG --conversation ID         the tag's summary and its segments
vc compact --conversation ID            run the memory job now, with a progress bar
vc retrieve --conversation ID -m TEXT [--ceiling N]   the plan a new message would get: parts, recall, reasons
vc transform --conversation ID -m TEXT [--ceiling N]  the upstream body that plan would send (JSON)
vc aliases list|suggest|add --conversation ID [ALIAS TAG]
vc config validate FILE | export --user NAME | import FILE --user NAME
vc demo [--url URL] [--user NAME] [--turns N] [--delay S] [--ceiling N]   replay the demo chat
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn
from rich.table import Table

from memory_app import selectors
from memory_app.config import config_for, config_from_yaml, config_to_yaml
from memory_app.engine.canon import alias_suggestions, tag_canonical
from memory_app.errors import ConfigError, DemoError
from memory_app.models import Conversation, MemoryJob, Segment, Tag, TagAlias, TagSummary
from memory_app.services import demo, jobs, pipeline
from memory_app.services.planning import request_preview
from vcloud.accounts.models import Account


class Command(BaseCommand):
    help = "Inspect and drive the memory of conversations."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        status = sub.add_parser("status")
        status.add_argument("--user", default="")
        for name in ("tags", "domains", "compact"):
            sub.add_parser(name).add_argument("--conversation", type=int, required=True)
        for name in ("retrieve", "transform"):
            preview = sub.add_parser(name)
            preview.add_argument("--conversation", type=int, required=True)
            preview.add_argument("-m", "--message", required=True)
            preview.add_argument("--ceiling", type=int, default=None)
        recall = sub.add_parser("recall")
        recall.add_argument("tag")
        recall.add_argument("--conversation", type=int, required=True)
        aliases = sub.add_parser("aliases")
        aliases.add_argument("verb", choices=["list", "suggest", "add"])
        aliases.add_argument("names", nargs="*", help="ALIAS TAG for add")
        aliases.add_argument("--conversation", type=int, required=True)
        config = sub.add_parser("config")
        config.add_argument("verb", choices=["validate", "export", "import"])
        config.add_argument("file", nargs="?", default="")
        config.add_argument("--user", default="")
        replay = sub.add_parser("demo", help="replay a demo chat through a running vcloud")
        replay.add_argument("--url", default="http://127.0.0.1:5757", help="the running vcloud")
        replay.add_argument("--user", default="demo", help="created if missing")
        replay.add_argument("--password", default=None, help="for a created user (else generated)")
        replay.add_argument("--turns", type=int, default=300, help="turns of both sides")
        replay.add_argument("--delay", type=float, default=0.2, help="seconds between requests")
        replay.add_argument("--ceiling", type=int, default=4000, help="the account's ceiling")

    def handle(self, *args: Any, **options: Any) -> None:
        self.console = Console(file=self.stdout, width=120)
        getattr(self, f"do_{options['action']}")(options)

    # ------------------------------------------------------------ reads

    def do_status(self, o: dict[str, Any]) -> None:
        rows = Conversation.objects.select_related("account").order_by("-updated_at")
        if o["user"]:
            rows = rows.filter(account__owner__username=o["user"])
        table = Table(
            "id", "account", "session", "turns", "watermark", "segments", "tags", "pending"
        )
        for c in rows[:200]:
            table.add_row(
                str(c.pk),
                c.account.name,
                c.session_id or c.title[:30],
                str(c.turn_count),
                str(c.watermark),
                str(c.segments.count()),
                str(c.tags.count()),
                str(jobs.pending_jobs(c.pk)),
            )
        self.console.print(table)

    def do_tags(self, o: dict[str, Any]) -> None:
        c = _conversation(o)
        table = Table("tag", "turns", "aliases", "description")
        for tag in (
            Tag.objects.filter(conversation=c)
            .prefetch_related("aliases")
            .order_by("-turn_count", "name")
        ):
            aliases = ", ".join(a.alias for a in tag.aliases.all())
            table.add_row(tag.name, str(tag.turn_count), aliases, tag.description)
        self.console.print(table)

    def do_domains(self, o: dict[str, Any]) -> None:
        c = _conversation(o)
        table = Table("tag", "segments", "covers until turn", "summary tokens")
        for ts in TagSummary.objects.filter(conversation=c).select_related("tag"):
            count = Segment.objects.filter(conversation=c, tags=ts.tag).count()
            table.add_row(ts.tag.name, str(count), str(ts.covers_until), str(ts.tokens))
        self.console.print(table)

    def do_recall(self, o: dict[str, Any]) -> None:
        c = _conversation(o)
        name = tag_canonical(o["tag"], selectors.vocabulary(c))
        summary = TagSummary.objects.filter(conversation=c, tag__name=name).first()
        self.console.print(f"[bold]{name}[/bold]")
        self.console.print(summary.summary if summary else "(no tag summary yet)")
        for s in Segment.objects.filter(conversation=c, tags__name=name).order_by("start_position"):
            self.console.print(
                f"\n[dim]turns {s.start_position}–{s.end_position}[/dim] {s.summary}"
            )

    # ------------------------------------------------------------ writes

    def do_compact(self, o: dict[str, Any]) -> None:
        c = _conversation(o)
        job = MemoryJob.objects.create(conversation=c, kind=jobs.PROCESS)
        errors: list[BaseException] = []
        worker = threading.Thread(target=_run, args=(job.pk, errors))
        worker.start()
        columns = [
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
        ]
        with Progress(*columns, console=self.console) as bar:
            task = bar.add_task("memory job", total=None)
            while worker.is_alive():
                worker.join(0.2)
                job.refresh_from_db()
                bar.update(task, completed=job.progress, total=job.total or None)
        if errors:
            raise CommandError(f"the memory job failed: {errors[0]}")
        c.refresh_from_db()
        self.stdout.write(
            f"conversation {c.pk}: watermark {c.watermark}, {c.segments.count()} segments, "
            f"{c.tag_summaries.count()} tag summaries"
        )

    def do_retrieve(self, o: dict[str, Any]) -> None:
        plan, _ = request_preview(
            conversation=_conversation(o), message=o["message"], ceiling=o["ceiling"]
        )
        if plan is None:
            raise CommandError("nothing to plan: the conversation has no turns")
        report = plan.report
        parts = ", ".join(f"{k} {v:,}" for k, v in report.get("parts", {}).items())
        self.stdout.write(f"ceiling {report.get('ceiling', 0):,}: {parts}")
        sent = "as sent" if plan.passthrough else f"{report.get('upstream_tokens', 0):,} planned"
        self.stdout.write(f"client history {report.get('client_tokens', 0):,} tokens → {sent}")
        table = Table("key", "tokens", "score", "tags", "bm25", "cosine", "why", "preview")
        for item in report.get("recalled", []):
            signals = item["signals"]
            table.add_row(
                item["key"],
                str(item["tokens"]),
                f"{item['score'] or 0:.4f}",
                *(f"{signals.get(s, 0):.3f}" for s in ("tags", "bm25", "cosine")),
                item["why"][:40],
                item["preview"][:50],
            )
        self.console.print(table)
        for reason in plan.reasons:
            self.stdout.write(f"- {reason}")

    def do_transform(self, o: dict[str, Any]) -> None:
        _, body = request_preview(
            conversation=_conversation(o), message=o["message"], ceiling=o["ceiling"]
        )
        self.stdout.write(json.dumps(body, indent=2, ensure_ascii=False))

    def do_aliases(self, o: dict[str, Any]) -> None:
        c = _conversation(o)
        if o["verb"] == "list":
            for alias in TagAlias.objects.filter(tag__conversation=c).select_related("tag"):
                self.stdout.write(f"{alias.alias} → {alias.tag.name}")
        elif o["verb"] == "suggest":
            for left, right, score in alias_suggestions(selectors.vocabulary(c)):
                self.stdout.write(f"{left} ~ {right}  ({score:.2f})")
        else:
            if len(o["names"]) != 2:
                raise CommandError("usage: vc aliases add ALIAS TAG --conversation ID")
            alias, name = o["names"]
            tag = Tag.objects.filter(conversation=c, name=name).first()
            if tag is None:
                raise CommandError(f"no tag {name!r} in conversation {c.pk}")
            TagAlias.objects.get_or_create(tag=tag, alias=alias)
            self.stdout.write(f"{alias} → {name}")

    def do_config(self, o: dict[str, Any]) -> None:
        if o["verb"] == "validate":
            _config_file(o["file"])
            self.stdout.write("valid")
            return
        account = Account.objects.filter(owner__username=o["user"]).first()
        if account is None:
            raise CommandError(f"no account for user {o['user']!r}")
        if o["verb"] == "export":
            self.stdout.write(config_to_yaml(config_for(account.memory_settings)))
            return
        from vcloud.accounts.services import account_memory_settings_update

        account_memory_settings_update(account=account, config=_config_file(o["file"]))
        self.stdout.write(f"memory settings of {account.name} updated")

    def do_demo(self, o: dict[str, Any]) -> None:
        for name in ("httpx", "httpx2", "anthropic"):  # their INFO lines carry the key's URL
            logging.getLogger(name).setLevel(logging.WARNING)
        try:
            demo.demo_server_check(url=o["url"])
        except DemoError as exc:
            raise CommandError(str(exc)) from exc
        columns = [
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
        ]
        with Progress(*columns, console=self.console) as bar:
            task = bar.add_task("demo requests", total=None)
            try:
                result = demo.demo_run(
                    url=o["url"],
                    username=o["user"],
                    password=o["password"],
                    turns=o["turns"],
                    delay=o["delay"],
                    ceiling=o["ceiling"],
                    on_request=lambda done, total: bar.update(task, completed=done, total=total),
                )
            except DemoError as exc:
                raise CommandError(str(exc)) from exc
        self._demo_report(o, result)

    def _demo_report(self, o: dict[str, Any], result: demo.DemoResult) -> None:
        url = o["url"].rstrip("/")
        self.stdout.write(
            f"{result.requests} requests in {result.seconds:.0f} s, "
            f"{result.served} answered by the simulated provider (session {result.session})"
        )
        if result.conversation_id is not None:
            c = demo.demo_settle(
                conversation_id=result.conversation_id, turns=2 * result.requests, timeout=60
            )
            self.stdout.write(
                f"conversation {c.pk}: {c.turn_count} turns, watermark {c.watermark}, "
                f"{c.segments.count()} segments, {c.tag_summaries.count()} tag summaries"
            )
            self.stdout.write(f"session page: {url}/dashboard/sessions/{c.pk}/")
        self.stdout.write(f"dashboard:    {url}/dashboard/")
        login = f"password {result.password}" if result.password else "its existing password"
        self.stdout.write(f"log in as:    {result.username} ({login})")


def _conversation(o: dict[str, Any]) -> Conversation:
    c = Conversation.objects.filter(pk=o["conversation"]).first()
    if c is None:
        raise CommandError(f"no conversation {o['conversation']}")
    return c


def _config_file(path: str) -> Any:
    if not path or not Path(path).is_file():
        raise CommandError(f"no such file: {path!r}")
    try:
        return config_from_yaml(Path(path).read_text())
    except ConfigError as exc:
        raise CommandError(f"invalid memory settings: {exc}") from exc


def _run(job_id: int, errors: list[BaseException]) -> None:
    from django.db import connection

    try:
        pipeline.conversation_process(job_id=job_id)
    except BaseException as exc:  # reported by the main thread
        errors.append(exc)
    finally:
        connection.close()
