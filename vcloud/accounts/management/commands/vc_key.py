"""vc_key create --user NAME [--create-user] [--password PW] | vc_key revoke PREFIX"""

from __future__ import annotations

import argparse
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from vcloud.accounts.errors import AccountError
from vcloud.accounts.services import account_for_user, vckey_create, vckey_revoke_by_prefix


class Command(BaseCommand):
    help = "Create or revoke vckeys. `create` prints the raw key on stdout and nothing else."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="create a key for a user")
        create.add_argument("--user", required=True)
        create.add_argument("--create-user", action="store_true", help="create the user if missing")
        create.add_argument("--password", default=None, help="password for a created user")
        create.add_argument("--name", default="cli", help="label of the key")
        revoke = sub.add_parser("revoke", help="revoke the key with this prefix")
        revoke.add_argument("prefix")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "create":
            self._create(options)
        else:
            try:
                key = vckey_revoke_by_prefix(prefix=options["prefix"])
            except AccountError as exc:
                raise CommandError(str(exc)) from exc
            self.stderr.write(f"revoked {key.prefix}… ({key.name})")

    def _create(self, options: dict[str, Any]) -> None:
        User = get_user_model()
        user = User.objects.filter(username=options["user"]).first()
        if user is None:
            if not options["create_user"]:
                raise CommandError(f"no user {options['user']!r} (pass --create-user)")
            user = User.objects.create_user(options["user"], password=options["password"])
        _, raw = vckey_create(account=account_for_user(user), name=options["name"])
        self.stdout.write(raw)
